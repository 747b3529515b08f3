package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newFS(t *testing.T) *FS {
	t.Helper()
	s, err := NewFS(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func shaOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func readAll(t *testing.T, s *FS, sha string) []byte {
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

func TestPutOpen(t *testing.T) {
	t.Parallel()
	s := newFS(t)
	ctx := context.Background()
	data := []byte("the bytes of an image")
	cases := []struct {
		name string
		r    func() io.Reader
	}{
		{"seeker", func() io.Reader { return bytes.NewReader(data) }},
		{"stream", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }},
		{"seeker again", func() io.Reader { return bytes.NewReader(data) }},
	}
	for _, tc := range cases {
		info, err := s.Put(ctx, tc.r())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if info.SHA256 != shaOf(data) || info.Size != int64(len(data)) {
			t.Fatalf("%s: info %+v", tc.name, info)
		}
	}
	if got := readAll(t, s, shaOf(data)); !bytes.Equal(got, data) {
		t.Fatalf("read %q", got)
	}
	if ok, err := s.Exists(ctx, shaOf(data)); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	other := shaOf([]byte("nothing"))
	if ok, err := s.Exists(ctx, other); err != nil || ok {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	if _, err := s.Open(ctx, other); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open(missing) = %v", err)
	}
	for _, bad := range []string{"", "../../etc/passwd", "ABCDEF" + other[6:], other[:63]} {
		if _, err := s.Open(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Open(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	// Nothing is left in tmp/, and the file is at its content address.
	if es, _ := os.ReadDir(filepath.Join(s.Dir(), tmpDir)); len(es) != 0 {
		t.Fatalf("tmp holds %d files", len(es))
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), shaOf(data)[:2], shaOf(data))); err != nil {
		t.Fatal(err)
	}
	// A file at the path with other bytes (a torn copy) is not reused.
	torn := []byte("torn")
	tornSHA := shaOf(torn)
	os.MkdirAll(filepath.Dir(s.Path(tornSHA)), 0o755)
	os.WriteFile(s.Path(tornSHA), []byte("to"), 0o644)
	if _, err := s.Put(ctx, bytes.NewReader(torn)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, tornSHA); !bytes.Equal(got, torn) {
		t.Fatalf("torn file reused: %q", got)
	}
}

// TestConcurrentPuts: many writers of the same and of different bytes at
// once; every file is whole.
func TestConcurrentPuts(t *testing.T) {
	t.Parallel()
	s := newFS(t)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				data := bytes.Repeat([]byte(fmt.Sprintf("blob %d;", i%5)), 1000)
				var r io.Reader = bytes.NewReader(data)
				if g%2 == 1 {
					r = iotest.HalfReader(r)
				}
				info, err := s.Put(context.Background(), r)
				if err != nil || info.SHA256 != shaOf(data) {
					t.Errorf("put: %+v %v", info, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	for i := 0; i < 5; i++ {
		data := bytes.Repeat([]byte(fmt.Sprintf("blob %d;", i)), 1000)
		if got := readAll(t, s, shaOf(data)); !bytes.Equal(got, data) {
			t.Fatalf("blob %d torn", i)
		}
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	s := newFS(t)
	ctx := context.Background()
	put := func(b string) string {
		info, err := s.Put(ctx, bytes.NewReader([]byte(b)))
		if err != nil {
			t.Fatal(err)
		}
		return info.SHA256
	}
	orphan, named, recent := put("orphan"), put("named"), put("recent")
	old := time.Now().Add(-2 * time.Hour)
	for _, sha := range []string{orphan, named} {
		os.Chtimes(s.Path(sha), old, old)
	}
	leftover := filepath.Join(s.Dir(), tmpDir, putPrefix+"123")
	os.WriteFile(leftover, []byte("half"), 0o644)
	os.Chtimes(leftover, old, old)
	fresh := filepath.Join(s.Dir(), tmpDir, putPrefix+"456")
	os.WriteFile(fresh, []byte("writing"), 0o644)
	// An old temporary file whose writer still runs (it holds the lock).
	writing, err := os.Create(filepath.Join(s.Dir(), tmpDir, putPrefix+"789"))
	if err != nil {
		t.Fatal(err)
	}
	defer writing.Close()
	if err := lockFile(writing, true); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(writing.Name(), old, old)

	inUse := map[string]bool{named: true}
	res, err := s.Sweep(ctx, SweepParams{OlderThan: time.Hour, InUse: func(_ context.Context, sha string) (bool, error) {
		return inUse[sha], nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 || res.Kept != 2 || res.Leftovers != 1 {
		t.Fatalf("sweep = %+v, want 1 removed, 2 kept (named, recent), 1 leftover", res)
	}
	for sha, want := range map[string]bool{orphan: false, named: true, recent: true} {
		if ok, _ := s.Exists(ctx, sha); ok != want {
			t.Fatalf("after sweep, exists(%s) = %v", sha, ok)
		}
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("an old leftover survived")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("a recent write was swept")
	}
	if _, err := os.Stat(writing.Name()); err != nil {
		t.Fatal("a write in progress was swept")
	}
	// The orphan's bytes can be put again.
	if put("orphan") != orphan || !bytes.Equal(readAll(t, s, orphan), []byte("orphan")) {
		t.Fatal("re-put after sweep")
	}
}

// TestSweepRacesPut: writers put bytes, some of them orphans grown old,
// and then "commit" a row naming them, while sweeps run. Once committed, a
// blob must always exist.
func TestSweepRacesPut(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "assets")
	putter, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	sweeper, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The sweep keeps what a Put touched within age; a Put and its commit
	// here are far closer than that, even under the race detector on a
	// loaded machine.
	const age = 500 * time.Millisecond
	var mu sync.Mutex
	committed := map[string]bool{}
	inUse := func(_ context.Context, sha string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return committed[sha], nil
	}
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	for i := 0; i < 2; i++ {
		sweeps.Add(1)
		go func() {
			defer sweeps.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := sweeper.Sweep(ctx, SweepParams{OlderThan: age, InUse: inUse}); err != nil {
					t.Errorf("sweep: %v", err)
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for g := 0; g < 4; g++ {
		writers.Add(1)
		go func(g int) {
			defer writers.Done()
			for i := 0; i < 10; i++ {
				data := []byte(fmt.Sprintf("writer %d blob %d", g, i))
				// An orphan first (a crash before the row), old enough to
				// be swept; then the retry reuses or rewrites it and
				// commits.
				if _, err := putter.Put(ctx, bytes.NewReader(data)); err != nil {
					t.Errorf("put: %v", err)
					return
				}
				// Time passes on purpose: the orphan grows old enough to
				// be swept while the retry comes.
				time.Sleep(age + time.Duration(i%3)*time.Millisecond)
				info, err := putter.Put(ctx, bytes.NewReader(data))
				if err != nil {
					t.Errorf("put: %v", err)
					return
				}
				mu.Lock()
				committed[info.SHA256] = true
				mu.Unlock()
				if ok, err := putter.Exists(ctx, info.SHA256); err != nil || !ok {
					t.Errorf("blob %s missing right after its commit", info.SHA256)
				}
			}
		}(g)
	}
	writers.Wait()
	close(stop)
	sweeps.Wait()
	// Sweep once more, then every committed blob is there and whole.
	if _, err := sweeper.Sweep(ctx, SweepParams{OlderThan: 0, InUse: inUse}); err != nil {
		t.Fatal(err)
	}
	if len(committed) != 40 {
		t.Fatalf("%d committed", len(committed))
	}
	for sha := range committed {
		f, err := putter.Open(ctx, sha)
		if err != nil {
			t.Fatalf("committed blob %s: %v", sha, err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if shaOf(b) != sha {
			t.Fatalf("committed blob %s torn", sha)
		}
	}
}
