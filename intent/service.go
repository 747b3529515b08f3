package intent

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Service creates intents: check -> plan -> commit.
//
// Planning may ask other services, so it runs before and outside any
// transaction, under a lock keyed by actor and request id: concurrent tries
// of one id plan once, tries of different ids plan in parallel. A plain read
// of the binding first answers replays and conflicts without planning; the
// store checks the binding again inside the commit transaction, and that
// check is the guarantee.
type Service struct {
	Store   IntentStore
	Planner Planner
	Locker  Locker
	// Publications reads what CreatePublication needs; without it the
	// service creates generations only.
	Publications PublicationStore
	// Channels are the publication channels carried out here; a
	// publication to another is refused. Empty means the gallery only.
	Channels []string
	// Now is the clock for record times; time.Now by default.
	Now func() time.Time
	// Observe, when set, is told the outcome of every intent (for metrics
	// and logs): created, replayed, conflict, invalid or error.
	Observe func(operation string, outcome Outcome)
}

// Outcome is how an intent (or an upload) ended, as Observe is told it.
type Outcome string

// Outcomes passed to Service.Observe.
const (
	OutcomeCreated  Outcome = "created"
	OutcomeReplayed Outcome = "replayed"
	OutcomeConflict Outcome = "conflict"
	OutcomeInvalid  Outcome = "invalid"
	OutcomeError    Outcome = "error"
)

// GenerationResult is the answer to a generation intent.
type GenerationResult struct {
	Batch Batch
	// Replayed is true when the request id was already bound to this input:
	// nothing was planned or written, and Batch is the record made then.
	Replayed bool
	// Fingerprint is the input's: ReplayGeneration takes it to answer a
	// retry of the same input without the input.
	Fingerprint string
}

// CreateGeneration runs a validated, normalized generation input under the
// actor's request id.
func (s *Service) CreateGeneration(ctx context.Context, actor, requestID string, in GenerationInput) (res GenerationResult, err error) {
	defer func() { s.observe(OpGeneration, res.Replayed, err) }()
	if err := ValidateRequestID(requestID); err != nil {
		return res, err
	}
	fp, err := Fingerprint(actor, OpGeneration, in)
	if err != nil {
		return res, err
	}
	b, created, err := s.bind(ctx, actor, requestID, OpGeneration, fp, func(ctx context.Context, now time.Time) (NewIntent, error) {
		planned, err := s.Planner.PlanGeneration(ctx, actor, &in)
		if err != nil {
			return NewIntent{}, err
		}
		spec, err := marshalSpec(in)
		if err != nil {
			return NewIntent{}, err
		}
		nb := &NewBatch{Prompt: in.Prompt, Spec: spec, CreatedAt: now, Tasks: make([]NewTask, len(planned))}
		if nb.ID, err = newID(); err != nil {
			return NewIntent{}, err
		}
		for i, p := range planned {
			id, err := newID()
			if err != nil {
				return NewIntent{}, err
			}
			nb.Tasks[i] = NewTask{ID: id, Collection: p.Collection, Frame: p.Frame, Generator: p.Generator, Candidate: p.Candidate}
		}
		return NewIntent{Batch: nb}, nil
	})
	if err != nil {
		return res, err
	}
	batch, err := s.Store.GetBatch(ctx, actor, b.ResourceID)
	if err != nil {
		return res, fmt.Errorf("read batch: %w", err)
	}
	return GenerationResult{Batch: batch, Replayed: !created, Fingerprint: fp}, nil
}

// ReplayGeneration answers a retry of an input whose fingerprint the
// caller kept from an earlier answer (GenerationResult.Fingerprint) for
// the same actor, without the input: when requestID is bound to a
// generation with that fingerprint, the batch, replayed, as
// CreateGeneration would answer it. Otherwise (the id is not bound, or
// bound to other input) ok is false and nothing is observed: the caller
// goes on to CreateGeneration with the input, which answers those.
func (s *Service) ReplayGeneration(ctx context.Context, actor, requestID, fp string) (res GenerationResult, ok bool, err error) {
	b, ok := s.replay(ctx, actor, requestID, OpGeneration, fp)
	if !ok {
		return res, false, nil
	}
	defer func() { s.observe(OpGeneration, true, err) }()
	batch, err := s.Store.GetBatch(ctx, actor, b.ResourceID)
	if err != nil {
		return res, true, fmt.Errorf("read batch: %w", err)
	}
	return GenerationResult{Batch: batch, Replayed: true, Fingerprint: fp}, true, nil
}

