package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// The task cases: leases, fences, steps, completions, retries, cancel and
// fair share. Leases in these tests are short; a case that needs one to
// expire claims until the task comes back, with a deadline, instead of
// assuming how long the database's clock takes.

const longTTL = time.Minute

func claim(t testing.TB, s store.Store, owner string, limit int, ttl time.Duration) []store.ClaimedTask {
	t.Helper()
	return claimOf(t, s.ClaimTasks, store.ClaimParams{Owner: owner, Limit: limit, TTL: ttl})
}

// claimed is a row under a fresh lease: a task or a publication item.
type claimed interface {
	store.ClaimedTask | store.ClaimedItem
}

// claimer is a store's claim of one kind (ClaimTasks, ClaimItems).
type claimer[C claimed] func(context.Context, store.ClaimParams) ([]C, error)

// claimOf claims with p and fails the test on an error.
func claimOf[C claimed](t testing.TB, claim claimer[C], p store.ClaimParams) []C {
	t.Helper()
	cs, err := claim(ctx(t), p)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return cs
}

// leaseOf is the lease of a claimed row.
func leaseOf[C claimed](c C) store.Lease {
	switch c := any(c).(type) {
	case store.ClaimedTask:
		return c.Lease
	case store.ClaimedItem:
		return c.Lease
	}
	panic("unreachable")
}

