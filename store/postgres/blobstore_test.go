package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"studio/blob"
	"studio/store/postgres/pgtest"
)

func openBlobs(t *testing.T) (*BlobStore, *Store) {
	t.Helper()
	_, schema := pgtest.Schema(t)
	db := openLockDB(t, pgtest.URL(t), schema)
	return NewBlobStore(db), db
}

func shaOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func readBlob(t *testing.T, s blob.Store, sha string) []byte {
	t.Helper()
	f, err := s.Open(context.Background(), sha)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func countBlobs(t *testing.T, db *Store) int {
	t.Helper()
	var n int
	if err := db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM blobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBlobPutOpen(t *testing.T) {
	t.Parallel()
	s, db := openBlobs(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("the bytes of an image "), 5000)
	for _, tc := range []struct {
		name string
		r    func() io.Reader
	}{
		{"seeker", func() io.Reader { return bytes.NewReader(data) }},
		{"stream", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }},
	} {
		info, err := s.Put(ctx, tc.r())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if info.SHA256 != shaOf(data) || info.Size != int64(len(data)) {
			t.Fatalf("%s: info %+v", tc.name, info)
		}
		if got := readBlob(t, s, info.SHA256); !bytes.Equal(got, data) {
			t.Fatalf("%s: read back %d bytes, want %d", tc.name, len(got), len(data))
		}
	}
	if n := countBlobs(t, db); n != 1 {
		t.Fatalf("%d rows for one content, want 1", n)
	}
	f, err := s.Open(ctx, shaOf(data))
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
	if ok, err := s.Exists(ctx, shaOf(data)); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	missing := shaOf([]byte("never stored"))
	if ok, err := s.Exists(ctx, missing); err != nil || ok {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	if _, err := s.Open(ctx, missing); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Open(ctx, "../etc/passwd"); !errors.Is(err, blob.ErrInvalid) {
		t.Fatalf("Open(bad name) = %v, want ErrInvalid", err)
	}
	empty, err := s.Put(ctx, bytes.NewReader(nil))
	if err != nil || empty.Size != 0 || len(readBlob(t, s, empty.SHA256)) != 0 {
		t.Fatalf("empty blob: %+v, %v", empty, err)
	}
}

// Racing Puts of the same bytes, through two stores (as two processes),
// all succeed and leave one row.
func TestBlobConcurrentPuts(t *testing.T) {
	t.Parallel()
	s, db := openBlobs(t)
	twin := NewBlobStore(openLockDB(t, pgtest.URL(t), db.Schema()))
	data := []byte("same bytes from everyone")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		wg.Go(func() {
			<-start
			info, err := []*BlobStore{s, twin}[i%2].Put(context.Background(), bytes.NewReader(data))
			if err != nil || info.SHA256 != shaOf(data) {
				t.Errorf("put %d: %+v, %v", i, info, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := countBlobs(t, db); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	if got := readBlob(t, twin, shaOf(data)); !bytes.Equal(got, data) {
		t.Fatalf("read %q", got)
	}
}

func TestBlobSweep(t *testing.T) {
	t.Parallel()
	s, db := openBlobs(t)
	clock := newStoppedClock()
	s.now = clock.now
	ctx := context.Background()
	put := func(b string) string {
		t.Helper()
		info, err := s.Put(ctx, bytes.NewReader([]byte(b)))
		if err != nil {
			t.Fatal(err)
		}
		return info.SHA256
	}
	named, unnamed := put("named"), put("unnamed")
	reused := put("reused")
	clock.Advance(2 * time.Hour)
	put("reused") // touched now: young again
	recent := put("recent")
	inUse := func(_ context.Context, sha string) (bool, error) { return sha == named, nil }
	res, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse})
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 || res.Kept != 1 {
		t.Fatalf("sweep = %+v, want 1 removed (unnamed), 1 kept (named)", res)
	}
	for sha, want := range map[string]bool{named: true, unnamed: false, reused: true, recent: true} {
		if ok, err := s.Exists(ctx, sha); err != nil || ok != want {
			t.Fatalf("Exists(%s) = %v, %v; want %v", sha, ok, err, want)
		}
	}
	if n := countBlobs(t, db); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour}); err == nil {
		t.Fatal("a sweep without InUse was accepted")
	}
	failing := func(context.Context, string) (bool, error) { return false, errors.New("boom") }
	if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Nanosecond, InUse: failing}); err == nil {
		t.Fatal("an InUse error was swallowed")
	}
	if n := countBlobs(t, db); n != 3 {
		t.Fatalf("a failed sweep removed rows: %d left", n)
	}
}

// A Put of bytes that a sweep is removing at the same moment: after Put
// returns, the bytes are there, whichever went first.
func TestBlobSweepRacesPut(t *testing.T) {
	t.Parallel()
	s, _ := openBlobs(t)
	clock := newStoppedClock()
	s.now = clock.now
	ctx := context.Background()
	never := func(context.Context, string) (bool, error) { return false, nil }
	for round := range 40 {
		data := []byte(fmt.Sprintf("round %d", round))
		if _, err := s.Put(ctx, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Minute, InUse: never}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			<-start
			if _, err := s.Put(ctx, bytes.NewReader(data)); err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		if ok, err := s.Exists(ctx, shaOf(data)); err != nil || !ok {
			t.Fatalf("round %d: bytes gone after a Put returned: %v, %v", round, ok, err)
		}
	}
}
