// Package store is the persistence contract of studio: what the application
// needs of a database, whatever the engine. store/sqlite and store/postgres
// implement it, and store/storetest is the one conformance suite both pass.
//
// Errors are the domain's (*intent.Error): ENotFound for a missing record
// (or another actor's), EConflict for a broken uniqueness rule. Driver
// errors never leave an implementation untranslated.
package store

import (
	"context"
	"strings"
	"time"

	"studio/intent"
)

// Store is everything studio keeps.
type Store interface {
	intent.IntentStore
	TaskStore
	UploadStore
	PublicationStore
	ChangeStore
	TokenStore
	RetentionStore

	// ListBatches returns the actor's batches newest first, at most
	// p.Limit, starting after the batch id p.After (exclusive) when set.
	ListBatches(ctx context.Context, p ListParams) ([]intent.Batch, error)
	// ListTasks returns one of the actor's batch's tasks in plan order, at
	// most p.Limit, after the task id p.After when set, only in p.State when
	// set. ENotFound when the batch is not the actor's.
	ListTasks(ctx context.Context, batchID string, p ListParams) ([]intent.Task, error)
	// CancelBatch cancels the batch's queued tasks at once and marks the
	// running ones to stop at their next step; it answers the batch after.
	// On a batch that has ended it changes nothing.
	CancelBatch(ctx context.Context, actor, id string) (intent.Batch, error)

	// GetAsset reads one of the actor's assets.
	GetAsset(ctx context.Context, actor, id string) (intent.Asset, error)

	// CursorKey returns the secret key that signs list cursors: made (32
	// random bytes) on the first call on a database and kept in it, so that
	// every store on one database, in any process, answers the same key.
	CursorKey(ctx context.Context) ([]byte, error)

	// Ping checks that the database answers and its migrations are applied.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// ListParams pages a list.
type ListParams struct {
	Actor string
	Limit int
	// After is the id of the last record of the previous page.
	After string
	// State filters tasks by state when not empty.
	State intent.State
}

// TaskStore is what workers need of tasks: the lease queue (LeaseStore,
// whose kind KindTask are tasks), the steps of a running task, and its
// asset. Every method that takes many items does them in one transaction,
// so a worker can batch its writes.
//
// A task's lease follows LeaseStore's rules; its parent is its batch,
// whose counts move in the same transaction as its tasks, and which can be
// asked to cancel: then an expired task becomes canceled instead of being
// claimed again, and every later write of a running one (step,
// completion, failure, release) cancels it and answers ErrTaskCanceled,
// or, for a renewal, names it in RenewResult.Canceled.
type TaskStore interface {
	LeaseStore
	// ClaimTasks leases up to p.Limit tasks (see LeaseStore): queued
	// tasks whose run_after has passed in fair-share order (round-robin
	// across actors, then across each actor's batches, then plan order
	// within a batch), after running tasks whose lease expired.
	ClaimTasks(ctx context.Context, p ClaimParams) ([]ClaimedTask, error)
	// SaveSteps records each task's step and provider reference. Per item
	// it answers nil, ErrLeaseLost, or ErrTaskCanceled when the batch was
	// asked to cancel (the task is then canceled, in the same transaction).
	SaveSteps(ctx context.Context, steps []StepSave) ([]error, error)
	// AssetForTask returns the asset stored for a task, ENotFound if none.
	AssetForTask(ctx context.Context, taskID string) (intent.Asset, error)
	// BlobInUse says whether any asset names the bytes with this SHA-256.
	BlobInUse(ctx context.Context, sha256 string) (bool, error)
}

// ClaimedTask is a task under a fresh lease, with what its generator needs.
type ClaimedTask struct {
	Lease
	BatchID    string
	Actor      string
	Collection string
	Frame      string
	Generator  string
	Candidate  int
	// Attempt is the 1-based number of this try (the task's attempts).
	Attempt int
	// Step and ProviderRef are what an earlier try recorded: a worker
	// resumes from them.
	Step        string
	ProviderRef string
	// Spec is the batch's canonical JSON of its intent.GenerationInput;
	// tasks of one batch share one slice, which must not be changed.
	Spec []byte
	// ExpiresAt is the lease's expiry by the database's clock.
	ExpiresAt time.Time
}

// StepSave records that a task reached a step.
type StepSave struct {
	Lease
	Step        string
	ProviderRef string
	// Calls is how many paid generation calls were made since the task's
	// last record of them: added to its generation_calls.
	Calls int
	// Note, when not empty, is appended to the task's history (a line
	// such as "attempt 2: the provider lost prompt X; submitted again").
	Note string
}

// MaxHistory bounds a task's history: the oldest lines past it are
// dropped.
const MaxHistory = 20

// HistoryLine is a note as a task's history column holds it: one line
// (newlines in it become spaces) ended by a newline; "" for no note.
func HistoryLine(note string) string {
	note = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(note, "\r", " "), "\n", " "))
	if note == "" {
		return ""
	}
	return note + "\n"
}

// HistoryLines reads a task's history column: its last MaxHistory lines,
// oldest first, never nil.
func HistoryLines(col string) []string {
	lines := strings.Split(strings.TrimSuffix(col, "\n"), "\n")
	if col == "" {
		return []string{}
	}
	if len(lines) > MaxHistory {
		lines = lines[len(lines)-MaxHistory:]
	}
	return lines
}
