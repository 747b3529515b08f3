package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"studio/intent"
	"studio/store"
)

// Publications and their items. The items are leased like tasks (see
// tasks.go): the database's clock, a fence bumped by every claim and named
// by every later write, the publication's counts moved in the same
// transaction, items locked before publications. Publications cannot be
// canceled, so nothing re-queues behind a sweep as with tasks.

var _ store.PublicationStore = (*Store)(nil)

// insertPublication writes a publication and its items inside the intent's
// transaction. The inserts select from the actor's batch and its assets, so
// the rule the service checked before the transaction (every asset was
// made by the actor's batch) holds in it too. The items go in with one
// statement over arrays.
func insertPublication(ctx context.Context, tx pgx.Tx, b intent.Binding, np *intent.NewPublication) error {
	now := stamp(np.CreatedAt)
	n := len(np.Items)
	if n == 0 {
		return errors.New("insert publication: no items")
	}
	tag, err := tx.Exec(ctx, `INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, created_at, updated_at)
		SELECT $1, $2, $3, id, $4, $5, $5, $6, $6 FROM batches WHERE id = $7 AND actor = $2`,
		np.ID, b.Actor, b.RequestID, np.Channel, n, now, np.BatchID)
	if err != nil {
		if batchDeleted(err) {
			return noBatch(np.BatchID)
		}
		return fmt.Errorf("insert publication: %w", interpret(err))
	}
	if tag.RowsAffected() == 0 {
		return noBatch(np.BatchID)
	}
	ids, assets := make([]string, n), make([]string, n)
	for i, it := range np.Items {
		ids[i], assets[i] = it.ID, it.AssetID
	}
	// Each asset is looked up by its key (a correlated subquery: two
	// primary-key reads per item), whatever the planner thinks of the
	// arrays' size; a join let it compare every asset with every task.
	rows, err := tx.Query(ctx, `INSERT INTO publication_items (id, publication_id, asset_id, created_at, updated_at)
		SELECT u.id, $1, u.asset, $2, $2
		FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(id, asset, ord)
		WHERE (SELECT t.batch_id FROM assets a JOIN tasks t ON t.id = a.task_id
			WHERE a.id = u.asset AND a.actor = $5) = $6
		ORDER BY u.ord
		RETURNING asset_id`, np.ID, now, ids, assets, b.Actor, np.BatchID)
	if err != nil {
		return fmt.Errorf("insert items: %w", interpret(err))
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if batchDeleted(err) {
		return noBatch(np.BatchID)
	}
	if err != nil {
		return fmt.Errorf("insert items: %w", interpret(err))
	}
	if len(inserted) < n {
		for _, a := range assets {
			if !slices.Contains(inserted, a) {
				return intent.Errorf(intent.EUnprocessable, "1 asset is not made by batch %s: %s.", np.BatchID, a)
			}
		}
	}
	return nil
}

// batchDeleted says whether err is a foreign key violation of the
// publication's inserts: the batch (or its assets) deleted by a
// transaction that committed while the insert waited for its row. The
// insert's SELECT saw the batch in its snapshot; the key check, which
// waits for the deleting transaction, did not find it any more.
func batchDeleted(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == codeForeignKeyViolation
}

// noBatch is the answer for a publication of a batch that is not (or no
// longer) the actor's: the same 422 the service gives when its check
// before the transaction finds no batch.
func noBatch(batchID string) error {
	return &intent.Error{Code: intent.EUnprocessable, Message: fmt.Sprintf("No batch of yours has the id %s.", batchID),
		Fields: []intent.FieldError{{Field: "batch_id", Message: "is not one of your batches"}}}
}

// CheckPublicationAssets says whether the batch is the actor's and which
// assets it did not make.
func (s *Store) CheckPublicationAssets(ctx context.Context, actor, batchID string, assetIDs []string) (intent.PublicationCheck, error) {
	var out intent.PublicationCheck
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM batches WHERE id = $1 AND actor = $2)`, batchID, actor).
		Scan(&out.BatchFound); err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	if !out.BatchFound {
		out.Foreign = slices.Clone(assetIDs)
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT u.id FROM unnest($1::text[]) AS u(id)
		WHERE (SELECT t.batch_id FROM assets a JOIN tasks t ON t.id = a.task_id
			WHERE a.id = u.id AND a.actor = $2) = $3`, assetIDs, actor, batchID)
	if err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	ours, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	for _, id := range assetIDs {
		if !slices.Contains(ours, id) {
			out.Foreign = append(out.Foreign, id)
		}
	}
	return out, nil
}

