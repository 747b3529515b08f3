package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
)

// Publications and their items. The items are leased like tasks (see
// tasks.go): the database's clock, a fence bumped by every claim and named
// by every later write, the publication's counts moved in the same
// transaction, items locked before publications. Publications cannot be
// canceled, so nothing re-queues behind a sweep as with tasks.

var _ store.PublicationStore = (*Store)(nil)

// itemLive is the condition of every fenced write of an item: this claim,
// still running, not expired by the database's clock. Its parameters are
// $1 id, $2 fence.
const itemLive = `id = $1 AND fence = $2 AND state = 'running' AND lease_expires_at > clock_timestamp()`

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
		return fmt.Errorf("insert publication: %w", interpret(err))
	}
	if tag.RowsAffected() == 0 {
		return intent.Errorf(intent.EUnprocessable, "No batch of yours has the id %s.", np.BatchID)
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

// ClaimItems leases items: expired leases first (failed instead when out
// of attempts), then queued items, oldest first, each set taken with FOR
// NO KEY UPDATE SKIP LOCKED so concurrent claimers take different items.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim items: need an owner, a limit >= 1 and a ttl > 0")
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	defer t.rollback(ctx)
	now, err := t.dbNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	expires := now.Add(ttlRoundUp(p.TTL))
	if p.MaxAttempts > 0 {
		rows, err := t.tx.Query(ctx, `UPDATE publication_items SET state = 'failed',
			error = 'attempt ' || attempts || ': the lease expired (the worker stopped or crashed); no attempts left',
			lease_owner = NULL, lease_expires_at = NULL, updated_at = $1
			WHERE id IN (SELECT id FROM publication_items
				WHERE state = 'running' AND lease_expires_at <= $2 AND attempts - released >= $3
				FOR NO KEY UPDATE SKIP LOCKED)
			RETURNING publication_id`, t.wall, now, p.MaxAttempts)
		if err != nil {
			return nil, fmt.Errorf("claim items: fail expired: %w", err)
		}
		pubs, err := pgx.CollectRows(rows, pgx.RowTo[string])
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
		expires   time.Time
		wasQueued bool
	}
	var claims []claim
	take := func(state intent.State, order string, n int) error {
		rows, err := t.tx.Query(ctx, `UPDATE publication_items SET state = 'running', fence = fence + 1, attempts = attempts + 1,
				lease_owner = $1, lease_expires_at = $2, updated_at = $3
			WHERE id IN (SELECT id FROM publication_items
				WHERE state = $4 AND (CASE WHEN $4 = 'queued' THEN run_after ELSE lease_expires_at END) <= $5
				ORDER BY `+order+` LIMIT $6 FOR NO KEY UPDATE SKIP LOCKED)
			RETURNING id, publication_id, fence, attempts, lease_expires_at`,
			p.Owner, expires, t.wall, string(state), now, n)
		if err != nil {
			return err
		}
		c := claim{wasQueued: state == intent.StateQueued}
		var got []claim
		if _, err := pgx.ForEachRow(rows, []any{&c.id, &c.pub, &c.fence, &c.attempt, &c.expires}, func() error {
			got = append(got, c)
			return nil
		}); err != nil {
			return err
		}
		// RETURNING keeps no order: answer in id (creation) order.
		slices.SortFunc(got, func(a, b claim) int { return cmpString(a.id, b.id) })
		claims = append(claims, got...)
		return nil
	}
	if err := take(intent.StateRunning, "lease_expires_at, id", p.Limit); err != nil {
		return nil, fmt.Errorf("claim items: reclaim expired: %w", err)
	}
	if n := p.Limit - len(claims); n > 0 {
		if err := take(intent.StateQueued, "id", n); err != nil {
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
	items, err := queryItems(ctx, t.tx, `i.id = ANY ($1)`, ids)
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
			ExpiresAt:       c.expires.UTC(),
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("claim items: commit: %w", err)
	}
	return out, nil
}

// RenewItemLeases extends the owner's live item leases, in one statement.
func (s *Store) RenewItemLeases(ctx context.Context, p store.ItemRenewParams) (store.ItemRenewResult, error) {
	var res store.ItemRenewResult
	if p.Owner == "" || p.TTL <= 0 {
		return res, fmt.Errorf("renew item leases: need an owner and a ttl > 0")
	}
	if len(p.Leases) == 0 {
		return res, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	defer t.rollback(ctx)
	now, err := t.dbNow(ctx)
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	expires := now.Add(ttlRoundUp(p.TTL))
	idx := sortedLeases(len(p.Leases), func(i int) string { return p.Leases[i].ItemID })
	ids := make([]string, len(idx))
	fences := make([]int64, len(idx))
	for j, i := range idx {
		ids[j], fences[j] = p.Leases[i].ItemID, p.Leases[i].Fence
	}
	rows, err := t.tx.Query(ctx, `WITH l AS (
			SELECT i.id FROM publication_items i JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, fence, ord)
				ON i.id = u.id AND i.fence = u.fence
			WHERE i.state = 'running' AND i.lease_expires_at > $3 AND i.lease_owner = $4
			ORDER BY u.ord FOR NO KEY UPDATE OF i
		)
		UPDATE publication_items i SET lease_expires_at = $5 FROM l WHERE i.id = l.id
		RETURNING i.id`, ids, fences, now, p.Owner, expires)
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("renew item leases: %w", err)
	}
	for _, l := range p.Leases {
		if !slices.Contains(renewed, l.ItemID) {
			res.Lost = append(res.Lost, l.ItemID)
		}
	}
	if err := t.commit(ctx); err != nil {
		return store.ItemRenewResult{}, fmt.Errorf("renew item leases: commit: %w", err)
	}
	res.ExpiresAt = expires.UTC()
	return res, nil
}

// CompleteItems marks items succeeded, fenced.
func (s *Store) CompleteItems(ctx context.Context, leases []store.ItemLease) ([]error, error) {
	return s.endItems(ctx, "complete items", leases, `UPDATE publication_items SET state = 'succeeded', error = NULL,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = $3 WHERE `+itemLive+` RETURNING publication_id`,
		func(d *store.CountDelta) { d.Move(intent.StateRunning, intent.StateSucceeded) })
}

// ReleaseItems hands leases back: queued again at once.
func (s *Store) ReleaseItems(ctx context.Context, leases []store.ItemLease) ([]error, error) {
	return s.endItems(ctx, "release items", leases, `UPDATE publication_items SET state = 'queued', released = released + 1,
		run_after = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL, updated_at = $3 WHERE `+itemLive+` RETURNING publication_id`,
		func(d *store.CountDelta) { d.Move(intent.StateRunning, intent.StateQueued) })
}

// endItems runs a fenced update (parameters: id, fence, wall) on each
// lease, in item id order, in one transaction, and moves the counts of
// those it matched.
func (s *Store) endItems(ctx context.Context, what string, leases []store.ItemLease, query string, move func(*store.CountDelta)) ([]error, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer t.rollback(ctx)
	out := make([]error, len(leases))
	for _, i := range sortedLeases(len(leases), func(i int) string { return leases[i].ItemID }) {
		l := leases[i]
		var pub string
		err := t.tx.QueryRow(ctx, query, l.ItemID, l.Fence, t.wall).Scan(&pub)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
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
	t, err := s.beginTask(ctx)
	if err != nil {
		return "", fmt.Errorf("fail item: %w", err)
	}
	defer t.rollback(ctx)
	var pub string
	var used int
	err = t.tx.QueryRow(ctx, `SELECT publication_id, attempts - released FROM publication_items WHERE `+itemLive+` FOR NO KEY UPDATE`,
		f.ItemID, f.Fence).Scan(&pub, &used)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", store.ErrLeaseLost
	case err != nil:
		return "", fmt.Errorf("fail item %s: %w", f.ItemID, err)
	}
	state := store.StateAfterFailure(false, f.Permanent, used, f.MaxAttempts)
	if _, err := t.tx.Exec(ctx, `UPDATE publication_items SET state = $3, error = $4, run_after = clock_timestamp() + $5::interval,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = $6 WHERE id = $1 AND fence = $2`,
		f.ItemID, f.Fence, state, f.Error, ttlRoundUp(max(f.Backoff, 0)), t.wall); err != nil {
		return "", fmt.Errorf("fail item %s: %w", f.ItemID, err)
	}
	t.pubs.Of(pub).Move(intent.StateRunning, state)
	t.retryAt = time.Now().Add(f.Backoff)
	if err := t.commit(ctx); err != nil {
		return "", fmt.Errorf("fail item: commit: %w", err)
	}
	return state, nil
}