// claimUntil claims (one at a time) until the row id comes back, for
// cases that wait for a lease to expire.
func claimUntil[C claimed](t *testing.T, claim claimer[C], owner, id string, p store.ClaimParams) C {
	t.Helper()
	p.Owner, p.Limit = owner, 1
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range claimOf(t, claim, p) {
			if got := leaseOf(c).ID; got != id {
				t.Fatalf("claimed %s while waiting for %s", got, id)
			}
			return c
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never became claimable again", id)
	var zero C
	return zero
}

// sleepPast sleeps a little longer than ttl by the local clock; callers
// then check by the store (claim or renew) that the lease expired, in a
// loop with a deadline.
func sleepPast(ttl time.Duration) { time.Sleep(ttl + 20*time.Millisecond) }

func task(t *testing.T, s store.Store, actor, batchID, taskID string) intent.Task {
	t.Helper()
	for _, tk := range allTasks(t, s, actor, batchID) {
		if tk.ID == taskID {
			return tk
		}
	}
	t.Fatalf("task %s not found", taskID)
	return intent.Task{}
}

// checkCounts proves the batch's counts equal its tasks' states. Call it
// only while nothing else writes the batch.
func checkCounts(t *testing.T, s store.Store, actor, batchID string) intent.Batch {
	t.Helper()
	b, err := s.GetBatch(ctx(t), actor, batchID)
	if err != nil {
		t.Fatal(err)
	}
	var c intent.Counts
	for _, tk := range allTasks(t, s, actor, batchID) {
		count(t, &c, tk.ID, tk.State)
	}
	if b.Counts != c {
		t.Fatalf("batch counts %+v, tasks say %+v", b.Counts, c)
	}
	if b.TaskCount != c.Total() {
		t.Fatalf("task_count %d, %d tasks", b.TaskCount, c.Total())
	}
	return b
}

// count counts one child (a task, an item) of state st in c.
func count(t *testing.T, c *intent.Counts, id string, st intent.State) {
	t.Helper()
	switch st {
	case intent.StateQueued:
		c.Queued++
	case intent.StateRunning:
		c.Running++
	case intent.StateSucceeded:
		c.Succeeded++
	case intent.StateFailed:
		c.Failed++
	case intent.StateCanceled:
		c.Canceled++
	default:
		t.Fatalf("%s in state %q", id, st)
	}
}

func asset(t testing.TB, sha string) intent.Asset {
	return intent.Asset{ID: mustID(t), SHA256: sha, ContentType: "image/png", Size: 67, Width: 1, Height: 1}
}

const shaA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func complete(t *testing.T, s store.Store, c store.ClaimedTask) store.CompletionResult {
	t.Helper()
	res, err := s.CompleteLeases(ctx(t), []store.Completion{{Lease: c.Lease, Asset: asset(t, shaA)}})
	if err != nil {
		t.Fatalf("CompleteTasks: %v", err)
	}
	return res[0]
}

func testClaimBasics(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 5)
	mustCreate(t, s, in)
	cs := claim(t, s, "w1", 3, longTTL)
	if len(cs) != 3 {
		t.Fatalf("claimed %d, want 3", len(cs))
	}
	slices.SortFunc(cs, func(a, b store.ClaimedTask) int { return cmpStr(a.ID, b.ID) })
	for i, c := range cs {
		want := in.Batch.Tasks[i]
		if c.ID != want.ID || c.BatchID != in.Batch.ID || c.Actor != "alice" || c.Generator != want.Generator ||
			c.Frame != want.Frame || c.Collection != want.Collection || c.Candidate != want.Candidate {
			t.Fatalf("claim %d = %+v, want task %+v (plan order)", i, c, want)
		}
		if c.Fence < 1 || c.Attempt != 1 || c.Step != "" || c.ProviderRef != "" || string(c.Spec) != string(in.Batch.Spec) {
			t.Fatalf("claim %d = %+v", i, c)
		}
		if time.Until(c.ExpiresAt) < 30*time.Second {
			t.Fatalf("lease expires at %v, want about a minute from now", c.ExpiresAt)
		}
	}
	b := checkCounts(t, s, "alice", in.Batch.ID)
	if b.Counts.Running != 3 || b.Counts.Queued != 2 || b.State != intent.StateRunning {
		t.Fatalf("batch after claim: %+v", b)
	}
	if tk := task(t, s, "alice", in.Batch.ID, cs[0].ID); tk.State != intent.StateRunning || tk.Attempts != 1 {
		t.Fatalf("claimed task reads %+v", tk)
	}
	rest := claim(t, s, "w2", 10, longTTL)
	if len(rest) != 2 {
		t.Fatalf("second claim got %d, want the 2 left", len(rest))
	}
	if more := claim(t, s, "w3", 10, longTTL); len(more) != 0 {
		t.Fatalf("claimed %d live-leased tasks", len(more))
	}
	if _, err := s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w", Limit: 0, TTL: time.Second}); err == nil {
		t.Fatal("a claim with limit 0 was accepted")
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// testRacingClaims: many claimers at once, on one store and on a twin (as
// another process), never get one task twice.
func testRacingClaims(t *testing.T, h Harness) {
	s := h.New(t)
	stores := []store.Store{s}
	if h.Twin != nil {
		stores = append(stores, h.Twin(t, s))
	}
	var ids []string
	for i := 0; i < 3; i++ {
		in := Intent(t, fmt.Sprintf("actor-%d", i), "req", "fp", 100)
		mustCreate(t, s, in)
		ids = append(ids, in.Batch.ID)
	}
	owner := raceClaims(t, stores, "task", func(st store.Store, p store.ClaimParams) ([]string, error) {
		cs, err := st.ClaimTasks(context.Background(), p)
		ids := make([]string, len(cs))
		for i, c := range cs {
			ids[i] = c.ID
		}
		return ids, err
	})
	if len(owner) != 300 {
		t.Fatalf("claimed %d distinct tasks, want 300", len(owner))
	}
	for i, id := range ids {
		b := checkCounts(t, s, fmt.Sprintf("actor-%d", i), id)
		if b.Counts.Running != 100 {
			t.Fatalf("batch %d counts %+v", i, b.Counts)
		}
	}
}

// testOldFence: after a lease expired and the task was claimed again, every
// write under the old fence changes nothing.
func testOldFence(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 1)
	mustCreate(t, s, in)
	// Claimed under a long lease (a loaded machine may take longer than
	// a short one between the calls), then renewed under a short one
	// that runs out.
	ttl := 500 * time.Millisecond
	old := claim(t, s, "w1", 1, longTTL)[0]
	if err := saveStep(t, s, old.Lease, "submitted", "ref-1"); err != nil {
		t.Fatalf("SaveSteps with the live fence: %v", err)
	}
	if rr, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{old.Lease}, TTL: ttl}); err != nil || len(rr.Lost) != 0 {
		t.Fatalf("renew under a short lease: %+v, %v", rr, err)
	}
	sleepPast(ttl)
	cur := claimUntil(t, s.ClaimTasks, "w2", old.ID, store.ClaimParams{TTL: longTTL})
	if cur.Fence <= old.Fence || cur.Attempt != 2 {
		t.Fatalf("reclaim fence %d attempt %d, old fence %d", cur.Fence, cur.Attempt, old.Fence)
	}
	if cur.Step != "submitted" || cur.ProviderRef != "ref-1" {
		t.Fatalf("reclaim lost the step: %q %q", cur.Step, cur.ProviderRef)
	}
	before := checkCounts(t, s, "alice", in.Batch.ID)
	beforeTask := task(t, s, "alice", in.Batch.ID, old.ID)

	if errs, err := s.SaveSteps(ctx(t), []store.StepSave{{Lease: old.Lease, Step: "waited", ProviderRef: "ref-x", Calls: 3, Note: "stale"}}); err != nil || !errors.Is(errs[0], store.ErrLeaseLost) {
		t.Fatalf("SaveSteps with the old fence: %v %v", errs, err)
	}
	wantLeaseLost(t, s, "w1", store.Completion{Lease: old.Lease, Asset: asset(t, shaA)})
	after := checkCounts(t, s, "alice", in.Batch.ID)
	afterTask := task(t, s, "alice", in.Batch.ID, old.ID)
	if after.Counts != before.Counts || !after.UpdatedAt.Equal(before.UpdatedAt) || !reflect.DeepEqual(afterTask, beforeTask) {
		t.Fatalf("old-fence writes changed something:\n%+v\n%+v\n%+v\n%+v", before, after, beforeTask, afterTask)
	}
	if _, err := s.AssetForTask(ctx(t), old.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("an old-fence completion left an asset: %v", err)
	}
	// The live fence completes.
	if r := complete(t, s, cur); r.Err != nil || r.AssetID == "" {
		t.Fatalf("completion with the live fence: %+v", r)
	}
	a, err := s.AssetForTask(ctx(t), cur.ID)
	if err != nil || a.ID == "" || a.Actor != "alice" || a.TaskID == nil || *a.TaskID != cur.ID || a.SHA256 != shaA {
		t.Fatalf("AssetForTask = %+v, %v", a, err)
	}
	if got, err := s.GetAsset(ctx(t), "alice", a.ID); err != nil || got.ID != a.ID {
		t.Fatalf("GetAsset = %+v, %v", got, err)
	}
	if in, err := s.BlobInUse(ctx(t), shaA); err != nil || !in {
		t.Fatalf("BlobInUse = %v, %v", in, err)
	}
	if in, err := s.BlobInUse(ctx(t), "bb"+shaA[2:]); err != nil || in {
		t.Fatalf("BlobInUse of an unknown blob = %v, %v", in, err)
	}
	tk := task(t, s, "alice", in.Batch.ID, cur.ID)
	if tk.State != intent.StateSucceeded || tk.AssetID == nil || *tk.AssetID != a.ID || tk.Attempts != 2 {
		t.Fatalf("completed task = %+v", tk)
	}
	if b := checkCounts(t, s, "alice", in.Batch.ID); b.State != intent.StateSucceeded {
		t.Fatalf("batch = %+v", b)
	}
	// A second completion of an ended task is a lost lease, not a second asset.
	if r := complete(t, s, cur); !errors.Is(r.Err, store.ErrLeaseLost) {
		t.Fatalf("second completion: %+v", r)
	}
}

