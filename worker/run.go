package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-json-experiment/json"

	"studio/generator"
	"studio/intent"
	"studio/leasequeue"
	"studio/store"
)

// errHandBack: the pool is stopping and the task is between steps (or
// still waiting for its turn): its lease is handed back.
var errHandBack = errors.New("worker: handing the lease back")

// errGeneratorDown: the task's generator is down (its breaker open, or
// this try failed with an outage error): the lease is handed back and the
// task waits, queued, without spending an attempt.
var errGeneratorDown = errors.New("generator down")

// storeTimeout bounds the writes that end a task (failure, release) made
// after its own context ended.
const storeTimeout = 30 * time.Second

// run is what a running task sees of its pool: the pool's handler and the
// runner's session (one Start..Stop).
type run struct {
	*tasks
	s *leasequeue.Session
}

// taskRun is one claimed task in this pool.
type taskRun struct {
	c      store.ClaimedTask
	job    generator.Job
	jobErr error // the spec could not be read: a permanent failure
	ctx    context.Context
	cancel context.CancelCauseFunc
	// unrecorded is the step reached but not recorded yet (task goroutine
	// only).
	unrecorded *store.StepSave
	// calls counts this try's paid generation calls; savedCalls is how
	// many of them a step record carried to the task already.
	calls      generator.Calls
	callsMu    sync.Mutex
	savedCalls int
	// step and ref are where the task is (recorded or not).
	step, ref string
	// stored: this try stored the image (the call was not thrown away).
	stored bool
	// note is a line for the task's history not recorded yet.
	note string
}

// takeNote answers the note not recorded yet, and forgets it.
func (tr *taskRun) takeNote() string {
	n := tr.note
	tr.note = ""
	return n
}

// takeCalls answers the calls not yet carried by a step record, and
// counts them as carried.
func (tr *taskRun) takeCalls() int {
	tr.callsMu.Lock()
	defer tr.callsMu.Unlock()
	n := tr.calls.N() - tr.savedCalls
	tr.savedCalls += n
	return n
}

// unsavedCalls answers the calls no step record carried yet.
func (tr *taskRun) unsavedCalls() int {
	tr.callsMu.Lock()
	defer tr.callsMu.Unlock()
	return tr.calls.N() - tr.savedCalls
}

// giveBack returns calls a failed step record did not carry.
func (tr *taskRun) giveBack(n int) {
	tr.callsMu.Lock()
	defer tr.callsMu.Unlock()
	tr.savedCalls -= n
}

// Claim leases up to limit tasks, and reads each batch's spec once. The
// claim waits at most a third of the lease for the database's locks: the
// runner counts a lease from the claim's start, so one that waited out an
// outage would be given up as soon as it was taken, and the task burn an
// attempt; it answers a busy fault instead, and the runner tries again.
func (h *tasks) Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]*taskRun, error) {
	cs, err := h.cfg.Store.ClaimTasks(store.WithWait(ctx, ttl/3), store.ClaimParams{
		Owner: owner, Limit: limit, TTL: ttl, MaxAttempts: h.cfg.MaxAttempts,
		SkipGenerators: h.cfg.Breakers.Skip(),
	})
	if err != nil {
		return nil, err
	}
	specs := map[string]specResult{}
	out := make([]*taskRun, len(cs))
	for i, c := range cs {
		out[i] = newTaskRun(c, specs)
	}
	return out, nil
}

// Lease is the task's lease.
func (h *tasks) Lease(tr *taskRun) store.Lease { return tr.c.Lease }

// Parent is the task's batch: a cancel of the batch (wake.Cancel) ends the
// task's context at once (leasequeue.Parenter).
func (h *tasks) Parent(tr *taskRun) string { return tr.c.BatchID }

// Run runs a claimed task to its end and records it.
func (h *tasks) Run(ctx context.Context, s *leasequeue.Session, tr *taskRun) {
	tr.ctx, tr.cancel = context.WithCancelCause(ctx)
	defer tr.cancel(nil)
	r := &run{tasks: h, s: s}
	r.settle(tr, r.execute(tr))
	if h.batchEnds != nil {
		h.batchEnds.touch(tr.c.BatchID, tr.c.Actor)
	}
}

type specResult struct {
	in  *intent.GenerationInput
	err error
}

func decodeSpec(spec []byte) specResult {
	var in intent.GenerationInput
	if err := json.Unmarshal(spec, &in); err != nil {
		return specResult{err: generator.Permanent(errors.New("the batch spec cannot be read: " + err.Error()))}
	}
	return specResult{in: &in}
}

// newTaskRun makes a claimed task's run, with its generator job.
func newTaskRun(c store.ClaimedTask, specs map[string]specResult) *taskRun {
	sr, ok := specs[c.BatchID]
	if !ok {
		sr = decodeSpec(c.Spec)
		specs[c.BatchID] = sr
	}
	tr := &taskRun{c: c, jobErr: sr.err}
	if sr.in != nil {
		tr.job = generator.Job{
			Key: c.ID, Prompt: sr.in.Prompt, Collection: c.Collection, Frame: c.Frame,
			Candidate: c.Candidate, Seed: sr.in.Seed, Params: sr.in.Params, Subjects: sr.in.Subjects,
			Attempt: c.Attempt,
		}
	}
	return tr
}

// sweepLoop removes unnamed blobs now and then.
func (h *tasks) sweepLoop(ctx context.Context) {
	first := min(time.Minute, h.cfg.SweepEvery)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := h.cfg.Blobs.Sweep(ctx, sweepParams(h.cfg))
		switch {
		case err != nil && ctx.Err() == nil:
			h.cfg.Logger.Warn("blob sweep failed", "err", err)
		case err == nil && (res.Removed > 0 || res.Leftovers > 0 || res.Purged > 0):
			h.cfg.Logger.Info("blob sweep", "removed", res.Removed, "kept", res.Kept, "leftovers", res.Leftovers, "purged", res.Purged)
		}
		t.Reset(h.cfg.SweepEvery)
	}
}
