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

// The lease queue (store.LeaseStore): one set of statements over the two
// tables of leased rows, tasks and publication_items, built from what a
// lane says of its kind (its table, its parent, whether the parent can be
// asked to cancel). The kinds supply the rest: the order in which queued
// rows are claimed (fair share for tasks, oldest first for items) and the
// payload a claim answers. Leases are measured by the database's clock,
// read once at the start of each transaction (dbNowSQL); every write of a
// row names its fence and checks the lease is live; the parent's counts
// move in the same IMMEDIATE transaction as its rows.

// dbNowSQL is the database's clock in integer milliseconds.
const dbNowSQL = `SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// nextChangeSQL is the change_seq of a task a statement changes (state,
// attempts, asset, error): one above the last one stamped. The trigger of
// migration 0006 moves task_change_clock up to it; SQLite has one writer,
// so the values are in commit order.
const nextChangeSQL = `(SELECT n + 1 FROM task_change_clock)`

// leaseTx is one write transaction of the lease methods: the database's
// clock, the wall clock for updated_at, and the parents' counts that move
// (batches', publications').
type leaseTx struct {
	*tx
	now     int64 // database clock, ms
	wall    int64 // s.now(), ms
	batches store.CountDeltas
	pubs    store.CountDeltas
	// retryAt is when a failed row is claimable again (its wake-up).
	retryAt time.Time
}

// The parents' counts, moved by leaseWrite.
const (
	updateCountsSQL = `UPDATE batches SET queued = queued + ?, running = running + ?,
		succeeded = succeeded + ?, failed = failed + ?, canceled = canceled + ?,
		started = MAX(started, ?), updated_at = ? WHERE id = ?`
	updatePublicationCountsSQL = `UPDATE publications SET queued = queued + ?, running = running + ?,
		succeeded = succeeded + ?, failed = failed + ?, started = MAX(started, ?), updated_at = ? WHERE id = ?`
)

// leaseWrite runs f in one write transaction (s.write) as a leaseTx, and
// moves the parents' counts before it commits, in id order. Once it has
// committed, the readers of the batches that moved are woken.
func (s *Store) leaseWrite(ctx context.Context, f func(*leaseTx) error) (err error) {
	defer func() {
		if err == nil {
			s.outage.Wrote() // the write lock is ours again: an outage is over
		}
	}()
	return s.write(ctx, func(t *tx) error {
		lt := &leaseTx{tx: t, wall: ms(s.now()), batches: store.CountDeltas{}, pubs: store.CountDeltas{}}
		if err := t.queryRow(dbNowSQL).Scan(&lt.now); err != nil {
			return fmt.Errorf("read database clock: %w", err)
		}
		if err := f(lt); err != nil {
			return err
		}
		for _, id := range lt.batches.IDs() {
			c := lt.batches[id]
			if _, err := t.exec(updateCountsSQL, c.Queued, c.Running, c.Succeeded, c.Failed, c.Canceled, c.Started, lt.wall, id); err != nil {
				return fmt.Errorf("update counts of batch %s: %w", id, err)
			}
		}
		for _, id := range lt.pubs.IDs() {
			c := lt.pubs[id]
			if _, err := t.exec(updatePublicationCountsSQL, c.Queued, c.Running, c.Succeeded, c.Failed, c.Started, lt.wall, id); err != nil {
				return fmt.Errorf("update counts of publication %s: %w", id, err)
			}
		}
		// Every task whose state moved moved its batch's counts.
		t.afterCommit(func() {
			s.wake.Publish(append(store.TaskWakes(lt.batches, lt.retryAt), store.ItemWakes(lt.pubs, lt.retryAt)...)...)
		})
		return nil
	})
}

// ttlMS converts a lease length to whole milliseconds, rounding up: a lease
// never ends before its holder expects.
func ttlMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// lane is one kind of leased row: its table and parent, and the lease
// statements built from them.
type lane struct {
	kind store.Kind
	// counts are the deltas of the kind's parents in a transaction.
	counts func(*leaseTx) store.CountDeltas
	// cancelable: the parent can be asked to cancel (batches).
	cancelable bool

	claimable, claimQueued, claimParent, findExpired, cancelExpired, failExpired, reclaim,
	renew, cancelLive, complete, failCheck, fail, release string
}

// leasedColumns are what a claim returns of each row; scanLeased reads
// them.
const leasedColumns = `id, %[2]s, fence, attempts, lease_expires_at`

// newLane builds the statements of a kind. parent is the column naming
// the parent row; canceling is SQL that is true when the parent was asked
// to cancel; stamp is set on every change of a row's state; filter is a
// further condition (with its parameters, just before the limit) on the
// queued rows claimParent takes.
func newLane(kind store.Kind, table, parent, canceling, stamp, filter, claimable string, counts func(*leaseTx) store.CountDeltas) *lane {
	f := func(q string) string { return fmt.Sprintf(q, table, parent, canceling, stamp, filter) }
	// live is the condition of every fenced write: this claim, still
	// running, not expired. Its parameters are id, fence, now.
	const live = `id = ? AND fence = ? AND state = 'running' AND lease_expires_at > ?`
	const take = `UPDATE %[1]s SET state = 'running', fence = fence + 1, attempts = attempts + 1,
		lease_owner = ?, lease_expires_at = ?, updated_at = ?%[4]s`
	const end = `lease_owner = NULL, lease_expires_at = NULL, updated_at = ?%[4]s`
	return &lane{
		kind:       kind,
		counts:     counts,
		cancelable: canceling != "0",
		claimable:  claimable,
		// Parameters of the claims: owner, expires, wall, [parent,] now,
		// [filter's,] limit.
		claimQueued: f(take + ` WHERE id IN (SELECT id FROM %[1]s
			WHERE state = 'queued' AND run_after <= ? ORDER BY id LIMIT ?) RETURNING ` + leasedColumns),
		claimParent: f(take + ` WHERE id IN (SELECT id FROM %[1]s
			WHERE %[2]s = ? AND state = 'queued' AND run_after <= ?%[5]s ORDER BY id LIMIT ?) RETURNING ` + leasedColumns),
		findExpired: f(`SELECT id, %[2]s, fence, attempts, attempts - released, %[3]s, lease_expires_at FROM %[1]s
			WHERE state = 'running' AND lease_expires_at <= ? ORDER BY lease_expires_at, id LIMIT ?`),
		cancelExpired: f(`UPDATE %[1]s SET state = 'canceled', ` + end + ` WHERE id = ? AND fence = ?`),
		failExpired:   f(`UPDATE %[1]s SET state = 'failed', error = ?, ` + end + ` WHERE id = ? AND fence = ?`),
		// A lease that expired in an outage of this process's calls is
		// taken back as if it had been released (the last parameter, 1).
		reclaim: f(`UPDATE %[1]s SET fence = fence + 1, attempts = attempts + 1, released = released + ?,
			lease_owner = ?, lease_expires_at = ?, updated_at = ?%[4]s WHERE id = ? AND fence = ? RETURNING ` + leasedColumns),
		renew:      f(`UPDATE %[1]s SET lease_expires_at = ? WHERE ` + live + ` AND lease_owner = ? RETURNING %[3]s`),
		cancelLive: f(`UPDATE %[1]s SET state = 'canceled', ` + end + ` WHERE ` + live + ` AND %[3]s RETURNING %[2]s`),
		complete: f(`UPDATE %[1]s SET state = 'succeeded', error = NULL, ` + end + `
			WHERE ` + live + ` AND NOT %[3]s RETURNING %[2]s`),
		failCheck: f(`SELECT %[2]s, attempts - released, %[3]s FROM %[1]s WHERE ` + live),
		fail:      f(`UPDATE %[1]s SET state = ?, error = ?, run_after = ?, ` + end + ` WHERE ` + live),
		release: f(`UPDATE %[1]s SET state = CASE WHEN %[3]s THEN 'canceled' ELSE 'queued' END,
			released = released + 1, run_after = ?, ` + end + ` WHERE ` + live + ` RETURNING %[2]s, state`),
	}
}

// The two kinds.
var (
	taskLane = newLane(store.KindTask, "tasks", "batch_id",
		`(SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id)`,
		`, change_seq = `+nextChangeSQL,
		// The generators of a JSON array (ClaimParams.SkipGenerators) are
		// left out.
		` AND generator NOT IN (SELECT value FROM json_each(?))`,
		// A batch with queued tasks (ready or not), or an expired lease.
		`SELECT EXISTS (SELECT 1 FROM batches WHERE queued > 0)
			OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running' AND lease_expires_at <= `+dbNowSQL[len("SELECT "):]+`)`,
		func(t *leaseTx) store.CountDeltas { return t.batches })
	itemLane = newLane(store.KindItem, "publication_items", "publication_id", "0", "", "",
		`SELECT EXISTS (SELECT 1 FROM publications WHERE queued > 0)
			OR EXISTS (SELECT 1 FROM publication_items WHERE state = 'running' AND lease_expires_at <= `+dbNowSQL[len("SELECT "):]+`)`,
		func(t *leaseTx) store.CountDeltas { return t.pubs })
)

