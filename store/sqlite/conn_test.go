package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"studio/intent"
)

// lateCtx is a context whose end lands while a statement runs: its first
// Done (the driver's check before it starts) is open, and each later one
// closes after a short spin, so that the driver's watcher fires during
// the statement or just after it.
type lateCtx struct {
	context.Context
	calls atomic.Int32
	spin  time.Duration
	ended atomic.Bool
}

func (c *lateCtx) Done() <-chan struct{} {
	ch := make(chan struct{})
	if c.calls.Add(1) == 1 {
		return ch
	}
	go func() {
		for start := time.Now(); time.Since(start) < c.spin; {
		}
		c.ended.Store(true)
		close(ch)
	}()
	return ch
}

func (c *lateCtx) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

// TestCommitCanceledAtBeginKeepsNoLock: a commit whose context ends while
// its BEGIN IMMEDIATE runs may take the write lock and still be answered
// with the context's error. Whatever it answered, the lock must not stay
// taken: another connection then takes it at once, and the store commits
// again.
func TestCommitCanceledAtBeginKeepsNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	s := openStore(t, path)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(1000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	failed := 0
	for i := 0; i < 2000; i++ {
		lc := &lateCtx{Context: ctx, spin: time.Duration(i%40) * 2 * time.Microsecond}
		if err := s.write(lc, func(*tx) error { return nil }); err == nil {
			continue
		}
		failed++
		if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE; ROLLBACK"); err != nil {
			t.Fatalf("round %d: after a commit canceled at its BEGIN, another writer: %v", i, err)
		}
	}
	if err := s.write(ctx, func(*tx) error { return nil }); err != nil {
		t.Fatalf("the store's next commit: %v", err)
	}
	t.Logf("%d of 2000 commits answered the context's end", failed)
}

// TestDroppedConnectionsAreClosed: a write whose context ends mid-way
// makes database/sql drop the write connection; the statements kept on
// it must not keep it open in SQLite (its files stay open otherwise).
func TestDroppedConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("counting open files needs /proc/self/fd")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	s := openStore(t, path)
	open := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, path) {
				n++
			}
		}
		return n
	}
	if err := s.write(ctx, func(*tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	before := open()
	for i := 0; i < 20; i++ {
		c, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		_, err := s.writeDB.ExecContext(c, `WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x < 100000000) SELECT count(*) FROM r`)
		cancel()
		if err == nil {
			t.Fatal("a 100M-row query was not canceled")
		}
		if err := s.write(ctx, func(*tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if after := open(); after > before {
		t.Fatalf("files of the database open: %d before, %d after 20 dropped connections", before, after)
	}
}

// oneTaskIntent is a one-task generation intent of alice under request id
// id, for tests that need a commit to wait or fail.
func oneTaskIntent(id string) intent.NewIntent {
	bid, _ := intent.NewID()
	tid, _ := intent.NewID()
	return intent.NewIntent{
		Binding: intent.Binding{Actor: "alice", RequestID: id, Operation: intent.OpGeneration, Fingerprint: "fp", ResourceID: bid, CreatedAt: time.Now()},
		Batch: &intent.NewBatch{ID: bid, Prompt: "p", Spec: []byte(`{}`), CreatedAt: time.Now(),
			Tasks: []intent.NewTask{{ID: tid, Collection: "c", Frame: "f", Generator: "g", Candidate: 1}}},
	}
}
