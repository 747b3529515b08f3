package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"studio/generator"
	"studio/intent"
	"studio/store"
)

// Causes of a task's context ending.
var (
	// errLeaseLost: a renewal said the lease is gone, or it could not be
	// renewed in time. Nothing more is recorded.
	errLeaseLost = errors.New("worker: lease lost")
	// errCancelRequested: the batch was asked to cancel; the lease is
	// handed back and the store cancels the task.
	errCancelRequested = errors.New("worker: batch canceled")
	// errStopping: the grace period of a stop ran out.
	errStopping = errors.New("worker: stopping")
	// errHandBack: the pool is stopping and the task is between steps.
	errHandBack = errors.New("worker: handing the lease back")
)

// storeTimeout bounds the writes that end a task (failure, release) made
// after its own context ended.
const storeTimeout = 30 * time.Second

// run is one Start..Stop of a pool.
type run struct {
	cfg Config

	bg       context.Context // renewals, writers, ending writes; lives to the end
	stopBg   context.CancelFunc
	work     context.Context // parent of every task's context
	abort    context.CancelCauseFunc
	stopping atomic.Bool
	stopCh   chan struct{} // closed when Stop begins
	stopCtx  context.Context
	endStop  context.CancelFunc // ends stopCtx, with stopCh
	stopOnce sync.Once
	done     chan struct{} // closed when Stop has ended

	runSlots chan struct{} // one per running task
	// avgRun is a moving average of how long tasks take to run their
	// steps (ns); it sizes how far ahead the pool claims.
	avgRun atomic.Int64

	mu    sync.Mutex
	tasks map[string]*taskRun
	wake  chan struct{} // a held task ended

	tasksWG sync.WaitGroup
	fetchWG sync.WaitGroup
	bgWG    sync.WaitGroup

	stepWriter  *batcher[store.StepSave, error]
	completions *batcher[store.Completion, store.CompletionResult]
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
	// deadline is the local time (unix ns) after which the lease must be
	// taken as lost if no renewal confirmed it.
	deadline atomic.Int64
}

func newRun(base context.Context, cfg Config) *run {
	r := &run{
		cfg:      cfg,
		stopCh:   make(chan struct{}),
		done:     make(chan struct{}),
		runSlots: make(chan struct{}, cfg.Concurrency),
		tasks:    map[string]*taskRun{},
		wake:     make(chan struct{}, 1),
	}
	r.bg, r.stopBg = context.WithCancel(base)
	r.stopCtx, r.endStop = context.WithCancel(base)
	r.work, r.abort = context.WithCancelCause(base)
	r.stepWriter = newBatcher(maxHeld, cfg.Store.SaveSteps)
	r.completions = newBatcher(maxHeld, cfg.Store.CompleteTasks)
	return r
}

func (r *run) start() {
	r.bgWG.Add(3)
	go func() { defer r.bgWG.Done(); r.stepWriter.loop(r.bg) }()
	go func() { defer r.bgWG.Done(); r.completions.loop(r.bg) }()
	go func() { defer r.bgWG.Done(); r.renewLoop() }()
	if r.cfg.SweepEvery > 0 {
		r.bgWG.Add(1)
		go func() { defer r.bgWG.Done(); r.sweepLoop() }()
	}
	r.fetchWG.Add(1)
	go func() { defer r.fetchWG.Done(); r.fetchLoop() }()
	r.cfg.Logger.Info("workers started", "owner", r.cfg.Owner, "concurrency", r.cfg.Concurrency,
		"lease_ttl", r.cfg.LeaseTTL.String(), "max_attempts", r.cfg.MaxAttempts)
}

func (r *run) isStopping() bool { return r.stopping.Load() }

