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

// executor carries out one attempt: the pool's handler and the session
// of the runner it runs in (one Start..Stop). Its methods are the steps
// of a task, from the claim to the write that ends the attempt.
type executor struct {
	*tasks
	s *leasequeue.Session
}

// execute runs a task's steps, within its generator's concurrency limit
// and a run slot (waiting for either ends at once when the pool stops),
// then records its completion: a write that needs neither slot, so the
// next task starts while it waits for its transaction.
func (e *executor) execute(at *attempt) error {
	if at.jobErr != nil {
		return at.jobErr
	}
	gen, err := e.cfg.Generators.Get(at.c.Generator)
	if err != nil {
		return err
	}
	if e.cfg.Breakers.Open(gen.ID()) {
		return errGeneratorDown
	}
	// A task still waiting for its turn when the pool stops hands its
	// lease back at once; one that started has its grace period.
	wait, stopWaiting := context.WithCancelCause(at.ctx)
	defer stopWaiting(nil)
	var mu sync.Mutex
	started, handedBack := false, false
	unwatch := context.AfterFunc(e.s.StopContext(), func() {
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
		case e.runSlots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		defer func() { <-e.runSlots }()
		mu.Lock()
		if handedBack {
			mu.Unlock()
			return errHandBack
		}
		started = true
		mu.Unlock()
		start := e.cfg.Now()
		a, err := e.steps(ctx, at, gen)
		if ctx.Err() == nil && e.cfg.Breakers.Result(gen.ID(), err) {
			err = fmt.Errorf("%w: %w", errGeneratorDown, err)
		}
		if err == nil && (at.unsavedCalls() > 0 || at.note != "") {
			// Calls no step recorded yet (a quick task), a note: recorded
			// with the step it reached, before the completion.
			err = e.saveStep(at, at.step, at.ref, at.takeNote())
		}
		if err == nil {
			e.s.Observe(e.cfg.Now().Sub(start))
			result = &a
		}
		if err != nil && ctx.Err() != nil && at.ctx.Err() == nil {
			// The generator slot's own lease ended (not the task's): try
			// again later, elsewhere.
			return errHandBack
		}
		return err
	}
	if e.cfg.Limiter != nil {
		err = e.cfg.Limiter.Hold(wait, gen.ID(), body)
	} else {
		err = body(wait)
	}
	if errors.Is(context.Cause(wait), errHandBack) {
		return errHandBack
	}
	if err != nil {
		return err
	}
	return e.complete(at, *result)
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
func (e *executor) steps(ctx context.Context, at *attempt, gen generator.Generator) (intent.Asset, error) {
	ctx = generator.WithCalls(ctx, &at.calls)
	at.step, at.ref = at.c.Step, at.c.ProviderRef
	redone := false
	for {
		if e.s.Stopping() {
			return intent.Asset{}, errHandBack
		}
		var err error
		var what string
		switch at.step {
		case StepSubmitted:
			what = "wait"
			if p, ok := gen.(generator.Producer); ok {
				what = "generate"
				var a *intent.Asset
				if a, err = e.produce(ctx, at, p); err == nil && a != nil {
					return *a, nil
				}
			} else if err = e.wait(ctx, at, gen, at.ref); err == nil {
				at.step = StepWaited
			}
		case StepWaited:
			what = "fetch"
			var a intent.Asset
			if a, err = e.finish(ctx, at, gen, at.ref); err == nil {
				return a, nil
			}
		case StepStored:
			what = "store image"
			var a intent.Asset
			if a, err = e.restore(ctx, at); err == nil {
				return a, nil
			}
		default:
			what = "submit"
			var ref string
			if ref, err = gen.Submit(ctx, at.job); err == nil {
				at.step, at.ref = StepSubmitted, ref
				at.unrecorded = &store.StepSave{Lease: at.c.Lease, Step: StepSubmitted, ProviderRef: ref}
			}
		}
		if err == nil {
			continue
		}
		le, lost := generator.AsLost(err)
		if !lost {
			return intent.Asset{}, fmt.Errorf("%s: %w", what, err)
		}
		e.cfg.Spend.Discarded(gen.ID(), le.Reason)
		back := StepNew
		if le.Ref != "" {
			back = StepSubmitted
		}
		note := fmt.Sprintf("attempt %d: %s: %v", at.c.Attempt, what, err)
		if serr := e.saveStep(at, back, le.Ref, note); serr != nil {
			return intent.Asset{}, serr
		}
		at.step, at.ref, at.unrecorded = back, le.Ref, nil
		e.cfg.Logger.Info("the provider lost the task's job or image; going back", "task", at.c.ID,
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
func (e *executor) produce(ctx context.Context, at *attempt, p generator.Producer) (*intent.Asset, error) {
	if at.unrecorded != nil {
		// The submission (no call for a Producer) is recorded with what
		// the call answers.
		at.unrecorded = nil
	}
	res, err := p.Produce(ctx, at.ref)
	if err != nil {
		return nil, err
	}
	if res.Image == nil {
		if err := e.saveStep(at, StepWaited, res.Ref, ""); err != nil {
			return nil, err
		}
		at.step, at.ref = StepWaited, res.Ref
		return nil, nil
	}
	a, err := e.store(ctx, at, p, *res.Image)
	if err != nil {
		return nil, err
	}
	ref, err := storedRef(a, at.ref)
	if err != nil {
		return nil, err
	}
	if err := e.saveStep(at, StepStored, ref, at.takeNote()); err != nil {
		return nil, err
	}
	at.step, at.ref = StepStored, ref
	return &a, nil
}

// wait runs the wait step. If "submitted" is not recorded yet, it is once
// the wait has run StepRecordAfter (a lost lease or a canceled batch found
// then stops the wait at once); "waited" is recorded after a wait that
// long.
func (e *executor) wait(ctx context.Context, at *attempt, gen generator.Generator, ref string) error {
	start := e.cfg.Now()
	var timer *time.Timer
	var saved chan error
	if pending := at.unrecorded; pending != nil {
		saved = make(chan error, 1)
		timer = time.AfterFunc(e.cfg.StepRecordAfter, func() {
			err := e.saveStep(at, pending.Step, pending.ProviderRef, "")
			if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrTaskCanceled) {
				at.cancel(err)
			}
			saved <- err
		})
	}
	err := gen.Wait(ctx, ref)
	if timer != nil && !timer.Stop() {
		if serr := <-saved; serr != nil {
			return serr
		}
		at.unrecorded = nil
	}
	if err != nil {
		return err
	}
	at.unrecorded = &store.StepSave{Lease: at.c.Lease, Step: StepWaited, ProviderRef: ref}
	if e.cfg.Now().Sub(start) >= e.cfg.StepRecordAfter {
		if err := e.saveStep(at, StepWaited, ref, ""); err != nil {
			return err
		}
		at.unrecorded = nil
	}
	return nil
}

// saveStep records a step under the task's fence, with the paid calls
// not recorded yet and a note for the task's history.
func (e *executor) saveStep(at *attempt, step, ref, note string) error {
	if err := at.ctx.Err(); err != nil {
		return context.Cause(at.ctx)
	}
	calls := at.takeCalls()
	err, txErr := e.stepWriter.Do(store.StepSave{Lease: at.c.Lease, Step: step, ProviderRef: ref, Calls: calls, Note: note})
	if txErr != nil {
		at.giveBack(calls)
		return fmt.Errorf("save step %s: %w", step, txErr)
	}
	if err != nil {
		at.giveBack(calls)
	}
	return err
}

// finish stores the image and answers the asset to record. A task
// resumed after an earlier try first looks for an asset already stored for
// it.
func (e *executor) finish(ctx context.Context, at *attempt, gen generator.Generator, ref string) (intent.Asset, error) {
	if at.c.Attempt > 1 {
		a, err := e.cfg.Store.AssetForTask(ctx, at.c.ID)
		switch {
		case err == nil:
			if ok, err := e.cfg.Blobs.Exists(ctx, a.SHA256); err == nil && ok {
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
	return e.store(ctx, at, gen, img)
}

// store puts an image's bytes in the blob store and answers its asset.
// An image of another size than the task's params ask is refused (a
// permanent error) when the generator says so, else kept with a note.
func (e *executor) store(ctx context.Context, at *attempt, gen generator.Generator, img generator.Image) (intent.Asset, error) {
	if want, err := generator.RequestSize(at.job.Params, ""); err == nil && want != "" {
		if got := fmt.Sprintf("%dx%d", img.Width, img.Height); got != want {
			if sr, ok := gen.(generator.SizeRefuser); ok && sr.RefusesOtherSizes() {
				e.cfg.Spend.Discarded(gen.ID(), generator.ReasonSize)
				return intent.Asset{}, generator.Permanent(fmt.Errorf("generator %q made an image of %s, not the %s asked; the catalog refuses such images (size_mismatch: refuse)", gen.ID(), got, want))
			}
			at.note = fmt.Sprintf("attempt %d: generator %q made an image of %s, not the %s asked; kept (size_mismatch: warn)", at.c.Attempt, gen.ID(), got, want)
			e.cfg.Logger.Warn("an image of another size than asked", "task", at.c.ID, "generator", gen.ID(), "asked", want, "made", got)
		}
	}
	info, err := e.putWaiting(ctx, at, img.Bytes)
	if err != nil {
		return intent.Asset{}, fmt.Errorf("store image: %w", err)
	}
	id, err := e.cfg.NewID()
	if err != nil {
		return intent.Asset{}, err
	}
	at.stored = true
	e.cfg.Spend.Stored(gen.ID())
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
func (e *executor) putWaiting(ctx context.Context, at *attempt, data []byte) (blob.Info, error) {
	wait := blobRetryMin
	for try := 1; ; try++ {
		info, err := e.cfg.Blobs.Put(ctx, bytes.NewReader(data))
		if !errors.Is(err, blob.ErrUnavailable) {
			if err == nil && try > 1 {
				e.cfg.Logger.Info("asset store back: image stored", "task", at.c.ID, "tries", try)
			}
			return info, err
		}
		if try == 1 {
			e.cfg.Logger.Warn("asset store unavailable: the task waits for it", "task", at.c.ID, "err", err)
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return blob.Info{}, fmt.Errorf("%w (waited %d tries)", err, try)
		case <-e.s.StopContext().Done():
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
func (e *executor) restore(ctx context.Context, at *attempt) (intent.Asset, error) {
	var si storedImage
	if err := json.Unmarshal([]byte(at.ref), &si); err != nil || si.SHA256 == "" {
		return intent.Asset{}, generator.Permanent(fmt.Errorf("the recorded image cannot be read: %q", at.ref))
	}
	ok, err := e.cfg.Blobs.Exists(ctx, si.SHA256)
	if err != nil {
		return intent.Asset{}, err
	}
	if !ok {
		return intent.Asset{}, &generator.LostError{Ref: si.Request, Reason: generator.ReasonLost,
			Err: fmt.Errorf("the stored image %s is gone from the blob store; it is made again", si.SHA256)}
	}
	id, err := e.cfg.NewID()
	if err != nil {
		return intent.Asset{}, err
	}
	at.stored = true
	return intent.Asset{ID: id, SHA256: si.SHA256, ContentType: si.ContentType, Size: si.Size, Width: si.Width, Height: si.Height}, nil
}

// complete records the task's success and its asset under its fence.
//
// A pool stopping still records a result it has: the write is short, and
// handing the lease back would only make another worker redo the task.
func (e *executor) complete(at *attempt, a intent.Asset) error {
	if cause := context.Cause(at.ctx); cause != nil && !errors.Is(cause, leasequeue.ErrStopping) {
		return cause
	}
	res, txErr := e.completions.Do(store.Completion{Lease: at.c.Lease, Asset: a})
	if txErr != nil {
		return fmt.Errorf("complete: %w", txErr)
	}
	if res.Err != nil {
		return res.Err
	}
	e.cfg.Observe(OutcomeSucceeded)
	e.cfg.Logger.Debug("task succeeded", "task", at.c.ID, "batch", at.c.BatchID, "attempt", at.c.Attempt,
		"fence", at.c.Fence, "asset", res.AssetID, "owner", e.cfg.Owner)
	return nil
}

// settle ends a task whose steps returned err: nothing more (success, lost
// lease, canceled by the store), a hand back, or a failure.
func (e *executor) settle(at *attempt, err error) {
	log := e.cfg.Logger.With("task", at.c.ID, "batch", at.c.BatchID, "attempt", at.c.Attempt, "fence", at.c.Fence)
	cause := context.Cause(at.ctx)
	switch {
	case err == nil:
		return
	case errors.Is(err, store.ErrLeaseLost), errors.Is(cause, store.ErrLeaseLost):
		e.cfg.Observe(OutcomeLost)
		log.Info("lease lost: the task is left to its new holder, nothing recorded")
		return
	case errors.Is(err, store.ErrTaskCanceled):
		e.cfg.Observe(OutcomeCanceled)
		log.Info("task canceled with its batch")
		return
	case errors.Is(cause, leasequeue.ErrCanceled):
		e.release(at, log, "batch canceled", true)
		return
	case at.ctx.Err() != nil, errors.Is(err, errHandBack):
		e.release(at, log, "pool stopping", false)
		return
	case e.s.Fault(err):
		// The database (or the disk under it) failed, not the task: hand
		// it back, which does not count against its attempts. The fault
		// is logged once per outage.
		e.release(at, log, "database fault", false)
		return
	case errors.Is(err, errGeneratorDown):
		e.release(at, log, err.Error(), false)
		return
	}
	permanent := generator.IsPermanent(err)
	msg := fmt.Sprintf("attempt %d: %v", at.c.Attempt, err)
	// No sooner than the provider said (429, 503 with Retry-After).
	backoff := leasequeue.RetryWait(e.cfg.RetryBase, e.cfg.RetryMax, at.c.Attempt, rand.Float64(), err)
	ctx, cancel := context.WithTimeout(e.s.Background(), storeTimeout)
	defer cancel()
	e.recordCalls(ctx, at, log)
	state, ferr := e.cfg.Store.FailLease(ctx, store.Failure{
		Lease: at.c.Lease, Error: msg, Permanent: permanent, MaxAttempts: e.cfg.MaxAttempts, Backoff: backoff,
	})
	switch {
	case errors.Is(ferr, store.ErrLeaseLost):
		e.cfg.Observe(OutcomeLost)
		log.Info("lease lost before the failure was recorded", "err", err)
	case e.s.Fault(ferr):
		// Logged once per outage; the lease will expire and the task run
		// again.
	case ferr != nil:
		log.Error("could not record a failure; the lease will expire and the task run again", "err", err, "record_err", ferr)
	case state == intent.StateQueued:
		e.cfg.Observe(OutcomeRetried)
		log.Info("task failed; will retry", "err", err, "backoff", backoff.String())
	case state == intent.StateCanceled:
		e.cfg.Observe(OutcomeCanceled)
		log.Info("task canceled with its batch", "err", err)
	default:
		e.cfg.Observe(OutcomeFailed)
		e.abandoned(at)
		log.Warn("task failed", "err", err, "permanent", permanent)
	}
}

// recordCalls records the paid calls of a try that ends without a step
// record carrying them, with the step the task reached.
func (e *executor) recordCalls(ctx context.Context, at *attempt, log *slog.Logger) {
	n := at.takeCalls()
	if n == 0 && at.unrecorded == nil {
		return
	}
	st := store.StepSave{Lease: at.c.Lease, Step: at.step, ProviderRef: at.ref, Calls: n}
	if at.unrecorded != nil {
		st.Step, st.ProviderRef = at.unrecorded.Step, at.unrecorded.ProviderRef
	}
	errs, err := e.cfg.Store.SaveSteps(ctx, []store.StepSave{st})
	if err == nil {
		err = errs[0] // one step, one answer
	}
	if err != nil {
		log.Info("could not record the step and calls before ending the try", "err", err)
	}
}

// abandoned counts the paid calls of a try whose task ended (failed,
// canceled) without storing an image: results thrown away.
func (e *executor) abandoned(at *attempt) {
	if at.stored {
		return
	}
	for range at.calls.N() {
		e.cfg.Spend.Discarded(at.c.Generator, generator.ReasonAbandoned)
	}
}

// release hands a lease back, recording first the step the task reached
// if it was not recorded yet, so that the next holder resumes there.
func (e *executor) release(at *attempt, log *slog.Logger, why string, canceled bool) {
	ctx, cancel := context.WithTimeout(e.s.Background(), storeTimeout)
	defer cancel()
	e.recordCalls(ctx, at, log)
	errs, err := e.cfg.Store.ReleaseLeases(ctx, []store.Lease{at.c.Lease})
	switch {
	case e.s.Fault(err):
		// Logged once per outage; the lease will expire.
	case err != nil:
		log.Error("could not hand the lease back; it will expire", "why", why, "err", err)
	case errs[0] != nil:
		e.cfg.Observe(OutcomeLost)
		log.Info("lease lost before it was handed back", "why", why)
	case canceled:
		e.cfg.Observe(OutcomeCanceled)
		e.abandoned(at)
		log.Info("task canceled with its batch")
	default:
		e.cfg.Observe(OutcomeReleased)
		log.Debug("lease handed back", "why", why)
	}
}
