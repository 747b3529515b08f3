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
	"errors"
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

	// CreateToken stores the hash of a new token for the actor.
	CreateToken(ctx context.Context, actor, tokenHash string) error
	// ActorForToken returns the actor of a token hash, ENotFound if none.
	ActorForToken(ctx context.Context, tokenHash string) (string, error)
	// CountTokens counts the stored tokens.
	CountTokens(ctx context.Context) (int, error)
	// CreateTokenIfNone stores the token hash for the actor only if the
	// store holds no token at all, atomically: of processes starting at
	// once on an empty database exactly one creates the first token.
	CreateTokenIfNone(ctx context.Context, actor, tokenHash string) (created bool, err error)

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

// TaskStore is what workers need: leases on tasks with fences, the steps of
// a running task, and its end. Every method that takes many items does them
// in one transaction, so a worker can batch its writes.
//
// A claim is a lease: it sets the task's owner and expiry (the database's
// clock: now + ttl) and bumps its fence. Every later write of the task names
// the fence and succeeds only while that lease is live (same fence, state
// running, expiry not passed); otherwise it changes nothing and answers
// ErrLeaseLost. A task whose lease expired is claimable again, under a
// higher fence. The batch's counts move in the same transaction as its
// tasks.
type TaskStore interface {
	// ClaimTasks leases up to p.Limit tasks to p.Owner for p.TTL: queued
	// tasks whose run_after has passed, in fair-share order (round-robin
	// across actors, then across each actor's batches, then plan order
	// within a batch), after running tasks whose lease expired. An expired
	// task of a batch asked to cancel becomes canceled instead, and one that
	// has used p.MaxAttempts attempts becomes failed. Each claim counts an
	// attempt.
	ClaimTasks(ctx context.Context, p ClaimParams) ([]ClaimedTask, error)
	// RenewLeases extends the live leases of p.Owner to p.TTL from now. It
	// answers which were lost (not renewed) and which belong to a batch
	// asked to cancel (renewed: the worker stops them and releases them).
	RenewLeases(ctx context.Context, p RenewParams) (RenewResult, error)
	// SaveSteps records each task's step and provider reference. Per item
	// it answers nil, ErrLeaseLost, or ErrTaskCanceled when the batch was
	// asked to cancel (the task is then canceled, in the same transaction).
	SaveSteps(ctx context.Context, steps []StepSave) ([]error, error)
	// CompleteTasks records each task's asset and marks it succeeded. The
	// asset row is unique per task: when one is already stored for the
	// task, it is kept and named in the result instead of the new one. Per
	// item: ErrLeaseLost, or ErrTaskCanceled (canceled, no asset) when the
	// batch was asked to cancel first.
	CompleteTasks(ctx context.Context, cs []Completion) ([]CompletionResult, error)
	// FailTask ends an attempt that failed. A transient failure puts the
	// task back in the queue, claimable after f.Backoff, unless it has used
	// f.MaxAttempts attempts; a permanent one, or the last attempt, makes it
	// failed. The error text is kept either way. It answers the task's new
	// state (queued, failed, or canceled when the batch was asked to
	// cancel), or ErrLeaseLost.
	FailTask(ctx context.Context, f Failure) (state intent.State, err error)
	// ReleaseTasks hands leases back (a worker stopping): each task is
	// queued again at once with its step and reference kept, or canceled
	// when its batch was asked to cancel. A released attempt still counts
	// in attempts but not against the maximum. Per item: nil or
	// ErrLeaseLost.
	ReleaseTasks(ctx context.Context, leases []Lease) ([]error, error)
	// AssetForTask returns the asset stored for a task, ENotFound if none.
	AssetForTask(ctx context.Context, taskID string) (intent.Asset, error)
	// BlobInUse says whether any asset names the bytes with this SHA-256.
	BlobInUse(ctx context.Context, sha256 string) (bool, error)
}

// Errors of the task methods, matched with errors.Is.
var (
	// ErrLeaseLost: the lease named is no longer live (expired, or the
	// task was claimed again under a higher fence, or it ended). The write
	// changed nothing; the worker must stop the task and record nothing.
	ErrLeaseLost = errors.New("task lease lost")
	// ErrTaskCanceled: the task's batch was asked to cancel; the task is
	// now canceled and the worker must stop it.
	ErrTaskCanceled = errors.New("task canceled")
)

// Lease names one claim of a task: writes succeed only with the fence of
// the live lease.
type Lease struct {
	TaskID string
	Fence  int64
}

// ClaimParams asks for tasks.
type ClaimParams struct {
	// Owner names the claimer (a worker process); renewals must match it.
	Owner string
	// Limit is the most tasks to claim, at least 1.
	Limit int
	// TTL is the lease length, measured by the database's clock.
	TTL time.Duration
	// MaxAttempts fails, instead of claiming, an expired task that has used
	// this many attempts (graceful releases not counted); 0 means no limit.
	MaxAttempts int
	// SkipGenerators names generators whose queued tasks are not claimed
	// (their circuit breaker is open): they stay queued, and other
	// generators' tasks are claimed as if they were not there.
	SkipGenerators []string
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

// RenewParams renews leases of one owner.
type RenewParams struct {
	Owner  string
	Leases []Lease
	TTL    time.Duration
}

// RenewResult is the outcome of a renewal; tasks in neither list were
// renewed until ExpiresAt.
type RenewResult struct {
	// Lost names the tasks whose lease is gone.
	Lost []string
	// Canceled names renewed tasks whose batch was asked to cancel.
	Canceled []string
	// ExpiresAt is the new expiry, by the database's clock.
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

// Completion is a task's result: the asset to record (its id, sha256,
// type, size and dimensions; actor and task come from the task).
type Completion struct {
	Lease
	Asset intent.Asset
}

// CompletionResult is the outcome of one completion.
type CompletionResult struct {
	// AssetID is the asset the task now names (an earlier one when it
	// already had one).
	AssetID string
	// Err is nil, ErrLeaseLost or ErrTaskCanceled.
	Err error
}

// Failure ends an attempt with an error.
type Failure struct {
	Lease
	// Error is kept on the task.
	Error string
	// Permanent fails the task at once.
	Permanent bool
	// MaxAttempts: a task that has used this many attempts (graceful
	// releases not counted) fails instead of being retried; 0 = no limit.
	MaxAttempts int
	// Backoff is how long the task waits before it is claimable again.
	Backoff time.Duration
}

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
