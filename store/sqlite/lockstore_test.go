package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
	"studio/locks/sqlitelock"
)

// TestLockStoreOnStudioDatabase: the lock store studio wires (sqlitelock
// on the store's write connection) works on a file that studio's
// migrations made, with the limits sqlitelock adds, and a second process
// (another Open of the file) meets it in its tables.
func TestLockStoreOnStudioDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "studio.db")
	ctx := t.Context()
	var engines [2]*locks.Engine
	for i := range engines {
		s, err := Open(ctx, Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ls, err := sqlitelock.New(ctx, s.DB())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		engines[i] = locks.New(ls)
		t.Cleanup(func() { engines[i].Close() })
	}
	err := engines[0].Hold(ctx, "k", func(ctx context.Context, l *locks.Lease) error {
		info, err := engines[1].Inspect(ctx, "k")
		if err != nil || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence() {
			t.Errorf("Inspect from the other engine: %+v, %v", info, err)
		}
		return engines[1].Semaphore(2).Hold(ctx, "gen", func(ctx context.Context, _ *locks.Lease) error {
			err := engines[0].Semaphore(3).Hold(ctx, "gen", func(context.Context, *locks.Lease) error { return nil })
			if !errors.Is(err, locks.ErrLimitConflict) {
				t.Errorf("a second limit on one key: %v", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
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
