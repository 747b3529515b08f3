package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"studio/blob"
	"studio/generator"
	"studio/intent"
	"studio/leasequeue"
	"studio/store"
)

// execute runs a task's steps, within its generator's concurrency limit
// and a run slot (waiting for either ends at once when the pool stops),
// then records its completion: a write that needs neither slot, so the
// next task starts while it waits for its transaction.
func (r *run) execute(tr *taskRun) error {
	if tr.jobErr != nil {
		return tr.jobErr
	}
	gen, err := r.cfg.Generators.Get(tr.c.Generator)
	if err != nil {
		return err
	}
	// A task still waiting for its turn when the pool stops hands its
	// lease back at once; one that started has its grace period.
	wait, stopWaiting := context.WithCancelCause(tr.ctx)
	defer stopWaiting(nil)
	var mu sync.Mutex
	started, handedBack := false, false
	unwatch := context.AfterFunc(r.s.StopContext(), func() {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			handedBack = true
			stopWaiting(errHandBack)
		}
	})
	defer unwatch()
	var result *intent.Asset
	body := func(ctx context.Context) error {
		select {
		case r.runSlots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		defer func() { <-r.runSlots }()
		mu.Lock()
		if handedBack {
			mu.Unlock()
			return errHandBack
		}
		started = true
		mu.Unlock()
		start := r.cfg.Now()
		a, err := r.steps(ctx, tr, gen)
		if err == nil {
			r.s.Observe(r.cfg.Now().Sub(start))
			result = &a
		}
		if err != nil && ctx.Err() != nil && tr.ctx.Err() == nil {
			// The generator slot's own lease ended (not the task's): try
			// again later, elsewhere.
			return errHandBack
		}
		return err
	}
	if r.cfg.Limiter != nil {
		err = r.cfg.Limiter.Run(wait, gen.ID(), body)
	} else {
		err = body(wait)
	}
	if errors.Is(context.Cause(wait), errHandBack) {
		return errHandBack
	}
	if err != nil {
		return err
	}
	return r.complete(tr, *result)
}

// steps moves the task from its stored step to its completion. A step is
// recorded (step and reference, under the fence) only when doing it again
// would cost more than recording it: "submitted" once the wait that
// follows has run StepRecordAfter, "waited" when the wait took that long.
// A quick task (a no-op generator, a fast provider) records no step at
// all, and a worker that takes it over submits again, under the same key,
// which gives the same reference. Between steps it hands the lease back if
// the pool is stopping, recording where it is first.
func (r *run) steps(ctx context.Context, tr *taskRun, gen generator.Generator) (intent.Asset, error) {
	step, ref := tr.c.Step, tr.c.ProviderRef
	for {
		if r.s.Stopping() {
			return intent.Asset{}, errHandBack
		}
		switch step {
		case StepSubmitted:
			if err := r.wait(ctx, tr, gen, ref); err != nil {
				return intent.Asset{}, err
			}
			step = StepWaited
		case StepWaited:
			return r.finish(ctx, tr, gen, ref)
		default:
			var err error
			if ref, err = gen.Submit(ctx, tr.job); err != nil {
				return intent.Asset{}, fmt.Errorf("submit: %w", err)
			}
			tr.unrecorded = &store.StepSave{Lease: tr.c.Lease, Step: StepSubmitted, ProviderRef: ref}
			step = StepSubmitted
		}
	}
}

// wait runs the wait step. If "submitted" is not recorded yet, it is once
// the wait has run StepRecordAfter (a lost lease or a canceled batch found
// then stops the wait at once); "waited" is recorded after a wait that
// long.
func (r *run) wait(ctx context.Context, tr *taskRun, gen generator.Generator, ref string) error {
	start := r.cfg.Now()
	var timer *time.Timer
	var saved chan error
	if pending := tr.unrecorded; pending != nil {
		saved = make(chan error, 1)
		timer = time.AfterFunc(r.cfg.StepRecordAfter, func() {
			err := r.saveStep(tr, pending.Step, pending.ProviderRef)
			if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrTaskCanceled) {
				tr.cancel(err)
			}
			saved <- err
		})
	}
	err := gen.Wait(ctx, ref)
	if timer != nil && !timer.Stop() {
		if serr := <-saved; serr != nil {
			return serr
		}
		tr.unrecorded = nil
	}
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	tr.unrecorded = &store.StepSave{Lease: tr.c.Lease, Step: StepWaited, ProviderRef: ref}
	if r.cfg.Now().Sub(start) >= r.cfg.StepRecordAfter {
		if err := r.saveStep(tr, StepWaited, ref); err != nil {
			return err
		}
		tr.unrecorded = nil
	}
	return nil
}

// saveStep records a step under the task's fence.
func (r *run) saveStep(tr *taskRun, step, ref string) error {
	if err := tr.ctx.Err(); err != nil {
		return context.Cause(tr.ctx)
	}
	err, txErr := r.stepWriter.Do(store.StepSave{Lease: tr.c.Lease, Step: step, ProviderRef: ref})
	if txErr != nil {
		return fmt.Errorf("save step %s: %w", step, txErr)
	}
	return err
}

