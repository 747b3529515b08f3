package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/store"
)

// DeleteBatch deletes one of the actor's ended batches and all that hangs
// from it, in one transaction. The batch row is locked first (FOR
// UPDATE): a publication being created on it waits (its foreign key
// locks the row to share) and then finds it gone, or commits first and
// makes this deletion answer ErrBatchRunning.
func (s *Store) DeleteBatch(ctx context.Context, actor, id string) (store.Deleted, error) {
	var d store.Deleted
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var requestID string
		if err := tx.QueryRow(ctx, `SELECT request_id FROM batches WHERE id = $1 AND actor = $2 FOR UPDATE`, id, actor).
			Scan(&requestID); err != nil {
			return interpret(err)
		}
		b, err := getBatch(ctx, tx, actor, id)
		if err != nil {
			return err
		}
		var publishing bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM publications WHERE batch_id = $1 AND queued + running > 0)`, id).
			Scan(&publishing); err != nil {
			return err
		}
		if b.Counts.Queued+b.Counts.Running > 0 || publishing {
			return store.ErrBatchRunning
		}
		if err := tx.QueryRow(ctx, `SELECT count(*), COALESCE(sum(size), 0) FROM assets
			WHERE task_id IN (SELECT id FROM tasks WHERE batch_id = $1)`, id).Scan(&d.Assets, &d.AssetBytes); err != nil {
			return err
		}
		d.Batches = 1
		for _, q := range deleteBatchSQL {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM tasks WHERE batch_id = $1`, id)
		if err != nil {
			return err
		}
		d.Tasks = int(tag.RowsAffected())
		if _, err := tx.Exec(ctx, `DELETE FROM batch_counts WHERE batch_id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM batches WHERE id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM intents WHERE actor = $1 AND request_id = $2`, actor, requestID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE cache_epoch SET epoch = epoch + 1 WHERE id = 1`)
		return err
	})
	if err != nil {
		return store.Deleted{}, store.Wrap("delete batch", err)
	}
	s.wakes.hub.Publish(store.DeletedWakes(id)...)
	return d, nil
}

// deleteBatchSQL delete what hangs from a batch ($1) before its tasks: its
// publications' items, bindings and rows, then its tasks' assets.
var deleteBatchSQL = []string{
	`DELETE FROM publication_items WHERE publication_id IN (SELECT id FROM publications WHERE batch_id = $1)`,
	`DELETE FROM intents WHERE (actor, request_id) IN (SELECT actor, request_id FROM publications WHERE batch_id = $1)`,
	`DELETE FROM publications WHERE batch_id = $1`,
	`DELETE FROM assets WHERE task_id IN (SELECT id FROM tasks WHERE batch_id = $1)`,
}

// EndedBatches lists prune candidates through batches_by_created; the
// counts are the batch row's plus its shards'.
func (s *Store) EndedBatches(ctx context.Context, before time.Time, after string, limit int) ([]store.BatchRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT b.id, b.actor, b.created_at, b.task_count FROM batches b
		CROSS JOIN LATERAL (`+shardSums+`) c
		WHERE b.created_at < $1 AND (b.created_at, b.id) > (COALESCE((SELECT created_at FROM batches WHERE id = $2), '-infinity'), $2)
		AND b.queued + c.queued + b.running + c.running = 0 AND GREATEST(b.updated_at, c.updated_at) < $1
		AND NOT EXISTS (SELECT 1 FROM publications p WHERE p.batch_id = b.id AND p.queued + p.running > 0)
		ORDER BY b.created_at, b.id LIMIT $3`, stamp(before), after, limit)
	if err != nil {
		return nil, fmt.Errorf("ended batches: %w", err)
	}
	var out []store.BatchRef
	var r store.BatchRef
	if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Actor, &r.CreatedAt, &r.Tasks}, func() error {
		r.CreatedAt = r.CreatedAt.UTC()
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ended batches: %w", err)
	}
	return out, nil
}