// stop: no more claims; running steps end within the grace period, then
// the rest are cancelled; every unfinished lease is handed back; then the
// writers and the renewals stop.
func (r *run) stop(ctx context.Context) {
	r.stopOnce.Do(func() {
		go func() {
			defer close(r.done)
			r.stopping.Store(true)
			close(r.stopCh)
			r.endStop()
			r.fetchWG.Wait()
			tasksDone := make(chan struct{})
			go func() { r.tasksWG.Wait(); close(tasksDone) }()
			grace := time.NewTimer(r.cfg.Grace)
			defer grace.Stop()
			select {
			case <-tasksDone:
			case <-grace.C:
				r.abort(errStopping)
			case <-ctx.Done():
				r.abort(errStopping)
			}
			<-tasksDone
			r.stopBg()
			r.bgWG.Wait()
			r.abort(errStopping)
			r.cfg.Logger.Info("workers stopped", "owner", r.cfg.Owner)
		}()
	})
	<-r.done
}

// sleep waits d, or until the pool stops; it answers false on stop.
func (r *run) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopCh:
		return false
	}
}

// jitter spreads d over [d/2, d].
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Claiming ahead: besides the Concurrency tasks that run, a pool holds
// leases on tasks waiting for a run slot, about lookAhead's worth of work
// (by the moving average of task run times), at least Concurrency and at
// most maxHeld in all. Quick tasks are then claimed and completed in large
// batches; slow ones are not hoarded away from other processes.
const (
	lookAhead = 50 * time.Millisecond
	maxHeld   = 512
)

// holdCap is how many leases the pool may hold now.
func (r *run) holdCap() int {
	c := r.cfg.Concurrency
	avg := time.Duration(r.avgRun.Load())
	ahead := c
	if avg > 0 {
		ahead = int(min(int64(maxHeld), int64(c)*int64(lookAhead)/int64(avg)))
	}
	return min(maxHeld, c+max(ahead, c))
}

// observe adds a task's run time to the moving average (weight 1/16).
func (r *run) observe(d time.Duration) {
	d = max(d, time.Microsecond)
	for {
		old := r.avgRun.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/16
		}
		if r.avgRun.CompareAndSwap(old, next) {
			return
		}
	}
}

// fetchLoop claims tasks while the pool has room (see holdCap), claiming
// again once at least half of it is free, so that claims come in batches.
func (r *run) fetchLoop() {
	idle := r.cfg.PollMin
	for {
		room, ok := r.waitRoom()
		if !ok {
			return
		}
		t0 := r.cfg.Now()
		cs, err := r.cfg.Store.ClaimTasks(r.bg, store.ClaimParams{
			Owner: r.cfg.Owner, Limit: room, TTL: r.cfg.LeaseTTL, MaxAttempts: r.cfg.MaxAttempts,
		})
		if err != nil {
			r.cfg.Logger.Warn("claim failed", "err", err)
			if !r.sleep(jitter(idle)) {
				return
			}
			idle = min(2*idle, r.cfg.PollMax)
			continue
		}
		if len(cs) == 0 {
			if !r.sleep(jitter(idle)) {
				return
			}
			idle = min(2*idle, r.cfg.PollMax)
			continue
		}
		idle = r.cfg.PollMin
		specs := map[string]specResult{}
		for _, c := range cs {
			r.launch(c, t0, specs)
		}
	}
}

