package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"studio/intent"
)

// TestCommitWaitEndsWithContext: a commit waiting for the write lock,
// which another connection holds, ends with its context's error when the
// context ends, not after the busy timeout (10 s), and once the lock is
// free the same store commits (its connection and statements still good).
func TestCommitWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := func(id string) intent.NewIntent {
		bid, _ := intent.NewID()
		tid, _ := intent.NewID()
		return intent.NewIntent{
			Binding: intent.Binding{Actor: "alice", RequestID: id, Operation: intent.OpGeneration, Fingerprint: "fp", ResourceID: bid, CreatedAt: time.Now()},
			Batch: &intent.NewBatch{ID: bid, Prompt: "p", Spec: []byte(`{}`), CreatedAt: time.Now(),
				Tasks: []intent.NewTask{{ID: tid, Collection: "c", Frame: "f", Generator: "g", Candidate: 1}}},
		}
	}
	// The statements are prepared before the lock is taken elsewhere.
	if _, _, err := s.CreateIntent(ctx, in("first")); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, _, err = s.CreateIntent(short, in("second"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit while another connection writes: %v; want the context's deadline", err)
	}
	if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	if _, created, err := s.CreateIntent(ctx, in("second")); err != nil || !created {
		t.Fatalf("commit once the lock is free: created %v, %v", created, err)
	}
	if _, err := s.LookupIntent(ctx, "alice", "second"); err != nil {
		t.Fatalf("the committed binding: %v", err)
	}
}
