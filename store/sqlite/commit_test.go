package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"studio/intent"
)

// TestCachesMissNotRemembered: a token or binding not found is asked
// again, so one created since (here by a second store on the file, as
// another process would) is found; one found is answered from memory
// after (the read pool closed, the answer still comes).
func TestCachesMissNotRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	a, b := openStore(t, path), openStore(t, path)
	hash := strings.Repeat("e", 64)
	if _, err := a.ActorForToken(ctx, hash); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("unknown token: %v", err)
	}
	if _, err := a.LookupIntent(ctx, "alice", "req"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("unknown binding: %v", err)
	}
	if err := b.CreateToken(ctx, "alice", hash); err != nil {
		t.Fatal(err)
	}
	id, err := intent.NewID()
	if err != nil {
		t.Fatal(err)
	}
	in := intent.NewIntent{
		Binding: intent.Binding{Actor: "alice", RequestID: "req", Operation: intent.OpGeneration, Fingerprint: "fp", ResourceID: id},
		Batch:   &intent.NewBatch{ID: id, Prompt: "p", Spec: []byte(`{}`), Tasks: []intent.NewTask{{ID: id + "-t", Collection: "c", Frame: "f", Generator: "g", Candidate: 1}}},
	}
	if _, created, err := b.CreateIntent(ctx, in); err != nil || !created {
		t.Fatalf("CreateIntent: %v, %v", created, err)
	}
	if actor, err := a.ActorForToken(ctx, hash); err != nil || actor != "alice" {
		t.Fatalf("token created by the other store: %q, %v", actor, err)
	}
	if bd, err := a.LookupIntent(ctx, "alice", "req"); err != nil || bd.ResourceID != id {
		t.Fatalf("binding committed by the other store: %+v, %v", bd, err)
	}
	if err := a.readDB.Close(); err != nil { // no read can reach the database now
		t.Fatal(err)
	}
	if actor, err := a.ActorForToken(ctx, hash); err != nil || actor != "alice" {
		t.Errorf("remembered token: %q, %v", actor, err)
	}
	if bd, err := a.LookupIntent(ctx, "alice", "req"); err != nil || bd.ResourceID != id {
		t.Errorf("remembered binding: %+v, %v", bd, err)
	}
}

// TestGetBatchEndedRemembered: a batch read while it can still move is
// read again every time (here its cancel, committed by a second store on
// the file as another process would, shows at once); once it has ended,
// it is answered from memory (the read pool closed, the answer still
// comes, and it is what the database holds).
func TestGetBatchEndedRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	a, b := openStore(t, path), openStore(t, path)
	id, err := intent.NewID()
	if err != nil {
		t.Fatal(err)
	}
	in := intent.NewIntent{
		Binding: intent.Binding{Actor: "alice", RequestID: "req", Operation: intent.OpGeneration, Fingerprint: "fp", ResourceID: id},
		Batch: &intent.NewBatch{ID: id, Prompt: "p", Spec: []byte(`{}`), Tasks: []intent.NewTask{
			{ID: id + "-1", Collection: "c", Frame: "f", Generator: "g", Candidate: 1},
			{ID: id + "-2", Collection: "c", Frame: "f", Generator: "g", Candidate: 2}}},
	}
	if _, created, err := a.CreateIntent(ctx, in); err != nil || !created {
		t.Fatalf("CreateIntent: %v, %v", created, err)
	}
	if got, err := a.GetBatch(ctx, "alice", id); err != nil || got.State != intent.StateQueued || got.Counts.Queued != 2 {
		t.Fatalf("new batch: %+v, %v", got, err)
	}
	want, err := b.CancelBatch(ctx, "alice", id)
	if err != nil || want.State != intent.StateCanceled {
		t.Fatalf("cancel: %+v, %v", want, err)
	}
	got, err := a.GetBatch(ctx, "alice", id)
	if err != nil || got != want {
		t.Fatalf("after the other store's cancel:\n got %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := a.GetBatch(ctx, "bob", id); intent.ErrorCode(err) != intent.ENotFound {
		t.Errorf("another actor's read: %v, want not found", err)
	}
	if err := a.readDB.Close(); err != nil { // no read can reach the database now
		t.Fatal(err)
	}
	if got, err := a.GetBatch(ctx, "alice", id); err != nil || got != want {
		t.Errorf("ended batch, remembered:\n got %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := a.GetBatch(ctx, "bob", id); err == nil {
		t.Errorf("another actor's read answered from memory")
	}
	// A store that first reads the batch once it has ended (the whole
	// row, no head yet) remembers it as well.
	c := openStore(t, path)
	if got, err := c.GetBatch(ctx, "alice", id); err != nil || got != want {
		t.Fatalf("first read of the ended batch:\n got %+v, %v\nwant %+v", got, err, want)
	}
	if err := c.readDB.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetBatch(ctx, "alice", id); err != nil || got != want {
		t.Errorf("ended batch first read whole, remembered:\n got %+v, %v\nwant %+v", got, err, want)
	}
}

// openStore opens a store on path, closed when the test ends.
func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
