package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"studio/intent"
)

// TokenStore keeps API tokens: only their SHA-256 is stored, never the
// secret. A token's public id is the first 16 hex digits of its hash
// (TokenID): enough to name it in a list or a revocation, nothing to sign
// in with.
type TokenStore interface {
	// CreateToken stores the hash of a new token for the actor, with no
	// label and no expiry.
	CreateToken(ctx context.Context, actor, tokenHash string) error
	// IssueToken stores a new token with its label and expiry.
	IssueToken(ctx context.Context, t NewToken) (Token, error)
	// UseToken returns the live token (not revoked, not expired) with this
	// hash, ENotFound for any other, and records its use to the hour (a
	// write at most once an hour per token).
	UseToken(ctx context.Context, tokenHash string) (Token, error)
	// ActorForToken is UseToken's actor.
	ActorForToken(ctx context.Context, tokenHash string) (string, error)
	// ListTokens lists the tokens of the actor (every actor's when empty),
	// oldest first, revoked and expired ones included.
	ListTokens(ctx context.Context, actor string) ([]Token, error)
	// RevokeToken revokes the token with this id at once; revoking a
	// revoked token changes nothing. ENotFound if there is none.
	RevokeToken(ctx context.Context, id string) (Token, error)
	// CountTokens counts the stored tokens.
	CountTokens(ctx context.Context) (int, error)
	// CreateTokenIfNone stores the token hash for the actor only if the
	// store holds no token at all, atomically: of processes starting at
	// once on an empty database exactly one creates the first token.
	CreateTokenIfNone(ctx context.Context, actor, tokenHash string) (created bool, err error)
}

// NewToken is a token to store.
type NewToken struct {
	Actor string
	// Hash is the hex SHA-256 of the secret.
	Hash  string
	Label string
	// ExpiresAt is when it stops working; zero for never.
	ExpiresAt time.Time
}

// Token is what is kept of a token, its secret excepted.
type Token struct {
	ID        string
	Actor     string
	Label     string
	CreatedAt time.Time
	// ExpiresAt, RevokedAt and LastUsedAt are zero when unset. LastUsedAt
	// is to the hour.
	ExpiresAt  time.Time
	RevokedAt  time.Time
	LastUsedAt time.Time
}

// TokenIDLen is the length of a token id: a prefix of the hex hash.
const TokenIDLen = 16

// TokenID is the public id of the token with this hash.
func TokenID(hash string) string {
	if len(hash) < TokenIDLen {
		return hash
	}
	return hash[:TokenIDLen]
}

// CheckTokenID refuses what cannot be a token id (ENotFound, as an unknown
// one).
func CheckTokenID(id string) error {
	if len(id) != TokenIDLen {
		return &intent.Error{Code: intent.ENotFound, Message: "No such token."}
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return &intent.Error{Code: intent.ENotFound, Message: "No such token."}
		}
	}
	return nil
}

// TokenIDRange is the range of hashes [lo, hi) whose id is id: a range
// read on the primary key.
func TokenIDRange(id string) (lo, hi string) { return id, id + "g" }

// Live says whether the token works at now.
func (t Token) Live(now time.Time) bool {
	return t.RevokedAt.IsZero() && (t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt))
}

// Hour is t truncated to the hour: what a token's last use records.
func Hour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// UseTokenAt is the rule of a token's use, t as an engine read it, at
// now: a token that is not live is not found; a live one has its use
// recorded to the hour (record writes it, asked only when the hour moved
// on). The record is advisory: a fault of the database (FaultOf) does not
// turn a live token away, and the next use records it.
func UseTokenAt(t Token, now time.Time, record func(hour time.Time) error) (Token, error) {
	if !t.Live(now) {
		return Token{}, &intent.Error{Code: intent.ENotFound, Message: "Not found."}
	}
	if hour := Hour(now); t.LastUsedAt.Before(hour) {
		if err := record(hour); err != nil {
			if FaultOf(err) == nil {
				return Token{}, fmt.Errorf("record token use: %w", err)
			}
		} else {
			t.LastUsedAt = hour
		}
	}
	return t, nil
}

