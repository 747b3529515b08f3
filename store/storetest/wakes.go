package storetest

import (
	"slices"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/wake"
)

// taken waits for the subscription's signal and takes what came.
func taken(t *testing.T, sub *wake.Sub, what string) wake.Pending {
	t.Helper()
	select {
	case <-sub.C():
	case <-ctx(t).Done():
		t.Fatalf("%s: no wake-up", what)
	}
	return sub.Take(time.Now())
}

// wantIDs fails unless the pending events of kind k name exactly ids.
func wantIDs(t *testing.T, p wake.Pending, k wake.Kind, what string, ids ...string) {
	t.Helper()
	got, all := p.IDs(k)
	slices.Sort(got)
	slices.Sort(ids)
	if all || !slices.Equal(got, ids) {
		t.Fatalf("%s: ids of kind %b %v (all %v), want %v", what, k, got, all, ids)
	}
}

// testWakes: each commit publishes its wake-ups on the store's hub once it
// is done: a new batch's tasks and a new publication's items are work; a
// claim, a completion, a failure and a release change their batch; a
// released task is claimable now, a failed one after its backoff; a
// cancel reaches the batch's running tasks.
func testWakes(t *testing.T, h Harness) {
	s := h.New(t)
	w, ok := s.(store.Waker)
	if !ok {
		t.Skip("the store has no hub (store.Waker)")
	}
	sub := w.Wake().Subscribe(wake.All)
	defer sub.Close()
	in := Intent(t, "alice", "req", "fp", 3)
	id := in.Batch.ID
	mustCreate(t, s, in)
	p := taken(t, sub, "create")
	if p.Due != wake.Tasks {
		t.Fatalf("create: due %b, want tasks", p.Due)
	}
	wantIDs(t, p, wake.Tasks, "create", id)

	cs := claim(t, s, "w1", 3, longTTL)
	if len(cs) != 3 {
		t.Fatalf("claimed %d of 3", len(cs))
	}
	p = taken(t, sub, "claim")
	if p.Due != wake.Changed {
		t.Fatalf("claim: due %b, want changed only", p.Due)
	}
	wantIDs(t, p, wake.Changed, "claim", id)

	before := time.Now()
	if _, err := s.FailLease(ctx(t), store.Failure{Lease: cs[0].Lease, Error: "boom", Backoff: time.Hour}); err != nil {
		t.Fatal(err)
	}
	p = taken(t, sub, "failure")
	if p.Due != wake.Changed || p.Next.Before(before.Add(time.Hour)) || p.Next.After(time.Now().Add(time.Hour)) {
		t.Fatalf("failure with an hour's backoff: due %b next %v, want changed now and tasks in an hour", p.Due, p.Next)
	}
	wantIDs(t, p, wake.Tasks, "failure", id)

	if _, err := s.ReleaseLeases(ctx(t), []store.Lease{cs[1].Lease}); err != nil {
		t.Fatal(err)
	}
	p = taken(t, sub, "release")
	if p.Due != wake.Tasks|wake.Changed {
		t.Fatalf("release: due %b, want tasks and changed", p.Due)
	}
	wantIDs(t, p, wake.Tasks, "release", id)

	if _, err := s.CompleteLeases(ctx(t), []store.Completion{{Lease: cs[2].Lease, Asset: asset(t, sha("a"))}}); err != nil {
		t.Fatal(err)
	}
	p = taken(t, sub, "completion")
	if p.Due != wake.Changed {
		t.Fatalf("completion: due %b, want changed", p.Due)
	}

	if _, err := s.CancelBatch(ctx(t), "alice", id); err != nil {
		t.Fatal(err)
	}
	p = taken(t, sub, "cancel")
	if p.Due&wake.Cancel == 0 {
		t.Fatalf("cancel: due %b, want cancel", p.Due)
	}
	wantIDs(t, p, wake.Cancel, "cancel", id)

	batch, assets := BatchWithAssets(t, s, "alice", "gen", 1)
	sub.Take(time.Now())
	pub := PublicationIntent(t, "alice", "pub", "fp", batch, assets, intent.ChannelGallery)
	mustCreate(t, s, pub)
	p = taken(t, sub, "publication")
	if p.Due != wake.Items {
		t.Fatalf("publication: due %b, want items", p.Due)
	}
	wantIDs(t, p, wake.Items, "publication", pub.Publication.ID)
	items := claimItems(t, s, "p1", 1, longTTL)
	if _, err := s.ReleaseLeases(ctx(t), []store.Lease{items[0].Lease}); err != nil {
		t.Fatal(err)
	}
	for p = taken(t, sub, "item release"); p.Due&wake.Items == 0; p = taken(t, sub, "item release") {
	}
	wantIDs(t, p, wake.Items, "item release", pub.Publication.ID)
}