// laneOf is the lane of a kind.
func laneOf(k store.Kind) (*lane, error) {
	switch k {
	case store.KindTask:
		return taskLane, nil
	case store.KindItem:
		return itemLane, nil
	}
	return nil, fmt.Errorf("no lease queue of kind %q", k)
}

// scanLeased reads claimed rows (leasedColumns).
func scanLeased(rows *rows) ([]store.Claimed, error) {
	defer rows.Close()
	var out []store.Claimed
	for rows.Next() {
		var l store.Claimed
		var expires int64
		if err := rows.Scan(&l.ID, &l.Parent, &l.Fence, &l.Attempt, &expires); err != nil {
			return nil, err
		}
		l.ExpiresAt = fromMS(expires)
		out = append(out, l)
	}
	return out, rows.Err()
}

// claim leases up to p.Limit rows of l's kind: running rows whose lease
// expired first, then queued ones in the kind's order (queued: it takes
// up to n and moves their parents' counts), and reads their payload
// (load), all in one transaction. An idle worker polls: the read pool is
// asked first, and the write lock taken only when there may be something
// to claim.
func claim[C any](ctx context.Context, s *Store, l *lane, p store.ClaimParams,
	queued func(t *leaseTx, expires int64, n int) ([]store.Claimed, error),
	load func(t *leaseTx, ls []store.Claimed) ([]C, error)) ([]C, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var maybe bool
	if err := s.read(ctx, func(t *tx) error { return t.queryRow(l.claimable).Scan(&maybe) }); err != nil {
		return nil, err
	}
	if !maybe {
		return nil, nil
	}
	var out []C
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		expires := t.now + ttlMS(p.TTL)
		got, err := t.reclaimExpired(l, p, expires, &s.outage)
		if err != nil {
			return err
		}
		if n := p.Limit - len(got); n > 0 {
			fresh, err := queued(t, expires, n)
			if err != nil {
				return err
			}
			got = append(got, fresh...)
		}
		if len(got) > 0 {
			out, err = load(t, got)
		}
		return err
	})
	return out, err
}

