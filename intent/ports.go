package intent

import (
	"context"
	"time"
)

// IntentStore is what the Service needs of persistence. store.Store includes
// it; the domain defines it so that it imports nothing of the app.
type IntentStore interface {
	// LookupIntent is the plain read of a binding: ENotFound when the actor
	// never used the request id.
	LookupIntent(ctx context.Context, actor, requestID string) (Binding, error)
	// CreateIntent commits the binding and the whole record tree in one
	// transaction, after checking the binding again inside it. When the id is
	// already bound with the same fingerprint it returns that binding and
	// created=false and writes nothing; with another fingerprint it returns
	// an EConflict error and writes nothing.
	CreateIntent(ctx context.Context, in NewIntent) (b Binding, created bool, err error)
	// GetBatch reads one of the actor's batches (ENotFound otherwise).
	GetBatch(ctx context.Context, actor, id string) (Batch, error)
}

// NewIntent is everything one intent commits: the binding and exactly one of
// Batch or Publication, all ids and bodies made before the transaction.
type NewIntent struct {
	Binding     Binding
	Batch       *NewBatch
	Publication *NewPublication
}

// NewBatch is a planned batch and its tasks.
type NewBatch struct {
	ID     string
	Prompt string
	// Spec is the canonical JSON of the normalized GenerationInput; workers
	// render from it.
	Spec      []byte
	Tasks     []NewTask
	CreatedAt time.Time
}

// NewTask is one planned task.
type NewTask struct {
	ID         string
	Collection string
	Frame      string
	Generator  string
	Candidate  int
}

// NewPublication is a planned publication and its items.
type NewPublication struct {
	ID        string
	BatchID   string
	Channel   string
	Items     []NewPublicationItem
	CreatedAt time.Time
}

// NewPublicationItem is one asset to publish.
type NewPublicationItem struct {
	ID      string
	AssetID string
}

// PlannedTask is one task of a plan, before it has an id.
type PlannedTask struct {
	Collection string
	Frame      string
	Generator  string
	Candidate  int
}

// Planner turns a normalized input into tasks. It may ask other services
// (catalog, visibility), so the Service calls it outside any transaction.
// It refuses with EUnprocessable what cannot be planned.
type Planner interface {
	PlanGeneration(ctx context.Context, actor string, in *GenerationInput) ([]PlannedTask, error)
}

// Locker serializes work on a key: Hold runs fn while no other holder of the
// key (in this process, or in every process sharing the lock store) runs.
type Locker interface {
	Hold(ctx context.Context, key string, fn func(ctx context.Context) error) error
}
