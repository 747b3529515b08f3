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

	"github.com/go-json-experiment/json"

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
	if r.cfg.Breakers.Open(gen.ID()) {
		return errGeneratorDown
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
		if ctx.Err() == nil && r.cfg.Breakers.Result(gen.ID(), err) {
			err = fmt.Errorf("%w: %w", errGeneratorDown, err)
		}
		if err == nil && (tr.unsavedCalls() > 0 || tr.note != "") {
			// Calls no step recorded yet (a quick task), a note: recorded
			// with the step it reached, before the completion.
			err = r.saveStep(tr, tr.step, tr.ref, tr.takeNote())
		}
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
// which gives the same reference. What a paid call answered is recorded at
// once: a Producer's image URL ("waited"), its inline bytes once stored
// ("stored"). Between steps it hands the lease back if the pool is
// stopping, recording where it is first.
//
// A step that finds the provider lost what the recorded reference names
// (generator.LostError) records the step that makes it again, with a note
// in the task's history, and goes back to it, once per attempt.
func (r *run) steps(ctx context.Context, tr *taskRun, gen generator.Generator) (intent.Asset, error) {
	ctx = generator.WithCalls(ctx, &tr.calls)
	tr.step, tr.ref = tr.c.Step, tr.c.ProviderRef
	redone := false
	for {
		if r.s.Stopping() {
			return intent.Asset{}, errHandBack
		}
		var err error
		var what string
		switch tr.step {
		case StepSubmitted:
			what = "wait"
			if p, ok := gen.(generator.Producer); ok {
				what = "generate"
				var a *intent.Asset
				if a, err = r.produce(ctx, tr, p); err == nil && a != nil {
					return *a, nil
				}
			} else if err = r.wait(ctx, tr, gen, tr.ref); err == nil {
				tr.step = StepWaited
			}
		case StepWaited:
			what = "fetch"
			var a intent.Asset
			if a, err = r.finish(ctx, tr, gen, tr.ref); err == nil {
				return a, nil
			}
		case StepStored:
			what = "store image"
			var a intent.Asset
			if a, err = r.restore(ctx, tr); err == nil {
				return a, nil
			}
		default:
			what = "submit"
			var ref string
			if ref, err = gen.Submit(ctx, tr.job); err == nil {
				tr.step, tr.ref = StepSubmitted, ref
				tr.unrecorded = &store.StepSave{Lease: tr.c.Lease, Step: StepSubmitted, ProviderRef: ref}
			}
		}
		if err == nil {
			continue
		}
		le, lost := generator.AsLost(err)
		if !lost {
			return intent.Asset{}, fmt.Errorf("%s: %w", what, err)
		}
		r.cfg.Spend.Discarded(gen.ID(), le.Reason)
		back := StepNew
		if le.Ref != "" {
			back = StepSubmitted
		}
		note := fmt.Sprintf("attempt %d: %s: %v", tr.c.Attempt, what, err)
		if serr := r.saveStep(tr, back, le.Ref, note); serr != nil {
			return intent.Asset{}, serr
		}
		tr.step, tr.ref, tr.unrecorded = back, le.Ref, nil
		r.cfg.Logger.Info("the provider lost the task's job or image; going back", "task", tr.c.ID,
			"generator", gen.ID(), "reason", le.Reason, "to_step", back, "err", err)
		if redone {
			// Lost twice in one attempt: the next attempt, after its backoff.
			return intent.Asset{}, fmt.Errorf("%s: %w", what, err)
		}
		redone = true
	}
}

// produce runs a Producer's wait step: the paid call. Inline bytes are
// stored at once and the step "stored" recorded with them (the asset to
// complete is answered); a URL is recorded as step "waited" before the
// download is tried.
func (r *run) produce(ctx context.Context, tr *taskRun, p generator.Producer) (*intent.Asset, error) {
	if tr.unrecorded != nil {
		// The submission (no call for a Producer) is recorded with what
		// the call answers.
		tr.unrecorded = nil
	}
	res, err := p.Produce(ctx, tr.ref)
	if err != nil {
		return nil, err
	}
	if res.Image == nil {
		if err := r.saveStep(tr, StepWaited, res.Ref, ""); err != nil {
			return nil, err
		}
		tr.step, tr.ref = StepWaited, res.Ref
		return nil, nil
	}
	a, err := r.store(ctx, tr, p, *res.Image)
	if err != nil {
		return nil, err
	}
	ref, err := storedRef(a, tr.ref)
	if err != nil {
		return nil, err
	}
	if err := r.saveStep(tr, StepStored, ref, tr.takeNote()); err != nil {
		return nil, err
	}
	tr.step, tr.ref = StepStored, ref
	return &a, nil
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
			err := r.saveStep(tr, pending.Step, pending.ProviderRef, "")
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
		return err
	}
	tr.unrecorded = &store.StepSave{Lease: tr.c.Lease, Step: StepWaited, ProviderRef: ref}
	if r.cfg.Now().Sub(start) >= r.cfg.StepRecordAfter {
		if err := r.saveStep(tr, StepWaited, ref, ""); err != nil {
			return err
		}
		tr.unrecorded = nil
	}
	return nil
}

