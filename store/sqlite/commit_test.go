package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"studio/intent"
)

// TestCachesBounded: a cache keeps at most its bound, and what it
// answers is what was put in.
func TestCachesBounded(t *testing.T) {
	t.Parallel()
	c := newCache[bindingKey, intent.Binding](8)
	for i := 0; i < 100; i++ {
		c.add(bindingKey{"a", fmt.Sprint(i)}, intent.Binding{Actor: "a", RequestID: fmt.Sprint(i), ResourceID: fmt.Sprint("r", i)})
	}
	if len(c.m) != 8 {
		t.Fatalf("size %d, want 8", len(c.m))
	}
	if b, ok := c.get(bindingKey{"a", "99"}); !ok || b.ResourceID != "r99" {
		t.Errorf("the last binding added: %+v, %v", b, ok)
	}
	for k, b := range c.m {
		if b.RequestID != k.requestID || b.ResourceID != "r"+k.requestID {
			t.Errorf("entry %v holds %+v", k, b)
		}
	}
}

// TestCachesMissNotRemembered: a token or binding not found is asked
// again, so one created since (here by a second store on the file, as
// another process would) is found; one found is answered from memory
// after (the read pool closed, the answer still comes).
func TestCachesMissNotRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	a, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
	if err := a.reads.close(); err != nil {
		t.Fatal(err)
	}
	a.reads = readStmts{}
	if actor, err := a.ActorForToken(ctx, hash); err != nil || actor != "alice" {
		t.Errorf("remembered token: %q, %v", actor, err)
	}
	if bd, err := a.LookupIntent(ctx, "alice", "req"); err != nil || bd.ResourceID != id {
		t.Errorf("remembered binding: %+v, %v", bd, err)
	}
}
