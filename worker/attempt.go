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

// attempt is one claimed task in this pool, one try at it: its lease,
// its generator job, and where its steps got to.
type attempt struct {
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
func (at *attempt) takeNote() string {
	n := at.note
	at.note = ""
	return n
}

// takeCalls answers the calls not yet carried by a step record, and
// counts them as carried.
func (at *attempt) takeCalls() int {
	at.callsMu.Lock()
	defer at.callsMu.Unlock()
	n := at.calls.N() - at.savedCalls
	at.savedCalls += n
	return n
}

// unsavedCalls answers the calls no step record carried yet.
func (at *attempt) unsavedCalls() int {
	at.callsMu.Lock()
	defer at.callsMu.Unlock()
	return at.calls.N() - at.savedCalls
}

// giveBack returns calls a failed step record did not carry.
func (at *attempt) giveBack(n int) {
	at.callsMu.Lock()
	defer at.callsMu.Unlock()
	at.savedCalls -= n
}

// Claim leases up to limit tasks, and reads each batch's spec once. The
// claim waits at most a third of the lease for the database's locks: the
// runner counts a lease from the claim's start, so one that waited out an
// outage would be given up as soon as it was taken, and the task burn an
// attempt; it answers a busy fault instead, and the runner tries again.
func (h *tasks) Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]*attempt, error) {
	cs, err := h.cfg.Store.ClaimTasks(store.WithWait(ctx, ttl/3), store.ClaimParams{
		Owner: owner, Limit: limit, TTL: ttl, MaxAttempts: h.cfg.MaxAttempts,
		SkipGenerators: h.cfg.Breakers.Skip(),
	})
	if err != nil {
		return nil, err
	}
	specs := map[string]specResult{}
	out := make([]*attempt, len(cs))
	for i, c := range cs {
		out[i] = newAttempt(c, specs)
	}
	return out, nil
}

// Lease is the task's lease.
func (h *tasks) Lease(at *attempt) store.Lease { return at.c.Lease }

// Parent is the task's batch: a cancel of the batch (wake.Cancel) ends the
// task's context at once (leasequeue.Parenter).
func (h *tasks) Parent(at *attempt) string { return at.c.BatchID }

// Run runs a claimed task to its end and records it.
func (h *tasks) Run(ctx context.Context, s *leasequeue.Session, at *attempt) {
	at.ctx, at.cancel = context.WithCancelCause(ctx)
	defer at.cancel(nil)
	e := &executor{tasks: h, s: s}
	e.settle(at, e.execute(at))
	if h.batchEnds != nil {
		h.batchEnds.touch(at.c.BatchID, at.c.Actor)
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

// newAttempt makes a claimed task's attempt, with its generator job.
func newAttempt(c store.ClaimedTask, specs map[string]specResult) *attempt {
	sr, ok := specs[c.BatchID]
	if !ok {
		sr = decodeSpec(c.Spec)
		specs[c.BatchID] = sr
	}
	at := &attempt{c: c, jobErr: sr.err}
	if sr.in != nil {
		at.job = generator.Job{
			Key: c.ID, Prompt: sr.in.Prompt, Collection: c.Collection, Frame: c.Frame,
			Candidate: c.Candidate, Seed: sr.in.Seed, Params: sr.in.Params, Subjects: sr.in.Subjects,
			Attempt: c.Attempt,
		}
	}
	return at
}