// wantLeaseLost checks that every write of the lease queue under a lease
// that is no longer live (its owner's renewal, the completion c, a
// failure, a release) answers ErrLeaseLost.
func wantLeaseLost(t *testing.T, s store.LeaseStore, owner string, c store.Completion) {
	t.Helper()
	rr, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: owner, Leases: []store.Lease{c.Lease}, TTL: longTTL})
	if err != nil || len(rr.Lost) != 1 {
		t.Fatalf("renew with the old fence: %+v, %v", rr, err)
	}
	res, err := s.CompleteLeases(ctx(t), []store.Completion{c})
	if err != nil || !errors.Is(res[0].Err, store.ErrLeaseLost) {
		t.Fatalf("complete with the old fence: %+v, %v", res, err)
	}
	if _, err := s.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "boom", Permanent: true}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("fail with the old fence: %v", err)
	}
	if errs, err := s.ReleaseLeases(ctx(t), []store.Lease{c.Lease}); err != nil || !errors.Is(errs[0], store.ErrLeaseLost) {
		t.Fatalf("release with the old fence: %v, %v", errs, err)
	}
}

func saveStep(t *testing.T, s store.Store, l store.Lease, step, ref string) error {
	t.Helper()
	errs, err := s.SaveSteps(ctx(t), []store.StepSave{{Lease: l, Step: step, ProviderRef: ref}})
	if err != nil {
		t.Fatalf("SaveSteps: %v", err)
	}
	return errs[0]
}

