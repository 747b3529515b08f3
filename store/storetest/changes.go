package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// changes reads a batch's changes, failing the test on an error.
func changes(t *testing.T, s store.Store, actor, batchID string, since, until int64) store.Changes {
	t.Helper()
	c, err := s.BatchChanges(ctx(t), store.ChangesParams{Actor: actor, BatchID: batchID, Since: since, Until: until})
	if err != nil {
		t.Fatalf("BatchChanges: %v", err)
	}
	return c
}

// settled reads a batch's changes after since once none is pending: on
// PostgreSQL a change is handed out only once every older transaction in
// the database has ended, and other work (other tests) may hold one open
// for a while.
func settled(t *testing.T, s store.Store, actor, batchID string, since int64) store.Changes {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c := changes(t, s, actor, batchID, since, 0)
		if !c.Pending {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("changes of %s still pending after a minute", batchID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// changedIDs are the ids of the tasks of c, with their states.
func changedIDs(c store.Changes) map[string]intent.State {
	m := map[string]intent.State{}
	for _, tk := range c.Tasks {
		m[tk.ID] = tk.State
	}
	return m
}

func testBatchChanges(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "req", "fp", 4)
	mustCreate(t, s, in)
	id := in.Batch.ID

	start := changes(t, s, "alice", id, -1, 0)
	if len(start.Tasks) != 0 || start.Batch.ID != id || start.Batch.Counts.Queued != 4 {
		t.Fatalf("first read: %d tasks, batch %+v", len(start.Tasks), start.Batch)
	}
	if c := changes(t, s, "alice", id, start.Position, 0); len(c.Tasks) != 0 || c.Pending {
		t.Fatalf("nothing changed, read %d tasks (pending %v)", len(c.Tasks), c.Pending)
	}
	_, err := s.BatchChanges(ctx(t), store.ChangesParams{Actor: "bob", BatchID: id, Since: -1})
	wantCode(t, err, intent.ENotFound)

	cs := claim(t, s, "w1", 2, longTTL)
	if len(cs) != 2 {
		t.Fatalf("claimed %d, want 2", len(cs))
	}
	afterClaim := settled(t, s, "alice", id, start.Position)
	got := changedIDs(afterClaim)
	if len(got) != 2 || got[cs[0].ID] != intent.StateRunning || got[cs[1].ID] != intent.StateRunning {
		t.Fatalf("after the claim read %v, want the 2 claimed tasks running", got)
	}
	for _, tk := range afterClaim.Tasks {
		if tk.Attempts != 1 {
			t.Fatalf("task %s attempts %d, want 1", tk.ID, tk.Attempts)
		}
	}
	if afterClaim.Batch.Counts.Running != 2 || afterClaim.Position <= start.Position {
		t.Fatalf("after the claim: counts %+v, position %d after %d", afterClaim.Batch.Counts, afterClaim.Position, start.Position)
	}
	p1 := afterClaim.Position

	// A step is not a change of anything an event shows.
	if err := saveStep(t, s, cs[0].Lease, "render", "ref"); err != nil {
		t.Fatal(err)
	}
	if c := settled(t, s, "alice", id, p1); len(c.Tasks) != 0 {
		t.Fatalf("a saved step read as %d changes", len(c.Tasks))
	}

	if r := complete(t, s, cs[0]); r.Err != nil {
		t.Fatal(r.Err)
	}
	st, err := s.FailLease(ctx(t), store.Failure{Lease: cs[1].Lease, Error: "boom", Permanent: true})
	if err != nil || st != intent.StateFailed {
		t.Fatalf("FailLease = %q, %v", st, err)
	}
	afterEnd := settled(t, s, "alice", id, p1)
	got = changedIDs(afterEnd)
	if len(got) != 2 || got[cs[0].ID] != intent.StateSucceeded || got[cs[1].ID] != intent.StateFailed {
		t.Fatalf("after complete and fail read %v", got)
	}
	for _, tk := range afterEnd.Tasks {
		switch tk.ID {
		case cs[0].ID:
			if tk.AssetID == nil {
				t.Fatalf("succeeded task read without its asset")
			}
		case cs[1].ID:
			if tk.Error == nil || *tk.Error != "boom" {
				t.Fatalf("failed task read with error %v", tk.Error)
			}
		}
	}
	p2 := afterEnd.Position

	// The range (start, p1] read again holds only what has not changed
	// since: both claimed tasks moved on, so nothing.
	if c := changes(t, s, "alice", id, start.Position, p1); len(c.Tasks) != 0 || c.Position != p1 {
		t.Fatalf("range read again: %d tasks, position %d (want 0 and %d)", len(c.Tasks), c.Position, p1)
	}

	if _, err := s.CancelBatch(ctx(t), "alice", id); err != nil {
		t.Fatal(err)
	}
	final := settled(t, s, "alice", id, p2)
	got = changedIDs(final)
	if len(got) != 2 || final.Batch.State != intent.StateFailed && final.Batch.State != intent.StateCanceled {
		t.Fatalf("after cancel read %v, batch %s", got, final.Batch.State)
	}
	for tid, st := range got {
		if st != intent.StateCanceled {
			t.Fatalf("task %s read %s after the cancel", tid, st)
		}
	}
	// From the start, every task once, as it stands.
	all := settled(t, s, "alice", id, start.Position)
	if len(all.Tasks) != 4 {
		t.Fatalf("from the start read %d tasks, want 4", len(all.Tasks))
	}
	for i := 1; i < len(all.Tasks); i++ {
		if all.Tasks[i-1].ID >= all.Tasks[i].ID {
			t.Fatalf("tasks not in id order")
		}
	}
	if c := changes(t, s, "alice", id, final.Position, 0); len(c.Tasks) != 0 {
		t.Fatalf("after the last position read %d tasks", len(c.Tasks))
	}
}

// testChangesUnderChurn reads a batch's changes from another store (as
// another process would) while workers move its tasks concurrently: every
// change is read exactly once. Each task's (state, attempts) only moves
// forward, so a read of a version already read is a repeat, and the last
// versions read must be the tasks' final ones.
func testChangesUnderChurn(t *testing.T, h Harness) {
	s := h.New(t)
	reader := s
	if h.Twin != nil {
		reader = h.Twin(t, s)
	}
	const n = 40
	in := Intent(t, "alice", "churn", "fp", n)
	mustCreate(t, s, in)
	id := in.Batch.ID
	pos := changes(t, reader, "alice", id, -1, 0).Position

	seen := map[string][]string{} // task -> versions read, in order
	read := func() store.Changes {
		c := changes(t, reader, "alice", id, pos, 0)
		for _, tk := range c.Tasks {
			v := fmt.Sprintf("%s/%d", tk.State, tk.Attempts)
			vs := seen[tk.ID]
			if len(vs) > 0 && vs[len(vs)-1] == v {
				t.Errorf("task %s read twice as %s", tk.ID, v)
			}
			seen[tk.ID] = append(vs, v)
		}
		if c.Position < pos {
			t.Errorf("position went back from %d to %d", pos, c.Position)
		}
		pos = c.Position
		return c
	}

	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for {
				cs, err := s.ClaimTasks(ctx(t), store.ClaimParams{Owner: owner, Limit: 2, TTL: longTTL})
				if err != nil {
					t.Errorf("ClaimTasks: %v", err)
					return
				}
				if len(cs) == 0 {
					return
				}
				for i, c := range cs {
					if (i+w)%3 == 0 {
						// Back to the queue once: a second attempt follows.
						if c.Attempt == 1 {
							if _, err := s.ReleaseLeases(ctx(t), []store.Lease{c.Lease}); err != nil {
								t.Errorf("ReleaseLeases: %v", err)
							}
							continue
						}
					}
					if _, err := s.CompleteLeases(ctx(t), []store.Completion{{Lease: c.Lease, Asset: asset(t, shaA)}}); err != nil {
						t.Errorf("CompleteLeases: %v", err)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			read()
		}
	}
	for {
		c := read()
		if !c.Pending {
			break
		}
	}
	final := allTasks(t, s, "alice", id)
	for _, tk := range final {
		vs := seen[tk.ID]
		want := fmt.Sprintf("%s/%d", tk.State, tk.Attempts)
		if len(vs) == 0 || vs[len(vs)-1] != want {
			t.Errorf("task %s: read %v, ends %s", tk.ID, vs, want)
		}
		if tk.State != intent.StateSucceeded {
			t.Errorf("task %s ended %s", tk.ID, tk.State)
		}
	}
}

func testListPublications(t *testing.T, h Harness) {
	s := h.New(t)
	batch, assets := BatchWithAssets(t, s, "alice", "b1", 2)
	var ids []string
	for i := 0; i < 3; i++ {
		rid := fmt.Sprintf("pub-%d", i)
		in := PublicationIntent(t, "alice", rid, "fp-"+rid, batch, assets, "gallery")
		mustCreate(t, s, in)
		ids = append(ids, in.Publication.ID)
	}
	page, err := s.ListPublications(ctx(t), store.ListParams{Actor: "alice", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].ID != ids[2] || page[1].ID != ids[1] {
		t.Fatalf("first page %v, want newest first", page)
	}
	if page[0].ItemCount != 2 || page[0].Channel != "gallery" || page[0].BatchID != batch || page[0].State != intent.StateQueued {
		t.Fatalf("publication read as %+v", page[0])
	}
	rest, err := s.ListPublications(ctx(t), store.ListParams{Actor: "alice", Limit: 2, After: page[1].ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0].ID != ids[0] {
		t.Fatalf("second page %v", rest)
	}
	other, err := s.ListPublications(ctx(t), store.ListParams{Actor: "bob", Limit: 10})
	if err != nil || len(other) != 0 {
		t.Fatalf("bob's publications: %v, %v", other, err)
	}
}

// testChangesEveryPath moves tasks by every path a task's state, attempts,
// asset or error can move (claims, expired leases reclaimed, failed or
// canceled, steps and completions of a canceled batch, failures, releases,
// the cancel sweep) and reads, after each, that exactly the task moved is
// read as changed, as it stands.
func testChangesEveryPath(t *testing.T, h Harness) {
	s := h.New(t)
	in := Intent(t, "alice", "paths", "fp", 8)
	mustCreate(t, s, in)
	id := in.Batch.ID
	pos := changes(t, s, "alice", id, -1, 0).Position
	expect := func(what string, taskIDs ...string) {
		t.Helper()
		c := settled(t, s, "alice", id, pos)
		got := changedIDs(c)
		if len(got) != len(taskIDs) {
			t.Fatalf("%s: read %v, want the tasks %v", what, got, taskIDs)
		}
		for _, tid := range taskIDs {
			now := task(t, s, "alice", id, tid)
			var read intent.Task
			for _, tk := range c.Tasks {
				if tk.ID == tid {
					read = tk
				}
			}
			if read.ID == "" || read.State != now.State || read.Attempts != now.Attempts {
				t.Fatalf("%s: read %+v, the task is %+v", what, read, now)
			}
		}
		pos = c.Position
	}
	const short = 20 * time.Millisecond
	cs := claim(t, s, "w1", 7, longTTL)
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	expect("claim", ids...)

	// An expired lease, claimed again: attempts 2.
	if _, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[0].Lease}, TTL: short}); err != nil {
		t.Fatal(err)
	}
	expect("renewal") // nothing
	sleepPast(short)
	again := claimUntil(t, s.ClaimTasks, "w2", cs[0].ID, store.ClaimParams{TTL: longTTL})
	expect("reclaim", cs[0].ID)
	// An expired lease out of attempts: failed.
	if _, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w2", Leases: []store.Lease{again.Lease}, TTL: short}); err != nil {
		t.Fatal(err)
	}
	sleepPast(short)
	deadline := time.Now().Add(30 * time.Second)
	for task(t, s, "alice", id, cs[0].ID).State == intent.StateRunning {
		if time.Now().After(deadline) {
			t.Fatal("the expired task never failed")
		}
		// The 8th task, once; then the expired one, out of attempts.
		if _, err := s.ClaimTasks(ctx(t), store.ClaimParams{Owner: "w3", Limit: 1, TTL: longTTL, MaxAttempts: 2}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	expect("expired, out of attempts", cs[0].ID, in.Batch.Tasks[7].ID)

	// A transient failure: queued again, with its error; a release.
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: cs[1].Lease, Error: "busy", Backoff: time.Hour}); err != nil || st != intent.StateQueued {
		t.Fatalf("FailLease: %q %v", st, err)
	}
	if errs, err := s.ReleaseLeases(ctx(t), []store.Lease{cs[2].Lease}); err != nil || errs[0] != nil {
		t.Fatalf("ReleaseLeases: %v %v", errs, err)
	}
	expect("failure and release", cs[1].ID, cs[2].ID)

	// The cancel sweep: the queued ones (cs[1] waits out its backoff,
	// cs[2] was released).
	if _, err := s.CancelBatch(ctx(t), "alice", id); err != nil {
		t.Fatal(err)
	}
	expect("cancel", cs[1].ID, cs[2].ID)
	if err := saveStep(t, s, cs[3].Lease, "submitted", "r"); !errors.Is(err, store.ErrTaskCanceled) {
		t.Fatalf("step after cancel: %v", err)
	}
	expect("step of a canceled batch", cs[3].ID)
	if r := complete(t, s, cs[4]); !errors.Is(r.Err, store.ErrTaskCanceled) {
		t.Fatalf("completion after cancel: %+v", r)
	}
	expect("completion of a canceled batch", cs[4].ID)
	if _, err := s.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{cs[5].Lease}, TTL: short}); err != nil {
		t.Fatal(err)
	}
	sleepPast(short)
	deadline = time.Now().Add(30 * time.Second)
	for task(t, s, "alice", id, cs[5].ID).State == intent.StateRunning {
		if time.Now().After(deadline) {
			t.Fatal("the expired task of a canceled batch was never canceled")
		}
		claim(t, s, "w3", 1, longTTL)
		time.Sleep(5 * time.Millisecond)
	}
	expect("expired lease of a canceled batch", cs[5].ID)
	if st, err := s.FailLease(ctx(t), store.Failure{Lease: cs[6].Lease, Error: "late"}); err != nil || st != intent.StateCanceled {
		t.Fatalf("FailLease after cancel: %q %v", st, err)
	}
	expect("failure of a canceled batch", cs[6].ID)
}

