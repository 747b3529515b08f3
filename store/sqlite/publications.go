package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json"

	"studio/intent"
	"studio/store"
)

// Publications and their items. The items are leased like tasks (see
// tasks.go): the database's clock, a fence bumped by every claim and named
// by every later write, and the publication's counts moved in the same
// IMMEDIATE transaction.

var _ store.PublicationStore = (*Store)(nil)

// insertItemSQL inserts one publication item, if its asset was made by
// the actor's batch.
const insertItemSQL = `INSERT INTO publication_items (id, publication_id, asset_id, created_at, updated_at)
	SELECT ?, ?, a.id, ?, ? FROM assets a
	WHERE a.id = ? AND a.actor = ? AND (SELECT t.batch_id FROM tasks t WHERE t.id = a.task_id) = ?`

// insertPublication writes a publication and its items inside the intent's
// transaction. The inserts select from the actor's batch and its assets, so
// the rule the service checked before the transaction (every asset was
// made by the actor's batch) holds in it too.
func insertPublication(t *tx, b intent.Binding, np *intent.NewPublication) error {
	now := ms(np.CreatedAt)
	n := len(np.Items)
	if n == 0 {
		return errors.New("insert publication: no items")
	}
	k, err := t.exec(`INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, created_at, updated_at)
		SELECT ?, ?, ?, id, ?, ?, ?, ?, ? FROM batches WHERE id = ? AND actor = ?`,
		np.ID, b.Actor, b.RequestID, np.Channel, n, n, now, now, np.BatchID, b.Actor)
	if err != nil {
		return fmt.Errorf("insert publication: %w", interpret(err))
	}
	if k == 0 {
		return intent.Errorf(intent.EUnprocessable, "No batch of yours has the id %s.", np.BatchID)
	}
	// The asset by its key, then its task by its key: written as a
	// correlated subquery so that the planner cannot start from the batch's
	// tasks instead (which made each insert scan the whole batch).
	for i := range np.Items {
		it := &np.Items[i]
		k, err := t.exec(insertItemSQL, it.ID, np.ID, now, now, it.AssetID, b.Actor, np.BatchID)
		if err != nil {
			return fmt.Errorf("insert item %d: %w", i, interpret(err))
		}
		if k == 0 {
			return intent.Errorf(intent.EUnprocessable, "1 asset is not made by batch %s: %s.", np.BatchID, it.AssetID)
		}
	}
	return nil
}

// CheckPublicationAssets says whether the batch is the actor's and which
// assets it did not make.
func (s *Store) CheckPublicationAssets(ctx context.Context, actor, batchID string, assetIDs []string) (intent.PublicationCheck, error) {
	var out intent.PublicationCheck
	ids, err := json.Marshal(assetIDs)
	if err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	err = s.read(ctx, func(t *tx) error {
		if err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM batches WHERE id = ? AND actor = ?)`, batchID, actor).
			Scan(&out.BatchFound); err != nil {
			return err
		}
		if !out.BatchFound {
			return nil
		}
		ours, err := collect(t, func(r scanner) (id string, err error) { return id, r.Scan(&id) },
			`SELECT a.id FROM assets a JOIN tasks t ON t.id = a.task_id
			WHERE a.id IN (SELECT value FROM json_each(?)) AND a.actor = ? AND t.batch_id = ?`, string(ids), actor, batchID)
		if err != nil {
			return err
		}
		for _, id := range assetIDs {
			if !slices.Contains(ours, id) {
				out.Foreign = append(out.Foreign, id)
			}
		}
		return nil
	})
	if err != nil {
		return intent.PublicationCheck{}, fmt.Errorf("check publication assets: %w", err)
	}
	if !out.BatchFound {
		out.Foreign = slices.Clone(assetIDs)
	}
	return out, nil
}

const publicationColumns = `id, actor, request_id, batch_id, channel, item_count, queued, running, succeeded, failed, started, created_at, updated_at`

// GetPublication reads one of the actor's publications.
func (s *Store) GetPublication(ctx context.Context, actor, id string) (intent.Publication, error) {
	var p intent.Publication
	err := s.read(ctx, func(t *tx) (err error) {
		p, err = scanPublication(t.queryRow(`SELECT `+publicationColumns+` FROM publications WHERE id = ? AND actor = ?`, id, actor))
		return err
	})
	if err != nil {
		return intent.Publication{}, interpret(err)
	}
	return p, nil
}

func scanPublication(r scanner) (intent.Publication, error) {
	var p intent.Publication
	var started bool
	var created, updated int64
	if err := r.Scan(&p.ID, &p.Actor, &p.RequestID, &p.BatchID, &p.Channel, &p.ItemCount,
		&p.Counts.Queued, &p.Counts.Running, &p.Counts.Succeeded, &p.Counts.Failed, &started, &created, &updated); err != nil {
		return intent.Publication{}, err
	}
	p.State = p.Counts.State(started)
	p.CreatedAt, p.UpdatedAt = fromMS(created), fromMS(updated)
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

func scanItem(r scanner) (store.PublicationItem, error) {
	var it store.PublicationItem
	var task sql.NullString
	var created int64
	if err := r.Scan(&it.ID, &it.PublicationID, &it.Actor, &it.Channel, &it.State, &it.Attempts, &it.Error,
		&it.Asset.ID, &it.Asset.Actor, &task, &it.Asset.SHA256, &it.Asset.ContentType, &it.Asset.Size,
		&it.Asset.Width, &it.Asset.Height, &created,
		&it.Prompt, &it.Collection, &it.Frame, &it.Generator, &it.Candidate); err != nil {
		return store.PublicationItem{}, err
	}
	if task.Valid {
		it.Asset.TaskID = &task.String
	}
	it.Asset.CreatedAt = fromMS(created)
	return it, nil
}

func queryItems(t *tx, where string, args ...any) ([]store.PublicationItem, error) {
	return collect(t, scanItem, `SELECT `+itemColumns+itemFrom+` WHERE `+where+` ORDER BY i.id`, args...)
}

// PublicationItems lists a publication's items in asset order (their ids
// were drawn in that order).
func (s *Store) PublicationItems(ctx context.Context, publicationID string) ([]store.PublicationItem, error) {
	var items []store.PublicationItem
	err := s.read(ctx, func(t *tx) (err error) {
		items, err = queryItems(t, `i.publication_id = ?`, publicationID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publication items: %w", err)
	}
	return items, nil
}

// PublicationItem answers the publication's item that names the asset.
func (s *Store) PublicationItem(ctx context.Context, publicationID, assetID string) (store.PublicationItem, error) {
	var items []store.PublicationItem
	err := s.read(ctx, func(t *tx) (err error) {
		items, err = queryItems(t, `i.publication_id = ? AND i.asset_id = ?`, publicationID, assetID)
		return err
	})
	if err != nil {
		return store.PublicationItem{}, fmt.Errorf("publication item: %w", err)
	}
	if len(items) == 0 {
		return store.PublicationItem{}, intent.Errorf(intent.ENotFound, "The publication has no item of asset %s.", assetID)
	}
	return items[0], nil
}
