package store

import (
	"context"

	"studio/intent"
)

// ChangeStore is what live batch events and the publications list read.
type ChangeStore interface {
	// BatchChanges reads one of the actor's batches and the tasks whose
	// state, attempts, asset or error changed after position p.Since, in
	// one snapshot (ENotFound when the batch is not the actor's).
	//
	// Positions are the engine's, opaque to callers but ordered: a change
	// committed after a read is always at a position above the one that
	// read answered, so reading from the answered position misses nothing
	// and repeats nothing. A task that changed several times since is read
	// once, as it stands.
	BatchChanges(ctx context.Context, p ChangesParams) (Changes, error)
	// ListPublications returns the actor's publications newest first, at
	// most p.Limit, after the publication id p.After when set.
	ListPublications(ctx context.Context, p ListParams) ([]intent.Publication, error)
	// WatchBatch returns a channel closed when a task of the batch
	// changes (a commit through this store value, or one of another
	// process that the store's hub hears of), and the release to call
	// once the caller stops waiting: see wake.Hub.Watch. A hint only: the
	// caller still polls.
	WatchBatch(batchID string) (<-chan struct{}, func())
}

// ChangesParams asks for a batch's changes.
type ChangesParams struct {
	Actor   string
	BatchID string
	// Since is the position after which changes are read; a negative one
	// reads no task, only the batch and the current position.
	Since int64
	// Until, when above Since, reads only changes up to it (a range that
	// an earlier read answered, read again); the answer's Position is then
	// Until.
	Until int64
}

// Changes is the answer of BatchChanges.
type Changes struct {
	Batch intent.Batch
	// Tasks changed in (Since, Position], in id (plan) order.
	Tasks []intent.Task
	// Position is where the next read starts.
	Position int64
	// Pending says that some of the batch's changes are committed but not
	// yet at a position a reader may hand out (PostgreSQL: their
	// transaction id is above the oldest one still running); a later read
	// will return them. The batch may already count them.
	Pending bool
}
