// Package blobtest is the conformance suite of blob.Store: one set of
// tests that every store (files, the PostgreSQL blobs table, S3-compatible
// object storage) passes, so that the guarantees of package blob hold
// whichever keeps the bytes.
//
// A store under test takes its time from a Clock the suite moves forward,
// so that "old enough to sweep" needs no waiting.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"studio/blob"
)

// Clock is the time of the stores under test: the real time moved
// forward by Advance.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the real time plus everything Advance added.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Backend is one store under test, made fresh for each test.
type Backend struct {
	// Store is the store under test, reading its time from Clock.
	Store blob.Store
	// Twin is a second store on the same bytes with the same clock, as
	// another process sharing them would have.
	Twin blob.Store
	// Clock is the stores' clock.
	Clock *Clock
	// Count answers how many copies of bytes the backend holds.
	Count func(t *testing.T) int
	// Tamper replaces the stored bytes of sha256 with data, behind the
	// store's back (a disk fault, a torn write, an object overwritten).
	Tamper func(t *testing.T, sha256 string, data []byte)
}

// Run runs the suite; newBackend makes a fresh, empty backend per test.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"PutOpen", testPutOpen},
		{"StoredOnce", testStoredOnce},
		{"ConcurrentPuts", testConcurrentPuts},
		{"VerifiedOnRead", testVerifiedOnRead},
		{"Sweep", testSweep},
		{"SweepRefuses", testSweepRefuses},
		{"SweepRacesPut", testSweepRacesPut},
		{"SweepRacesCommit", testSweepRacesCommit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBackend(t))
		})
	}
}

