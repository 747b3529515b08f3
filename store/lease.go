package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"studio/intent"
)

// LeaseStore is the lease queue: rows that workers claim under leases with
// fences, of two kinds (tasks, publication items) kept in their own
// tables. One API and, in each engine, one implementation serve both;
// the kind supplies its claim order and its payload (ClaimTasks,
// ClaimItems), and its parent (a batch, a publication) whose counts move
// in the same transaction as its rows.
//
// A claim is a lease: it sets the row's owner and expiry (the database's
// clock: now + ttl), bumps its fence and counts an attempt. It takes back
// running rows whose lease expired first (oldest expiry first; a row that
// has used p.MaxAttempts attempts becomes failed instead, and a task of a
// batch asked to cancel becomes canceled), then queued rows whose
// run_after has passed, in the kind's order. Every later write names the
// lease (kind, id, fence) and succeeds only while it is live (same fence,
// state running, expiry not passed); otherwise it changes nothing and
// answers ErrLeaseLost. A row whose lease expired is claimable again,
// under a higher fence.
//
// The methods below take leases of either kind, mixed, and do them in
// one transaction.
type LeaseStore interface {
	// RenewLeases extends the live leases of p.Owner to p.TTL from now. It
	// answers which were lost (not renewed) and which belong to a parent
	// asked to cancel (renewed: the worker stops them and releases them).
	RenewLeases(ctx context.Context, p RenewParams) (RenewResult, error)
	// CompleteLeases ends each lease with success. A task's completion
	// records its asset (Completion.Asset); the asset row is unique per
	// task: when one is already stored for the task, it is kept and named
	// in the result instead of the new one. Per item: nil, ErrLeaseLost,
	// or ErrTaskCanceled (canceled, no asset) when the batch was asked to
	// cancel first.
	CompleteLeases(ctx context.Context, cs []Completion) ([]CompletionResult, error)
	// FailLease ends an attempt that failed. A transient failure puts the
	// row back in the queue, claimable after f.Backoff, unless it has used
	// f.MaxAttempts attempts; a permanent one, or the last attempt, makes
	// it failed. The error text is kept either way. It answers the row's
	// new state (queued, failed, or canceled when its parent was asked to
	// cancel), or ErrLeaseLost.
	FailLease(ctx context.Context, f Failure) (state intent.State, err error)
	// ReleaseLeases hands leases back (a worker stopping): each row is
	// queued again at once (a task with its step and reference kept), or
	// canceled when its parent was asked to cancel. A released attempt
	// still counts in attempts but not against the maximum. Per item: nil
	// or ErrLeaseLost.
	ReleaseLeases(ctx context.Context, leases []Lease) ([]error, error)
}

// Kind names a lease queue: which table's rows a lease is on.
type Kind string

// The kinds of lease.
const (
	// KindTask: a batch's task (TaskStore).
	KindTask Kind = "task"
	// KindItem: a publication's item (PublicationStore).
	KindItem Kind = "item"
)

// Errors of the lease methods, matched with errors.Is.
var (
	// ErrLeaseLost: the lease named is no longer live (expired, or the
	// row was claimed again under a higher fence, or it ended). The write
	// changed nothing; the worker must stop and record nothing.
	ErrLeaseLost = errors.New("lease lost")
	// ErrTaskCanceled: the task's batch was asked to cancel; the task is
	// now canceled and the worker must stop it.
	ErrTaskCanceled = errors.New("task canceled")
)

// Lease names one claim of a row: writes succeed only with the fence of
// the live lease.
type Lease struct {
	Kind  Kind
	ID    string
	Fence int64
}

// ClaimParams asks for rows of one kind.
type ClaimParams struct {
	// Owner names the claimer (a worker process); renewals must match it.
	Owner string
	// Limit is the most rows to claim, at least 1.
	Limit int
	// TTL is the lease length, measured by the database's clock.
	TTL time.Duration
	// MaxAttempts fails, instead of claiming, an expired row that has used
	// this many attempts (graceful releases not counted); 0 means no limit.
	MaxAttempts int
	// SkipGenerators (tasks only) names generators whose queued tasks are
	// not claimed (their circuit breaker is open): they stay queued, and
	// other generators' tasks are claimed as if they were not there.
	SkipGenerators []string
}

// RenewParams renews leases of one owner.
type RenewParams struct {
	Owner  string
	Leases []Lease
	TTL    time.Duration
}

// RenewResult is the outcome of a renewal; leases in neither list were
// renewed until ExpiresAt.
type RenewResult struct {
	// Lost names (by id) the leases that are gone.
	Lost []string
	// Canceled names renewed leases whose parent was asked to cancel.
	Canceled []string
	// ExpiresAt is the new expiry, by the database's clock.
	ExpiresAt time.Time
}

