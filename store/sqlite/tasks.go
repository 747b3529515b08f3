package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"studio/intent"
	"studio/store"
)

// The task methods. Leases are measured by the database's clock, read once
// at the start of each transaction (dbNowSQL); every write of a task names
// its fence and checks the lease is live; the batch's counts move in the
// same IMMEDIATE transaction as its tasks.

// dbNowSQL is the database's clock in integer milliseconds.
const dbNowSQL = `SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// liveLease is the condition of every fenced write: this claim, still
// running, not expired. Its parameters are id, fence, now.
const liveLease = `id = ? AND fence = ? AND state = 'running' AND lease_expires_at > ?`

// notCanceling is true while the task's batch was not asked to cancel.
const notCanceling = `(SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id) = 0`

// claimColumns are what a claim returns of each task.
const claimColumns = `id, batch_id, actor, collection, frame, generator, candidate, attempts, fence, step, provider_ref, lease_expires_at`

// claimQueuedSQL leases ready queued tasks in fair-share order. Active
// batches (with a ready task, least recently touched first, at most
// :batches of them) each offer their first :n ready tasks in plan order;
// those are ranked round-robin across actors, then across an actor's
// batches, then within a batch, and the first :n are taken.
const claimQueuedSQL = `UPDATE tasks SET state = 'running', fence = fence + 1, attempts = attempts + 1,
	lease_owner = :owner, lease_expires_at = :expires, updated_at = :wall