// finish stores the image and answers the asset to record. A task
// resumed after an earlier try first looks for an asset already stored for
// it.
func (r *run) finish(ctx context.Context, tr *taskRun, gen generator.Generator, ref string) (intent.Asset, error) {
	if tr.c.Attempt > 1 {
		a, err := r.cfg.Store.AssetForTask(ctx, tr.c.ID)
		switch {
		case err == nil:
			if ok, err := r.cfg.Blobs.Exists(ctx, a.SHA256); err == nil && ok {
				return a, nil
			}
		case intent.ErrorCode(err) != intent.ENotFound:
			return intent.Asset{}, fmt.Errorf("look for a stored asset: %w", err)
		}
	}
	img, err := gen.Fetch(ctx, ref)
	if err != nil {
		return intent.Asset{}, fmt.Errorf("fetch: %w", err)
	}
	info, err := r.cfg.Blobs.Put(ctx, bytes.NewReader(img.Bytes))
	if err != nil {
		return intent.Asset{}, fmt.Errorf("store image: %w", err)
	}
	id, err := r.cfg.NewID()
	if err != nil {
		return intent.Asset{}, err
	}
	return intent.Asset{
		ID: id, SHA256: info.SHA256, ContentType: img.ContentType, Size: info.Size,
		Width: img.Width, Height: img.Height,
	}, nil
}

// complete records the task's success and its asset under its fence.
//
// A pool stopping still records a result it has: the write is short, and
// handing the lease back would only make another worker redo the task.
func (r *run) complete(tr *taskRun, a intent.Asset) error {
	if cause := context.Cause(tr.ctx); cause != nil && !errors.Is(cause, leasequeue.ErrStopping) {
		return cause
	}
	res, txErr := r.completions.Do(store.Completion{Lease: tr.c.Lease, Asset: a})
	if txErr != nil {
		return fmt.Errorf("complete: %w", txErr)
	}
	if res.Err != nil {
		return res.Err
	}
	r.cfg.Observe(OutcomeSucceeded)
	r.cfg.Logger.Debug("task succeeded", "task", tr.c.ID, "batch", tr.c.BatchID, "attempt", tr.c.Attempt,
		"fence", tr.c.Fence, "asset", res.AssetID, "owner", r.cfg.Owner)
	return nil
}

// settle ends a task whose steps returned err: nothing more (success, lost
// lease, canceled by the store), a hand back, or a failure.
func (r *run) settle(tr *taskRun, err error) {
	log := r.cfg.Logger.With("task", tr.c.ID, "batch", tr.c.BatchID, "attempt", tr.c.Attempt, "fence", tr.c.Fence)
	cause := context.Cause(tr.ctx)
	switch {
	case err == nil:
		return
	case errors.Is(err, store.ErrLeaseLost), errors.Is(cause, store.ErrLeaseLost):
		r.cfg.Observe(OutcomeLost)
		log.Info("lease lost: the task is left to its new holder, nothing recorded")
		return
	case errors.Is(err, store.ErrTaskCanceled):
		r.cfg.Observe(OutcomeCanceled)
		log.Info("task canceled with its batch")
		return
	case errors.Is(cause, leasequeue.ErrCanceled):
		r.release(tr, log, "batch canceled", true)
		return
	case tr.ctx.Err() != nil, errors.Is(err, errHandBack):
		r.release(tr, log, "pool stopping", false)
		return
	}
	permanent := generator.IsPermanent(err)
	msg := fmt.Sprintf("attempt %d: %v", tr.c.Attempt, err)
	// No sooner than the provider said (429, 503 with Retry-After).
	backoff := leasequeue.RetryWait(r.cfg.RetryBase, r.cfg.RetryMax, tr.c.Attempt, rand.Float64(), err)
	ctx, cancel := context.WithTimeout(r.s.Background(), storeTimeout)
	defer cancel()
	state, ferr := r.cfg.Store.FailLease(ctx, store.Failure{
		Lease: tr.c.Lease, Error: msg, Permanent: permanent, MaxAttempts: r.cfg.MaxAttempts, Backoff: backoff,
	})
	switch {
	case errors.Is(ferr, store.ErrLeaseLost):
		r.cfg.Observe(OutcomeLost)
		log.Info("lease lost before the failure was recorded", "err", err)
	case ferr != nil:
		log.Error("could not record a failure; the lease will expire and the task run again", "err", err, "record_err", ferr)
	case state == intent.StateQueued:
		r.cfg.Observe(OutcomeRetried)
		log.Info("task failed; will retry", "err", err, "backoff", backoff.String())
	case state == intent.StateCanceled:
		r.cfg.Observe(OutcomeCanceled)
		log.Info("task canceled with its batch", "err", err)
	default:
		r.cfg.Observe(OutcomeFailed)
		log.Warn("task failed", "err", err, "permanent", permanent)
	}
}

// release hands a lease back, recording first the step the task reached
// if it was not recorded yet, so that the next holder resumes there.
func (r *run) release(tr *taskRun, log *slog.Logger, why string, canceled bool) {
	ctx, cancel := context.WithTimeout(r.s.Background(), storeTimeout)
	defer cancel()
	if tr.unrecorded != nil {
		errs, err := r.cfg.Store.SaveSteps(ctx, []store.StepSave{*tr.unrecorded})
		if err == nil {
			err = errs[0] // one step, one answer
		}
		if err != nil {
			log.Info("could not record the step before handing the lease back", "err", err)
		}
	}
	errs, err := r.cfg.Store.ReleaseLeases(ctx, []store.Lease{tr.c.Lease})
	switch {
	case err != nil:
		log.Error("could not hand the lease back; it will expire", "why", why, "err", err)
	case errs[0] != nil:
		r.cfg.Observe(OutcomeLost)
		log.Info("lease lost before it was handed back", "why", why)
	case canceled:
		r.cfg.Observe(OutcomeCanceled)
		log.Info("task canceled with its batch")
	default:
		r.cfg.Observe(OutcomeReleased)
		log.Debug("lease handed back", "why", why)
	}
}

// sweepParams are the sweep's settings: blobs named by an asset are kept.
func sweepParams(cfg Config) blob.SweepParams {
	return blob.SweepParams{OlderThan: cfg.SweepAge, InUse: cfg.Store.BlobInUse}
}