// takeQueued runs a claim of queued rows (claimQueued, claimParent) and
// moves the counts of what it took.
func (t *leaseTx) takeQueued(l *lane, q string, args ...any) ([]store.Claimed, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	got, err := scanLeased(rows)
	if err != nil {
		return nil, err
	}
	for _, g := range got {
		l.counts(t).Of(g.Parent).Move(intent.StateQueued, intent.StateRunning)
	}
	return got, nil
}

// reclaimExpired handles running rows whose lease expired, oldest expiry
// first, at most p.Limit of them: canceled if their parent was asked to
// cancel, failed if they used every attempt, otherwise claimed again.
//
// A lease that expired in one of outage's windows (in which this
// process's lease calls could not get through, store.LeaseOutage) is
// taken back as released: its try does not count against the attempts.
func (t *leaseTx) reclaimExpired(l *lane, p store.ClaimParams, expires int64, outage *store.LeaseOutage) ([]store.Claimed, error) {
	rows, err := t.query(l.findExpired, t.now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("find expired leases: %w", err)
	}
	type expired struct {
		id, parent      string
		fence           int64
		attempts, used  int
		cancelRequested bool
		expiredAt       int64
	}
	var found []expired
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.id, &e.parent, &e.fence, &e.attempts, &e.used, &e.cancelRequested, &e.expiredAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find expired leases: %w", err)
		}
		found = append(found, e)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var outages []store.Window
	if len(found) > 0 {
		outages = outage.Windows(fromMS(t.now))
	}
	var out []store.Claimed
	for _, e := range found {
		released := 0
		if store.InOutage(outages, fromMS(e.expiredAt)) {
			released, e.used = 1, e.used-1
		}
		switch state, msg := store.ExpiredEnd(e.cancelRequested, e.attempts, e.used, p.MaxAttempts); state {
		case intent.StateCanceled:
			if _, err := t.exec(l.cancelExpired, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("cancel expired %s: %w", l.kind, err)
			}
			l.counts(t).Of(e.parent).Move(intent.StateRunning, state)
		case intent.StateFailed:
			if _, err := t.exec(l.failExpired, msg, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("fail expired %s: %w", l.kind, err)
			}
			l.counts(t).Of(e.parent).Move(intent.StateRunning, state)
		default:
			rows, err := t.query(l.reclaim, released, p.Owner, expires, t.wall, e.id, e.fence)
			if err != nil {
				return nil, fmt.Errorf("reclaim expired %s: %w", l.kind, err)
			}
			got, err := scanLeased(rows)
			if err != nil {
				return nil, fmt.Errorf("reclaim expired %s: %w", l.kind, err)
			}
			out = append(out, got...)
		}
	}
	return out, nil
}

