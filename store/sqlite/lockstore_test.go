package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
	"studio/locks/sqlitelock"
	"studio/store/storetest"
)

// TestLockStoreOnStudioDatabase: the lock store studio wires (sqlitelock
// on the store's write connection) works on a file that studio's
// migrations made, with the limits sqlitelock adds, and a second process
// (another Open of the file) meets it in its tables.
func TestLockStoreOnStudioDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "studio.db")
	ctx := t.Context()
	var stores [2]locks.Store
	for i := range stores {
		ls, err := sqlitelock.New(ctx, openStore(t, path).DB())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		stores[i] = ls
	}
	storetest.LockStoresMeet(t, stores[0], stores[1])
}

// TestMigratesAfterLockPackage: a database whose lock tables sqlitelock
// made first (before studio ever opened it) migrates, and a key's fences
// still grow past what was handed out before.
func TestMigratesAfterLockPackage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "studio.db")
	ctx := t.Context()
	ls, err := sqlitelock.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := ls.Acquire(ctx, "k", "owner-1", time.Minute)
	if err != nil || first < 1 {
		t.Fatalf("acquire before studio: %d, %v", first, err)
	}
	ls.Close()
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatalf("studio migrates after sqlitelock: %v", err)
	}
	defer s.Close()
	ls2, err := sqlitelock.New(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	defer ls2.Close()
	lockstest.TakenBefore(t, ls2, "k", "owner-1", first)
}