// testRenew: a live lease renews; an expired one does not, even when no one
// claimed it since; another owner cannot renew it.
func testRenew(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 2)
	mustCreate(t, s, in)
	cs := claim(t, s, "w1", 2, longTTL)
	rr, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[0].Lease, cs[1].Lease}, TTL: 2 * longTTL})
	if err != nil || len(rr.Lost) != 0 || len(rr.Canceled) != 0 || !rr.ExpiresAt.After(cs[0].ExpiresAt) {
		t.Fatalf("renew: %+v, %v (claimed until %v)", rr, err, cs[0].ExpiresAt)
	}
	rr, err = s.RenewLeases(ctx(t), store.RenewParams{Owner: "w2", Leases: []store.Lease{cs[0].Lease}, TTL: longTTL})
	if err != nil || len(rr.Lost) != 1 {
		t.Fatalf("renew by another owner: %+v, %v", rr, err)
	}
	// Shorten to an expiry, then renewing fails.
	ttl := 20 * time.Millisecond
	if _, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[0].Lease}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	sleepPast(ttl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rr, err = s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[0].Lease}, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Lost) == 1 && rr.Lost[0] == cs[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lease renewed for 20ms never expired")
		}
		sleepPast(ttl)
	}
	// Once lost, lost for good.
	if rr, _ := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[0].Lease}, TTL: longTTL}); len(rr.Lost) != 1 {
		t.Fatalf("an expired lease renewed: %+v", rr)
	}
	if err := saveStep(t, s, cs[0].Lease, "submitted", "r"); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a step under an expired lease: %v", err)
	}
	if r := complete(t, s, cs[1]); r.Err != nil {
		t.Fatalf("the other, renewed lease: %+v", r)
	}
}

// testCancelRunning: cancel cancels queued tasks at once; running ones end
// canceled at their next write, unless already succeeded.
func testCancelRunning(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 8)
	mustCreate(t, s, in)
	cs := claim(t, s, "w1", 6, longTTL)
	if r := complete(t, s, cs[0]); r.Err != nil {
		t.Fatal(r.Err)
	}
	b, err := s.CancelBatch(ctx(t), "alice", in.Batch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.Counts != (intent.Counts{Running: 5, Succeeded: 1, Canceled: 2}) || b.State != intent.StateRunning {
		t.Fatalf("after cancel: %+v", b)
	}
	checkCounts(t, s, "alice", in.Batch.ID)
	if got := claim(t, s, "w2", 10, longTTL); len(got) != 0 {
		t.Fatalf("claimed %d tasks of a canceled batch", len(got))
	}
	// A step: canceled.
	if err := saveStep(t, s, cs[1].Lease, "submitted", "r"); !errors.Is(err, store.ErrTaskCanceled) {
		t.Fatalf("step after cancel: %v", err)
	}
	// A completion: canceled, no asset.
	if r := complete(t, s, cs[2]); !errors.Is(r.Err, store.ErrTaskCanceled) {
		t.Fatalf("completion after cancel: %+v", r)
	}
	if _, err := s.AssetForTask(ctx(t), cs[2].ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("a canceled completion left an asset: %v", err)
	}
	// A renewal names it; a release ends it canceled.
	rr, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[3].Lease}, TTL: longTTL})
	if err != nil || len(rr.Canceled) != 1 || rr.Canceled[0] != cs[3].ID || len(rr.Lost) != 0 {
		t.Fatalf("renew after cancel: %+v, %v", rr, err)
	}
	if errs, err := s.ReleaseLeases(ctx(t), []store.Lease{cs[3].Lease}); err != nil || errs[0] != nil {
		t.Fatalf("release after cancel: %v %v", errs, err)
	}
	// A failure: canceled, not queued.
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: cs[4].Lease, Error: "boom", Backoff: time.Millisecond}); err != nil || st != intent.StateCanceled {
		t.Fatalf("fail after cancel: %q %v", st, err)
	}
	// An expired lease: canceled by the next claim.
	if _, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[5].Lease}, TTL: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for task(t, s, "alice", in.Batch.ID, cs[5].ID).State == intent.StateRunning {
		if time.Now().After(deadline) {
			t.Fatal("the expired task of a canceled batch was never canceled")
		}
		sleepPast(10 * time.Millisecond)
		if got := claim(t, s, "w2", 10, longTTL); len(got) != 0 {
			t.Fatalf("claimed %d tasks of a canceled batch", len(got))
		}
	}
	b = checkCounts(t, s, "alice", in.Batch.ID)
	if b.Counts != (intent.Counts{Succeeded: 1, Canceled: 7}) || b.State != intent.StateCanceled {
		t.Fatalf("final: %+v", b)
	}
	if tk := task(t, s, "alice", in.Batch.ID, cs[0].ID); tk.State != intent.StateSucceeded || tk.AssetID == nil {
		t.Fatalf("the succeeded task changed: %+v", tk)
	}
	again, err := s.CancelBatch(ctx(t), "alice", in.Batch.ID)
	if err != nil || again.Counts != b.Counts || !again.UpdatedAt.Equal(b.UpdatedAt) {
		t.Fatalf("cancel of an ended batch changed it: %+v %v", again, err)
	}
}