// ClaimTasks leases up to p.Limit tasks: expired leases first, then queued
// tasks in fair-share order (claimFairShare), in one transaction.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimParams) (_ []store.ClaimedTask, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	cs, err := claim(ctx, s, taskLane, p, func(t *leaseTx, expires int64, n int) ([]store.Claimed, error) {
		return t.claimFairShare(p.Owner, expires, n, skipJSON(p.SkipGenerators))
	}, (*leaseTx).loadTasks)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return cs, nil
}

// ClaimItems leases up to p.Limit publication items: expired leases
// first, then queued items oldest first, in one transaction.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimParams) (_ []store.ClaimedItem, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	cs, err := claim(ctx, s, itemLane, p, func(t *leaseTx, expires int64, n int) ([]store.Claimed, error) {
		return t.takeQueued(itemLane, itemLane.claimQueued, p.Owner, expires, t.wall, t.now, n)
	}, (*leaseTx).loadItems)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	return cs, nil
}

// idsJSON is the ids of ls as a JSON array, for json_each.
func idsJSON(ls []store.Claimed) (string, error) {
	b, err := json.Marshal(store.ClaimedIDs(ls))
	return string(b), err
}

// loadTasks reads the claimed tasks' payload: what the generator needs,
// and each batch's spec once, shared among its tasks.
func (t *leaseTx) loadTasks(ls []store.Claimed) ([]store.ClaimedTask, error) {
	ids, err := idsJSON(ls)
	if err != nil {
		return nil, err
	}
	rows, err := t.query(`SELECT id, actor, collection, frame, generator, candidate, step, provider_ref
		FROM tasks WHERE id IN (SELECT value FROM json_each(?))`, ids)
	if err != nil {
		return nil, fmt.Errorf("read claimed tasks: %w", err)
	}
	out, byID := store.ClaimedTasks(ls)
	for rows.Next() {
		var id string
		var c store.ClaimedTask
		if err := rows.Scan(&id, &c.Actor, &c.Collection, &c.Frame, &c.Generator, &c.Candidate, &c.Step, &c.ProviderRef); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read claimed tasks: %w", err)
		}
		if o := byID[id]; o != nil {
			o.Actor, o.Collection, o.Frame, o.Generator, o.Candidate, o.Step, o.ProviderRef =
				c.Actor, c.Collection, c.Frame, c.Generator, c.Candidate, c.Step, c.ProviderRef
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read claimed tasks: %w", err)
	}
	specs := map[string][]byte{}
	for i := range out {
		spec, ok := specs[out[i].BatchID]
		if !ok {
			if err := t.queryRow(`SELECT spec FROM batches WHERE id = ?`, out[i].BatchID).Scan(&spec); err != nil {
				return nil, fmt.Errorf("read spec of batch %s: %w", out[i].BatchID, err)
			}
			specs[out[i].BatchID] = spec
		}
		out[i].Spec = spec
	}
	return out, nil
}

// loadItems reads the claimed items' payload: each with its publication,
// its asset and the task that made it.
func (t *leaseTx) loadItems(ls []store.Claimed) ([]store.ClaimedItem, error) {
	ids, err := idsJSON(ls)
	if err != nil {
		return nil, err
	}
	items, err := queryItems(t.tx, `i.id IN (SELECT value FROM json_each(?))`, ids)
	if err != nil {
		return nil, fmt.Errorf("read claimed items: %w", err)
	}
	return store.ClaimedItems(ls, items), nil
}