WHERE id IN (
	WITH active AS (
		SELECT b.id, b.actor, b.updated_at FROM batches b
		WHERE b.queued > 0 AND EXISTS (SELECT 1 FROM tasks q
			WHERE q.batch_id = b.id AND q.state = 'queued' AND q.run_after <= :now)
		ORDER BY b.updated_at, b.id LIMIT :batches
	),
	cand AS (
		SELECT t.id, a.actor, a.id AS batch_id, a.updated_at,
			ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY t.id) AS rn
		FROM active a JOIN tasks t ON t.id IN (SELECT q.id FROM tasks q
			WHERE q.batch_id = a.id AND q.state = 'queued' AND q.run_after <= :now
			ORDER BY q.id LIMIT :n)
	),
	ranked AS (
		SELECT id, batch_id, updated_at,
			ROW_NUMBER() OVER (PARTITION BY actor ORDER BY rn, updated_at, batch_id) AS arn
		FROM cand
	)
	SELECT id FROM ranked ORDER BY arn, updated_at, batch_id LIMIT :n
)
RETURNING ` + claimColumns

// countDelta is how one batch's counts move in a transaction.
type countDelta struct {
	queued, running, succeeded, failed, canceled int
	started                                      bool
}

type deltas map[string]*countDelta

func (d deltas) of(batchID string) *countDelta {
	c := d[batchID]
	if c == nil {
		c = &countDelta{}
		d[batchID] = c
	}
	return c
}

// apply writes the batches' new counts, in batch id order.
func (d deltas) apply(ctx context.Context, tx *sql.Tx, wall int64) error {
	if len(d) == 0 {
		return nil
	}
	ids := make([]string, 0, len(d))
	for id := range d {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	stmt, err := tx.PrepareContext(ctx, `UPDATE batches SET queued = queued + ?, running = running + ?,
		succeeded = succeeded + ?, failed = failed + ?, canceled = canceled + ?,
		started = MAX(started, ?), updated_at = ? WHERE id = ?`)
	if err != nil {
		return fmt.Errorf("update counts: %w", err)
	}
	defer stmt.Close()
	for _, id := range ids {
		c := d[id]
		if _, err := stmt.ExecContext(ctx, c.queued, c.running, c.succeeded, c.failed, c.canceled, c.started, wall, id); err != nil {
			return fmt.Errorf("update counts of batch %s: %w", id, err)
		}
	}
	return nil
}

// taskTx is one write transaction of the task methods: the database's
// clock, the wall clock for updated_at, and the counts that move.
type taskTx struct {
	tx     *sql.Tx
	now    int64 // database clock, ms
	wall   int64 // s.now(), ms
	deltas deltas
}

func (s *Store) beginTask(ctx context.Context) (*taskTx, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	t := &taskTx{tx: tx, wall: ms(s.now()), deltas: deltas{}}
	if err := tx.QueryRowContext(ctx, dbNowSQL).Scan(&t.now); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("read database clock: %w", err)
	}
	return t, nil
}

func (t *taskTx) commit(ctx context.Context) error {
	if err := t.deltas.apply(ctx, t.tx, t.wall); err != nil {
		return err
	}
	return t.tx.Commit()
}

func (t *taskTx) rollback() { t.tx.Rollback() }

// ttlMS converts a lease length to whole milliseconds, rounding up: a lease
// never ends before its holder expects.
func ttlMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// ClaimTasks leases up to p.Limit tasks: expired leases first, then queued
// tasks in fair-share order, in one transaction.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim tasks: need an owner, a limit >= 1 and a ttl > 0")
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	defer t.rollback()
	expires := t.now + ttlMS(p.TTL)
	claimed, err := t.reclaimExpired(ctx, p, expires)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if n := p.Limit - len(claimed); n > 0 {
		rows, err := t.tx.QueryContext(ctx, claimQueuedSQL, sql.Named("owner", p.Owner), sql.Named("expires", expires),
			sql.Named("wall", t.wall), sql.Named("now", t.now), sql.Named("batches", max(4*n, 64)), sql.Named("n", n))
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
		fresh, err := scanClaims(rows)
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
		for _, c := range fresh {
			d := t.deltas.of(c.BatchID)
			d.queued--
			d.running++
			d.started = true
		}
		claimed = append(claimed, fresh...)
	}
	if err := t.attachSpecs(ctx, claimed); err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("claim tasks: commit: %w", err)
	}
	return claimed, nil
}

// reclaimExpired handles running tasks whose lease expired, oldest expiry
// first, at most p.Limit of them: canceled if their batch was asked to
// cancel, failed if they used every attempt, otherwise claimed again.
func (t *taskTx) reclaimExpired(ctx context.Context, p store.ClaimParams, expires int64) ([]store.ClaimedTask, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT t.id, t.batch_id, t.fence, t.attempts, t.attempts - t.released, b.cancel_requested
		FROM tasks t JOIN batches b ON b.id = t.batch_id
		WHERE t.state = 'running' AND t.lease_expires_at <= ?
		ORDER BY t.lease_expires_at LIMIT ?`, t.now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("find expired leases: %w", err)
	}
	type expired struct {
		id, batch       string
		fence           int64
		attempts, used  int
		cancelRequested bool
	}
	var found []expired
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.id, &e.batch, &e.fence, &e.attempts, &e.used, &e.cancelRequested); err != nil {
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
	var claimed []store.ClaimedTask
	for _, e := range found {
		switch {
		case e.cancelRequested:
			if _, err := t.tx.ExecContext(ctx, `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
				WHERE id = ? AND fence = ?`, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("cancel expired task: %w", err)
			}
			d := t.deltas.of(e.batch)
			d.running--
			d.canceled++
		case p.MaxAttempts > 0 && e.used >= p.MaxAttempts:
			msg := fmt.Sprintf("attempt %d: the lease expired (the worker stopped or crashed); no attempts left", e.attempts)
			if _, err := t.tx.ExecContext(ctx, `UPDATE tasks SET state = 'failed', error = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
				WHERE id = ? AND fence = ?`, msg, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("fail expired task: %w", err)
			}
			d := t.deltas.of(e.batch)
			d.running--
			d.failed++
		default:
			rows, err := t.tx.QueryContext(ctx, `UPDATE tasks SET fence = fence + 1, attempts = attempts + 1,
				lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE id = ? AND fence = ? RETURNING `+claimColumns,
				p.Owner, expires, t.wall, e.id, e.fence)
			if err != nil {
				return nil, fmt.Errorf("reclaim expired task: %w", err)
			}
			cs, err := scanClaims(rows)
			if err != nil {
				return nil, fmt.Errorf("reclaim expired task: %w", err)
			}
			claimed = append(claimed, cs...)
		}
	}
	return claimed, nil
}

func scanClaims(rows *sql.Rows) ([]store.ClaimedTask, error) {
	defer rows.Close()
	var out []store.ClaimedTask
	for rows.Next() {
		var c store.ClaimedTask
		var exp int64
		if err := rows.Scan(&c.TaskID, &c.BatchID, &c.Actor, &c.Collection, &c.Frame, &c.Generator, &c.Candidate,
			&c.Attempt, &c.Fence, &c.Step, &c.ProviderRef, &exp); err != nil {
			return nil, err
		}
		c.ExpiresAt = fromMS(exp)
		out = append(out, c)
	}
	return out, rows.Err()
}

