package store

import (
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
