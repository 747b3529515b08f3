package store

import (
	"context"
	"errors"
	"slices"

	"studio/intent"
)

// The rules of a child's life (a task's or a publication item's) that do
// not depend on the engine. Every backend applies them the same way.

// OutOfAttempts says whether a child that has used `used` attempts may not
// be tried again: maxAttempts <= 0 means no limit.
func OutOfAttempts(used, maxAttempts int) bool {
	return maxAttempts > 0 && used >= maxAttempts
}

// StateAfterFailure is where a child goes when its try failed: canceled
// when its parent was asked to cancel, failed when the error is permanent
// or the attempts are used up, queued again (after a backoff) otherwise.
func StateAfterFailure(canceling, permanent bool, used, maxAttempts int) intent.State {
	switch {
	case canceling:
		return intent.StateCanceled
	case permanent || OutOfAttempts(used, maxAttempts):
		return intent.StateFailed
	default:
		return intent.StateQueued
	}
}

// CountDelta is how one parent's counts (a batch's or a publication's) move
// within one transaction; the engine adds it to the stored counts before
// commit, in the same transaction as the children's moves.
type CountDelta struct {
	Queued, Running, Succeeded, Failed, Canceled int
	// Started is set when a child was claimed.
	Started bool
}

// Move books one child moving from one state to another.
func (d *CountDelta) Move(from, to intent.State) {
	*d.of(from)--
	*d.of(to)++
	if from == intent.StateQueued && to == intent.StateRunning {
		d.Started = true
	}
}

// of is the count of one state.
func (d *CountDelta) of(s intent.State) *int {
	switch s {
	case intent.StateQueued:
		return &d.Queued
	case intent.StateRunning:
		return &d.Running
	case intent.StateSucceeded:
		return &d.Succeeded
	case intent.StateFailed:
		return &d.Failed
	case intent.StateCanceled:
		return &d.Canceled
	}
	panic("store: no count for state " + string(s))
}

// CountDeltas are the deltas of several parents, by parent id.
type CountDeltas map[string]*CountDelta

// Of returns the delta of one parent, made on first use.
func (d CountDeltas) Of(id string) *CountDelta {
	c := d[id]
	if c == nil {
		c = &CountDelta{}
		d[id] = c
	}
	return c
}

// IDs returns the parents' ids in order: engines write (and so lock) the
// parents' rows in this one order, so concurrent transactions cannot
// deadlock on them.
func (d CountDeltas) IDs() []string {
	ids := make([]string, 0, len(d))
	for id := range d {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// IsItemError tells a per-item answer of a fenced write (ErrLeaseLost,
// ErrTaskCanceled) from a failure of the whole transaction.
func IsItemError(err error) bool {
	return errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrTaskCanceled)
}

// CancelRequested books what an engine's cancel of a running task found:
// found says whether its statement matched a live lease whose batch was
// asked to cancel (the task, in the batch parent, is now canceled). It
// answers ErrTaskCanceled when it did, ErrLeaseLost when nothing matched.
func CancelRequested(d CountDeltas, parent string, found bool) error {
	if !found {
		return ErrLeaseLost
	}
	d.Of(parent).Move(intent.StateRunning, intent.StateCanceled)
	return ErrTaskCanceled
}

// StepWriter is what SaveStepsIn needs of an engine's transaction: its
// SQL, one statement each.
type StepWriter interface {
	// SaveStep writes one step under its fence while the lease is live and
	// the batch not asked to cancel; it says whether a row matched.
	SaveStep(ctx context.Context, st StepSave) (bool, error)
	// CancelIfRequested cancels a live task whose batch was asked to
	// cancel (answering CancelRequested's errors).
	CancelIfRequested(ctx context.Context, l Lease) error
}

// SaveStepsIn is SaveSteps within an engine's transaction, in the order
// given (indexes into steps): a step that matches no live lease cancels
// its task when the batch was asked to cancel, or answers ErrLeaseLost.
// The transaction fails on any other error.
func SaveStepsIn(ctx context.Context, w StepWriter, steps []StepSave, order []int) ([]error, error) {
	out := make([]error, len(steps))
	for _, i := range order {
		saved, err := w.SaveStep(ctx, steps[i])
		if err != nil {
			return nil, err
		}
		if !saved {
			if out[i] = w.CancelIfRequested(ctx, steps[i].Lease); !IsItemError(out[i]) {
				return nil, out[i]
			}
		}
	}
	return out, nil
}

// InOrder is the order 0..n-1, for SaveStepsIn.
func InOrder(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}