// attachSpecs reads each claimed batch's spec once and shares it among its
// tasks.
func (t *taskTx) attachSpecs(ctx context.Context, cs []store.ClaimedTask) error {
	specs := map[string][]byte{}
	for i := range cs {
		spec, ok := specs[cs[i].BatchID]
		if !ok {
			if err := t.tx.QueryRowContext(ctx, `SELECT spec FROM batches WHERE id = ?`, cs[i].BatchID).Scan(&spec); err != nil {
				return fmt.Errorf("read spec of batch %s: %w", cs[i].BatchID, err)
			}
			specs[cs[i].BatchID] = spec
		}
		cs[i].Spec = spec
	}
	return nil
}

// RenewLeases extends the owner's live leases.
func (s *Store) RenewLeases(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	var res store.RenewResult
	if p.Owner == "" || p.TTL <= 0 {
		return res, fmt.Errorf("renew leases: need an owner and a ttl > 0")
	}
	if len(p.Leases) == 0 {
		return res, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	defer t.rollback()
	expires := t.now + ttlMS(p.TTL)
	stmt, err := t.tx.PrepareContext(ctx, `UPDATE tasks SET lease_expires_at = ?
		WHERE `+liveLease+` AND lease_owner = ?
		RETURNING (SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id)`)
	if err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	defer stmt.Close()
	for _, l := range p.Leases {
		var canceling bool
		err := stmt.QueryRowContext(ctx, expires, l.TaskID, l.Fence, t.now, p.Owner).Scan(&canceling)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res.Lost = append(res.Lost, l.TaskID)
		case err != nil:
			return store.RenewResult{}, fmt.Errorf("renew lease of task %s: %w", l.TaskID, err)
		case canceling:
			res.Canceled = append(res.Canceled, l.TaskID)
		}
	}
	if err := t.commit(ctx); err != nil {
		return store.RenewResult{}, fmt.Errorf("renew leases: commit: %w", err)
	}
	res.ExpiresAt = fromMS(expires)
	return res, nil
}

// cancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *taskTx) cancelIfRequested(ctx context.Context, l store.Lease) error {
	var batch string
	err := t.tx.QueryRowContext(ctx, `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
		WHERE `+liveLease+` AND NOT `+notCanceling+` RETURNING batch_id`, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrLeaseLost
	case err != nil:
		return fmt.Errorf("cancel task %s: %w", l.TaskID, err)
	}
	d := t.deltas.of(batch)
	d.running--
	d.canceled++
	return store.ErrTaskCanceled
}

// itemErr tells a per-item outcome (lease lost, canceled) from a failure
// of the transaction.
func itemErr(err error) bool {
	return errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrTaskCanceled)
}

