package blob_test

import (
	"os"
	"path/filepath"
	"testing"

	"studio/blob"
	"studio/blob/blobtest"
)

// TestConformance holds the files store to the contract every store keeps.
func TestConformance(t *testing.T) {
	t.Parallel()
	blobtest.Run(t, func(t *testing.T) blobtest.Backend {
		dir := filepath.Join(t.TempDir(), "assets")
		clock := &blobtest.Clock{}
		open := func() *blob.FS {
			s, err := blob.NewFS(dir)
			if err != nil {
				t.Fatal(err)
			}
			blob.SetClock(s, clock.Now)
			return s
		}
		s := open()
		return blobtest.Backend{
			Store: s, Twin: open(), Clock: clock,
			Count: func(t *testing.T) int {
				files, err := filepath.Glob(filepath.Join(dir, "??", "*"))
				if err != nil {
					t.Fatal(err)
				}
				return len(files)
			},
			Tamper: func(t *testing.T, sha string, data []byte) {
				if err := os.WriteFile(s.Path(sha), data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
