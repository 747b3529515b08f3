package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"studio/store"
	"studio/store/sqlite/sqlitetest"
)

// TestClassifyBusy: SQLite's own SQLITE_BUSY, met by a connection with no
// busy timeout while another holds the write lock, is a FaultBusy; a
// constraint error is no fault.
func TestClassifyBusy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	release := sqlitetest.HoldWriteLock(t, path)
	_, err = db.Exec(`INSERT INTO t (id) VALUES (1)`)
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultBusy || f.MaybeCommitted {
		t.Fatalf("insert while another connection writes: %v, fault %+v; want busy", err, f)
	}
	release()
	if _, err := db.Exec(`INSERT INTO t (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO t (id) VALUES (1)`)
	if err == nil || store.FaultOf(err) != nil {
		t.Fatalf("a unique violation: %v is no fault", err)
	}
}

// TestWaitBound: with store.WithWait on its context, a write waits that
// long for a lock another process holds, not the busy timeout, and
// answers a FaultBusy: through the intent commit (below database/sql) and
// through a database/sql transaction (a cancel). A context without the
// bound still waits, and its own deadline ends the wait (not the busy
// timeout, 10 s) as no fault. Once the lock is free, the same store
// commits: its connection and statements are still good.
func TestWaitBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	s := openStore(t, path)
	in := oneTaskIntent
	b, _, err := s.CreateIntent(ctx, in("first"))
	if err != nil {
		t.Fatal(err)
	}
	release := sqlitetest.HoldWriteLock(t, path)
	bounded := store.WithWait(ctx, 100*time.Millisecond)
	_, _, err = s.CreateIntent(bounded, in("second"))
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultBusy || f.MaybeCommitted {
		t.Fatalf("commit past the wait: %v; want a busy fault", err)
	}
	_, err = s.CancelBatch(bounded, "alice", b.ResourceID)
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultBusy {
		t.Fatalf("cancel past the wait: %v; want a busy fault", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, _, err = s.CreateIntent(short, in("second"))
	if !errors.Is(err, context.DeadlineExceeded) || store.FaultOf(err) != nil {
		t.Fatalf("commit past its own deadline: %v; want the deadline, no fault", err)
	}
	release()
	if _, created, err := s.CreateIntent(ctx, in("second")); err != nil || !created {
		t.Fatalf("commit once the lock is free: %v %v", created, err)
	}
	if _, err := s.LookupIntent(ctx, "alice", "second"); err != nil {
		t.Fatalf("the committed binding: %v", err)
	}
	if _, err := s.CancelBatch(ctx, "alice", b.ResourceID); err != nil {
		t.Fatalf("cancel once the lock is free: %v", err)
	}
}