const publicationColumns = `id, actor, request_id, batch_id, channel, item_count, queued, running, succeeded, failed, started, created_at, updated_at`

// GetPublication reads one of the actor's publications.
func (s *Store) GetPublication(ctx context.Context, actor, id string) (intent.Publication, error) {
	p, err := scanPublication(s.pool.QueryRow(ctx, `SELECT `+publicationColumns+` FROM publications WHERE id = $1 AND actor = $2`, id, actor))
	if err != nil {
		return intent.Publication{}, interpret(err)
	}
	return p, nil
}

func scanPublication(r pgx.Row) (intent.Publication, error) {
	var p intent.Publication
	var started bool
	if err := r.Scan(&p.ID, &p.Actor, &p.RequestID, &p.BatchID, &p.Channel, &p.ItemCount,
		&p.Counts.Queued, &p.Counts.Running, &p.Counts.Succeeded, &p.Counts.Failed, &started, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return intent.Publication{}, err
	}
	p.State = p.Counts.State(started)
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p, nil
}

// itemColumns and itemFrom read an item with its publication, its asset
// and the task and batch that made the asset.
const itemColumns = `i.id, i.publication_id, p.actor, p.channel, i.state, i.attempts, COALESCE(i.error, ''),
	a.id, a.actor, a.task_id, a.sha256, a.content_type, a.size, a.width, a.height, a.created_at,
	COALESCE(b.prompt, ''), COALESCE(t.collection, ''), COALESCE(t.frame, ''), COALESCE(t.generator, ''), COALESCE(t.candidate, 0)`

const itemFrom = ` FROM publication_items i JOIN publications p ON p.id = i.publication_id
	JOIN assets a ON a.id = i.asset_id
	LEFT JOIN tasks t ON t.id = a.task_id LEFT JOIN batches b ON b.id = t.batch_id`

func queryItems(ctx context.Context, q querier, where string, args ...any) ([]store.PublicationItem, error) {
	rows, err := q.Query(ctx, `SELECT `+itemColumns+itemFrom+` WHERE `+where+` ORDER BY i.id`, args...)
	if err != nil {
		return nil, err
	}
	var out []store.PublicationItem
	var it store.PublicationItem
	_, err = pgx.ForEachRow(rows, []any{&it.ID, &it.PublicationID, &it.Actor, &it.Channel, &it.State, &it.Attempts, &it.Error,
		&it.Asset.ID, &it.Asset.Actor, &it.Asset.TaskID, &it.Asset.SHA256, &it.Asset.ContentType, &it.Asset.Size,
		&it.Asset.Width, &it.Asset.Height, &it.Asset.CreatedAt,
		&it.Prompt, &it.Collection, &it.Frame, &it.Generator, &it.Candidate}, func() error {
		it.Asset.CreatedAt = it.Asset.CreatedAt.UTC()
		out = append(out, it)
		it.Asset.TaskID = nil // a fresh pointer for the next row
		return nil
	})
	return out, err
}

// PublicationItems lists a publication's items in asset order (their ids
// were drawn in that order).
func (s *Store) PublicationItems(ctx context.Context, publicationID string) ([]store.PublicationItem, error) {
	items, err := queryItems(ctx, s.pool, `i.publication_id = $1`, publicationID)
	if err != nil {
		return nil, fmt.Errorf("publication items: %w", err)
	}
	return items, nil
}

// PublicationItem answers the publication's item that names the asset.
func (s *Store) PublicationItem(ctx context.Context, publicationID, assetID string) (store.PublicationItem, error) {
	items, err := queryItems(ctx, s.pool, `i.publication_id = $1 AND i.asset_id = $2`, publicationID, assetID)
	if err != nil {
		return store.PublicationItem{}, fmt.Errorf("publication item: %w", err)
	}
	if len(items) == 0 {
		return store.PublicationItem{}, intent.Errorf(intent.ENotFound, "The publication has no item of asset %s.", assetID)
	}
	return items[0], nil
}

// applyPublicationDeltas writes the publications' new counts, in id order, in one round
// trip.
func applyPublicationDeltas(ctx context.Context, tx pgx.Tx, wall time.Time, d store.CountDeltas) error {
	if len(d) == 0 {
		return nil
	}
	ids := d.IDs()
	var b pgx.Batch
	for _, id := range ids {
		c := d[id]
		b.Queue(`UPDATE publications SET queued = queued + $1, running = running + $2,
			succeeded = succeeded + $3, failed = failed + $4, started = started OR $5, updated_at = $6 WHERE id = $7`,
			c.Queued, c.Running, c.Succeeded, c.Failed, c.Started, wall, id)
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("update publication counts: %w", err)
	}
	return nil
}
