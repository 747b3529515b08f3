package client

import (
	"encoding/json"
	"time"
)

// States of batches, tasks and publications.
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCanceled  = "canceled"
)

// Ended says whether a batch or publication in this state has ended.
func Ended(state string) bool {
	return state == StateSucceeded || state == StateFailed || state == StateCanceled
}

// GenerationRequest is the body of POST /v1/generations. Zero fields are
// left out and take the server's defaults.
type GenerationRequest struct {
	// RequestID names the intent; when empty, CreateGeneration makes one.
	RequestID  string     `json:"request_id,omitempty"`
	Prompt     string     `json:"prompt"`
	Sets       []FrameSet `json:"sets"`
	Providers  []string   `json:"providers,omitempty"`
	Candidates int        `json:"candidates,omitempty"`
	Subjects   []string   `json:"subjects,omitempty"`
	Seed       *int64     `json:"seed,omitempty"`
	// Params is a JSON object passed to the generators.
	Params json.RawMessage `json:"params,omitempty"`
}

// FrameSet is one collection of frames of a generation.
type FrameSet struct {
	Collection string   `json:"collection"`
	Frames     []string `json:"frames"`
}

// Counts are a batch's tasks (or a publication's items) by state.
type Counts struct {
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Canceled  int `json:"canceled"`
}

// Ended is how many have ended, whichever way.
func (c Counts) Ended() int { return c.Succeeded + c.Failed + c.Canceled }

// Batch is the record a generation creates.
type Batch struct {
	ID        string    `json:"id"`
	RequestID string    `json:"request_id"`
	State     string    `json:"state"`
	Prompt    string    `json:"prompt"`
	TaskCount int       `json:"task_count"`
	Counts    Counts    `json:"counts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Task is one image of a batch.
type Task struct {
	ID         string    `json:"id"`
	BatchID    string    `json:"batch_id"`
	Collection string    `json:"collection"`
	Frame      string    `json:"frame"`
	Generator  string    `json:"generator"`
	Candidate  int       `json:"candidate"`
	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	AssetID    *string   `json:"asset_id"`
	Error      *string   `json:"error"`
	UpdatedAt  time.Time `json:"updated_at"`
	// GenerationCalls counts the paid generation calls the task made.
	GenerationCalls int `json:"generation_calls"`
	// History notes what happened to the task beyond its state (a lost
	// prompt submitted again, an expired image URL made again).
	History []string `json:"history"`
}

// Asset is a stored image.
type Asset struct {
	ID          string    `json:"id"`
	TaskID      *string   `json:"task_id"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	Size        int64     `json:"size"`
	Width       int       `json:"width"`
	Height      int       `json:"height"`
	CreatedAt   time.Time `json:"created_at"`
}

// PublicationRequest is the body of POST /v1/publications.
type PublicationRequest struct {
	// RequestID names the intent; when empty, CreatePublication makes one.
	RequestID string   `json:"request_id,omitempty"`
	BatchID   string   `json:"batch_id"`
	AssetIDs  []string `json:"asset_ids"`
	Channel   string   `json:"channel,omitempty"`
}

// Publication is the record a publication intent creates.
type Publication struct {
	ID        string    `json:"id"`
	RequestID string    `json:"request_id"`
	BatchID   string    `json:"batch_id"`
	Channel   string    `json:"channel"`
	State     string    `json:"state"`
	ItemCount int       `json:"item_count"`
	Counts    Counts    `json:"counts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Page is one page of a list; NextCursor is "" on the last page.
type Page[T any] struct {
	Items      []T
	NextCursor string
}

// ListOptions page a list: Limit 1..500 (0: the server's 100) and the
// Cursor of the previous page.
type ListOptions struct {
	Limit  int
	Cursor string
}

// TaskListOptions page a batch's tasks, optionally in one State.
type TaskListOptions struct {
	ListOptions
	State string
}

// Created is the answer to an intent: the record, the request id it is
// bound to, and whether the server already had it (a replay: 200 instead
// of 201).
type Created[T any] struct {
	Record    T
	RequestID string
	Replayed  bool
}
