// Package storetest is the one conformance suite that every store.Store
// implementation passes. A backend's test calls Run with a Harness that
// makes fresh, empty stores; the suite knows nothing of the engine.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// Harness makes stores for the suite.
type Harness struct {
	// New returns an empty store, closed by the harness when t ends.
	New func(t *testing.T) store.Store
	// Twin returns a second store on the same database as s, with its own
	// connections, as another process would have them. Nil skips the tests
	// that need it (with a message).
	Twin func(t *testing.T, s store.Store) store.Store
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"CreateThenReplay", testCreateThenReplay},
		{"ConflictChangesNothing", testConflict},
		{"OperationIsPartOfTheBinding", testOperationConflict},
		{"FailingChildLeavesNothing", testRollback},
		{"ConcurrentSameID", testConcurrentSameID},
		{"ConcurrentSameIDAcrossStores", testConcurrentAcrossStores},
		{"ActorScoping", testActorScoping},
		{"ListBatchesPages", testListBatches},
		{"ListTasksPagesAndFilters", testListTasks},
		{"Cancel", testCancel},
		{"Tokens", testTokens},
		{"FirstTokenOnce", testFirstTokenOnce},
		{"AssetsNotFound", testAssetNotFound},
		{"Ping", testPing},
		{"LargestTree", testLargestTree},
		{"ClaimBasics", testClaimBasics},
		{"RacingClaimsNeverShareATask", testRacingClaims},
		{"OldFenceChangesNothing", testOldFence},
		{"RenewAfterExpiryFails", testRenew},
		{"CancelRunningTasks", testCancelRunning},
		{"FairShare", testFairShare},
		{"BackoffRespected", testBackoff},
		{"MaxAttemptsKeepsTheError", testMaxAttempts},
		{"ReleaseKeepsTheStep", testRelease},
		{"GenerationCallsAndHistory", testGenerationCalls},
		{"ClaimSkipsGenerators", testSkipGenerators},
		{"CountsConsistentUnderChurn", testCountsUnderChurn},
		{"UploadKeyReplayAndConflict", testUploadKeyReplayAndConflict},
		{"UploadWithoutKey", testUploadWithoutKey},
		{"UploadKeysPerActor", testUploadKeysPerActor},
		{"UploadConcurrentSameKey", testUploadConcurrentSameKey},
		{"UploadRejectsTaskAssets", testUploadRejectsTaskAssets},
		{"PublicationCreateThenReplay", testPublicationCreateThenReplay},
		{"PublicationConflicts", testPublicationConflicts},
		{"PublicationFailingItemLeavesNothing", testPublicationRollback},
		{"PublicationAssetRules", testPublicationAssetRules},
		{"PublicationActorScoping", testPublicationActorScoping},
		{"ItemLeases", testItemLeases},
		{"ItemExpiry", testItemExpiry},
		{"ItemFailures", testItemFailures},
		{"ItemExpiredOutOfAttempts", testItemExpiredOutOfAttempts},
		{"ItemRelease", testItemRelease},
		{"RacingItemClaimsNeverShareAnItem", testRacingItemClaims},
		{"CursorKeyOnce", testCursorKeyOnce},
		{"BatchChanges", testBatchChanges},
		{"BatchChangesUnderChurn", testChangesUnderChurn},
		{"BatchChangesEveryPath", testChangesEveryPath},
		{"WatchBatch", testWatchBatch},
		{"Wakes", testWakes},
		{"ListPublications", testListPublications},
		{"TokenLifecycle", testTokenLifecycle},
		{"DeleteBatch", testDeleteBatch},
		{"Prune", testPrune},
		{"CacheAcrossStores", testCacheAcrossStores},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// Intent builds a valid generation intent with n tasks and fresh ids.
func Intent(t testing.TB, actor, requestID, fingerprint string, n int) intent.NewIntent {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	nb := &intent.NewBatch{ID: mustID(t), Prompt: "a knight in the rain", Spec: []byte(`{"prompt":"a knight in the rain"}`), CreatedAt: now}
	for i := 0; i < n; i++ {
		nb.Tasks = append(nb.Tasks, intent.NewTask{
			ID: mustID(t), Collection: "walk", Frame: fmt.Sprintf("f%03d", i/2), Generator: []string{"sketch", "mosaic"}[i%2], Candidate: 1,
		})
	}
	return intent.NewIntent{
		Binding: intent.Binding{Actor: actor, RequestID: requestID, Operation: intent.OpGeneration, Fingerprint: fingerprint, ResourceID: nb.ID, CreatedAt: now},
		Batch:   nb,
	}
}