// testFairShare: a small batch behind a big one of another actor is served
// in the first claim; three actors share a claim round-robin.
func testFairShare(t *testing.T, h Harness) {
	s := h.New(t)
	big := Intent(t, "alice", "big", "fp", 600)
	mustCreate(t, s, big)
	// A claim first, so the big batch has started and been touched.
	first := claim(t, s, "w", 4, longTTL)
	for _, c := range first {
		if c.BatchID != big.Batch.ID {
			t.Fatalf("claimed from %s", c.BatchID)
		}
	}
	small := Intent(t, "bob", "small", "fp", 2)
	mustCreate(t, s, small)
	cs := claim(t, s, "w", 4, longTTL)
	got := map[string]int{}
	for _, c := range cs {
		got[c.BatchID]++
	}
	if got[small.Batch.ID] != 2 || got[big.Batch.ID] != 2 {
		t.Fatalf("claim of 4 after a small batch: %v (small %s)", got, small.Batch.ID)
	}

	// Three actors, one with two batches: one claim of 3 serves each actor once.
	s2 := h.New(t)
	var batches []string
	owners := map[string]string{}
	for _, a := range []struct {
		actor, req string
		n          int
	}{{"alice", "a1", 50}, {"alice", "a2", 50}, {"bob", "b1", 50}, {"carol", "c1", 50}} {
		in := Intent(t, a.actor, a.req, "fp", a.n)
		mustCreate(t, s2, in)
		batches = append(batches, in.Batch.ID)
		owners[in.Batch.ID] = a.actor
	}
	actors := map[string]int{}
	for _, c := range claim(t, s2, "w", 3, longTTL) {
		actors[owners[c.BatchID]]++
	}
	if actors["alice"] != 1 || actors["bob"] != 1 || actors["carol"] != 1 {
		t.Fatalf("claim of 3 across three actors: %v", actors)
	}
	// Within an actor, its batches take turns: over the next claims both of
	// alice's batches are served.
	perBatch := map[string]int{}
	for i := 0; i < 4; i++ {
		for _, c := range claim(t, s2, "w", 3, longTTL) {
			perBatch[c.BatchID]++
		}
	}
	for _, id := range batches {
		if perBatch[id] == 0 {
			t.Fatalf("batch %s of %s was not served in 4 claims: %v", id, owners[id], perBatch)
		}
	}
}

