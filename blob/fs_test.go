package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
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

// TestPutFiles: a Put leaves nothing in tmp/ and its file at its content
// address, and does not reuse a file at that path holding other bytes (a
// torn copy). The conformance suite (blobtest) checks the rest of Put and
// Open.
func TestPutFiles(t *testing.T) {
	t.Parallel()
	s := newFS(t)
	ctx := context.Background()
	data := []byte("the bytes of an image")
	if _, err := s.Put(ctx, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(filepath.Join(s.Dir(), tmpDir)); len(es) != 0 {
		t.Fatalf("tmp holds %d files", len(es))
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), shaOf(data)[:2], shaOf(data))); err != nil {
		t.Fatal(err)
	}
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

// TestSweep: a sweep removes old temporary files of interrupted writes,
// but not recent ones nor one whose writer still runs (it holds the
// lock), and counts the files it keeps, named or recent. The conformance
// suite checks which content files it removes.
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
	orphan, named := put("orphan"), put("named")
	put("recent")
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
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("an old leftover survived")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("a recent write was swept")
	}
	if _, err := os.Stat(writing.Name()); err != nil {
		t.Fatal("a write in progress was swept")
	}
}
