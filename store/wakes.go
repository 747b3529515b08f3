package store

import (
	"time"

	"studio/intent"
	"studio/wake"
)

// The wake-ups a commit publishes (package wake), the same on every
// engine. An engine publishes them on its hub once the commit is done (and
// on PostgreSQL also sends them, from the committing transaction, to the
// other processes).

// Waker is a store that publishes its commits' wake-ups on a hub: the
// workers, the publisher and the events streams of the process subscribe
// to it.
type Waker interface {
	// Wake returns the store's hub. It hears this process's commits
	// through this store and, where the engine can, other processes'.
	Wake() *wake.Hub
}

// TaskWakes are the wake-ups of a commit of the task methods that moved
// the counts d: each batch in d changed (its events streams read), and a
// batch whose tasks went back to the queue has claimable tasks: at
// retryAt when set (a retry's backoff), else now.
func TaskWakes(d CountDeltas, retryAt time.Time) []wake.Event {
	return appendWakes(nil, d, wake.Changed, wake.Tasks, retryAt)
}

// ItemWakes are the wake-ups of a commit that moved publications' counts
// d: a publication whose items went back to the queue has claimable items,
// at retryAt when set, else now.
func ItemWakes(d CountDeltas, retryAt time.Time) []wake.Event {
	return appendWakes(nil, d, 0, wake.Items, retryAt)
}

func appendWakes(out []wake.Event, d CountDeltas, changed, queued wake.Kind, retryAt time.Time) []wake.Event {
	for id, c := range d {
		if changed != 0 {
			out = append(out, wake.Event{Kind: changed, ID: id})
		}
		if c.Queued > 0 {
			out = append(out, wake.Event{Kind: queued, ID: id, At: retryAt})
		}
	}
	return out
}

// CreatedWakes are the wake-ups of a committed intent: the batch's tasks
// or the publication's items are new work.
func CreatedWakes(in intent.NewIntent) []wake.Event {
	switch {
	case in.Batch != nil && len(in.Batch.Tasks) > 0:
		return []wake.Event{{Kind: wake.Tasks, ID: in.Batch.ID}}
	case in.Publication != nil:
		return []wake.Event{{Kind: wake.Items, ID: in.Publication.ID}}
	}
	return nil
}

// CancelWakes are the wake-ups of a batch asked to cancel: its running
// tasks stop, its events streams read.
func CancelWakes(batchID string) []wake.Event {
	return []wake.Event{{Kind: wake.Cancel | wake.Changed, ID: batchID}}
}

// DeletedWakes are the wake-ups of a batch deleted: its events streams
// read (and find it gone).
func DeletedWakes(batchID string) []wake.Event {
	return []wake.Event{{Kind: wake.Changed, ID: batchID}}
}