// testBackoff: a transient failure waits for its backoff; a zero backoff is
// claimable at once, as the next attempt.
func testBackoff(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 1)
	mustCreate(t, s, in)
	c := claim(t, s, "w", 1, longTTL)[0]
	st, err := s.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "attempt 1: flaky", Backoff: time.Hour, MaxAttempts: 5})
	if err != nil || st != intent.StateQueued {
		t.Fatalf("FailTask = %q, %v", st, err)
	}
	b := checkCounts(t, s, "alice", in.Batch.ID)
	if b.Counts.Queued != 1 || b.State != intent.StateRunning {
		t.Fatalf("a batch with a task waiting to retry: %+v (want running: it started)", b)
	}
	tk := task(t, s, "alice", in.Batch.ID, c.ID)
	if tk.Error == nil || *tk.Error != "attempt 1: flaky" || tk.Attempts != 1 {
		t.Fatalf("queued task = %+v", tk)
	}
	if got := claim(t, s, "w", 5, longTTL); len(got) != 0 {
		t.Fatalf("claimed a task inside its backoff")
	}
	// A second batch is not held up by the first one's waiting task.
	other := Intent(t, "alice", "req-2", "fp", 1)
	mustCreate(t, s, other)
	if got := claim(t, s, "w", 5, longTTL); len(got) != 1 || got[0].BatchID != other.Batch.ID {
		t.Fatalf("claim beside a backoff: %+v", got)
	}

	in3 := Intent(t, "alice", "req-3", "fp", 1)
	mustCreate(t, s, in3)
	c3 := claim(t, s, "w", 1, longTTL)[0]
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: c3.Lease, Error: "flaky", MaxAttempts: 5}); err != nil || st != intent.StateQueued {
		t.Fatalf("FailTask = %q, %v", st, err)
	}
	again := claim(t, s, "w", 1, longTTL)
	if len(again) != 1 || again[0].ID != c3.ID || again[0].Attempt != 2 || again[0].Fence <= c3.Fence {
		t.Fatalf("retry claim = %+v", again)
	}
	if r := complete(t, s, again[0]); r.Err != nil {
		t.Fatal(r.Err)
	}
	if tk := task(t, s, "alice", in3.Batch.ID, c3.ID); tk.Error != nil || tk.Attempts != 2 {
		t.Fatalf("succeeded after a retry: %+v (error cleared, attempts 2)", tk)
	}
}

// testMaxAttempts: the last allowed failure fails the task with its error;
// a permanent error fails it at once; releases do not count.
func testMaxAttempts(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 2)
	mustCreate(t, s, in)
	id := in.Batch.Tasks[0].ID
	for attempt := 1; attempt <= 3; attempt++ {
		var c store.ClaimedTask
		for _, got := range claim(t, s, "w", 2, longTTL) {
			if got.ID == id {
				c = got
			} else if _, err := s.ReleaseLeases(ctx(t), []store.Lease{got.Lease}); err != nil {
				t.Fatal(err)
			}
		}
		if c.Attempt != attempt {
			t.Fatalf("attempt %d claimed as %+v", attempt, c)
		}
		st, err := s.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: fmt.Sprintf("attempt %d: boom", attempt), MaxAttempts: 3})
		want := intent.StateQueued
		if attempt == 3 {
			want = intent.StateFailed
		}
		if err != nil || st != want {
			t.Fatalf("attempt %d: FailTask = %q, %v; want %q", attempt, st, err, want)
		}
		checkCounts(t, s, "alice", in.Batch.ID)
	}
	tk := task(t, s, "alice", in.Batch.ID, id)
	if tk.State != intent.StateFailed || tk.Error == nil || *tk.Error != "attempt 3: boom" || tk.Attempts != 3 {
		t.Fatalf("failed task = %+v", tk)
	}
	// The other task was released three times and still has every attempt.
	other := in.Batch.Tasks[1].ID
	c := claim(t, s, "w", 1, longTTL)[0]
	if c.ID != other || c.Attempt != 4 {
		t.Fatalf("claim after releases = %+v", c)
	}
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "flaky", MaxAttempts: 2}); err != nil || st != intent.StateQueued {
		t.Fatalf("released tries counted against the maximum: %q %v", st, err)
	}
	c = claim(t, s, "w", 1, longTTL)[0]
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "bad params", Permanent: true, MaxAttempts: 5}); err != nil || st != intent.StateFailed {
		t.Fatalf("permanent failure = %q %v", st, err)
	}
	b := checkCounts(t, s, "alice", in.Batch.ID)
	if b.State != intent.StateFailed || b.Counts.Failed != 2 {
		t.Fatalf("batch = %+v", b)
	}

	// An expired lease on the last attempt fails the task at the next claim.
	in2 := Intent(t, "bob", "req", "fp", 1)
	mustCreate(t, s, in2)
	ttl := 20 * time.Millisecond
	c = claim(t, s, "w", 1, ttl)[0]
	deadline := time.Now().Add(30 * time.Second)
	for task(t, s, "bob", in2.Batch.ID, c.ID).State == intent.StateRunning {
		if time.Now().After(deadline) {
			t.Fatal("an expired task on its last attempt was never failed")
		}
		sleepPast(ttl)
		if got, err := s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w2", Limit: 1, TTL: longTTL, MaxAttempts: 1}); err != nil || len(got) != 0 {
			t.Fatalf("claimed %+v, %v", got, err)
		}
	}
	tk = task(t, s, "bob", in2.Batch.ID, c.ID)
	if tk.State != intent.StateFailed || tk.Error == nil || tk.Attempts != 1 {
		t.Fatalf("expired on its last attempt: %+v", tk)
	}
	checkCounts(t, s, "bob", in2.Batch.ID)
}