// Usage sums what is kept.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM batches), (SELECT COALESCE(sum(task_count), 0) FROM batches),
		(SELECT count(*) FROM assets), (SELECT COALESCE(sum(size), 0) FROM assets)`).
		Scan(&u.Batches, &u.Tasks, &u.Assets, &u.AssetBytes); err != nil {
		return store.Usage{}, fmt.Errorf("usage: %w", err)
	}
	return u, nil
}

// CacheEpoch reads the number every invalidating write bumps.
func (s *Store) CacheEpoch(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM cache_epoch WHERE id = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("cache epoch: %w", err)
	}
	return n, nil
}

// IssueToken stores a token with its label and expiry.
func (s *Store) IssueToken(ctx context.Context, t store.NewToken) (store.Token, error) {
	now := stamp(s.now())
	var exp *time.Time
	out := store.Token{ID: store.TokenID(t.Hash), Actor: t.Actor, Label: t.Label, CreatedAt: now}
	if !t.ExpiresAt.IsZero() {
		out.ExpiresAt = stamp(t.ExpiresAt)
		exp = &out.ExpiresAt
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tokens (hash, actor, label, expires_at, created_at) VALUES ($1, $2, $3, $4, $5)`,
		t.Hash, t.Actor, t.Label, exp, now); err != nil {
		return store.Token{}, fmt.Errorf("issue token: %w", interpret(err))
	}
	return out, nil
}

// CreateToken stores a token hash for an actor, no label, no expiry.
func (s *Store) CreateToken(ctx context.Context, actor, tokenHash string) error {
	if _, err := s.IssueToken(ctx, store.NewToken{Actor: actor, Hash: tokenHash}); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	return nil
}

// ActorForToken is UseToken's actor.
func (s *Store) ActorForToken(ctx context.Context, tokenHash string) (string, error) {
	t, err := s.UseToken(ctx, tokenHash)
	return t.Actor, err
}

// UseToken reads a live token and records its use to the hour (a write
// only when the hour moved on).
func (s *Store) UseToken(ctx context.Context, tokenHash string) (store.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, tokenHash))
	if err != nil {
		return store.Token{}, interpret(err)
	}
	return store.UseTokenAt(t, s.now(), func(hour time.Time) error {
		_, err := s.pool.Exec(ctx, `UPDATE tokens SET last_used_at = $1 WHERE hash = $2
			AND (last_used_at IS NULL OR last_used_at < $1)`, hour, tokenHash)
		return err
	})
}

const tokenColumns = `hash, actor, label, created_at, expires_at, revoked_at, last_used_at`

func scanToken(r pgx.Row) (store.Token, error) {
	var t store.Token
	var hash string
	var exp, rev, used *time.Time
	if err := r.Scan(&hash, &t.Actor, &t.Label, &t.CreatedAt, &exp, &rev, &used); err != nil {
		return store.Token{}, err
	}
	t.ID = store.TokenID(hash)
	t.CreatedAt = t.CreatedAt.UTC()
	for _, f := range []struct {
		v  *time.Time
		to *time.Time
	}{{exp, &t.ExpiresAt}, {rev, &t.RevokedAt}, {used, &t.LastUsedAt}} {
		if f.v != nil {
			*f.to = f.v.UTC()
		}
	}
	return t, nil
}

// ListTokens lists tokens oldest first.
func (s *Store) ListTokens(ctx context.Context, actor string) ([]store.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE $1 = '' OR actor = $1 ORDER BY created_at, hash`, actor)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken revokes the token with this id and bumps the cache epoch,
// in one transaction.
func (s *Store) RevokeToken(ctx context.Context, id string) (store.Token, error) {
	if err := store.CheckTokenID(id); err != nil {
		return store.Token{}, err
	}
	lo, hi := store.TokenIDRange(id)
	var t store.Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tokens SET revoked_at = $1 WHERE hash >= $2 AND hash < $3 AND revoked_at IS NULL`,
			stamp(s.now()), lo, hi); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE cache_epoch SET epoch = epoch + 1 WHERE id = 1`); err != nil {
			return err
		}
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash >= $1 AND hash < $2`, lo, hi))
		return interpret(err)
	})
	if err != nil {
		return store.Token{}, store.Wrap("revoke token", err)
	}
	return t, nil
}
