package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"studio/store"
	"studio/store/sqlite"
	"studio/store/storetest"
)

func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return open(t, filepath.Join(t.TempDir(), "studio.db"))
		},
		Twin: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*sqlite.Store).Path())
		},
	})
}
