package postgres

import (
	"context"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
	"studio/locks/pglock"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

func openLockDB(t testing.TB, url, schema string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: url, Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestLockStoreOnStudioSchema: the lock store studio wires (pglock on the
// store's pool) works on a schema that studio's migrations made, with the
// limits pglock adds, and two engines on it meet in its tables.
func TestLockStoreOnStudioSchema(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.Schema(t)
	db := openLockDB(t, pgtest.URL(t), schema)
	ctx := t.Context()
	var stores [2]locks.Store
	for i := range stores {
		ls, err := pglock.New(ctx, db.Pool())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		stores[i] = ls
	}
	storetest.LockStoresMeet(t, stores[0], stores[1])
}

// TestMigratesAfterLockPackage: a schema whose lock tables pglock made
// first (before studio ever opened it) migrates, and a key's fences still
// grow past what was handed out before.
func TestMigratesAfterLockPackage(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	ctx := t.Context()
	ls, err := pglock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := ls.Acquire(ctx, "k", "owner-1", time.Minute)
	if err != nil || first < 1 {
		t.Fatalf("acquire before studio: %d, %v", first, err)
	}
	ls.Close()
	db := openLockDB(t, pgtest.URL(t), schema)
	ls2, err := pglock.New(ctx, db.Pool())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls2.Close() })
	lockstest.TakenBefore(t, ls2, "k", "owner-1", first)
}
