package sqlite

import (
	"context"
	"fmt"
	"time"

	"studio/store"
)

// DeleteBatch deletes one of the actor's ended batches and all that hangs
// from it, in one IMMEDIATE transaction.
func (s *Store) DeleteBatch(ctx context.Context, actor, id string) (store.Deleted, error) {
	var d store.Deleted
	err := s.write(ctx, func(tx *tx) error {
		var requestID string
		var open, publishing int64
		if err := tx.queryRow(`SELECT request_id, queued + running,
			(SELECT COUNT(*) FROM publications p WHERE p.batch_id = b.id AND p.queued + p.running > 0)
			FROM batches b WHERE id = ? AND actor = ?`, id, actor).Scan(&requestID, &open, &publishing); err != nil {
			return interpret(err)
		}
		if open != 0 || publishing > 0 {
			return store.ErrBatchRunning
		}
		var n, bytes int64
		if err := tx.queryRow(`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM assets
			WHERE task_id IN (SELECT id FROM tasks WHERE batch_id = ?)`, id).Scan(&n, &bytes); err != nil {
			return err
		}
		d = store.Deleted{Batches: 1, Assets: int(n), AssetBytes: bytes}
		for _, q := range deleteBatchSQL {
			if _, err := tx.exec(q, id); err != nil {
				return err
			}
		}
		tasks, err := tx.exec(`DELETE FROM tasks WHERE batch_id = ?`, id)
		if err != nil {
			return err
		}
		d.Tasks = int(tasks)
		if _, err := tx.exec(`DELETE FROM batches WHERE id = ?`, id); err != nil {
			return err
		}
		if _, err := tx.exec(`DELETE FROM intents WHERE actor = ? AND request_id = ?`, actor, requestID); err != nil {
			return err
		}
		_, err = tx.exec(`UPDATE cache_epoch SET epoch = epoch + 1 WHERE id = 1`)
		return err
	})
	if err != nil {
		return store.Deleted{}, store.Wrap("delete batch", err)
	}
	s.wake.Publish(store.DeletedWakes(id)...)
	return d, nil
}

// deleteBatchSQL delete what hangs from a batch (the one parameter) before
// its tasks: its publications' items, bindings and rows, then its tasks'
// assets.
var deleteBatchSQL = []string{
	`DELETE FROM publication_items WHERE publication_id IN (SELECT id FROM publications WHERE batch_id = ?1)`,
	`DELETE FROM intents WHERE (actor, request_id) IN (SELECT actor, request_id FROM publications WHERE batch_id = ?1)`,
	`DELETE FROM publications WHERE batch_id = ?1`,
	`DELETE FROM assets WHERE task_id IN (SELECT id FROM tasks WHERE batch_id = ?1)`,
}

// EndedBatches lists prune candidates through batches_by_created.
func (s *Store) EndedBatches(ctx context.Context, before time.Time, after string, limit int) ([]store.BatchRef, error) {
	var out []store.BatchRef
	err := s.read(ctx, func(t *tx) error {
		rows, err := t.query(`SELECT id, actor, created_at, task_count FROM batches
			WHERE created_at < ?1 AND (created_at, id) > (COALESCE((SELECT created_at FROM batches WHERE id = ?2), -1), ?2)
			AND queued + running = 0 AND updated_at < ?1
			AND NOT EXISTS (SELECT 1 FROM publications p WHERE p.batch_id = batches.id AND p.queued + p.running > 0)
			ORDER BY created_at, id LIMIT ?3`, ms(before), after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.BatchRef
			var created int64
			if err := rows.Scan(&r.ID, &r.Actor, &created, &r.Tasks); err != nil {
				return err
			}
			r.CreatedAt = fromMS(created)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ended batches: %w", err)
	}
	return out, nil
}

// Usage sums what is kept: batches and tasks from the batch rows, assets
// and their bytes from the asset rows.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	err := s.read(ctx, func(t *tx) error {
		if err := t.queryRow(`SELECT COUNT(*), COALESCE(SUM(task_count), 0) FROM batches`).Scan(&u.Batches, &u.Tasks); err != nil {
			return err
		}
		return t.queryRow(`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM assets`).Scan(&u.Assets, &u.AssetBytes)
	})
	if err != nil {
		return store.Usage{}, fmt.Errorf("usage: %w", err)
	}
	return u, nil
}

// CacheEpoch reads the number every invalidating write bumps.
func (s *Store) CacheEpoch(ctx context.Context) (int64, error) {
	var n int64
	if err := s.read(ctx, func(t *tx) error {
		return t.queryRow(`SELECT epoch FROM cache_epoch WHERE id = 1`).Scan(&n)
	}); err != nil {
		return 0, fmt.Errorf("cache epoch: %w", err)
	}
	return n, nil
}

