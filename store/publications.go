package store

import (
	"context"
	"time"

	"studio/intent"
)

// UploadStore keeps uploads and their client keys.
type UploadStore interface {
	intent.UploadStore
}

// PublicationStore keeps publications and what workers need to carry out
// their items: the same leases with fences as tasks. A publication and its
// items are written by CreateIntent (NewIntent.Publication), in one
// transaction with the binding of the request id.
//
// A claim leases items for p.TTL by the database's clock and bumps each
// one's fence; every later write names the fence and changes nothing once
// the lease is gone (ErrLeaseLost). The publication's counts move in the
// same transaction as its items.
type PublicationStore interface {
	intent.PublicationStore

	// ClaimItems leases up to p.Limit items to p.Owner for p.TTL: running
	// items whose lease expired first (an expired item that has used
	// p.MaxAttempts attempts becomes failed instead), then queued items
	// whose run_after has passed, oldest first. Each claim counts an
	// attempt.
	ClaimItems(ctx context.Context, p ClaimParams) ([]ClaimedItem, error)
	// RenewItemLeases extends p.Owner's live leases to p.TTL from now and
	// answers which were lost.
	RenewItemLeases(ctx context.Context, p ItemRenewParams) (ItemRenewResult, error)
	// CompleteItems marks items succeeded. Per item: nil or ErrLeaseLost.
	CompleteItems(ctx context.Context, leases []ItemLease) ([]error, error)
	// FailItem ends an attempt that failed: queued again after f.Backoff,
	// or failed when permanent or out of attempts; the error is kept. It
	// answers the new state, or ErrLeaseLost.
	FailItem(ctx context.Context, f ItemFailure) (state intent.State, err error)
	// ReleaseItems hands leases back (a worker stopping): queued again at
	// once; the attempt counts in attempts but not against the maximum.
	// Per item: nil or ErrLeaseLost.
	ReleaseItems(ctx context.Context, leases []ItemLease) ([]error, error)
	// PublicationItems lists every item of a publication in asset order,
	// with what a channel writes of it (the gallery's manifest). It is a
	// worker's read: not scoped to an actor.
	PublicationItems(ctx context.Context, publicationID string) ([]PublicationItem, error)
}

// ItemLease names one claim of a publication item.
type ItemLease struct {
	ItemID string
	Fence  int64
}

// PublicationItem is one item of a publication with its asset and, for an
// asset a task made, what the task was.
type PublicationItem struct {
	ID            string
	PublicationID string
	Actor         string
	Channel       string
	State         intent.State
	Attempts      int
	Error         string
	Asset         intent.Asset
	// Prompt, Collection, Frame, Generator and Candidate describe the
	// task that made the asset.
	Prompt     string
	Collection string
	Frame      string
	Generator  string
	Candidate  int
}

// ClaimedItem is an item under a fresh lease.
type ClaimedItem struct {
	ItemLease
	PublicationItem
	// Attempt is the 1-based number of this try.
	Attempt int
	// ExpiresAt is the lease's expiry by the database's clock.
	ExpiresAt time.Time
}

// ItemRenewParams renews item leases of one owner.
type ItemRenewParams struct {
	Owner  string
	Leases []ItemLease
	TTL    time.Duration
}

// ItemRenewResult is the outcome of a renewal.
type ItemRenewResult struct {
	// Lost names the items whose lease is gone.
	Lost []string
	// ExpiresAt is the new expiry of the others.
	ExpiresAt time.Time
}

// ItemFailure ends an item's attempt with an error.
type ItemFailure struct {
	ItemLease
	Error string
	// Permanent fails the item at once.
	Permanent bool
	// MaxAttempts: an item that has used this many attempts (releases not
	// counted) fails instead of being retried; 0 = no limit.
	MaxAttempts int
	// Backoff is how long the item waits before it is claimable again.
	Backoff time.Duration
}
