package sqlite

import (
	"context"
	"fmt"

	"studio/intent"
	"studio/store"
)

var _ store.UploadStore = (*Store)(nil)

// LookupUpload is the plain read of a client key's binding.
func (s *Store) LookupUpload(ctx context.Context, actor, clientKey string) (intent.UploadBinding, error) {
	var b intent.UploadBinding
	err := s.read(ctx, func(t *tx) (err error) {
		b, err = lookupUpload(t, actor, clientKey)
		return err
	})
	return b, err
}

func lookupUpload(t *tx, actor, clientKey string) (intent.UploadBinding, error) {
	b := intent.UploadBinding{Actor: actor, ClientKey: clientKey}
	var created int64
	err := t.queryRow(`SELECT asset_id, sha256, created_at FROM upload_keys
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
	var got intent.Asset
	created := false
	err := s.write(ctx, func(t *tx) error {
		if in.ClientKey != "" {
			found, err := lookupUpload(t, a.Actor, in.ClientKey)
			switch {
			case err == nil:
				if found.SHA256 != a.SHA256 {
					return &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
				}
				got, err = scanAsset(t.queryRow(`SELECT `+assetColumns+` FROM assets WHERE id = ? AND actor = ?`, found.AssetID, a.Actor))
				if err != nil {
					return fmt.Errorf("read bound asset: %w", err)
				}
				return nil
			case intent.ErrorCode(err) != intent.ENotFound:
				return fmt.Errorf("check binding: %w", err)
			}
		}
		now := ms(a.CreatedAt)
		if _, err := t.exec(`INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
			VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)`, a.ID, a.Actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, now); err != nil {
			return fmt.Errorf("insert asset: %w", interpret(err))
		}
		if in.ClientKey != "" {
			if _, err := t.exec(`INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at)
				VALUES (?, ?, ?, ?, ?)`, a.Actor, in.ClientKey, a.ID, a.SHA256, now); err != nil {
				return fmt.Errorf("bind client key: %w", interpret(err))
			}
		}
		got, created = a, true
		got.CreatedAt = fromMS(now)
		return nil
	})
	if err != nil {
		return intent.Asset{}, false, fmt.Errorf("create upload: %w", err)
	}
	return got, created, nil
}
