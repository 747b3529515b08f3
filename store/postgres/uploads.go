package postgres

import (
	"context"
	"fmt"

	"studio/intent"
	"studio/store"
)

var _ store.UploadStore = (*Store)(nil)

// LookupUpload is the plain read of a client key's binding.
func (s *Store) LookupUpload(ctx context.Context, actor, clientKey string) (intent.UploadBinding, error) {
	return lookupUpload(ctx, s.pool, actor, clientKey)
}

func lookupUpload(ctx context.Context, q querier, actor, clientKey string) (intent.UploadBinding, error) {
	b := intent.UploadBinding{Actor: actor, ClientKey: clientKey}
	err := q.QueryRow(ctx, `SELECT asset_id, sha256, created_at FROM upload_keys
		WHERE actor = $1 AND client_key = $2`, actor, clientKey).Scan(&b.AssetID, &b.SHA256, &b.CreatedAt)
	if err != nil {
		return intent.UploadBinding{}, interpret(err)
	}
	b.CreatedAt = b.CreatedAt.UTC()
	return b, nil
}

// CreateUpload inserts an uploaded asset and binds its client key in one
// transaction. As in CreateIntent, the binding is not checked before it is
// written: the asset goes in, then the key with ON CONFLICT DO NOTHING. A
// second upload of the same key waits on the primary key for the first's
// transaction; if that committed, the insert does nothing, this
// transaction rolls back (its asset with it), and the committed binding
// answers: a replay of the same bytes, or a conflict.
func (s *Store) CreateUpload(ctx context.Context, in intent.NewUpload) (intent.Asset, bool, error) {
	a := in.Asset
	if a.ID == "" || a.Actor == "" || a.SHA256 == "" || a.ContentType == "" || a.TaskID != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: the asset needs an id, an actor, a sha256, a content type and no task")
	}
	a.CreatedAt = stamp(a.CreatedAt)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $8)`, a.ID, a.Actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, a.CreatedAt); err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: insert asset: %w", interpret(err))
	}
	if in.ClientKey != "" {
		tag, err := tx.Exec(ctx, `INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (actor, client_key) DO NOTHING`, a.Actor, in.ClientKey, a.ID, a.SHA256, a.CreatedAt)
		if err != nil {
			return intent.Asset{}, false, fmt.Errorf("create upload: bind client key: %w", interpret(err))
		}
		if tag.RowsAffected() == 0 {
			if err := tx.Rollback(ctx); err != nil {
				return intent.Asset{}, false, fmt.Errorf("create upload: %w", err)
			}
			found, err := lookupUpload(ctx, s.pool, a.Actor, in.ClientKey)
			if err != nil {
				return intent.Asset{}, false, fmt.Errorf("create upload: read binding: %w", err)
			}
			if found.SHA256 != a.SHA256 {
				return intent.Asset{}, false, &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
			}
			got, err := getAsset(ctx, s.pool, a.Actor, found.AssetID)
			if err != nil {
				return intent.Asset{}, false, fmt.Errorf("create upload: read bound asset: %w", err)
			}
			return got, false, nil
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: commit: %w", interpret(err))
	}
	return a, true, nil
}