// saveStep records a step under the task's fence, with the paid calls
// not recorded yet and a note for the task's history.
func (r *run) saveStep(tr *taskRun, step, ref, note string) error {
	if err := tr.ctx.Err(); err != nil {
		return context.Cause(tr.ctx)
	}
	calls := tr.takeCalls()
	err, txErr := r.stepWriter.Do(store.StepSave{Lease: tr.c.Lease, Step: step, ProviderRef: ref, Calls: calls, Note: note})
	if txErr != nil {
		tr.giveBack(calls)
		return fmt.Errorf("save step %s: %w", step, txErr)
	}
	if err != nil {
		tr.giveBack(calls)
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
		return intent.Asset{}, err
	}
	return r.store(ctx, tr, gen, img)
}

// store puts an image's bytes in the blob store and answers its asset.
// An image of another size than the task's params ask is refused (a
// permanent error) when the generator says so, else kept with a note.
func (r *run) store(ctx context.Context, tr *taskRun, gen generator.Generator, img generator.Image) (intent.Asset, error) {
	if want, err := generator.RequestSize(tr.job.Params, ""); err == nil && want != "" {
		if got := fmt.Sprintf("%dx%d", img.Width, img.Height); got != want {
			if sr, ok := gen.(generator.SizeRefuser); ok && sr.RefusesOtherSizes() {
				r.cfg.Spend.Discarded(gen.ID(), generator.ReasonSize)
				return intent.Asset{}, generator.Permanent(fmt.Errorf("generator %q made an image of %s, not the %s asked; the catalog refuses such images (size_mismatch: refuse)", gen.ID(), got, want))
			}
			tr.note = fmt.Sprintf("attempt %d: generator %q made an image of %s, not the %s asked; kept (size_mismatch: warn)", tr.c.Attempt, gen.ID(), got, want)
			r.cfg.Logger.Warn("an image of another size than asked", "task", tr.c.ID, "generator", gen.ID(), "asked", want, "made", got)
		}
	}
	info, err := r.putWaiting(ctx, tr, img.Bytes)
	if err != nil {
		return intent.Asset{}, fmt.Errorf("store image: %w", err)
	}
	id, err := r.cfg.NewID()
	if err != nil {
		return intent.Asset{}, err
	}
	tr.stored = true
	r.cfg.Spend.Stored(gen.ID())
	return intent.Asset{
		ID: id, SHA256: info.SHA256, ContentType: img.ContentType, Size: info.Size,
		Width: img.Width, Height: img.Height,
	}, nil
}

// putWaiting stores the image's bytes. While the blob store is
// unavailable (an object store that is down) it keeps the image and tries
// again, backing off up to blobRetryMax, for as long as the task's lease
// holds: the task waits, holding its run slot (so the worker claims no
// more), and burns no attempt. Stopping the pool or losing the lease ends
// the wait.
func (r *run) putWaiting(ctx context.Context, tr *taskRun, data []byte) (blob.Info, error) {
	wait := blobRetryMin
	for try := 1; ; try++ {
		info, err := r.cfg.Blobs.Put(ctx, bytes.NewReader(data))
		if !errors.Is(err, blob.ErrUnavailable) {
			if err == nil && try > 1 {
				r.cfg.Logger.Info("asset store back: image stored", "task", tr.c.ID, "tries", try)
			}
			return info, err
		}
		if try == 1 {
			r.cfg.Logger.Warn("asset store unavailable: the task waits for it", "task", tr.c.ID, "err", err)
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return blob.Info{}, fmt.Errorf("%w (waited %d tries)", err, try)
		case <-r.s.StopContext().Done():
			t.Stop()
			return blob.Info{}, errHandBack
		case <-t.C:
		}
		wait = min(2*wait, blobRetryMax)
	}
}

// The wait between two tries of an unavailable blob store.
const (
	blobRetryMin = 200 * time.Millisecond
	blobRetryMax = 5 * time.Second
)

// storedImage is what the step "stored" records: the stored bytes' asset
// fields, and the reference to make them again from should the blob be
// gone.
type storedImage struct {
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
	Request     string `json:"request"`
}

func storedRef(a intent.Asset, request string) (string, error) {
	b, err := json.Marshal(storedImage{SHA256: a.SHA256, ContentType: a.ContentType, Size: a.Size,
		Width: a.Width, Height: a.Height, Request: request})
	if err != nil {
		return "", fmt.Errorf("record the stored image: %w", err)
	}
	return string(b), nil
}

