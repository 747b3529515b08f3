package intent

import (
	"time"
)

// Operations: the kinds of intent. The operation is part of the fingerprint,
// so one request id used for two operations is a conflict.
const (
	OpGeneration  = "generation"
	OpPublication = "publication"
)

// State is the state of a task, a batch, a publication or a publication
// item. Its values are the ones the API answers and the database stores.
type State string

// Task and batch states (publications and their items use the same).
const (
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCanceled  State = "canceled"
)

// Binding ties an actor's request id to the fingerprint of the input it was
// first used with and to the record that input created.
type Binding struct {
	Actor       string
	RequestID   string
	Operation   string
	Fingerprint string
	// ResourceID is the id of the record the intent created (a batch or a
	// publication).
	ResourceID string
	CreatedAt  time.Time
}

// Counts counts a batch's (or a publication's) children by state.
type Counts struct {
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Canceled  int `json:"canceled"`
}

// Total is the number of children counted.
func (c Counts) Total() int {
	return c.Queued + c.Running + c.Succeeded + c.Failed + c.Canceled
}

// Ended is the number of children in a final state.
func (c Counts) Ended() int { return c.Succeeded + c.Failed + c.Canceled }

// State derives the parent's state from its children's counts. started says
// whether any child was ever claimed (a task waiting for a retry is queued
// again, but its batch has started).
func (c Counts) State(started bool) State {
	switch {
	case c.Total() > 0 && c.Ended() == c.Total():
		if c.Canceled > 0 {
			return StateCanceled
		}
		if c.Failed > 0 {
			return StateFailed
		}
		return StateSucceeded
	case started || c.Running > 0 || c.Ended() > 0:
		return StateRunning
	default:
		return StateQueued
	}
}

// Batch is the record a generation intent creates.
type Batch struct {
	ID        string    `json:"id"`
	Actor     string    `json:"-"`
	RequestID string    `json:"request_id"`
	State     State     `json:"state"`
	Prompt    string    `json:"prompt"`
	TaskCount int       `json:"task_count"`
	Counts    Counts    `json:"counts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Task is one image to make: a batch's child.
type Task struct {
	ID         string    `json:"id"`
	BatchID    string    `json:"batch_id"`
	Collection string    `json:"collection"`
	Frame      string    `json:"frame"`
	Generator  string    `json:"generator"`
	Candidate  int       `json:"candidate"`
	State      State     `json:"state"`
	Attempts   int       `json:"attempts"`
	AssetID    *string   `json:"asset_id"`
	Error      *string   `json:"error"`
	UpdatedAt  time.Time `json:"updated_at"`
	// GenerationCalls counts the paid generation calls the task made of
	// its generator, over all its attempts.
	GenerationCalls int `json:"generation_calls"`
	// History notes what happened to the task beyond its state: a prompt
	// the provider lost and that was submitted again, an image URL that
	// expired, an image of another size than asked. Oldest first; never
	// null.
	History []string `json:"history"`
}

// Asset is a stored image: made by a task, or uploaded by a client.
type Asset struct {
	ID          string    `json:"id"`
	Actor       string    `json:"-"`
	TaskID      *string   `json:"task_id"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	Width       int       `json:"width"`
	Height      int       `json:"height"`
	CreatedAt   time.Time `json:"created_at"`
}

// Publication is the record a publication intent creates; its items (one per
// asset) are carried out by workers.
type Publication struct {
	ID        string    `json:"id"`
	Actor     string    `json:"-"`
	RequestID string    `json:"request_id"`
	BatchID   string    `json:"batch_id"`
	Channel   string    `json:"channel"`
	State     State     `json:"state"`
	ItemCount int       `json:"item_count"`
	Counts    Counts    `json:"counts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}