// Wrap says what failed (what) on an engine's error, but answers an error
// of the domain (an intent code other than internal: not found,
// conflict) as it is.
func Wrap(what string, err error) error {
	if intent.ErrorCode(err) != intent.EInternal {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RetentionStore deletes what has ended. A binding lives as long as its
// batch: once the batch is deleted, its request id is free, and the same
// id makes a new batch.
type RetentionStore interface {
	// DeleteBatch deletes one of the actor's ended batches with its tasks,
	// their changes and assets, its publications (ended) and the bindings
	// of all of them, in one transaction. ENotFound when the batch is not
	// the actor's (or gone); ErrBatchRunning when a task or a publication
	// of it has not ended. The asset bytes stay for the blob sweep, which
	// removes those no asset names any more.
	DeleteBatch(ctx context.Context, actor, id string) (Deleted, error)
	// EndedBatches lists up to limit ended batches created before
	// `before` whose last change is before it too, oldest first, after
	// the batch id `after` (exclusive) when set: the candidates of a prune.
	EndedBatches(ctx context.Context, before time.Time, after string, limit int) ([]BatchRef, error)
	// Usage counts what is kept.
	Usage(ctx context.Context) (Usage, error)
	// CacheEpoch is a number that grows with every write that can make a
	// remembered value stale (a token revoked, a batch deleted): Cache
	// reads it to know when to forget.
	CacheEpoch(ctx context.Context) (int64, error)
}

// ErrBatchRunning: the batch (or one of its publications) has not ended;
// cancel it first.
var ErrBatchRunning = &intent.Error{Code: intent.EConflict, Message: "The batch is still running: cancel it first, then delete it."}

// BatchRef names a batch.
type BatchRef struct {
	ID, Actor string
	CreatedAt time.Time
	Tasks     int
}

// Deleted counts what a deletion removed.
type Deleted struct {
	Batches, Tasks, Assets int
	// AssetBytes is the size of the deleted assets (their bytes go when no
	// other asset names them).
	AssetBytes int64
}

// Add adds d2 to d.
func (d *Deleted) Add(d2 Deleted) {
	d.Batches += d2.Batches
	d.Tasks += d2.Tasks
	d.Assets += d2.Assets
	d.AssetBytes += d2.AssetBytes
}

// Usage counts the rows and bytes kept.
type Usage struct {
	Batches, Tasks, Assets int64
	AssetBytes             int64
}

// PruneParams steers a prune.
type PruneParams struct {
	// Before: batches that ended (and were created) before it go.
	Before time.Time
	// DryRun counts what would go and deletes nothing.
	DryRun bool
	// Page is how many candidates are read at once (100 by default); each
	// batch is deleted in its own transaction.
	Page int
	// Deleted, when set, is called after each batch deleted (metrics).
	Deleted func(Deleted)
}

// Prune deletes every ended batch older than p.Before, one transaction per
// batch, so that the write lock is never held for more than one batch's
// rows. A batch that moved (or started to be published) between its
// listing and its deletion is skipped.
func Prune(ctx context.Context, s RetentionStore, p PruneParams) (Deleted, error) {
	if p.Page <= 0 {
		p.Page = 100
	}
	var total Deleted
	after := ""
	for {
		refs, err := s.EndedBatches(ctx, p.Before, after, p.Page)
		if err != nil {
			return total, fmt.Errorf("prune: %w", err)
		}
		for _, r := range refs {
			after = r.ID
			if p.DryRun {
				total.Add(Deleted{Batches: 1, Tasks: r.Tasks})
				continue
			}
			d, err := s.DeleteBatch(ctx, r.Actor, r.ID)
			switch {
			case errors.Is(err, ErrBatchRunning) || intent.ErrorCode(err) == intent.ENotFound:
				continue // moved since the listing, or deleted by another
			case err != nil:
				return total, fmt.Errorf("prune batch %s: %w", r.ID, err)
			}
			total.Add(d)
			if p.Deleted != nil {
				p.Deleted(d)
			}
		}
		if len(refs) < p.Page {
			return total, nil
		}
	}
}