// Completion ends a lease with success; for a task, with its asset (its
// id, sha256, type, size and dimensions; actor and task come from the
// task). An item's completion has no asset.
type Completion struct {
	Lease
	Asset intent.Asset
}

// CompletionResult is the outcome of one completion.
type CompletionResult struct {
	// AssetID is the asset the task now names (an earlier one when it
	// already had one); empty for an item.
	AssetID string
	// Err is nil, ErrLeaseLost or ErrTaskCanceled.
	Err error
}

// Failure ends an attempt with an error.
type Failure struct {
	Lease
	// Error is kept on the row.
	Error string
	// Permanent fails the row at once.
	Permanent bool
	// MaxAttempts: a row that has used this many attempts (graceful
	// releases not counted) fails instead of being retried; 0 = no limit.
	MaxAttempts int
	// Backoff is how long the row waits before it is claimable again.
	Backoff time.Duration
}

// What follows is the engine-independent part of the lease methods: every
// backend checks their parameters, decides about expired leases and
// answers its claims the same way.

// Check refuses a claim without an owner, a limit of at least 1 or a ttl.
func (p ClaimParams) Check() error {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return errors.New("need an owner, a limit >= 1 and a ttl > 0")
	}
	return nil
}

// Check refuses a renewal without an owner or a ttl.
func (p RenewParams) Check() error {
	if p.Owner == "" || p.TTL <= 0 {
		return errors.New("need an owner and a ttl > 0")
	}
	return nil
}

// CheckCompletions refuses the completion of a task whose asset has no id,
// sha256 or content type.
func CheckCompletions(cs []Completion) error {
	for _, c := range cs {
		if c.Kind == KindTask && (c.Asset.ID == "" || c.Asset.SHA256 == "" || c.Asset.ContentType == "") {
			return fmt.Errorf("task %s: the asset needs an id, a sha256 and a content type", c.ID)
		}
	}
	return nil
}

// ExpiredEnd says what a claim does with a running row whose lease
// expired, which made attempts tries (used of them count against
// maxAttempts): it cancels it when its parent was asked to cancel
// (StateCanceled), fails it with the error answered when it has no
// attempts left (StateFailed), or else claims it again (StateRunning).
func ExpiredEnd(cancelRequested bool, attempts, used, maxAttempts int) (intent.State, string) {
	switch {
	case cancelRequested:
		return intent.StateCanceled, ""
	case OutOfAttempts(used, maxAttempts):
		return intent.StateFailed, fmt.Sprintf("attempt %d: the lease expired (the worker stopped or crashed); no attempts left", attempts)
	default:
		return intent.StateRunning, ""
	}
}

// Claimed is a row an engine's claim took under a fresh lease, before its
// kind's payload is read.
type Claimed struct {
	ID, Parent string
	Fence      int64
	// Attempt is the 1-based number of this try.
	Attempt   int
	ExpiresAt time.Time
}

// ClaimedIDs is the ids of cs, for the engine's read of their payload.
func ClaimedIDs(cs []Claimed) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

// ClaimedTasks answers claimed tasks in the order of cs, with their
// leases; the engine fills in the rest of each (its row and its batch's
// spec) through byID.
func ClaimedTasks(cs []Claimed) (out []ClaimedTask, byID map[string]*ClaimedTask) {
	out = make([]ClaimedTask, len(cs))
	byID = make(map[string]*ClaimedTask, len(cs))
	for i, c := range cs {
		out[i] = ClaimedTask{Lease: Lease{Kind: KindTask, ID: c.ID, Fence: c.Fence},
			BatchID: c.Parent, Attempt: c.Attempt, ExpiresAt: c.ExpiresAt}
		byID[c.ID] = &out[i]
	}
	return out, byID
}

// ClaimedItems answers claimed items in the order of cs, each with its
// row among items (as the engine read them).
func ClaimedItems(cs []Claimed, items []PublicationItem) []ClaimedItem {
	byID := make(map[string]PublicationItem, len(items))
	for _, it := range items {
		byID[it.ID] = it
	}
	out := make([]ClaimedItem, len(cs))
	for i, c := range cs {
		out[i] = ClaimedItem{
			Lease:           Lease{Kind: KindItem, ID: c.ID, Fence: c.Fence},
			PublicationItem: byID[c.ID],
			Attempt:         c.Attempt,
			ExpiresAt:       c.ExpiresAt,
		}
	}
	return out
}