// restore answers the asset of an image an earlier try stored (step
// "stored"): no call. Bytes no longer in the blob store send the task back
// to the paid call (a *generator.LostError).
func (r *run) restore(ctx context.Context, tr *taskRun) (intent.Asset, error) {
	var si storedImage
	if err := json.Unmarshal([]byte(tr.ref), &si); err != nil || si.SHA256 == "" {
		return intent.Asset{}, generator.Permanent(fmt.Errorf("the recorded image cannot be read: %q", tr.ref))
	}
	ok, err := r.cfg.Blobs.Exists(ctx, si.SHA256)
	if err != nil {
		return intent.Asset{}, err
	}
	if !ok {
		return intent.Asset{}, &generator.LostError{Ref: si.Request, Reason: generator.ReasonLost,
			Err: fmt.Errorf("the stored image %s is gone from the blob store; it is made again", si.SHA256)}
	}
	id, err := r.cfg.NewID()
	if err != nil {
		return intent.Asset{}, err
	}
	tr.stored = true
	return intent.Asset{ID: id, SHA256: si.SHA256, ContentType: si.ContentType, Size: si.Size, Width: si.Width, Height: si.Height}, nil
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
	case r.s.Fault(err):
		// The database (or the disk under it) failed, not the task: hand
		// it back, which does not count against its attempts. The fault
		// is logged once per outage.
		r.release(tr, log, "database fault", false)
		return
	case errors.Is(err, errGeneratorDown):
		r.release(tr, log, err.Error(), false)
		return
	}
	permanent := generator.IsPermanent(err)
	msg := fmt.Sprintf("attempt %d: %v", tr.c.Attempt, err)
	// No sooner than the provider said (429, 503 with Retry-After).
	backoff := leasequeue.RetryWait(r.cfg.RetryBase, r.cfg.RetryMax, tr.c.Attempt, rand.Float64(), err)
	ctx, cancel := context.WithTimeout(r.s.Background(), storeTimeout)
	defer cancel()
	r.recordCalls(ctx, tr, log)
	state, ferr := r.cfg.Store.FailLease(ctx, store.Failure{
		Lease: tr.c.Lease, Error: msg, Permanent: permanent, MaxAttempts: r.cfg.MaxAttempts, Backoff: backoff,
	})
	switch {
	case errors.Is(ferr, store.ErrLeaseLost):
		r.cfg.Observe(OutcomeLost)
		log.Info("lease lost before the failure was recorded", "err", err)
	case r.s.Fault(ferr):
		// Logged once per outage; the lease will expire and the task run
		// again.
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
		r.abandoned(tr)
		log.Warn("task failed", "err", err, "permanent", permanent)
	}
}

// recordCalls records the paid calls of a try that ends without a step
// record carrying them, with the step the task reached.
func (r *run) recordCalls(ctx context.Context, tr *taskRun, log *slog.Logger) {
	n := tr.takeCalls()
	if n == 0 && tr.unrecorded == nil {
		return
	}
	st := store.StepSave{Lease: tr.c.Lease, Step: tr.step, ProviderRef: tr.ref, Calls: n}
	if tr.unrecorded != nil {
		st.Step, st.ProviderRef = tr.unrecorded.Step, tr.unrecorded.ProviderRef
	}
	errs, err := r.cfg.Store.SaveSteps(ctx, []store.StepSave{st})
	if err == nil {
		err = errs[0] // one step, one answer
	}
	if err != nil {
		log.Info("could not record the step and calls before ending the try", "err", err)
	}
}

// abandoned counts the paid calls of a try whose task ended (failed,
// canceled) without storing an image: results thrown away.
func (r *run) abandoned(tr *taskRun) {
	if tr.stored {
		return
	}
	for range tr.calls.N() {
		r.cfg.Spend.Discarded(tr.c.Generator, generator.ReasonAbandoned)
	}
}

// release hands a lease back, recording first the step the task reached
// if it was not recorded yet, so that the next holder resumes there.
func (r *run) release(tr *taskRun, log *slog.Logger, why string, canceled bool) {
	ctx, cancel := context.WithTimeout(r.s.Background(), storeTimeout)
	defer cancel()
	r.recordCalls(ctx, tr, log)
	errs, err := r.cfg.Store.ReleaseLeases(ctx, []store.Lease{tr.c.Lease})
	switch {
	case r.s.Fault(err):
		// Logged once per outage; the lease will expire.
	case err != nil:
		log.Error("could not hand the lease back; it will expire", "why", why, "err", err)
	case errs[0] != nil:
		r.cfg.Observe(OutcomeLost)
		log.Info("lease lost before it was handed back", "why", why)
	case canceled:
		r.cfg.Observe(OutcomeCanceled)
		r.abandoned(tr)
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