// IssueToken stores a token with its label and expiry.
func (s *Store) IssueToken(ctx context.Context, t store.NewToken) (store.Token, error) {
	now := s.now()
	var exp any
	if !t.ExpiresAt.IsZero() {
		exp = ms(t.ExpiresAt)
	}
	if err := s.write(ctx, func(tx *tx) error {
		_, err := tx.exec(`INSERT INTO tokens (hash, actor, label, expires_at, created_at) VALUES (?, ?, ?, ?, ?)`,
			t.Hash, t.Actor, t.Label, exp, ms(now))
		return err
	}); err != nil {
		return store.Token{}, fmt.Errorf("issue token: %w", interpret(err))
	}
	out := store.Token{ID: store.TokenID(t.Hash), Actor: t.Actor, Label: t.Label, CreatedAt: fromMS(ms(now))}
	if !t.ExpiresAt.IsZero() {
		out.ExpiresAt = fromMS(ms(t.ExpiresAt))
	}
	return out, nil
}

// CreateToken stores a token hash for an actor, no label, no expiry.
func (s *Store) CreateToken(ctx context.Context, actor, tokenHash string) error {
	_, err := s.IssueToken(ctx, store.NewToken{Actor: actor, Hash: tokenHash})
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	return nil
}

// ActorForToken is UseToken's actor.
func (s *Store) ActorForToken(ctx context.Context, tokenHash string) (string, error) {
	t, err := s.UseToken(ctx, tokenHash)
	return t.Actor, err
}

// UseToken reads a live token and records its use to the hour: one point
// read, and a write only when the hour moved on.
func (s *Store) UseToken(ctx context.Context, tokenHash string) (store.Token, error) {
	var t store.Token
	if err := s.read(ctx, func(tx *tx) (err error) {
		t, err = scanToken(tx.queryRow(`SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, tokenHash))
		return err
	}); err != nil {
		return store.Token{}, interpret(err)
	}
	return store.UseTokenAt(t, s.now(), func(hour time.Time) error {
		// A database too busy for the write (another writer holds the
		// lock) is a fault: the token still works.
		return s.write(ctx, func(tx *tx) error {
			_, err := tx.exec(`UPDATE tokens SET last_used_at = ?1 WHERE hash = ?2 AND COALESCE(last_used_at, 0) < ?1`, ms(hour), tokenHash)
			return err
		})
	})
}

// ListTokens lists tokens oldest first.
func (s *Store) ListTokens(ctx context.Context, actor string) ([]store.Token, error) {
	var out []store.Token
	err := s.read(ctx, func(t *tx) error {
		rows, err := t.query(`SELECT `+tokenColumns+` FROM tokens WHERE ?1 = '' OR actor = ?1 ORDER BY created_at, hash`, actor)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			tok, err := scanToken(rows)
			if err != nil {
				return err
			}
			out = append(out, tok)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

const tokenColumns = `hash, actor, label, created_at, COALESCE(expires_at, 0), COALESCE(revoked_at, 0), COALESCE(last_used_at, 0)`

func scanToken(r scanner) (store.Token, error) {
	var t store.Token
	var hash string
	var created, exp, rev, used int64
	if err := r.Scan(&hash, &t.Actor, &t.Label, &created, &exp, &rev, &used); err != nil {
		return store.Token{}, err
	}
	t.ID = store.TokenID(hash)
	t.CreatedAt = fromMS(created)
	for _, f := range []struct {
		v  int64
		to *time.Time
	}{{exp, &t.ExpiresAt}, {rev, &t.RevokedAt}, {used, &t.LastUsedAt}} {
		if f.v != 0 {
			*f.to = fromMS(f.v)
		}
	}
	return t, nil
}

// RevokeToken revokes the token with this id and bumps the cache epoch,
// in one transaction.
func (s *Store) RevokeToken(ctx context.Context, id string) (store.Token, error) {
	if err := store.CheckTokenID(id); err != nil {
		return store.Token{}, err
	}
	lo, hi := store.TokenIDRange(id)
	var tok store.Token
	err := s.write(ctx, func(t *tx) error {
		if _, err := t.exec(`UPDATE tokens SET revoked_at = ? WHERE hash >= ? AND hash < ? AND revoked_at IS NULL`,
			ms(s.now()), lo, hi); err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE cache_epoch SET epoch = epoch + 1 WHERE id = 1`); err != nil {
			return err
		}
		var err error
		tok, err = scanToken(t.queryRow(`SELECT `+tokenColumns+` FROM tokens WHERE hash >= ? AND hash < ?`, lo, hi))
		return interpret(err)
	})
	if err != nil {
		return store.Token{}, store.Wrap("revoke token", err)
	}
	return tok, nil
}