// replay is the plain read of ReplayGeneration and ReplayPublication: the
// binding of requestID when it is bound to op with fingerprint fp. Any
// other answer, a failed read included, sends the caller the whole way,
// which reads again and answers it.
func (s *Service) replay(ctx context.Context, actor, requestID, op, fp string) (Binding, bool) {
	if fp == "" || ValidateRequestID(requestID) != nil {
		return Binding{}, false
	}
	b, err := s.Store.LookupIntent(ctx, actor, requestID)
	if err != nil || b.Operation != op || b.Fingerprint != fp {
		return Binding{}, false
	}
	return b, true
}

// bind answers a request id: a replay or a conflict when it is bound, else
// it plans (build) and commits under the keyed lock.
//
// A binding never changes once committed, so a plain read that finds one
// answers at once, without the lock: replays cost no lock writes, even with
// a database lock store. A miss takes the lock and reads again, so that
// concurrent tries of one id plan once; the store's check inside the commit
// transaction is the guarantee, and what it finds is answered the same way.
func (s *Service) bind(ctx context.Context, actor, requestID, op, fp string, build func(ctx context.Context, now time.Time) (NewIntent, error)) (b Binding, created bool, err error) {
	lookup := func(ctx context.Context) (Binding, bool, error) {
		found, err := s.Store.LookupIntent(ctx, actor, requestID)
		switch {
		case err == nil:
			b, err := checkBinding(found, op, fp)
			return b, true, err
		case ErrorCode(err) != ENotFound:
			return Binding{}, false, fmt.Errorf("look up request id: %w", err)
		}
		return Binding{}, false, nil
	}
	if b, found, err := lookup(ctx); found || err != nil {
		return b, false, err
	}
	err = s.Locker.Hold(ctx, lockKey(actor, requestID), func(ctx context.Context) error {
		var found bool
		if b, found, err = lookup(ctx); found || err != nil {
			return err
		}
		now := s.now()
		in, err := build(ctx, now)
		if err != nil {
			return err
		}
		in.Binding = Binding{Actor: actor, RequestID: requestID, Operation: op, Fingerprint: fp, CreatedAt: now}
		switch {
		case in.Batch != nil:
			in.Binding.ResourceID = in.Batch.ID
		case in.Publication != nil:
			in.Binding.ResourceID = in.Publication.ID
		}
		if b, created, err = s.Store.CreateIntent(ctx, in); err != nil {
			return err
		}
		// The in-transaction check may have found a binding the early
		// reads missed (another process committed in between).
		b, err = checkBinding(b, op, fp)
		return err
	})
	return b, created, err
}

// checkBinding answers a found binding: the same operation and fingerprint
// is a replay, anything else a conflict.
func checkBinding(b Binding, op, fp string) (Binding, error) {
	if b.Operation != op || b.Fingerprint != fp {
		return Binding{}, &Error{Code: EConflict, Message: ConflictMessage}
	}
	return b, nil
}

// lockKey is the planning lock's key: actor and request id, kept apart by a
// separator neither may contain (request ids have no control characters).
func lockKey(actor, requestID string) string {
	return "intent\x00" + actor + "\x00" + requestID
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) observe(op string, replayed bool, err error) {
	if s.Observe == nil {
		return
	}
	switch code := ErrorCode(err); {
	case err == nil && replayed:
		s.Observe(op, OutcomeReplayed)
	case err == nil:
		s.Observe(op, OutcomeCreated)
	case code == EConflict:
		s.Observe(op, OutcomeConflict)
	case code == EInvalid || code == EUnprocessable:
		s.Observe(op, OutcomeInvalid)
	case errors.Is(err, context.Canceled):
	default:
		s.Observe(op, OutcomeError)
	}
}

// marshalSpec encodes the normalized input the workers render from. It runs
// before the commit so that a value that cannot be encoded fails before any
// lock on the database is taken.
func marshalSpec(in GenerationInput) ([]byte, error) {
	b, err := CanonicalJSON(in)
	if err != nil {
		return nil, fmt.Errorf("encode batch spec: %w", err)
	}
	return b, nil
}