// SHA256 is the lowercase hex SHA-256 of data.
func SHA256(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func read(t *testing.T, s blob.Store, sha string) []byte {
	t.Helper()
	f, err := s.Open(context.Background(), sha)
	if err != nil {
		t.Fatalf("open %s: %v", sha, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", sha, err)
	}
	return b
}

func put(t *testing.T, s blob.Store, data []byte) string {
	t.Helper()
	info, err := s.Put(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if info.SHA256 != SHA256(data) || info.Size != int64(len(data)) {
		t.Fatalf("put answered %+v, want %s and %d bytes", info, SHA256(data), len(data))
	}
	return info.SHA256
}

func exists(t *testing.T, s blob.Store, sha string) bool {
	t.Helper()
	ok, err := s.Exists(context.Background(), sha)
	if err != nil {
		t.Fatalf("exists %s: %v", sha, err)
	}
	return ok
}

func testPutOpen(t *testing.T, b Backend) {
	s, ctx := b.Store, context.Background()
	data := bytes.Repeat([]byte("the bytes of an image "), 5000)
	for _, tc := range []struct {
		name string
		r    func() io.Reader
	}{
		{"seeker", func() io.Reader { return bytes.NewReader(data) }},
		{"stream", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }},
		{"seeker again", func() io.Reader { return bytes.NewReader(data) }},
		// A reader partly read already: what is left is the blob.
		{"seeker past a header", func() io.Reader {
			r := bytes.NewReader(append([]byte("a header the store must not keep"), data...))
			r.Seek(int64(len("a header the store must not keep")), io.SeekStart)
			return r
		}},
		{"file", func() io.Reader {
			f, err := os.CreateTemp(t.TempDir(), "put-*")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			return f
		}},
	} {
		info, err := s.Put(ctx, tc.r())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if info.SHA256 != SHA256(data) || info.Size != int64(len(data)) {
			t.Fatalf("%s: info %+v", tc.name, info)
		}
	}
	if got := read(t, s, SHA256(data)); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want %d", len(got), len(data))
	}
	// The reader seeks, as http.ServeContent needs for ranges.
	f, err := s.Open(ctx, SHA256(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(-5, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if tail, _ := io.ReadAll(f); string(tail) != "mage " {
		t.Fatalf("seek to the end read %q", tail)
	}
	f.Close()
	if !exists(t, s, SHA256(data)) || !exists(t, b.Twin, SHA256(data)) {
		t.Fatal("stored bytes do not exist")
	}
	missing := SHA256([]byte("never stored"))
	if exists(t, s, missing) {
		t.Fatal("bytes never stored exist")
	}
	if _, err := s.Open(ctx, missing); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(missing) = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "../../etc/passwd", "ABCDEF" + missing[6:], missing[:63]} {
		if _, err := s.Open(ctx, bad); !errors.Is(err, blob.ErrInvalid) {
			t.Fatalf("Open(%q) = %v, want ErrInvalid", bad, err)
		}
		if _, err := s.Exists(ctx, bad); !errors.Is(err, blob.ErrInvalid) {
			t.Fatalf("Exists(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	empty := put(t, s, nil)
	if got := read(t, s, empty); len(got) != 0 {
		t.Fatalf("empty blob read %d bytes", len(got))
	}
}

// The same bytes put many times, through two stores, are kept once.
func testStoredOnce(t *testing.T, b Backend) {
	data := []byte("stored once, whoever puts it")
	for i := range 6 {
		put(t, []blob.Store{b.Store, b.Twin}[i%2], data)
	}
	put(t, b.Store, []byte("other bytes"))
	if n := b.Count(t); n != 2 {
		t.Fatalf("%d copies held for 2 contents", n)
	}
	// A store that walks lists each content once.
	if w, ok := b.Twin.(blob.Walker); ok {
		var got []string
		if err := w.Walk(context.Background(), func(sha string) error { got = append(got, sha); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		want := []string{SHA256(data), SHA256([]byte("other bytes"))}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Walk listed %v, want %v", got, want)
		}
	}
}

// Many writers of the same and of different bytes at once, through two
// stores: every Put succeeds and every content is whole, once.
func testConcurrentPuts(t *testing.T, b Backend) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 12 {
		wg.Go(func() {
			<-start
			s := []blob.Store{b.Store, b.Twin}[g%2]
			for i := range 8 {
				data := bytes.Repeat(fmt.Appendf(nil, "blob %d;", i%4), 2000)
				var r io.Reader = bytes.NewReader(data)
				if g%3 == 1 {
					r = iotest.HalfReader(r)
				}
				info, err := s.Put(context.Background(), r)
				if err != nil || info.SHA256 != SHA256(data) {
					t.Errorf("put: %+v %v", info, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range 4 {
		data := bytes.Repeat(fmt.Appendf(nil, "blob %d;", i), 2000)
		if got := read(t, b.Twin, SHA256(data)); !bytes.Equal(got, data) {
			t.Fatalf("blob %d torn", i)
		}
	}
	if n := b.Count(t); n != 4 {
		t.Fatalf("%d copies held for 4 contents", n)
	}
}

// Bytes that no longer hash to their name are refused on read: other
// content, a truncated copy, nothing at all.
func testVerifiedOnRead(t *testing.T, b Backend) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		stored []byte
	}{
		{"other bytes", []byte("a different image of the same size!")},
		{"truncated", []byte("an image cut sh")},
		{"emptied", []byte{}},
	} {
		data := []byte("an image cut short by a disk fault: " + tc.name)
		sha := put(t, b.Store, data)
		b.Tamper(t, sha, tc.stored)
		f, err := b.Store.Open(ctx, sha)
		if err == nil {
			got, _ := io.ReadAll(f)
			f.Close()
			t.Fatalf("%s: tampered bytes served (%q)", tc.name, got)
		}
		if !errors.Is(err, blob.ErrCorrupt) {
			t.Fatalf("%s: Open = %v, want ErrCorrupt", tc.name, err)
		}
	}
}

// A sweep removes old unnamed bytes; it keeps named ones, recent ones and
// old ones a Put reused since.
func testSweep(t *testing.T, b Backend) {
	s, ctx := b.Store, context.Background()
	named, unnamed, reused := put(t, s, []byte("named")), put(t, s, []byte("unnamed")), put(t, s, []byte("reused"))
	b.Clock.Advance(2 * time.Hour)
	put(t, b.Twin, []byte("reused")) // young again
	recent := put(t, s, []byte("recent"))
	inUse := func(_ context.Context, sha string) (bool, error) { return sha == named, nil }
	res, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse})
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 {
		t.Fatalf("sweep = %+v, want 1 removed (the unnamed)", res)
	}
	// A store may keep what it removes for a while (see s3blob); a later
	// sweep past the age removes it for good.
	b.Clock.Advance(2 * time.Hour)
	if _, err := b.Twin.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: func(_ context.Context, sha string) (bool, error) {
		return sha != unnamed, nil
	}}); err != nil {
		t.Fatal(err)
	}
	for sha, want := range map[string]bool{named: true, unnamed: false, reused: true, recent: true} {
		if got := exists(t, s, sha); got != want {
			t.Fatalf("after the sweeps, Exists(%s) = %v, want %v", sha, got, want)
		}
	}
	if _, err := s.Open(ctx, unnamed); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(swept) = %v, want ErrNotFound", err)
	}
	if n := b.Count(t); n != 3 {
		t.Fatalf("%d copies held after the sweeps, want 3", n)
	}
	// Swept bytes can be put again.
	put(t, s, []byte("unnamed"))
	if got := read(t, b.Twin, unnamed); string(got) != "unnamed" {
		t.Fatalf("put again after the sweep, read %q", got)
	}
}

// A sweep without InUse, or whose InUse fails, removes nothing.
func testSweepRefuses(t *testing.T, b Backend) {
	s, ctx := b.Store, context.Background()
	sha := put(t, s, []byte("kept whatever goes wrong"))
	b.Clock.Advance(2 * time.Hour)
	if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour}); err == nil {
		t.Fatal("a sweep without InUse was accepted")
	}
	failing := func(context.Context, string) (bool, error) { return false, errors.New("database down") }
	if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: failing}); err == nil {
		t.Fatal("an InUse error was swallowed")
	}
	if got := read(t, s, sha); string(got) != "kept whatever goes wrong" {
		t.Fatalf("a failed sweep removed bytes: %q", got)
	}
}

// A Put of bytes that a sweep is removing at the same moment: once Put
// has returned, the bytes are there, whichever went first.
func testSweepRacesPut(t *testing.T, b Backend) {
	ctx := context.Background()
	never := func(context.Context, string) (bool, error) { return false, nil }
	for round := range 15 {
		data := fmt.Appendf(nil, "round %d", round)
		put(t, b.Store, data)
		b.Clock.Advance(time.Hour)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			if _, err := b.Twin.Sweep(ctx, blob.SweepParams{OlderThan: time.Minute, InUse: never}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			<-start
			if _, err := b.Store.Put(ctx, bytes.NewReader(data)); err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		if got := read(t, b.Store, SHA256(data)); !bytes.Equal(got, data) {
			t.Fatalf("round %d: read %q after the Put returned", round, got)
		}
	}
}

// Writers put bytes grown old, then commit a row naming them, while
// sweeps run: once committed, bytes are never missing, now or after
// later sweeps.
func testSweepRacesCommit(t *testing.T, b Backend) {
	ctx := context.Background()
	var mu sync.Mutex
	committed := map[string]bool{}
	inUse := func(_ context.Context, sha string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return committed[sha], nil
	}
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Twin.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse}); err != nil {
				t.Errorf("sweep: %v", err)
				return
			}
		}
	})
	// The clock moves only while no writer is between its Put and its
	// commit: a store may count on that time being well under the age.
	var window sync.RWMutex
	var writers sync.WaitGroup
	for g := range 3 {
		writers.Go(func() {
			for i := range 6 {
				data := fmt.Appendf(nil, "writer %d blob %d", g, i)
				// An orphan first (a crash before the row), grown old;
				// then the retry reuses or rewrites it and commits.
				if _, err := b.Store.Put(ctx, bytes.NewReader(data)); err != nil {
					t.Errorf("put: %v", err)
					return
				}
				window.Lock()
				b.Clock.Advance(90 * time.Minute)
				window.Unlock()
				window.RLock()
				info, err := b.Store.Put(ctx, bytes.NewReader(data))
				if err != nil {
					window.RUnlock()
					t.Errorf("put: %v", err)
					return
				}
				mu.Lock()
				committed[info.SHA256] = true
				mu.Unlock()
				window.RUnlock()
				if ok, err := b.Store.Exists(ctx, info.SHA256); err != nil || !ok {
					t.Errorf("blob %s missing right after its commit: %v", info.SHA256, err)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	sweeps.Wait()
	// Later sweeps, far past the age, keep every named blob.
	for range 2 {
		b.Clock.Advance(3 * time.Hour)
		if _, err := b.Twin.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse}); err != nil {
			t.Fatal(err)
		}
	}
	if len(committed) != 18 {
		t.Fatalf("%d committed", len(committed))
	}
	for sha := range committed {
		if got := read(t, b.Store, sha); SHA256(got) != sha {
			t.Fatalf("committed blob %s torn", sha)
		}
	}
}