// RenewLeases extends the owner's live leases.
func (s *Store) RenewLeases(ctx context.Context, p store.RenewParams) (_ store.RenewResult, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	var res store.RenewResult
	if err := p.Check(); err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	if len(p.Leases) == 0 {
		return res, nil
	}
	var expires int64
	err = s.leaseWrite(ctx, func(t *leaseTx) error {
		expires = t.now + ttlMS(p.TTL)
		for _, ls := range p.Leases {
			l, err := laneOf(ls.Kind)
			if err != nil {
				return err
			}
			var canceling bool
			err = t.queryRow(l.renew, expires, ls.ID, ls.Fence, t.now, p.Owner).Scan(&canceling)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				res.Lost = append(res.Lost, ls.ID)
			case err != nil:
				return fmt.Errorf("renew lease of %s %s: %w", l.kind, ls.ID, err)
			case canceling:
				res.Canceled = append(res.Canceled, ls.ID)
			}
		}
		return nil
	})
	if err != nil {
		return store.RenewResult{}, fmt.Errorf("renew leases: %w", err)
	}
	res.ExpiresAt = fromMS(expires)
	return res, nil
}

// cancelIfRequested ends a live lease whose parent was asked to cancel:
// the row becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live (or its kind cannot be
// canceled).
func (t *leaseTx) cancelIfRequested(l *lane, ls store.Lease) error {
	if !l.cancelable {
		return store.ErrLeaseLost
	}
	var parent string
	err := t.queryRow(l.cancelLive, t.wall, ls.ID, ls.Fence, t.now).Scan(&parent)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cancel %s %s: %w", l.kind, ls.ID, err)
	}
	return store.CancelRequested(l.counts(t), parent, err == nil)
}

