package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-json-experiment/json"

	"studio/intent"
	"studio/store"
)

// Publications and their items. The items are leased like tasks (see
// tasks.go): the database's clock, a fence bumped by every claim and named
// by every later write, and the publication's counts moved in the same
// IMMEDIATE transaction.

var _ store.PublicationStore = (*Store)(nil)

// itemLive is the condition of every fenced write of an item: this claim,
// still running, not expired. Its parameters are id, fence, now.
const itemLive = `id = ? AND fence = ? AND state = 'running' AND lease_expires_at > ?`

// insertItemSQL inserts one publication item, if its asset was made by
// the actor's batch.
const insertItemSQL = `INSERT INTO publication_items (id, publication_id, asset_id, created_at, updated_at)
	SELECT ?, ?, a.id, ?, ? FROM assets a
	WHERE a.id = ? AND a.actor = ? AND (SELECT t.batch_id FROM tasks t WHERE t.id = a.task_id) = ?`

// insertPublication writes a publication and its items inside the intent's
// transaction. The inserts select from the actor's batch and its assets, so
// the rule the service checked before the transaction (every asset was
// made by the actor's batch) holds in it too.
func insertPublication(tx *writeTx, b intent.Binding, np *intent.NewPublication) error {
	now := ms(np.CreatedAt)
	n := len(np.Items)
	if n == 0 {
		return errors.New("insert publication: no items")
	}
	k, err := tx.exec(`INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, created_at, updated_at)
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
		k, err := tx.exec(insertItemSQL, it.ID, np.ID, now, now, it.AssetID, b.Actor, np.BatchID)
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
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM batches WHERE id = ? AND actor = ?)`, batchID, actor).
		Scan(&out.BatchFound); err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	if !out.BatchFound {
		out.Foreign = slices.Clone(assetIDs)
		return out, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT a.id FROM assets a JOIN tasks t ON t.id = a.task_id
		WHERE a.id IN (SELECT value FROM json_each(?)) AND a.actor = ? AND t.batch_id = ?`, string(ids), actor, batchID)
	if err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	defer rows.Close()
	ours := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return out, fmt.Errorf("check publication assets: %w", err)
		}
		ours[id] = true
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("check publication assets: %w", err)
	}
	for _, id := range assetIDs {
		if !ours[id] {
			out.Foreign = append(out.Foreign, id)
		}
	}
	return out, nil
}

const publicationColumns = `id, actor, request_id, batch_id, channel, item_count, queued, running, succeeded, failed, started, created_at, updated_at`

// GetPublication reads one of the actor's publications.
func (s *Store) GetPublication(ctx context.Context, actor, id string) (intent.Publication, error) {
	p, err := scanPublication(s.read.QueryRowContext(ctx, `SELECT `+publicationColumns+` FROM publications WHERE id = ? AND actor = ?`, id, actor))
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

type rowsQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryItems(ctx context.Context, q rowsQueryer, where string, args ...any) ([]store.PublicationItem, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+itemColumns+itemFrom+` WHERE `+where+` ORDER BY i.id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.PublicationItem
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// PublicationItems lists a publication's items in asset order (their ids
// were drawn in that order).
func (s *Store) PublicationItems(ctx context.Context, publicationID string) ([]store.PublicationItem, error) {
	items, err := queryItems(ctx, s.read, `i.publication_id = ?`, publicationID)
	if err != nil {
		return nil, fmt.Errorf("publication items: %w", err)
	}
	return items, nil
}

// itemTx is one write transaction of the item methods: a taskTx (its
// clocks; its batch counts stay untouched) and the publications' counts.
type itemTx struct {
	*taskTx
	pubs store.CountDeltas
}

func (s *Store) beginItems(ctx context.Context) (*itemTx, error) {
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, err
	}
	return &itemTx{taskTx: t, pubs: store.CountDeltas{}}, nil
}

// commit writes the publications' new counts, in id order, and commits.
func (t *itemTx) commit(ctx context.Context) error {
	for _, id := range t.pubs.IDs() {
		d := t.pubs[id]
		if _, err := t.tx.ExecContext(ctx, `UPDATE publications SET queued = queued + ?, running = running + ?,
			succeeded = succeeded + ?, failed = failed + ?, started = MAX(started, ?), updated_at = ? WHERE id = ?`,
			d.Queued, d.Running, d.Succeeded, d.Failed, d.Started, t.wall, id); err != nil {
			return fmt.Errorf("update counts of publication %s: %w", id, err)
		}
	}
	if err := t.taskTx.commit(ctx); err != nil {
		return err
	}
	t.s.wake.Publish(store.ItemWakes(t.pubs, t.retryAt)...)
	return nil
}

// ClaimItems leases items: expired leases first (failed instead when out
// of attempts), then queued items, oldest first. Each claim is one UPDATE
// that bumps the fences of the rows it takes.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim items: need an owner, a limit >= 1 and a ttl > 0")
	}
	t, err := s.beginItems(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	defer t.rollback()
	expires := t.now + ttlMS(p.TTL)
	if p.MaxAttempts > 0 {
		rows, err := t.tx.QueryContext(ctx, `UPDATE publication_items SET state = 'failed',
			error = 'attempt ' || attempts || ': the lease expired (the worker stopped or crashed); no attempts left',
			lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
			WHERE state = 'running' AND lease_expires_at <= ? AND attempts - released >= ?
			RETURNING publication_id`, t.wall, t.now, p.MaxAttempts)
		if err != nil {
			return nil, fmt.Errorf("claim items: fail expired: %w", err)
		}
		pubs, err := scanStrings(rows)
		if err != nil {
			return nil, fmt.Errorf("claim items: fail expired: %w", err)
		}
		for _, id := range pubs {
			t.pubs.Of(id).Move(intent.StateRunning, intent.StateFailed)
		}
	}
	type claim struct {
		id, pub   string
		fence     int64
		attempt   int
		expires   int64
		wasQueued bool
	}
	var claims []claim
	take := func(query string, wasQueued bool, n int) error {
		rows, err := t.tx.QueryContext(ctx, query, sql.Named("owner", p.Owner), sql.Named("expires", expires),
			sql.Named("wall", t.wall), sql.Named("now", t.now), sql.Named("n", n))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c := claim{wasQueued: wasQueued}
			if err := rows.Scan(&c.id, &c.pub, &c.fence, &c.attempt, &c.expires); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		return rows.Err()
	}
	const set = `SET state = 'running', fence = fence + 1, attempts = attempts + 1,
		lease_owner = :owner, lease_expires_at = :expires, updated_at = :wall`
	const returning = ` RETURNING id, publication_id, fence, attempts, lease_expires_at`
	if err := take(`UPDATE publication_items `+set+` WHERE id IN (SELECT id FROM publication_items
		WHERE state = 'running' AND lease_expires_at <= :now ORDER BY lease_expires_at, id LIMIT :n)`+returning, false, p.Limit); err != nil {
		return nil, fmt.Errorf("claim items: reclaim expired: %w", err)
	}
	if n := p.Limit - len(claims); n > 0 {
		if err := take(`UPDATE publication_items `+set+` WHERE id IN (SELECT id FROM publication_items
			WHERE state = 'queued' AND run_after <= :now ORDER BY id LIMIT :n)`+returning, true, n); err != nil {
			return nil, fmt.Errorf("claim items: %w", err)
		}
	}
	if len(claims) == 0 {
		return nil, t.commit(ctx)
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.id
		if c.wasQueued {
			t.pubs.Of(c.pub).Move(intent.StateQueued, intent.StateRunning)
		}
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	items, err := queryItems(ctx, t.tx, `i.id IN (SELECT value FROM json_each(?))`, string(idsJSON))
	if err != nil {
		return nil, fmt.Errorf("claim items: read items: %w", err)
	}
	byID := make(map[string]store.PublicationItem, len(items))
	for _, it := range items {
		byID[it.ID] = it
	}
	out := make([]store.ClaimedItem, len(claims))
	for i, c := range claims {
		out[i] = store.ClaimedItem{
			ItemLease:       store.ItemLease{ItemID: c.id, Fence: c.fence},
			PublicationItem: byID[c.id],
			Attempt:         c.attempt,
			ExpiresAt:       fromMS(c.expires),
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("claim items: commit: %w", err)
	}
	return out, nil
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// RenewItemLeases extends the owner's live item leases.
func (s *Store) RenewItemLeases(ctx context.Context, p store.ItemRenewParams) (store.ItemRenewResult, error) {
	var res store.ItemRenewResult
	if p.Owner == "" || p.TTL <= 0 {
		return res, fmt.Errorf("renew item leases: need an owner and a ttl > 0")
	}
	if len(p.Leases) == 0 {
		return res, nil
	}
	t, err := s.beginItems(ctx)
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	defer t.rollback()
	expires := t.now + ttlMS(p.TTL)
	stmt, err := t.tx.PrepareContext(ctx, `UPDATE publication_items SET lease_expires_at = ? WHERE `+itemLive+` AND lease_owner = ?`)
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	defer stmt.Close()
	for _, l := range p.Leases {
		r, err := stmt.ExecContext(ctx, expires, l.ItemID, l.Fence, t.now, p.Owner)
		if err != nil {
			return store.ItemRenewResult{}, fmt.Errorf("renew lease of item %s: %w", l.ItemID, err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return store.ItemRenewResult{}, fmt.Errorf("renew lease of item %s: %w", l.ItemID, err)
		} else if n == 0 {
			res.Lost = append(res.Lost, l.ItemID)
		}
	}
	if err := t.commit(ctx); err != nil {
		return store.ItemRenewResult{}, fmt.Errorf("renew item leases: commit: %w", err)
	}
	res.ExpiresAt = fromMS(expires)
	return res, nil
}

// CompleteItems marks items succeeded, fenced.
func (s *Store) CompleteItems(ctx context.Context, leases []store.ItemLease) ([]error, error) {
	return s.endItems(ctx, "complete items", leases, `UPDATE publication_items SET state = 'succeeded', error = NULL,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE `+itemLive+` RETURNING publication_id`,
		func(d *store.CountDelta) { d.Move(intent.StateRunning, intent.StateSucceeded) })
}

// ReleaseItems hands leases back: queued again at once.
func (s *Store) ReleaseItems(ctx context.Context, leases []store.ItemLease) ([]error, error) {
	return s.endItems(ctx, "release items", leases, `UPDATE publication_items SET state = 'queued', released = released + 1,
		run_after = 0, lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE `+itemLive+` RETURNING publication_id`,
		func(d *store.CountDelta) { d.Move(intent.StateRunning, intent.StateQueued) })
}

// endItems runs a fenced update (parameters: wall, id, fence, now) on each
// lease in one transaction and moves the counts of those it matched.
func (s *Store) endItems(ctx context.Context, what string, leases []store.ItemLease, query string, move func(*store.CountDelta)) ([]error, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	t, err := s.beginItems(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer t.rollback()
	stmt, err := t.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer stmt.Close()
	out := make([]error, len(leases))
	for i, l := range leases {
		var pub string
		err := stmt.QueryRowContext(ctx, t.wall, l.ItemID, l.Fence, t.now).Scan(&pub)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out[i] = store.ErrLeaseLost
			continue
		case err != nil:
			return nil, fmt.Errorf("%s: item %s: %w", what, l.ItemID, err)
		}
		move(t.pubs.Of(pub))
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("%s: commit: %w", what, err)
	}
	return out, nil
}

// FailItem ends a failed attempt: queued again after the backoff, or
// failed.
func (s *Store) FailItem(ctx context.Context, f store.ItemFailure) (intent.State, error) {
	t, err := s.beginItems(ctx)
	if err != nil {
		return "", fmt.Errorf("fail item: %w", err)
	}
	defer t.rollback()
	var pub string
	var used int
	err = t.tx.QueryRowContext(ctx, `SELECT publication_id, attempts - released FROM publication_items WHERE `+itemLive,
		f.ItemID, f.Fence, t.now).Scan(&pub, &used)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", store.ErrLeaseLost
	case err != nil:
		return "", fmt.Errorf("fail item %s: %w", f.ItemID, err)
	}
	state := store.StateAfterFailure(false, f.Permanent, used, f.MaxAttempts)
	runAfter := t.now + max(ttlMS(f.Backoff), 0)
	if _, err := t.tx.ExecContext(ctx, `UPDATE publication_items SET state = ?, error = ?, run_after = ?,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE `+itemLive,
		state, f.Error, runAfter, t.wall, f.ItemID, f.Fence, t.now); err != nil {
		return "", fmt.Errorf("fail item %s: %w", f.ItemID, err)
	}
	t.pubs.Of(pub).Move(intent.StateRunning, state)
	t.retryAt = time.Now().Add(f.Backoff)
	if err := t.commit(ctx); err != nil {
		return "", fmt.Errorf("fail item: commit: %w", err)
	}
	return state, nil
}