// waitRoom waits until at least half the pool's leases are free, and
// answers how many more it may take; false when the pool stops.
func (r *run) waitRoom() (int, bool) {
	for {
		select {
		case <-r.stopCh:
			return 0, false
		default:
		}
		hold := r.holdCap()
		r.mu.Lock()
		room := hold - len(r.tasks)
		r.mu.Unlock()
		if room >= hold/2 && room > 0 {
			return room, true
		}
		select {
		case <-r.wake:
		case <-r.stopCh:
			return 0, false
		}
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

// launch starts a claimed task's goroutine.
func (r *run) launch(c store.ClaimedTask, t0 time.Time, specs map[string]specResult) {
	sr, ok := specs[c.BatchID]
	if !ok {
		sr = decodeSpec(c.Spec)
		specs[c.BatchID] = sr
	}
	ctx, cancel := context.WithCancelCause(r.work)
	tr := &taskRun{c: c, ctx: ctx, cancel: cancel, jobErr: sr.err}
	if sr.in != nil {
		tr.job = generator.Job{
			Key: c.TaskID, Prompt: sr.in.Prompt, Collection: c.Collection, Frame: c.Frame,
			Candidate: c.Candidate, Seed: sr.in.Seed, Params: sr.in.Params, Subjects: sr.in.Subjects,
			Attempt: c.Attempt,
		}
	}
	tr.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
	r.mu.Lock()
	r.tasks[c.TaskID] = tr
	r.mu.Unlock()
	r.tasksWG.Add(1)
	go func() {
		defer r.tasksWG.Done()
		defer r.forget(tr)
		r.settle(tr, r.execute(tr))
	}()
}

// forget drops an ended task and wakes the fetch loop.
func (r *run) forget(tr *taskRun) {
	tr.cancel(nil)
	r.mu.Lock()
	if r.tasks[tr.c.TaskID] == tr {
		delete(r.tasks, tr.c.TaskID)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// renewLoop renews every lease the pool holds, every ttl/3, one renewal at
// a time.
func (r *run) renewLoop() {
	every := r.cfg.LeaseTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.bg.Done():
			return
		case <-t.C:
		}
		r.renewOnce()
	}
}

func (r *run) renewOnce() {
	r.mu.Lock()
	held := make([]*taskRun, 0, len(r.tasks))
	for _, tr := range r.tasks {
		if tr.ctx.Err() == nil {
			held = append(held, tr)
		}
	}
	r.mu.Unlock()
	if len(held) > 0 {
		leases := make([]store.Lease, len(held))
		for i, tr := range held {
			leases[i] = tr.c.Lease
		}
		t0 := r.cfg.Now()
		res, err := r.cfg.Store.RenewLeases(r.bg, store.RenewParams{Owner: r.cfg.Owner, Leases: leases, TTL: r.cfg.LeaseTTL})
		if err != nil {
			if r.bg.Err() == nil {
				r.cfg.Logger.Warn("lease renewal failed", "leases", len(leases), "err", err)
			}
		} else {
			lost := make(map[string]bool, len(res.Lost))
			for _, id := range res.Lost {
				lost[id] = true
			}
			canceled := make(map[string]bool, len(res.Canceled))
			for _, id := range res.Canceled {
				canceled[id] = true
			}
			for _, tr := range held {
				switch {
				case lost[tr.c.TaskID]:
					tr.cancel(errLeaseLost)
				case canceled[tr.c.TaskID]:
					tr.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
					tr.cancel(errCancelRequested)
				default:
					tr.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
				}
			}
		}
	}
	// Leases not confirmed in time are lost, whatever the reason (a slow
	// database, a process that was stopped).
	now := r.cfg.Now().UnixNano()
	r.mu.Lock()
	for _, tr := range r.tasks {
		if now >= tr.deadline.Load() {
			tr.cancel(errLeaseLost)
		}
	}
	r.mu.Unlock()
}

// sweepLoop removes unnamed blobs now and then.
func (r *run) sweepLoop() {
	first := min(time.Minute, r.cfg.SweepEvery)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-r.bg.Done():
			return
		case <-t.C:
		}
		res, err := r.cfg.Blobs.Sweep(r.bg, sweepParams(r.cfg))
		switch {
		case err != nil && r.bg.Err() == nil:
			r.cfg.Logger.Warn("blob sweep failed", "err", err)
		case err == nil && (res.Removed > 0 || res.Leftovers > 0):
			r.cfg.Logger.Info("blob sweep", "removed", res.Removed, "kept", res.Kept, "leftovers", res.Leftovers)
		}
		t.Reset(r.cfg.SweepEvery)
	}
}

// Backoff is the wait before the next try after attempt (1-based) failed:
// base·2^(attempt-1), at most max, with equal jitter (half of it fixed,
// the other half scaled by r in [0, 1)).
func Backoff(base, max time.Duration, attempt int, r float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}
