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
// their items: the lease queue (LeaseStore, whose kind KindItem are
// publication items). A publication and its items are written by
// CreateIntent (NewIntent.Publication), in one transaction with the
// binding of the request id. An item's parent is its publication, whose
// counts move in the same transaction as its items; it cannot be canceled.
type PublicationStore interface {
	intent.PublicationStore
	LeaseStore

	// ClaimItems leases up to p.Limit items (see LeaseStore): queued
	// items whose run_after has passed, oldest first, after running items
	// whose lease expired.
	ClaimItems(ctx context.Context, p ClaimParams) ([]ClaimedItem, error)
	// PublicationItems lists every item of a publication in asset order,
	// with what a channel writes of it (the gallery's manifest). It is a
	// worker's read: not scoped to an actor.
	PublicationItems(ctx context.Context, publicationID string) ([]PublicationItem, error)
	// PublicationItem answers the item of a publication that names an
	// asset (ENotFound if none): what the gallery serves for one file. It
	// is not scoped to an actor either.
	PublicationItem(ctx context.Context, publicationID, assetID string) (PublicationItem, error)
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

// ClaimedItem is an item under a fresh lease. Its id is Lease.ID (and
// PublicationItem.ID: the same).
type ClaimedItem struct {
	Lease
	PublicationItem
	// Attempt is the 1-based number of this try.
	Attempt int
	// ExpiresAt is the lease's expiry by the database's clock.
	ExpiresAt time.Time
}