// testWatchBatch: a watcher of a batch is woken by a claim, a failure and
// a cancel of its tasks through the same store value, and not by changes
// to another batch.
func testWatchBatch(t *testing.T, h Harness) {
	s := h.New(t)
	a, b := Intent(t, "alice", "req-a", "fp", 2), Intent(t, "alice", "req-b", "fp", 2)
	mustCreate(t, s, a)
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	// The claim takes a's tasks (created first, fair share or not, b does
	// not exist yet).
	wa, ra := s.WatchBatch(a.Batch.ID)
	defer ra()
	wb, rb := s.WatchBatch(b.Batch.ID)
	defer rb()
	cs := claim(t, s, "w1", 1, longTTL)
	if len(cs) != 1 {
		t.Fatalf("claimed %d, want 1", len(cs))
	}
	if !woken(wa) || woken(wb) {
		t.Fatalf("after a claim of a's task: a woken %v, b woken %v", woken(wa), woken(wb))
	}
	wa2, ra2 := s.WatchBatch(a.Batch.ID)
	defer ra2()
	if woken(wa2) {
		t.Fatal("a new watch is woken before any change")
	}
	if _, err := s.FailLease(ctx(t), store.Failure{Lease: cs[0].Lease, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	if !woken(wa2) {
		t.Fatal("a failure did not wake the watcher")
	}
	wa3, ra3 := s.WatchBatch(a.Batch.ID)
	defer ra3()
	if _, err := s.CancelBatch(ctx(t), "alice", a.Batch.ID); err != nil {
		t.Fatal(err)
	}
	if !woken(wa3) || woken(wb) {
		t.Fatalf("after a cancel of a: a woken %v, b woken %v", woken(wa3), woken(wb))
	}
}