// Completing a task: its asset is the one already stored for it, if any,
// else the new one, inserted only once the fenced update matched.
const (
	completeTaskSQL = `UPDATE tasks SET state = 'succeeded', error = NULL,
		asset_id = COALESCE((SELECT a.id FROM assets a WHERE a.task_id = tasks.id), ?),
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ?, change_seq = ` + nextChangeSQL + `
		WHERE id = ? AND fence = ? AND state = 'running' AND lease_expires_at > ?
			AND NOT (SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id)
		RETURNING batch_id, actor, asset_id`
	insertAssetSQL = `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// CompleteLeases ends leases with success, fenced; a task's with its
// asset.
func (s *Store) CompleteLeases(ctx context.Context, cs []store.Completion) (_ []store.CompletionResult, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(cs) == 0 {
		return nil, nil
	}
	if err := store.CheckCompletions(cs); err != nil {
		return nil, fmt.Errorf("complete leases: %w", err)
	}
	out := make([]store.CompletionResult, len(cs))
	err = s.leaseWrite(ctx, func(t *leaseTx) error {
		for i, c := range cs {
			l, err := laneOf(c.Kind)
			if err != nil {
				return err
			}
			var parent string
			if c.Kind == store.KindTask {
				var actor string
				err = t.queryRow(completeTaskSQL, c.Asset.ID, t.wall, c.ID, c.Fence, t.now).Scan(&parent, &actor, &out[i].AssetID)
				if err == nil && out[i].AssetID == c.Asset.ID {
					a := c.Asset
					if _, err := t.exec(insertAssetSQL, a.ID, actor, c.ID, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, t.wall); err != nil {
						return fmt.Errorf("complete task %s: insert asset: %w", c.ID, interpret(err))
					}
				}
			} else {
				err = t.queryRow(l.complete, t.wall, c.ID, c.Fence, t.now).Scan(&parent)
			}
			switch {
			case errors.Is(err, sql.ErrNoRows):
				if out[i].Err = t.cancelIfRequested(l, c.Lease); !store.IsItemError(out[i].Err) {
					return out[i].Err
				}
				continue
			case err != nil:
				return fmt.Errorf("complete %s %s: %w", l.kind, c.ID, err)
			}
			l.counts(t).Of(parent).Move(intent.StateRunning, intent.StateSucceeded)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete leases: %w", err)
	}
	return out, nil
}

// FailLease ends a failed attempt: queued again after the backoff, or
// failed, or canceled when the parent was asked to cancel.
func (s *Store) FailLease(ctx context.Context, f store.Failure) (_ intent.State, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	l, err := laneOf(f.Kind)
	if err != nil {
		return "", fmt.Errorf("fail lease: %w", err)
	}
	var state intent.State
	err = s.leaseWrite(ctx, func(t *leaseTx) error {
		var parent string
		var used int
		var canceling bool
		err := t.queryRow(l.failCheck, f.ID, f.Fence, t.now).Scan(&parent, &used, &canceling)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrLeaseLost
		case err != nil:
			return err
		}
		state = store.StateAfterFailure(canceling, f.Permanent, used, f.MaxAttempts)
		runAfter := t.now + max(ttlMS(f.Backoff), 0)
		if _, err := t.exec(l.fail, state, f.Error, runAfter, t.wall, f.ID, f.Fence, t.now); err != nil {
			return err
		}
		l.counts(t).Of(parent).Move(intent.StateRunning, state)
		t.retryAt = time.Now().Add(f.Backoff)
		return nil
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return "", store.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("fail %s %s: %w", l.kind, f.ID, err)
	}
	return state, nil
}

// ReleaseLeases hands leases back: queued at once, or canceled.
func (s *Store) ReleaseLeases(ctx context.Context, leases []store.Lease) (_ []error, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(leases) == 0 {
		return nil, nil
	}
	out := make([]error, len(leases))
	err = s.leaseWrite(ctx, func(t *leaseTx) error {
		for i, ls := range leases {
			l, err := laneOf(ls.Kind)
			if err != nil {
				return err
			}
			var parent string
			var state intent.State
			err = t.queryRow(l.release, t.now, t.wall, ls.ID, ls.Fence, t.now).Scan(&parent, &state)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				out[i] = store.ErrLeaseLost
				continue
			case err != nil:
				return fmt.Errorf("release %s %s: %w", l.kind, ls.ID, err)
			}
			l.counts(t).Of(parent).Move(intent.StateRunning, state)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("release leases: %w", err)
	}
	return out, nil
}

// activeBatchesSQL lists the batches that have a ready queued task, least
// recently touched first: the candidates of a claim's round-robin. The
// generators of a JSON array (ClaimParams.SkipGenerators) are left out.
const activeBatchesSQL = `SELECT b.id, b.actor FROM batches b
	WHERE b.queued > 0 AND EXISTS (SELECT 1 FROM tasks q
		WHERE q.batch_id = b.id AND q.state = 'queued' AND q.run_after <= ?
		AND q.generator NOT IN (SELECT value FROM json_each(?)))
	ORDER BY b.updated_at, b.id LIMIT ?`

// claimFairShare leases up to n ready queued tasks in fair-share order:
// round-robin across the actors of the active batches, across each
// actor's batches, in plan order within a batch. The shares are counted
// here and each batch's share taken with one statement (claimParent); a
// batch with fewer ready tasks than its share leaves the rest to the
// others, in another round. All of it runs in the claim's IMMEDIATE
// transaction, so no other claim sees the tasks between the choice and
// the update.
func (t *leaseTx) claimFairShare(owner string, expires int64, n int, skip string) ([]store.Claimed, error) {
	rows, err := t.query(activeBatchesSQL, t.now, skip, max(4*n, 64))
	if err != nil {
		return nil, fmt.Errorf("find active batches: %w", err)
	}
	var actors []*actorQueue
	byActor := map[string]*actorQueue{}
	for rows.Next() {
		var id, actor string
		if err := rows.Scan(&id, &actor); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find active batches: %w", err)
		}
		q := byActor[actor]
		if q == nil {
			q = &actorQueue{}
			byActor[actor] = q
			actors = append(actors, q)
		}
		q.batches = append(q.batches, id)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []store.Claimed
	for len(out) < n && len(actors) > 0 {
		for _, sh := range roundRobin(actors, n-len(out)) {
			got, err := t.takeQueued(taskLane, taskLane.claimParent, owner, expires, t.wall, sh.batch, t.now, skip, sh.n)
			if err != nil {
				return nil, fmt.Errorf("claim from batch %s: %w", sh.batch, err)
			}
			if len(got) < sh.n {
				sh.q.drop(sh.batch)
			}
			out = append(out, got...)
		}
		actors = slices.DeleteFunc(actors, func(q *actorQueue) bool { return len(q.batches) == 0 })
	}
	return out, nil
}

// noteLease records a lease call that began at start and ended with *err
// in s.outage (deferred by each lease method): a fault opens an outage
// window; leaseWrite's commits close it.
func (s *Store) noteLease(ctx context.Context, start time.Time, err *error) {
	s.outage.Note(ctx, start, *err)
}
