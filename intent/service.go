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
	Observe func(operation, outcome string)
}

// Outcomes passed to Service.Observe.
const (
	OutcomeCreated  = "created"
	OutcomeReplayed = "replayed"
	OutcomeConflict = "conflict"
	OutcomeInvalid  = "invalid"
	OutcomeError    = "error"
)

// GenerationResult is the answer to a generation intent.
type GenerationResult struct {
	Batch Batch
	// Replayed is true when the request id was already bound to this input:
	// nothing was planned or written, and Batch is the record made then.
	Replayed bool
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
		return res, fmt.Errorf("fingerprint: %w", err)
	}
	var b Binding
	var created bool
	err = s.Locker.Hold(ctx, lockKey(actor, requestID), func(ctx context.Context) error {
		// The early check: a replay or a conflict needs no plan.
		found, err := s.Store.LookupIntent(ctx, actor, requestID)
		switch {
		case err == nil:
			b, err = checkBinding(found, OpGeneration, fp)
			return err
		case ErrorCode(err) != ENotFound:
			return fmt.Errorf("look up request id: %w", err)
		}
		planned, err := s.Planner.PlanGeneration(ctx, actor, &in)
		if err != nil {
			return err
		}
		spec, err := marshalSpec(in)
		if err != nil {
			return err
		}
		now := s.now()
		nb := &NewBatch{Prompt: in.Prompt, Spec: spec, CreatedAt: now, Tasks: make([]NewTask, len(planned))}
		if nb.ID, err = newID(); err != nil {
			return err
		}
		for i, p := range planned {
			id, err := newID()
			if err != nil {
				return err
			}
			nb.Tasks[i] = NewTask{ID: id, Collection: p.Collection, Frame: p.Frame, Generator: p.Generator, Candidate: p.Candidate}
		}
		b, created, err = s.Store.CreateIntent(ctx, NewIntent{
			Binding: Binding{Actor: actor, RequestID: requestID, Operation: OpGeneration, Fingerprint: fp, ResourceID: nb.ID, CreatedAt: now},
			Batch:   nb,
		})
		if err != nil {
			return err
		}
		// The in-transaction check may have found a binding the early read
		// missed (another process committed in between).
		b, err = checkBinding(b, OpGeneration, fp)
		return err
	})
	if err != nil {
		return res, err
	}
	batch, err := s.Store.GetBatch(ctx, actor, b.ResourceID)
	if err != nil {
		return res, fmt.Errorf("read batch: %w", err)
	}
	return GenerationResult{Batch: batch, Replayed: !created}, nil
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
