package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

func TestCountTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, _ := pgtest.Schema(t)
	s := open(t, u)
	if c, err := s.CountTasks(ctx); err != nil || c != (intent.Counts{}) {
		t.Fatalf("empty store: %+v, %v", c, err)
	}
	for _, req := range []string{"a", "b"} {
		n := map[string]int{"a": 12, "b": 3}[req]
		if _, _, err := s.CreateIntent(ctx, storetest.Intent(t, "alice", req, "fp", n)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: 3, TTL: time.Minute})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	res, err := s.CompleteLeases(ctx, []store.Completion{{Lease: claimed[0].Lease, Asset: intent.Asset{
		ID: mustID(t), SHA256: strings.Repeat("a", 64), ContentType: "image/png", Size: 67, Width: 1, Height: 1}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("complete: %v %v", err, res)
	}
	if _, err := s.FailLease(ctx, store.Failure{Lease: claimed[1].Lease, Error: "boom", Permanent: true}); err != nil {
		t.Fatal(err)
	}
	want := intent.Counts{Queued: 12, Running: 1, Succeeded: 1, Failed: 1}
	if c, err := s.CountTasks(ctx); err != nil || c != want {
		t.Fatalf("counts %+v, %v; want %+v", c, err, want)
	}
}
