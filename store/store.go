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

	"studio/intent"
)

// Store is everything studio keeps.
type Store interface {
	intent.IntentStore

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
	State string
}
