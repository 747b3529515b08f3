package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"studio/blob"
	"studio/generator"
	"studio/intent"
	"studio/leasequeue"
	"studio/store"
	"studio/wake"
)

// Defaults of Config beyond leasequeue.Options'.
const (
	DefaultSweepEvery = time.Hour
	DefaultSweepAge   = time.Hour
	// DefaultStepRecordAfter: steps shorter than this are not recorded.
	DefaultStepRecordAfter = 100 * time.Millisecond
)

// Steps a running task records.
const (
	// StepNew: nothing done yet (the stored step is empty).
	StepNew = ""
	// StepSubmitted: the generator took the job; the reference is stored.
	StepSubmitted = "submitted"
	// StepWaited: the job is done; the image can be fetched (for a
	// generator.Producer: the reference is the image's URL).
	StepWaited = "waited"
	// StepStored: the image is in the blob store (a paid answer that
	// carried the bytes); the reference holds its address and size.
	StepStored = "stored"
)

// Spend hears what tasks bought of their generators, for metrics: images
// stored, and paid results thrown away (with a generator.Discard* reason).
// Its methods must not block.
type Spend interface {
	// Stored: one image of the generator went to the blob store.
	Stored(generator string)
	// Discarded: one paid result of the generator was thrown away.
	Discarded(generator, reason string)
}

// noSpend is the Spend of a pool without metrics.
type noSpend struct{}

func (noSpend) Stored(string)            {}
func (noSpend) Discarded(string, string) {}

// Outcome is how one attempt at a task ended, for Config.Observe. Its
// values are the metric label values of studio_attempts_total.
type Outcome string

// Outcomes of an attempt, for Config.Observe.
const (
	OutcomeSucceeded Outcome = "succeeded" // the result was recorded
	OutcomeRetried   Outcome = "retried"   // failed, queued again after a backoff
	OutcomeFailed    Outcome = "failed"    // failed for good (permanent, or the last attempt)
	OutcomeCanceled  Outcome = "canceled"  // the batch was canceled while it ran
	OutcomeReleased  Outcome = "released"  // handed back by the pool stopping
	OutcomeLost      Outcome = "lost"      // the lease was lost: nothing recorded
)

// Generators finds a task's generator by id. *generator.Registry is one;
// an error (permanent, as the registry's) fails the task.
type Generators interface {
	Get(id string) (generator.Generator, error)
}

// Config configures a Pool. Zero fields take the defaults above.
type Config struct {
	// Options are the runner's: how many tasks run at once, the lease
	// length, the attempts and their retry waits, the grace of a stop (the
	// steps still running after it are canceled; either way their leases
	// are handed back), the polls, the logger and the owner.
	leasequeue.Options
	Store      store.TaskStore
	Generators Generators
	Blobs      blob.Store
	// StepRecordAfter: a step is recorded only once redoing it would take
	// this long (see the package doc); negative records every step at once.
	StepRecordAfter time.Duration
	// Batches, when set, reads the batches this pool ran tasks of, to log
	// each once it has ended ("batch finished").
	Batches BatchReader
	// Limiter bounds each generator's concurrency (max_concurrency); nil
	// means no bound but Concurrency.
	Limiter Limiter
	// Observe, when set, is told how each attempt this pool ran ended: one
	// of the Outcome values (for metrics). It must not block.
	Observe func(outcome Outcome)
	// Spend, when set, hears of images stored and paid results thrown
	// away, per generator.
	Spend Spend
	// Breakers, when set, hold the tasks of a generator that is down: a
	// task that fails with an outage error is handed back (queued again,
	// no attempt spent) instead of failed, and while the generator's
	// breaker is open claims skip its tasks.
	Breakers *Breakers
	// SweepEvery is how often the pool sweeps unnamed blobs (the first a
	// minute after Start, or sooner if SweepEvery is shorter); negative
	// disables sweeps. SweepAge is the age below which a blob is kept.
	SweepEvery, SweepAge time.Duration
	// NewID makes asset ids; intent.NewID by default.
	NewID func() (string, error)
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Store == nil || out.Generators == nil || out.Blobs == nil {
		return out, errors.New("new worker pool: Store, Generators and Blobs are required")
	}
	o, err := out.Options.WithDefaults("worker")
	if err != nil {
		return out, fmt.Errorf("new worker pool: %w", err)
	}
	out.Options = o
	if out.SweepAge <= 0 {
		out.SweepAge = DefaultSweepAge
	}
	if out.StepRecordAfter == 0 {
		out.StepRecordAfter = DefaultStepRecordAfter
	}
	out.StepRecordAfter = max(out.StepRecordAfter, 0)
	if out.SweepEvery == 0 {
		out.SweepEvery = DefaultSweepEvery
	}
	if out.Observe == nil {
		out.Observe = func(Outcome) {}
	}
	if out.Spend == nil {
		out.Spend = noSpend{}
	}
	if out.NewID == nil {
		out.NewID = intent.NewID
	}
	return out, nil
}