// testRelease: a released task is queued at once with its step kept.
func testRelease(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 1)
	mustCreate(t, s, in)
	c := claim(t, s, "w1", 1, longTTL)[0]
	if err := saveStep(t, s, c.Lease, "waited", "ref-9"); err != nil {
		t.Fatal(err)
	}
	errs, err := s.ReleaseLeases(ctx(t), []store.Lease{c.Lease})
	if err != nil || errs[0] != nil {
		t.Fatalf("release: %v %v", errs, err)
	}
	if b := checkCounts(t, s, "alice", in.Batch.ID); b.Counts.Queued != 1 {
		t.Fatalf("after release: %+v", b)
	}
	again := claim(t, s, "w2", 1, longTTL)
	if len(again) != 1 || again[0].Step != "waited" || again[0].ProviderRef != "ref-9" || again[0].Attempt != 2 {
		t.Fatalf("claim after release = %+v", again)
	}
	if errs, _ := s.ReleaseLeases(ctx(t), []store.Lease{c.Lease}); !errors.Is(errs[0], store.ErrLeaseLost) {
		t.Fatalf("second release of the old lease: %v", errs[0])
	}
}

// testGenerationCalls: steps add their calls to the task's
// generation_calls and append their notes to its history, one line each,
// kept over attempts and a success; a task starts at 0 and an empty
// history (never null).
func testGenerationCalls(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 1)
	mustCreate(t, s, in)
	c := claim(t, s, "w1", 1, longTTL)[0]
	if tk := task(t, s, "alice", in.Batch.ID, c.ID); tk.GenerationCalls != 0 || tk.History == nil || len(tk.History) != 0 {
		t.Fatalf("a new task: calls %d, history %#v", tk.GenerationCalls, tk.History)
	}
	errs, err := s.SaveSteps(ctx(t), []store.StepSave{{Lease: c.Lease, Step: "submitted", ProviderRef: "r", Calls: 1}})
	if err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	errs, err = s.SaveSteps(ctx(t), []store.StepSave{{Lease: c.Lease, Step: "", ProviderRef: "", Calls: 0, Note: "attempt 1: lost\nline two"}})
	if err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if errs, _ := s.ReleaseLeases(ctx(t), []store.Lease{c.Lease}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	c = claim(t, s, "w2", 1, longTTL)[0]
	if c.Step != "" || c.ProviderRef != "" {
		t.Fatalf("the step reset did not hold: %q %q", c.Step, c.ProviderRef)
	}
	errs, err = s.SaveSteps(ctx(t), []store.StepSave{{Lease: c.Lease, Step: "submitted", ProviderRef: "r", Calls: 2, Note: "attempt 2: again"}})
	if err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if r := complete(t, s, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	tk := task(t, s, "alice", in.Batch.ID, c.ID)
	if tk.GenerationCalls != 3 || !reflect.DeepEqual(tk.History, []string{"attempt 1: lost line two", "attempt 2: again"}) {
		t.Fatalf("after two attempts: calls %d, history %#v", tk.GenerationCalls, tk.History)
	}
}

// testSkipGenerators: a claim that skips a generator leaves its queued
// tasks queued and claims the others' (tasks alternate sketch, mosaic);
// without the skip they are claimed.
func testSkipGenerators(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 6)
	mustCreate(t, s, in)
	cs, err := s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w1", Limit: 10, TTL: longTTL, SkipGenerators: []string{"mosaic"}})
	if err != nil || len(cs) != 3 {
		t.Fatalf("claim skipping mosaic: %d tasks, %v; want the 3 sketch tasks", len(cs), err)
	}
	for _, c := range cs {
		if c.Generator != "sketch" {
			t.Fatalf("claimed a %s task while skipping mosaic", c.Generator)
		}
	}
	if b := checkCounts(t, s, "alice", in.Batch.ID); b.Counts.Queued != 3 || b.Counts.Running != 3 {
		t.Fatalf("counts %+v", b.Counts)
	}
	cs, err = s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w1", Limit: 10, TTL: longTTL, SkipGenerators: []string{"mosaic", "other"}})
	if err != nil || len(cs) != 0 {
		t.Fatalf("second claim skipping mosaic: %d tasks, %v", len(cs), err)
	}
	cs, err = s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w1", Limit: 10, TTL: longTTL})
	if err != nil || len(cs) != 3 || cs[0].Generator != "mosaic" {
		t.Fatalf("claim without a skip: %d tasks, %v", len(cs), err)
	}
}

