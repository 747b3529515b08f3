package sqlite_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"studio/intent"
	"studio/store/sqlite"
	"studio/store/storetest"
)

// The publication and upload benchmarks run each commit beside its floor:
// the same rows inserted with bare statements in one IMMEDIATE
// transaction, with no check of the binding and no check that the assets
// are the batch's. The ratio is the cost of those checks.
//
//	go test -run '^$' -bench 'PublicationCommit|UploadCommit' -benchtime 200x ./store/sqlite
func BenchmarkPublicationCommit(b *testing.B) {
	for _, n := range []int{12, 600} {
		for _, kind := range []string{"intent", "floor"} {
			b.Run(fmt.Sprintf("items=%d/%s", n, kind), func(b *testing.B) {
				s := openBench(b, sqlite.SyncFull)
				batch, assets := storetest.BatchWithAssets(b, s, "alice", "gen", n)
				ins := make([]intent.NewIntent, b.N)
				for i := range ins {
					ins[i] = storetest.PublicationIntent(b, "alice", fmt.Sprintf("pub-%d", i), "fp", batch, assets, intent.ChannelGallery)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var err error
					if kind == "intent" {
						_, _, err = s.CreateIntent(context.Background(), ins[i])
					} else {
						err = floorPublication(s, ins[i])
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// floorPublication inserts the binding, the publication and its items
// with plain INSERTs in one transaction.
func floorPublication(s *sqlite.Store, in intent.NewIntent) error {
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	bd, np := in.Binding, in.Publication
	if _, err := tx.ExecContext(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, 1); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, np.ID, bd.Actor, bd.RequestID, np.BatchID, np.Channel, len(np.Items), len(np.Items), 1, 1); err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO publication_items (id, publication_id, asset_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, it := range np.Items {
		if _, err := stmt.ExecContext(ctx, it.ID, np.ID, it.AssetID, 1, 1); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// BenchmarkUploadCommit runs CreateUpload with a client key (the binding
// checked inside the transaction, the asset and the key inserted) beside
// the floor of the two bare inserts.
func BenchmarkUploadCommit(b *testing.B) {
	for _, kind := range []string{"upload", "floor"} {
		b.Run(kind, func(b *testing.B) {
			s := openBench(b, sqlite.SyncFull)
			ins := make([]intent.NewUpload, b.N)
			for i := range ins {
				id, _ := intent.NewID()
				ins[i] = intent.NewUpload{ClientKey: fmt.Sprintf("key-%d", i), Asset: intent.Asset{ID: id, Actor: "alice",
					SHA256: strings.Repeat(fmt.Sprintf("%x", i%16), 64), ContentType: "image/png", Size: 100, Width: 8, Height: 8,
					CreatedAt: time.Now()}}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var err error
				if kind == "upload" {
					_, _, err = s.CreateUpload(context.Background(), ins[i])
				} else {
					err = floorUpload(s, ins[i])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func floorUpload(s *sqlite.Store, in intent.NewUpload) error {
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	a := in.Asset
	if _, err := tx.ExecContext(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)`, a.ID, a.Actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, 1); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at)
		VALUES (?, ?, ?, ?, ?)`, a.Actor, in.ClientKey, a.ID, a.SHA256, 1); err != nil {
		return err
	}
	return tx.Commit()
}
