package store

import (
	"context"
	"sync"
	"sync/atomic"

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
	// changes through this store value (this process), and the release
	// to call once the caller stops waiting: see ChangeSignal.
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

// ChangeSignal wakes, within one process, the readers of a batch's
// changes when a task of the batch changed in this process: a live
// stream then reads at once instead of at its next poll. It is a hint
// only: changes that other processes commit are found by polling, and a
// woken reader reads BatchChanges like a polling one, so a wake-up missed
// or spurious costs a delay or a read, never an event.
type ChangeSignal struct {
	waiting atomic.Int64 // waiters in w: Notify's fast path when none
	mu      sync.Mutex
	w       map[string]*changeWaiter
}

type changeWaiter struct {
	ch chan struct{}
	n  int
}

// Wait returns a channel closed by the next Notify of batchID, and the
// release the caller calls once it no longer waits on the channel.
func (s *ChangeSignal) Wait(batchID string) (<-chan struct{}, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		s.w = map[string]*changeWaiter{}
	}
	w := s.w[batchID]
	if w == nil {
		w = &changeWaiter{ch: make(chan struct{})}
		s.w[batchID] = w
	}
	w.n++
	s.waiting.Add(1)
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.w[batchID] != w {
				return // woken: Notify counted it out
			}
			w.n--
			s.waiting.Add(-1)
			if w.n == 0 {
				delete(s.w, batchID)
			}
		})
	}
}

// Notify wakes the waiters of each batch: their channels close, and a
// later Wait gets a new one. A store calls it after a commit that changed
// tasks of these batches.
func (s *ChangeSignal) Notify(batchIDs ...string) {
	if s.waiting.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range batchIDs {
		s.wakeLocked(id)
	}
}

// NotifyMoved is Notify of the batches whose counts d moves: a commit's
// deltas. With nobody waiting it costs one atomic load.
func (s *ChangeSignal) NotifyMoved(d CountDeltas) {
	if s.waiting.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range d {
		s.wakeLocked(id)
	}
}

// wakeLocked wakes the waiters of one batch. s.mu is held.
func (s *ChangeSignal) wakeLocked(id string) {
	if w := s.w[id]; w != nil {
		close(w.ch)
		delete(s.w, id)
		s.waiting.Add(-int64(w.n))
	}
}