func mustID(t testing.TB) string {
	t.Helper()
	id, err := intent.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func mustCreate(t testing.TB, s store.Store, in intent.NewIntent) intent.Binding {
	t.Helper()
	b, created, err := s.CreateIntent(ctx(t), in)
	if err != nil {
		t.Fatalf("CreateIntent: %v", err)
	}
	if !created {
		t.Fatalf("CreateIntent: created = false for a new id")
	}
	return b
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := intent.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

func countBatches(t *testing.T, s store.Store, actor string) int {
	t.Helper()
	bs, err := s.ListBatches(ctx(t), store.ListParams{Actor: actor, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(bs)
}

func allTasks(t *testing.T, s store.Store, actor, batchID string) []intent.Task {
	t.Helper()
	ts, err := s.ListTasks(ctx(t), batchID, store.ListParams{Actor: actor, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func testCreateThenReplay(t *testing.T, h Harness) {
	s := h.New(t)
	first := Intent(t, "alice", "req-1", "fp-1", 12)
	b := mustCreate(t, s, first)
	if b.ResourceID != first.Batch.ID {
		t.Fatalf("binding names %s, want %s", b.ResourceID, first.Batch.ID)
	}
	batch, err := s.GetBatch(ctx(t), "alice", first.Batch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if batch.TaskCount != 12 || batch.Counts.Queued != 12 || batch.State != intent.StateQueued || batch.RequestID != "req-1" {
		t.Fatalf("batch = %+v", batch)
	}
	tasks := allTasks(t, s, "alice", first.Batch.ID)
	if len(tasks) != 12 {
		t.Fatalf("%d tasks, want 12", len(tasks))
	}
	for i, task := range tasks {
		if task.ID != first.Batch.Tasks[i].ID || task.State != intent.StateQueued || task.Attempts != 0 || task.AssetID != nil {
			t.Fatalf("task %d = %+v, want id %s queued", i, task, first.Batch.Tasks[i].ID)
		}
	}
	got, err := s.LookupIntent(ctx(t), "alice", "req-1")
	if err != nil || got.Fingerprint != "fp-1" || got.ResourceID != first.Batch.ID || got.Operation != intent.OpGeneration {
		t.Fatalf("LookupIntent = %+v, %v", got, err)
	}

	// A retry carries a new plan (new ids); the store keeps the first.
	retry := Intent(t, "alice", "req-1", "fp-1", 12)
	b2, created, err := s.CreateIntent(ctx(t), retry)
	if err != nil || created {
		t.Fatalf("replay: created=%v err=%v", created, err)
	}
	if b2.ResourceID != first.Batch.ID {
		t.Fatalf("replay names %s, want the first batch %s", b2.ResourceID, first.Batch.ID)
	}
	if n := countBatches(t, s, "alice"); n != 1 {
		t.Fatalf("%d batches after a replay, want 1", n)
	}
	if _, err := s.GetBatch(ctx(t), "alice", retry.Batch.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the replay's batch exists: %v", err)
	}
}

func testConflict(t *testing.T, h Harness) {
	s := h.New(t)
	first := Intent(t, "alice", "req-1", "fp-1", 3)
	mustCreate(t, s, first)
	_, created, err := s.CreateIntent(ctx(t), Intent(t, "alice", "req-1", "fp-2", 5))
	wantCode(t, err, intent.EConflict)
	if intent.ErrorMessage(err) != intent.ConflictMessage {
		t.Fatalf("conflict message = %q", intent.ErrorMessage(err))
	}
	if created {
		t.Fatal("created on conflict")
	}
	if n := countBatches(t, s, "alice"); n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
	if ts := allTasks(t, s, "alice", first.Batch.ID); len(ts) != 3 {
		t.Fatalf("%d tasks, want 3", len(ts))
	}
	b, err := s.LookupIntent(ctx(t), "alice", "req-1")
	if err != nil || b.Fingerprint != "fp-1" {
		t.Fatalf("binding changed: %+v %v", b, err)
	}
}

func testOperationConflict(t *testing.T, h Harness) {
	s := h.New(t)
	mustCreate(t, s, Intent(t, "alice", "req-1", "fp-1", 1))
	other := Intent(t, "alice", "req-1", "fp-1", 1)
	other.Binding.Operation = intent.OpPublication
	_, _, err := s.CreateIntent(ctx(t), other)
	wantCode(t, err, intent.EConflict)
}

func testRollback(t *testing.T, h Harness) {
	s := h.New(t)
	bad := Intent(t, "alice", "req-1", "fp-1", 600)
	// The last task reuses the first task's id: its insert fails inside the
	// transaction, after the binding, the batch and 599 tasks went in.
	bad.Batch.Tasks[599].ID = bad.Batch.Tasks[0].ID
	if _, _, err := s.CreateIntent(ctx(t), bad); err == nil {
		t.Fatal("CreateIntent with a failing child succeeded")
	}
	if _, err := s.LookupIntent(ctx(t), "alice", "req-1"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("binding left behind: %v", err)
	}
	if _, err := s.GetBatch(ctx(t), "alice", bad.Batch.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("batch left behind: %v", err)
	}
	if n := countBatches(t, s, "alice"); n != 0 {
		t.Fatalf("%d batches left behind", n)
	}
	if _, err := s.ListTasks(ctx(t), bad.Batch.ID, store.ListParams{Actor: "alice", Limit: 10}); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("tasks of the failed batch: %v", err)
	}
	// A retry with good input starts clean, even one that reuses the ids of
	// the failed try.
	good := Intent(t, "alice", "req-1", "fp-1", 600)
	good.Batch.ID = bad.Batch.ID
	good.Binding.ResourceID = bad.Batch.ID
	good.Batch.Tasks[0].ID = bad.Batch.Tasks[0].ID
	mustCreate(t, s, good)
	if ts := allTasks(t, s, "alice", good.Batch.ID); len(ts) != 600 {
		t.Fatalf("%d tasks after the clean retry, want 600", len(ts))
	}
}

func raceSameID(t *testing.T, stores []store.Store, n int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	ids := map[string]int{}
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			in := Intent(t, "alice", "same", "fp", 4)
			<-start
			b, c, err := stores[i%len(stores)].CreateIntent(context.Background(), in)
			if err != nil {
				t.Errorf("try %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c {
				created++
			}
			ids[b.ResourceID]++
		}(i)
	}
	close(start)
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d tries created %d records naming %d batches, want 1 and 1", n, created, len(ids))
	}
	if got := countBatches(t, stores[0], "alice"); got != 1 {
		t.Fatalf("%d batches, want 1", got)
	}
}

func testConcurrentSameID(t *testing.T, h Harness) {
	raceSameID(t, []store.Store{h.New(t)}, 64)
}

func testConcurrentAcrossStores(t *testing.T, h Harness) {
	if h.Twin == nil {
		t.Skip("the harness has no Twin: two stores on one database are not tested for this backend")
	}
	s := h.New(t)
	raceSameID(t, []store.Store{s, h.Twin(t, s)}, 64)
}

func testActorScoping(t *testing.T, h Harness) {
	s := h.New(t)
	a := Intent(t, "alice", "req-1", "fp-alice", 2)
	mustCreate(t, s, a)
	if _, err := s.GetBatch(ctx(t), "bob", a.Batch.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob reads alice's batch: %v", err)
	}
	if _, err := s.ListTasks(ctx(t), a.Batch.ID, store.ListParams{Actor: "bob", Limit: 10}); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob lists alice's tasks: %v", err)
	}
	if _, err := s.CancelBatch(ctx(t), "bob", a.Batch.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob cancels alice's batch: %v", err)
	}
	if _, err := s.LookupIntent(ctx(t), "bob", "req-1"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob sees alice's request id: %v", err)
	}
	// The same request id is bob's own, independent of alice's.
	b := Intent(t, "bob", "req-1", "fp-bob", 1)
	mustCreate(t, s, b)
	if n := countBatches(t, s, "bob"); n != 1 {
		t.Fatalf("bob has %d batches", n)
	}
	if n := countBatches(t, s, "alice"); n != 1 {
		t.Fatalf("alice has %d batches", n)
	}
	if got, _ := s.GetBatch(ctx(t), "alice", a.Batch.ID); got.Counts.Canceled != 0 {
		t.Fatal("bob's cancel changed alice's batch")
	}
}

func testListBatches(t *testing.T, h Harness) {
	s := h.New(t)
	var ids []string
	for i := 0; i < 5; i++ {
		in := Intent(t, "alice", fmt.Sprintf("req-%d", i), "fp", 1)
		mustCreate(t, s, in)
		ids = append(ids, in.Batch.ID)
	}
	mustCreate(t, s, Intent(t, "bob", "req-0", "fp", 1))
	var got []string
	after := ""
	for page := 0; page < 10; page++ {
		bs, err := s.ListBatches(ctx(t), store.ListParams{Actor: "alice", Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) == 0 {
			break
		}
		for _, b := range bs {
			got = append(got, b.ID)
		}
		after = bs[len(bs)-1].ID
	}
	if len(got) != 5 {
		t.Fatalf("paged %d batches, want 5: %v", len(got), got)
	}
	for i := range got {
		if got[i] != ids[4-i] {
			t.Fatalf("page order %v, want newest first %v", got, ids)
		}
	}
}

func testListTasks(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 250)
	mustCreate(t, s, in)
	seen := map[string]bool{}
	after := ""
	for {
		ts, err := s.ListTasks(ctx(t), in.Batch.ID, store.ListParams{Actor: "alice", Limit: 100, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) == 0 {
			break
		}
		for _, task := range ts {
			if seen[task.ID] {
				t.Fatalf("task %s twice", task.ID)
			}
			seen[task.ID] = true
		}
		after = ts[len(ts)-1].ID
	}
	if len(seen) != 250 {
		t.Fatalf("paged %d tasks, want 250", len(seen))
	}
	q, err := s.ListTasks(ctx(t), in.Batch.ID, store.ListParams{Actor: "alice", Limit: 500, State: intent.StateQueued})
	if err != nil || len(q) != 250 {
		t.Fatalf("queued filter: %d, %v", len(q), err)
	}
	c, err := s.ListTasks(ctx(t), in.Batch.ID, store.ListParams{Actor: "alice", Limit: 500, State: intent.StateSucceeded})
	if err != nil || len(c) != 0 {
		t.Fatalf("succeeded filter: %d, %v", len(c), err)
	}
}

func testCancel(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 7)
	mustCreate(t, s, in)
	b, err := s.CancelBatch(ctx(t), "alice", in.Batch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != intent.StateCanceled || b.Counts.Canceled != 7 || b.Counts.Queued != 0 {
		t.Fatalf("after cancel: %+v", b)
	}
	for _, task := range allTasks(t, s, "alice", in.Batch.ID) {
		if task.State != intent.StateCanceled {
			t.Fatalf("task %s is %s after cancel", task.ID, task.State)
		}
	}
	again, err := s.CancelBatch(ctx(t), "alice", in.Batch.ID)
	if err != nil || again.Counts != b.Counts || again.State != b.State || !again.UpdatedAt.Equal(b.UpdatedAt) {
		t.Fatalf("second cancel changed the batch: %+v -> %+v (%v)", b, again, err)
	}
	if _, err := s.CancelBatch(ctx(t), "alice", mustID(t)); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("cancel of a missing batch: %v", err)
	}
}

func testTokens(t *testing.T, h Harness) {
	s := h.New(t)
	if n, err := s.CountTokens(ctx(t)); err != nil || n != 0 {
		t.Fatalf("CountTokens = %d, %v", n, err)
	}
	if err := s.CreateToken(ctx(t), "alice", "hash-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx(t), "bob", "hash-b"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.CreateToken(ctx(t), "mallory", "hash-a"), intent.EConflict)
	if a, err := s.ActorForToken(ctx(t), "hash-a"); err != nil || a != "alice" {
		t.Fatalf("ActorForToken = %q, %v", a, err)
	}
	_, err := s.ActorForToken(ctx(t), "hash-x")
	wantCode(t, err, intent.ENotFound)
	if n, err := s.CountTokens(ctx(t)); err != nil || n != 2 {
		t.Fatalf("CountTokens = %d, %v", n, err)
	}
}

func testAssetNotFound(t *testing.T, h Harness) {
	s := h.New(t)
	_, err := s.GetAsset(ctx(t), "alice", mustID(t))
	wantCode(t, err, intent.ENotFound)
}

func testPing(t *testing.T, h Harness) {
	s := h.New(t)
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func testLargestTree(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "big", "fp", 600)
	mustCreate(t, s, in)
	b, err := s.GetBatch(ctx(t), "alice", in.Batch.ID)
	if err != nil || b.TaskCount != 600 || b.Counts.Queued != 600 {
		t.Fatalf("batch = %+v, %v", b, err)
	}
}

func testFirstTokenOnce(t *testing.T, h Harness) {
	s := h.New(t)
	stores := []store.Store{s}
	if h.Twin != nil {
		stores = append(stores, h.Twin(t, s))
	}
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok, err := stores[i%len(stores)].CreateTokenIfNone(context.Background(), "local", fmt.Sprintf("hash-%d", i))
			if err != nil {
				t.Errorf("try %d: %v", i, err)
				return
			}
			if ok {
				mu.Lock()
				created++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("%d racing first-token tries created %d, want 1", n, created)
	}
	if c, err := s.CountTokens(ctx(t)); err != nil || c != 1 {
		t.Fatalf("CountTokens = %d, %v", c, err)
	}
	if ok, err := s.CreateTokenIfNone(ctx(t), "local", "hash-late"); err != nil || ok {
		t.Fatalf("a later first-token try: created=%v err=%v", ok, err)
	}
}
