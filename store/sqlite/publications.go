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

// updatePublicationCountsSQL moves a publication's counts (leaseWrite).
const updatePublicationCountsSQL = `UPDATE publications SET queued = queued + ?, running = running + ?,
	succeeded = succeeded + ?, failed = failed + ?, started = MAX(started, ?), updated_at = ? WHERE id = ?`

// ClaimItems leases items: expired leases first (failed instead when out
// of attempts), then queued items, oldest first. Each claim is one UPDATE
// that bumps the fences of the rows it takes.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim items: need an owner, a limit >= 1 and a ttl > 0")
	}
	var out []store.ClaimedItem
	err := s.leaseWrite(ctx, func(t *leaseTx) (err error) {
		out, err = t.claimItems(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	return out, nil
}

// claimItems is ClaimItems in t.
func (t *leaseTx) claimItems(p store.ClaimParams) ([]store.ClaimedItem, error) {
	expires := t.now + ttlMS(p.TTL)
	if p.MaxAttempts > 0 {
		rows, err := t.query(`UPDATE publication_items SET state = 'failed',
			error = 'attempt ' || attempts || ': the lease expired (the worker stopped or crashed); no attempts left',
			lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
			WHERE state = 'running' AND lease_expires_at <= ? AND attempts - released >= ?
			RETURNING publication_id`, t.wall, t.now, p.MaxAttempts)
		if err != nil {
			return nil, fmt.Errorf("fail expired: %w", err)
		}
		pubs, err := scanStrings(rows)
		if err != nil {
			return nil, fmt.Errorf("fail expired: %w", err)
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
		rows, err := t.query(query, p.Owner, expires, t.wall, t.now, n)
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
	// Parameters: owner, expires, wall, now, n.
	const set = `SET state = 'running', fence = fence + 1, attempts = attempts + 1,
		lease_owner = ?1, lease_expires_at = ?2, updated_at = ?3`
	const returning = ` RETURNING id, publication_id, fence, attempts, lease_expires_at`
	if err := take(`UPDATE publication_items `+set+` WHERE id IN (SELECT id FROM publication_items
		WHERE state = 'running' AND lease_expires_at <= ?4 ORDER BY lease_expires_at, id LIMIT ?5)`+returning, false, p.Limit); err != nil {
		return nil, fmt.Errorf("reclaim expired: %w", err)
	}
	if n := p.Limit - len(claims); n > 0 {
		if err := take(`UPDATE publication_items `+set+` WHERE id IN (SELECT id FROM publication_items
			WHERE state = 'queued' AND run_after <= ?4 ORDER BY id LIMIT ?5)`+returning, true, n); err != nil {
			return nil, err
		}
	}
	if len(claims) == 0 {
		return nil, nil
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
		return nil, err
	}
	items, err := queryItems(t.tx, `i.id IN (SELECT value FROM json_each(?))`, string(idsJSON))
	if err != nil {
		return nil, fmt.Errorf("read items: %w", err)
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
	return out, nil
}

func scanStrings(rows *rows) ([]string, error) {
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
	var expires int64
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		expires = t.now + ttlMS(p.TTL)
		for _, l := range p.Leases {
			n, err := t.exec(`UPDATE publication_items SET lease_expires_at = ? WHERE `+itemLive+` AND lease_owner = ?`,
				expires, l.ItemID, l.Fence, t.now, p.Owner)
			if err != nil {
				return fmt.Errorf("renew lease of item %s: %w", l.ItemID, err)
			}
			if n == 0 {
				res.Lost = append(res.Lost, l.ItemID)
			}
		}
		return nil
	})
	if err != nil {
		return store.ItemRenewResult{}, fmt.Errorf("renew item leases: %w", err)
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
	out := make([]error, len(leases))
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		for i, l := range leases {
			var pub string
			err := t.queryRow(query, t.wall, l.ItemID, l.Fence, t.now).Scan(&pub)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				out[i] = store.ErrLeaseLost
				continue
			case err != nil:
				return fmt.Errorf("item %s: %w", l.ItemID, err)
			}
			move(t.pubs.Of(pub))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// FailItem ends a failed attempt: queued again after the backoff, or
// failed.
func (s *Store) FailItem(ctx context.Context, f store.ItemFailure) (intent.State, error) {
	var state intent.State
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		var pub string
		var used int
		err := t.queryRow(`SELECT publication_id, attempts - released FROM publication_items WHERE `+itemLive,
			f.ItemID, f.Fence, t.now).Scan(&pub, &used)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrLeaseLost
		case err != nil:
			return fmt.Errorf("fail item %s: %w", f.ItemID, err)
		}
		state = store.StateAfterFailure(false, f.Permanent, used, f.MaxAttempts)
		runAfter := t.now + max(ttlMS(f.Backoff), 0)
		if _, err := t.exec(`UPDATE publication_items SET state = ?, error = ?, run_after = ?,
			lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE `+itemLive,
			state, f.Error, runAfter, t.wall, f.ItemID, f.Fence, t.now); err != nil {
			return fmt.Errorf("fail item %s: %w", f.ItemID, err)
		}
		t.pubs.Of(pub).Move(intent.StateRunning, state)
		t.retryAt = time.Now().Add(f.Backoff)
		return nil
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return "", store.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("fail item: %w", err)
	}
	return state, nil
}