// SaveSteps records steps and provider references, fenced.
func (s *Store) SaveSteps(ctx context.Context, steps []store.StepSave) ([]error, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	defer t.rollback()
	stmt, err := t.tx.PrepareContext(ctx, `UPDATE tasks SET step = ?, provider_ref = ?, updated_at = ?
		WHERE `+liveLease+` AND `+notCanceling)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	defer stmt.Close()
	out := make([]error, len(steps))
	for i, st := range steps {
		res, err := stmt.ExecContext(ctx, st.Step, st.ProviderRef, t.wall, st.TaskID, st.Fence, t.now)
		if err != nil {
			return nil, fmt.Errorf("save step of task %s: %w", st.TaskID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("save step of task %s: %w", st.TaskID, err)
		} else if n == 0 {
			if out[i] = t.cancelIfRequested(ctx, st.Lease); !itemErr(out[i]) {
				return nil, fmt.Errorf("save steps: %w", out[i])
			}
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("save steps: commit: %w", err)
	}
	return out, nil
}

// CompleteTasks marks tasks succeeded with their assets, fenced.
func (s *Store) CompleteTasks(ctx context.Context, cs []store.Completion) ([]store.CompletionResult, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	for _, c := range cs {
		if c.Asset.ID == "" || c.Asset.SHA256 == "" || c.Asset.ContentType == "" {
			return nil, fmt.Errorf("complete tasks: task %s: the asset needs an id, a sha256 and a content type", c.TaskID)
		}
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	defer t.rollback()
	// The task first: its asset is the one already stored for it, if any,
	// else the new one, inserted only once the fenced update matched.
	done, err := t.tx.PrepareContext(ctx, `UPDATE tasks SET state = 'succeeded', error = NULL,
		asset_id = COALESCE((SELECT a.id FROM assets a WHERE a.task_id = tasks.id), ?),
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
		WHERE `+liveLease+` AND `+notCanceling+`
		RETURNING batch_id, actor, asset_id`)
	if err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	defer done.Close()
	insert, err := t.tx.PrepareContext(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	defer insert.Close()
	out := make([]store.CompletionResult, len(cs))
	for i, c := range cs {
		var batch, actor, assetID string
		err := done.QueryRowContext(ctx, c.Asset.ID, t.wall, c.TaskID, c.Fence, t.now).Scan(&batch, &actor, &assetID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if out[i].Err = t.cancelIfRequested(ctx, c.Lease); !itemErr(out[i].Err) {
				return nil, fmt.Errorf("complete tasks: %w", out[i].Err)
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("complete task %s: %w", c.TaskID, err)
		}
		if assetID == c.Asset.ID {
			a := c.Asset
			if _, err := insert.ExecContext(ctx, a.ID, actor, c.TaskID, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, t.wall); err != nil {
				return nil, fmt.Errorf("complete task %s: insert asset: %w", c.TaskID, interpret(err))
			}
		}
		out[i].AssetID = assetID
		d := t.deltas.of(batch)
		d.running--
		d.succeeded++
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("complete tasks: commit: %w", err)
	}
	return out, nil
}

// FailTask ends a failed attempt: queued again after the backoff, or
// failed, or canceled when the batch was asked to cancel.
func (s *Store) FailTask(ctx context.Context, f store.Failure) (string, error) {
	t, err := s.beginTask(ctx)
	if err != nil {
		return "", fmt.Errorf("fail task: %w", err)
	}
	defer t.rollback()
	var batch string
	var used int
	var canceling bool
	err = t.tx.QueryRowContext(ctx, `SELECT batch_id, attempts - released, NOT `+notCanceling+`
		FROM tasks WHERE `+liveLease, f.TaskID, f.Fence, t.now).Scan(&batch, &used, &canceling)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", store.ErrLeaseLost
	case err != nil:
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	state := intent.StateQueued
	switch {
	case canceling:
		state = intent.StateCanceled
	case f.Permanent || (f.MaxAttempts > 0 && used >= f.MaxAttempts):
		state = intent.StateFailed
	}
	runAfter := t.now + max(ttlMS(f.Backoff), 0)
	if _, err := t.tx.ExecContext(ctx, `UPDATE tasks SET state = ?, error = ?, run_after = ?,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ? WHERE `+liveLease,
		state, f.Error, runAfter, t.wall, f.TaskID, f.Fence, t.now); err != nil {
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	d := t.deltas.of(batch)
	d.running--
	switch state {
	case intent.StateQueued:
		d.queued++
	case intent.StateFailed:
		d.failed++
	case intent.StateCanceled:
		d.canceled++
	}
	if err := t.commit(ctx); err != nil {
		return "", fmt.Errorf("fail task: commit: %w", err)
	}
	return state, nil
}

// ReleaseTasks hands leases back: queued at once, or canceled.
func (s *Store) ReleaseTasks(ctx context.Context, leases []store.Lease) ([]error, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("release tasks: %w", err)
	}
	defer t.rollback()
	stmt, err := t.tx.PrepareContext(ctx, `UPDATE tasks SET
		state = CASE WHEN `+notCanceling+` THEN 'queued' ELSE 'canceled' END,
		released = released + 1, run_after = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
		WHERE `+liveLease+` RETURNING batch_id, state`)
	if err != nil {
		return nil, fmt.Errorf("release tasks: %w", err)
	}
	defer stmt.Close()
	out := make([]error, len(leases))
	for i, l := range leases {
		var batch, state string
		err := stmt.QueryRowContext(ctx, t.now, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch, &state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out[i] = store.ErrLeaseLost
			continue
		case err != nil:
			return nil, fmt.Errorf("release task %s: %w", l.TaskID, err)
		}
		d := t.deltas.of(batch)
		d.running--
		if state == intent.StateQueued {
			d.queued++
		} else {
			d.canceled++
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("release tasks: commit: %w", err)
	}
	return out, nil
}

// AssetForTask reads the asset stored for a task.
func (s *Store) AssetForTask(ctx context.Context, taskID string) (intent.Asset, error) {
	var a intent.Asset
	var task sql.NullString
	var created int64
	err := s.read.QueryRowContext(ctx, `SELECT id, actor, task_id, sha256, content_type, size, width, height, created_at
		FROM assets WHERE task_id = ?`, taskID).
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

// BlobInUse says whether an asset names the bytes of sha256.
func (s *Store) BlobInUse(ctx context.Context, sha256 string) (bool, error) {
	var in bool
	if err := s.read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE sha256 = ?)`, sha256).Scan(&in); err != nil {
		return false, fmt.Errorf("blob in use: %w", err)
	}
	return in, nil
}
