package storetest

import (
	"errors"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// The retention cases: tokens that are listed, expired and revoked; batch
// deletion and prune; and the cache (store.Cache) over two stores on one
// database, as two processes would have them.

func testTokenLifecycle(t *testing.T, h Harness) {
	s := h.New(t)
	issue := func(actor, hash, label string, exp time.Time) store.Token {
		t.Helper()
		tok, err := s.IssueToken(ctx(t), store.NewToken{Actor: actor, Hash: hash, Label: label, ExpiresAt: exp})
		if err != nil {
			t.Fatalf("IssueToken: %v", err)
		}
		if tok.ID != store.TokenID(hash) || tok.Actor != actor || tok.Label != label {
			t.Fatalf("IssueToken = %+v", tok)
		}
		return tok
	}
	h1, h2, h3 := sha("1a"), sha("2b"), sha("3c")
	later := time.Now().Add(time.Hour)
	live := issue("alice", h1, "laptop", later)
	issue("alice", h2, "", time.Now().Add(-time.Second)) // expired already
	issue("bob", h3, "ci", time.Time{})
	if a, err := s.ActorForToken(ctx(t), h1); err != nil || a != "alice" {
		t.Fatalf("live token: %q, %v", a, err)
	}
	_, err := s.ActorForToken(ctx(t), h2)
	wantCode(t, err, intent.ENotFound)

	toks, err := s.ListTokens(ctx(t), "alice")
	if err != nil || len(toks) != 2 {
		t.Fatalf("ListTokens(alice) = %+v, %v", toks, err)
	}
	got := toks[0]
	if got.ID != live.ID {
		got = toks[1]
	}
	if got.Label != "laptop" || got.ExpiresAt.Sub(later).Abs() > time.Millisecond || !got.RevokedAt.IsZero() {
		t.Fatalf("listed token = %+v", got)
	}
	if !got.LastUsedAt.Equal(store.Hour(time.Now())) && !got.LastUsedAt.Equal(store.Hour(time.Now().Add(-time.Minute))) {
		t.Fatalf("last used %v, want the hour of the use", got.LastUsedAt)
	}
	if all, err := s.ListTokens(ctx(t), ""); err != nil || len(all) != 3 {
		t.Fatalf("ListTokens() = %d, %v", len(all), err)
	}

	rev, err := s.RevokeToken(ctx(t), live.ID)
	if err != nil || rev.RevokedAt.IsZero() || rev.Actor != "alice" {
		t.Fatalf("RevokeToken = %+v, %v", rev, err)
	}
	_, err = s.ActorForToken(ctx(t), h1)
	wantCode(t, err, intent.ENotFound)
	again, err := s.RevokeToken(ctx(t), live.ID)
	if err != nil || !again.RevokedAt.Equal(rev.RevokedAt) {
		t.Fatalf("second revoke = %+v, %v; want it unchanged", again, err)
	}
	_, err = s.RevokeToken(ctx(t), "0123456789abcdef")
	wantCode(t, err, intent.ENotFound)
	_, err = s.RevokeToken(ctx(t), "not-an-id")
	wantCode(t, err, intent.ENotFound)
	if a, err := s.ActorForToken(ctx(t), h3); err != nil || a != "bob" {
		t.Fatalf("another token after a revoke: %q, %v", a, err)
	}
}

// endedBatch makes a batch of n tasks with assets, all succeeded.
func endedBatch(t *testing.T, s store.Store, actor, requestID string, n int) (string, []string) {
	t.Helper()
	return BatchWithAssets(t, s, actor, requestID, n)
}

func testDeleteBatch(t *testing.T, h Harness) {
	s := h.New(t)
	id, assets := endedBatch(t, s, "alice", "req-del", 3)
	running := Intent(t, "alice", "req-run", "fp", 2)
	mustCreate(t, s, running)
	_, err := s.DeleteBatch(ctx(t), "alice", running.Batch.ID)
	if !errors.Is(err, store.ErrBatchRunning) {
		t.Fatalf("delete of a queued batch: %v, want ErrBatchRunning", err)
	}
	_, err = s.DeleteBatch(ctx(t), "bob", id)
	wantCode(t, err, intent.ENotFound)

	// A publication still queued holds the batch; once it ended, it goes
	// with the batch.
	pub := PublicationIntent(t, "alice", "req-pub", "fp-pub", id, assets[:2], "gallery")
	mustCreate(t, s, pub)
	_, err = s.DeleteBatch(ctx(t), "alice", id)
	if !errors.Is(err, store.ErrBatchRunning) {
		t.Fatalf("delete while publishing: %v, want ErrBatchRunning", err)
	}
	items := claimItems(t, s, "w", 10, longTTL)
	var done []store.Completion
	for _, it := range items {
		done = append(done, store.Completion{Lease: it.Lease})
	}
	if res, err := s.CompleteLeases(ctx(t), done); err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("CompleteLeases = %v, %v", res, err)
	}

	// An upload of the same bytes as one of the batch's assets keeps them.
	a0, err := s.GetAsset(ctx(t), "alice", assets[0])
	if err != nil {
		t.Fatal(err)
	}
	up, _, err := s.CreateUpload(ctx(t), intent.NewUpload{Asset: upload(t, "alice", a0.SHA256)})
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Usage(ctx(t))
	if err != nil {
		t.Fatal(err)
	}

	d, err := s.DeleteBatch(ctx(t), "alice", id)
	if err != nil {
		t.Fatalf("DeleteBatch: %v", err)
	}
	if d.Batches != 1 || d.Tasks != 3 || d.Assets != 3 || d.AssetBytes != 3*67 {
		t.Fatalf("deleted %+v, want 1 batch, 3 tasks, 3 assets of 67 bytes", d)
	}
	_, err = s.GetBatch(ctx(t), "alice", id)
	wantCode(t, err, intent.ENotFound)
	_, err = s.LookupIntent(ctx(t), "alice", "req-del")
	wantCode(t, err, intent.ENotFound)
	_, err = s.LookupIntent(ctx(t), "alice", "req-pub")
	wantCode(t, err, intent.ENotFound)
	_, err = s.GetPublication(ctx(t), "alice", pub.Publication.ID)
	wantCode(t, err, intent.ENotFound)
	_, err = s.ListTasks(ctx(t), id, store.ListParams{Actor: "alice", Limit: 10})
	wantCode(t, err, intent.ENotFound)
	for _, a := range assets {
		_, err := s.GetAsset(ctx(t), "alice", a)
		wantCode(t, err, intent.ENotFound)
	}
	if n := countBatches(t, s, "alice"); n != 1 {
		t.Fatalf("%d batches listed, want only the running one", n)
	}
	if _, err := s.GetAsset(ctx(t), "alice", up.ID); err != nil {
		t.Fatalf("the upload went with the batch: %v", err)
	}
	if in, err := s.BlobInUse(ctx(t), a0.SHA256); err != nil || !in {
		t.Fatalf("bytes an upload names: in use %v, %v", in, err)
	}
	after, err := s.Usage(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if before.Batches-after.Batches != 1 || before.Tasks-after.Tasks != 3 || before.Assets-after.Assets != 3 || before.AssetBytes-after.AssetBytes != 3*67 {
		t.Fatalf("usage %+v -> %+v", before, after)
	}

	// Deleting it again: not found, as a random id.
	_, err = s.DeleteBatch(ctx(t), "alice", id)
	wantCode(t, err, intent.ENotFound)
	// The request id is free again: the same id makes a new batch.
	again := Intent(t, "alice", "req-del", "fp-req-del", 1)
	if b, created, err := s.CreateIntent(ctx(t), again); err != nil || !created || b.ResourceID != again.Batch.ID {
		t.Fatalf("the id after its batch's deletion: %+v, %v, %v", b, created, err)
	}
}

func testPrune(t *testing.T, h Harness) {
	s := h.New(t)
	old1, _ := endedBatch(t, s, "alice", "p-1", 2)
	old2, _ := endedBatch(t, s, "bob", "p-2", 3)
	canceled := Intent(t, "alice", "p-3", "fp", 2)
	mustCreate(t, s, canceled)
	if _, err := s.CancelBatch(ctx(t), "alice", canceled.Batch.ID); err != nil {
		t.Fatal(err)
	}
	queued := Intent(t, "alice", "p-4", "fp", 2)
	mustCreate(t, s, queued)
	cut := time.Now().Add(time.Minute)

	dry, err := store.Prune(ctx(t), s, store.PruneParams{Before: cut, DryRun: true, Page: 2})
	if err != nil || dry.Batches != 3 || dry.Tasks != 7 {
		t.Fatalf("dry run = %+v, %v; want 3 batches, 7 tasks", dry, err)
	}
	if n := countBatches(t, s, "alice") + countBatches(t, s, "bob"); n != 4 {
		t.Fatalf("a dry run deleted: %d batches left", n)
	}
	if none, err := store.Prune(ctx(t), s, store.PruneParams{Before: time.Now().Add(-time.Hour)}); err != nil || none.Batches != 0 {
		t.Fatalf("prune of nothing old enough = %+v, %v", none, err)
	}
	var calls int
	d, err := store.Prune(ctx(t), s, store.PruneParams{Before: cut, Page: 2, Deleted: func(store.Deleted) { calls++ }})
	if err != nil || d.Batches != 3 || d.Tasks != 7 || d.Assets != 5 || calls != 3 {
		t.Fatalf("prune = %+v, %v (%d calls); want 3 batches, 7 tasks, 5 assets", d, err, calls)
	}
	for _, b := range []struct{ actor, id string }{{"alice", old1}, {"bob", old2}, {"alice", canceled.Batch.ID}} {
		_, err := s.GetBatch(ctx(t), b.actor, b.id)
		wantCode(t, err, intent.ENotFound)
	}
	if _, err := s.GetBatch(ctx(t), "alice", queued.Batch.ID); err != nil {
		t.Fatalf("the queued batch was pruned: %v", err)
	}
	u, err := s.Usage(ctx(t))
	if err != nil || u.Batches != 1 || u.Tasks != 2 || u.Assets != 0 {
		t.Fatalf("usage after prune = %+v, %v", u, err)
	}
}

// testCacheAcrossStores: a Cache over one store answers from memory what
// it read, forgets at once what is deleted through it, and what another
// store on the database deletes once MaxAge has passed (the clock is the
// test's).
func testCacheAcrossStores(t *testing.T, h Harness) {
	if h.Twin == nil {
		t.Skip("the harness makes no twin stores")
	}
	s := h.New(t)
	other := h.Twin(t, s)
	clock := time.Now()
	c := store.NewCache(s, store.CacheConfig{MaxAge: time.Second, Now: func() time.Time { return clock }})

	hash := sha("cafe")
	tok, err := other.IssueToken(ctx(t), store.NewToken{Actor: "alice", Hash: hash})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := c.ActorForToken(ctx(t), hash); err != nil || a != "alice" {
		t.Fatalf("a token another store made: %q, %v", a, err)
	}
	id, _ := endedBatch(t, other, "alice", "c-1", 1)
	if b, err := c.LookupIntent(ctx(t), "alice", "c-1"); err != nil || b.ResourceID != id {
		t.Fatalf("a binding another store made: %+v, %v", b, err)
	}
	if b, err := c.GetBatch(ctx(t), "alice", id); err != nil || b.State != intent.StateSucceeded {
		t.Fatalf("an ended batch: %+v, %v", b, err)
	}

	// Deleted by the other store: remembered until MaxAge has passed.
	if _, err := other.RevokeToken(ctx(t), tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.DeleteBatch(ctx(t), "alice", id); err != nil {
		t.Fatal(err)
	}
	if a, err := c.ActorForToken(ctx(t), hash); err != nil || a != "alice" {
		t.Fatalf("within MaxAge the remembered token answers: %q, %v", a, err)
	}
	clock = clock.Add(time.Second)
	_, err = c.ActorForToken(ctx(t), hash)
	wantCode(t, err, intent.ENotFound)
	_, err = c.LookupIntent(ctx(t), "alice", "c-1")
	wantCode(t, err, intent.ENotFound)
	_, err = c.GetBatch(ctx(t), "alice", id)
	wantCode(t, err, intent.ENotFound)

	// Deleted through the cache: forgotten at once.
	hash2 := sha("beef")
	tok2, err := other.IssueToken(ctx(t), store.NewToken{Actor: "bob", Hash: hash2})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := c.ActorForToken(ctx(t), hash2); err != nil || a != "bob" {
		t.Fatalf("second token: %q, %v", a, err)
	}
	id2, _ := endedBatch(t, other, "bob", "c-2", 1)
	if _, err := c.GetBatch(ctx(t), "bob", id2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevokeToken(ctx(t), tok2.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.ActorForToken(ctx(t), hash2)
	wantCode(t, err, intent.ENotFound)
	if _, err := c.DeleteBatch(ctx(t), "bob", id2); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBatch(ctx(t), "bob", id2)
	wantCode(t, err, intent.ENotFound)
	// The id is free again, on every store.
	again := Intent(t, "bob", "c-2", "fp", 1)
	mustCreate(t, s, again)
	if b, err := c.LookupIntent(ctx(t), "bob", "c-2"); err != nil || b.ResourceID != again.Batch.ID {
		t.Fatalf("the new binding of a freed id: %+v, %v", b, err)
	}
}