// Pool runs tasks: Start begins claiming, Stop stops gracefully. Both are
// safe to call any number of times and in any order; a Pool stopped can be
// started again. The claiming, renewing and stopping are a
// leasequeue.Runner's; the pool is its task handler.
type Pool struct {
	runner *leasequeue.Runner[*attempt]
}

// tasks is the pool's handler of the lease runner: what a task is and how
// it is run and recorded.
type tasks struct {
	cfg Config

	runSlots chan struct{} // one per running task

	stepWriter  *leasequeue.Batcher[store.StepSave, error]
	completions *leasequeue.Batcher[store.Completion, store.CompletionResult]

	batchEnds *batchEnds // nil without Config.Batches
}

// New checks cfg and returns a stopped pool.
func New(cfg Config) (*Pool, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &tasks{
		cfg:         c,
		runSlots:    make(chan struct{}, c.Concurrency),
		stepWriter:  leasequeue.NewBatcher(leasequeue.MaxHeld, c.Store.SaveSteps),
		completions: leasequeue.NewBatcher(leasequeue.MaxHeld, c.Store.CompleteLeases),
	}
	loops := []func(context.Context){h.stepWriter.Loop, h.completions.Loop}
	if c.SweepEvery > 0 {
		loops = append(loops, h.sweepLoop)
	}
	if c.Batches != nil {
		h.batchEnds = &batchEnds{read: c.Batches, seen: map[string]string{}, done: map[string]struct{}{}}
		loops = append(loops, h.batchEndLoop)
	}
	r, err := leasequeue.New(leasequeue.Config{
		Options:    c.Options,
		Leases:     c.Store,
		ClaimAhead: true,
		Loops:      loops,
		WakeOn:     wake.Tasks,
		OnStart: func() {
			c.Logger.Info("workers started", "owner", c.Owner, "concurrency", c.Concurrency,
				"lease_ttl", c.LeaseTTL.String(), "max_attempts", c.MaxAttempts)
		},
		OnStop: func() { c.Logger.Info("workers stopped", "owner", c.Owner) },
	}, h)
	if err != nil {
		return nil, fmt.Errorf("new worker pool: %w", err)
	}
	return &Pool{runner: r}, nil
}

// Start begins claiming and running tasks, in goroutines that live until
// Stop (ctx only carries values). Starting a started pool does nothing;
// starting a pool that is stopping waits for the stop to end, then starts.
func (p *Pool) Start(ctx context.Context) error { return p.runner.Start(ctx) }

// Stats are the pool's counts of claims (all, and those that found
// nothing) since it was made.
func (p *Pool) Stats() leasequeue.Stats { return p.runner.Stats() }

// Stop stops claiming, lets running steps end within Grace (or until ctx
// ends), hands the leases of unfinished tasks back, and returns once every
// task and loop of the pool has ended. Stopping a stopped pool does
// nothing; concurrent calls all wait for the one stop.
func (p *Pool) Stop(ctx context.Context) error {
	p.runner.Stop(ctx)
	return nil
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

// sweepParams are the sweep's settings: blobs named by an asset are kept.
func sweepParams(cfg Config) blob.SweepParams {
	return blob.SweepParams{OlderThan: cfg.SweepAge, InUse: cfg.Store.BlobInUse}
}