// testCountsUnderChurn runs random task moves from several goroutines and
// checks, after each move of a single-threaded phase and at the end of the
// concurrent one, that the counts equal the tasks.
func testCountsUnderChurn(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 60)
	mustCreate(t, s, in)
	rng := rand.New(rand.NewPCG(1, 2))
	step := func(r *rand.Rand, owner string, check bool) bool {
		cs, err := s.ClaimTasks(context.Background(), store.ClaimParams{Owner: owner, Limit: 1 + r.IntN(4), TTL: longTTL, MaxAttempts: 3})
		if err != nil {
			t.Errorf("claim: %v", err)
			return false
		}
		if len(cs) == 0 {
			return false
		}
		for _, c := range cs {
			switch r.IntN(5) {
			case 0:
				_, err = s.CompleteLeases(context.Background(), []store.Completion{{Lease: c.Lease, Asset: asset(t, shaA)}})
			case 1:
				_, err = s.FailLease(context.Background(), store.Failure{Lease: c.Lease, Error: "x", MaxAttempts: 3})
			case 2:
				_, err = s.ReleaseLeases(context.Background(), []store.Lease{c.Lease})
			case 3:
				_, err = s.SaveSteps(context.Background(), []store.StepSave{{Lease: c.Lease, Step: "submitted", ProviderRef: "r"}})
				if err == nil {
					_, err = s.CompleteLeases(context.Background(), []store.Completion{{Lease: c.Lease, Asset: asset(t, shaA)}})
				}
			case 4:
				_, err = s.FailLease(context.Background(), store.Failure{Lease: c.Lease, Error: "perm", Permanent: true})
			}
			if err != nil {
				t.Errorf("move: %v", err)
				return false
			}
			if check {
				checkCounts(t, s, "alice", in.Batch.ID)
			}
		}
		return true
	}
	for i := 0; i < 20 && step(rng, "solo", true); i++ {
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for step(r, fmt.Sprintf("w%d", g), false) {
			}
		}(g)
	}
	wg.Wait()
	b := checkCounts(t, s, "alice", in.Batch.ID)
	if b.Counts.Queued != 0 || b.Counts.Running != 0 || b.State == intent.StateRunning {
		t.Fatalf("churn left %+v", b)
	}
}

// raceClaims runs 12 goroutines over stores, each claiming (1 to 5 at a
// time, under its own owner) until claim finds nothing, and reports any id
// claimed twice. It answers which owner claimed each id.
func raceClaims[S any](t *testing.T, stores []S, what string, claim func(S, store.ClaimParams) ([]string, error)) map[string]string {
	t.Helper()
	var mu sync.Mutex
	owner := map[string]string{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			st := stores[g%len(stores)]
			me := fmt.Sprintf("w%d", g)
			<-start
			for {
				ids, err := claim(st, store.ClaimParams{Owner: me, Limit: 1 + g%5, TTL: longTTL})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(ids) == 0 {
					return
				}
				mu.Lock()
				for _, id := range ids {
					if prev, ok := owner[id]; ok {
						t.Errorf("%s %s claimed by %s and %s", what, id, prev, me)
					}
					owner[id] = me
				}
				mu.Unlock()
			}
		}(g)
	}
	close(start)
	wg.Wait()
	return owner
}
