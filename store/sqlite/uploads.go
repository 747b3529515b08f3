package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"studio/intent"
	"studio/store"
)

var _ store.UploadStore = (*Store)(nil)

// LookupUpload is the plain read of a client key's binding.
func (s *Store) LookupUpload(ctx context.Context, actor, clientKey string) (intent.UploadBinding, error) {
	return lookupUpload(ctx, s.read, actor, clientKey)
}

func lookupUpload(ctx context.Context, q queryer, actor, clientKey string) (intent.UploadBinding, error) {
	b := intent.UploadBinding{Actor: actor, ClientKey: clientKey}
	var created int64
	err := q.QueryRowContext(ctx, `SELECT asset_id, sha256, created_at FROM upload_keys
		WHERE actor = ? AND client_key = ?`, actor, clientKey).Scan(&b.AssetID, &b.SHA256, &created)
	if err != nil {
		return intent.UploadBinding{}, interpret(err)
	}
	b.CreatedAt = fromMS(created)
	return b, nil
}

// CreateUpload inserts an uploaded asset and binds its client key in one
// IMMEDIATE transaction, after checking the binding again inside it.
func (s *Store) CreateUpload(ctx context.Context, in intent.NewUpload) (intent.Asset, bool, error) {
	a := in.Asset
	if a.ID == "" || a.Actor == "" || a.SHA256 == "" || a.ContentType == "" || a.TaskID != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: the asset needs an id, an actor, a sha256, a content type and no task")
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: %w", err)
	}
	defer tx.Rollback()
	if in.ClientKey != "" {
		found, err := lookupUpload(ctx, tx, a.Actor, in.ClientKey)
		switch {
		case err == nil:
			if found.SHA256 != a.SHA256 {
				return intent.Asset{}, false, &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
			}
			got, err := readAsset(ctx, tx, a.Actor, found.AssetID)
			if err != nil {
				return intent.Asset{}, false, fmt.Errorf("create upload: read bound asset: %w", err)
			}
			return got, false, nil
		case intent.ErrorCode(err) != intent.ENotFound:
			return intent.Asset{}, false, fmt.Errorf("create upload: check binding: %w", err)
		}
	}
	now := ms(a.CreatedAt)
	if _, err := tx.ExecContext(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)`, a.ID, a.Actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, now); err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: insert asset: %w", interpret(err))
	}
	if in.ClientKey != "" {
		if _, err := tx.ExecContext(ctx, `INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at)
			VALUES (?, ?, ?, ?, ?)`, a.Actor, in.ClientKey, a.ID, a.SHA256, now); err != nil {
			return intent.Asset{}, false, fmt.Errorf("create upload: bind client key: %w", interpret(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: commit: %w", err)
	}
	a.CreatedAt = fromMS(now)
	return a, true, nil
}

// readAsset reads one of the actor's assets through q (a transaction or a
// pool).
func readAsset(ctx context.Context, q queryer, actor, id string) (intent.Asset, error) {
	var a intent.Asset
	var task sql.NullString
	var created int64
	err := q.QueryRowContext(ctx, `SELECT id, actor, task_id, sha256, content_type, size, width, height, created_at
		FROM assets WHERE id = ? AND actor = ?`, id, actor).
		Scan(&a.ID, &a.Actor, &task, &a.SHA256, &a.ContentType, &a.Size, &a.Width, &a.Height, &created)
	if err != nil {
		return intent.Asset{}, interpret(err)
	}
	if task.Valid {
		a.TaskID = &task.String
	}
	a.CreatedAt = fromMS(created)
	return a, nil
}
