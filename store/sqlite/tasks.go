package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// claimableSQL says whether a claim may find something: a batch with
// queued tasks (ready or not), or an expired lease.
const claimableSQL = `SELECT EXISTS (SELECT 1 FROM batches WHERE queued > 0)
	OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running'
		AND lease_expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER))`

// activeBatchesSQL lists the batches that have a ready queued task, least
// recently touched first: the candidates of a claim's round-robin.
const activeBatchesSQL = `SELECT b.id, b.actor FROM batches b
	WHERE b.queued > 0 AND EXISTS (SELECT 1 FROM tasks q
		WHERE q.batch_id = b.id AND q.state = 'queued' AND q.run_after <= ?)
	ORDER BY b.updated_at, b.id LIMIT ?`

// nextChangeSQL is the change_seq of a task a statement changes (state,
// attempts, asset, error): one above the last one stamped. The trigger of
// migration 0006 moves task_change_clock up to it; SQLite has one writer,
// so the values are in commit order.
const nextChangeSQL = `(SELECT n + 1 FROM task_change_clock)`

// claimBatchSQL leases the first ready queued tasks of one batch, in plan
// order. Parameters: owner, expires, wall, batch, now, limit.
const claimBatchSQL = `UPDATE tasks SET state = 'running', fence = fence + 1, attempts = attempts + 1,
	lease_owner = ?, lease_expires_at = ?, updated_at = ?, change_seq = ` + nextChangeSQL + `
WHERE id IN (SELECT q.id FROM tasks q
	WHERE q.batch_id = ? AND q.state = 'queued' AND q.run_after <= ?
	ORDER BY q.id LIMIT ?)
RETURNING ` + claimColumns

// The task methods' statements, prepared once per store (see taskStmts).
const (
	updateCountsSQL = `UPDATE batches SET queued = queued + ?, running = running + ?,
		succeeded = succeeded + ?, failed = failed + ?, canceled = canceled + ?,
		started = MAX(started, ?), updated_at = ? WHERE id = ?`
	findExpiredSQL = `SELECT t.id, t.batch_id, t.fence, t.attempts, t.attempts - t.released, b.cancel_requested
		FROM tasks t JOIN batches b ON b.id = t.batch_id
		WHERE t.state = 'running' AND t.lease_expires_at <= ?
		ORDER BY t.lease_expires_at LIMIT ?`
	cancelExpiredSQL = `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?,
		change_seq = ` + nextChangeSQL + ` WHERE id = ? AND fence = ?`
	failExpiredSQL = `UPDATE tasks SET state = 'failed', error = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?,
		change_seq = ` + nextChangeSQL + ` WHERE id = ? AND fence = ?`
	reclaimSQL = `UPDATE tasks SET fence = fence + 1, attempts = attempts + 1,
		lease_owner = ?, lease_expires_at = ?, updated_at = ?, change_seq = ` + nextChangeSQL + `
		WHERE id = ? AND fence = ? RETURNING ` + claimColumns
	specSQL      = `SELECT spec FROM batches WHERE id = ?`
	renewTaskSQL = `UPDATE tasks SET lease_expires_at = ?
		WHERE ` + liveLease + ` AND lease_owner = ?
		RETURNING (SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id)`
	cancelLiveSQL = `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?,
		change_seq = ` + nextChangeSQL + ` WHERE ` + liveLease + ` AND NOT ` + notCanceling + ` RETURNING batch_id`
	saveStepSQL = `UPDATE tasks SET step = ?, provider_ref = ?, updated_at = ?
		WHERE ` + liveLease + ` AND ` + notCanceling
	// The task first: its asset is the one already stored for it, if any,
	// else the new one, inserted only once the fenced update matched.
	completeSQL = `UPDATE tasks SET state = 'succeeded', error = NULL,
		asset_id = COALESCE((SELECT a.id FROM assets a WHERE a.task_id = tasks.id), ?),
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ?, change_seq = ` + nextChangeSQL + `
		WHERE ` + liveLease + ` AND ` + notCanceling + `
		RETURNING batch_id, actor, asset_id`
	insertAssetSQL = `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	failCheckSQL = `SELECT batch_id, attempts - released, NOT ` + notCanceling + `
		FROM tasks WHERE ` + liveLease
	failSQL = `UPDATE tasks SET state = ?, error = ?, run_after = ?,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = ?, change_seq = ` + nextChangeSQL + `
		WHERE ` + liveLease
	releaseTaskSQL = `UPDATE tasks SET
		state = CASE WHEN ` + notCanceling + ` THEN 'queued' ELSE 'canceled' END,
		released = released + 1, run_after = ?, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?,
		change_seq = ` + nextChangeSQL + ` WHERE ` + liveLease + ` RETURNING batch_id, state`
)

var taskSQL = []string{dbNowSQL, activeBatchesSQL, claimBatchSQL, updateCountsSQL, findExpiredSQL, cancelExpiredSQL, failExpiredSQL,
	reclaimSQL, specSQL, renewTaskSQL, cancelLiveSQL, saveStepSQL, completeSQL, insertAssetSQL, failCheckSQL, failSQL, releaseTaskSQL}

// taskStmts are the task statements prepared on the write pool, once: the
// claim alone is a large statement to compile, and the worker's writes are
// many small transactions. They are prepared before a transaction begins
// (the pool has one connection) and bound to each transaction with
// Tx.StmtContext, which reuses the connection's prepared statement.
type taskStmts struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func (c *taskStmts) prepare(ctx context.Context, db *sql.DB) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stmts != nil {
		return nil
	}
	m := make(map[string]*sql.Stmt, len(taskSQL))
	for _, q := range taskSQL {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			for _, p := range m {
				p.Close()
			}
			return fmt.Errorf("prepare task statements: %w", err)
		}
		m[q] = st
	}
	c.stmts = m
	return nil
}

// applyBatchDeltas writes the batches' new counts, in batch id order.
func applyBatchDeltas(ctx context.Context, t *taskTx, d store.CountDeltas) error {
	if len(d) == 0 {
		return nil
	}
	ids := d.IDs()
	stmt := t.stmt(ctx, updateCountsSQL)
	for _, id := range ids {
		c := d[id]
		if _, err := stmt.ExecContext(ctx, c.Queued, c.Running, c.Succeeded, c.Failed, c.Canceled, c.Started, t.wall, id); err != nil {
			return fmt.Errorf("update counts of batch %s: %w", id, err)
		}
	}
	return nil
}

// taskTx is one write transaction of the task methods: the database's
// clock, the wall clock for updated_at, and the counts that move.
type taskTx struct {
	s      *Store
	tx     *sql.Tx
	now    int64 // database clock, ms
	wall   int64 // s.now(), ms
	deltas store.CountDeltas
	// retryAt is when a failed task is claimable again (its wake-up).
	retryAt time.Time
}

func (s *Store) beginTask(ctx context.Context) (*taskTx, error) {
	if err := s.taskStmts.prepare(ctx, s.write); err != nil {
		return nil, err
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	t := &taskTx{s: s, tx: tx, wall: ms(s.now()), deltas: store.CountDeltas{}}
	if err := t.stmt(ctx, dbNowSQL).QueryRowContext(ctx).Scan(&t.now); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("read database clock: %w", err)
	}
	return t, nil
}

// stmt binds a prepared statement to the transaction.
func (t *taskTx) stmt(ctx context.Context, q string) *sql.Stmt {
	return t.tx.StmtContext(ctx, t.s.taskStmts.stmts[q])
}

func (t *taskTx) commit(ctx context.Context) error {
	if err := applyBatchDeltas(ctx, t, t.deltas); err != nil {
		return err
	}
	if err := t.tx.Commit(); err != nil {
		return err
	}
	// Every task whose state moved moved its batch's counts.
	t.s.wake.Publish(store.TaskWakes(t.deltas, t.retryAt)...)
	return nil
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
	// An idle worker polls: it asks the read pool first, and takes the
	// write lock only when there may be something to claim.
	var maybe bool
	if err := s.read.QueryRowContext(ctx, claimableSQL).Scan(&maybe); err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if !maybe {
		return nil, nil
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
		fresh, err := t.claimQueued(ctx, p.Owner, expires, n)
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
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

// claimQueued leases up to n ready queued tasks in fair-share order:
// round-robin across the actors of the active batches, across each
// actor's batches, in plan order within a batch. The shares are counted
// here and each batch's share taken with one statement; a batch with fewer
// ready tasks than its share leaves the rest to the others, in another
// round. All of it runs in the claim's IMMEDIATE transaction, so no other
// claim sees the tasks between the choice and the update.
func (t *taskTx) claimQueued(ctx context.Context, owner string, expires int64, n int) ([]store.ClaimedTask, error) {
	rows, err := t.stmt(ctx, activeBatchesSQL).QueryContext(ctx, t.now, max(4*n, 64))
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
	stmt := t.stmt(ctx, claimBatchSQL)
	var out []store.ClaimedTask
	for len(out) < n && len(actors) > 0 {
		shares := roundRobin(actors, n-len(out))
		for _, sh := range shares {
			rows, err := stmt.QueryContext(ctx, owner, expires, t.wall, sh.batch, t.now, sh.n)
			if err != nil {
				return nil, fmt.Errorf("claim from batch %s: %w", sh.batch, err)
			}
			got, err := scanClaims(rows)
			if err != nil {
				return nil, fmt.Errorf("claim from batch %s: %w", sh.batch, err)
			}
			if len(got) < sh.n {
				sh.q.drop(sh.batch)
			}
			d := t.deltas.Of(sh.batch)
			d.Queued -= len(got)
			d.Running += len(got)
			d.Started = d.Started || len(got) > 0
			out = append(out, got...)
		}
		actors = slices.DeleteFunc(actors, func(q *actorQueue) bool { return len(q.batches) == 0 })
	}
	return out, nil
}

// actorQueue is one actor's active batches, in turn order.
type actorQueue struct {
	batches []string
	next    int // the batch whose turn is next
}

func (q *actorQueue) drop(batch string) {
	if i := slices.Index(q.batches, batch); i >= 0 {
		q.batches = slices.Delete(q.batches, i, i+1)
		if q.next > i {
			q.next--
		}
		if q.next >= len(q.batches) {
			q.next = 0
		}
	}
}

// share is how many tasks to take from one batch.
type share struct {
	q     *actorQueue
	batch string
	n     int
}

// roundRobin deals n picks one at a time across the actors, each actor
// giving its pick to its batches in turn, and answers the picks per batch
// in the order their first pick was dealt.
func roundRobin(actors []*actorQueue, n int) []*share {
	var out []*share
	idx := map[string]*share{}
	for dealt := 0; dealt < n; {
		for _, q := range actors {
			if dealt == n {
				break
			}
			b := q.batches[q.next]
			q.next = (q.next + 1) % len(q.batches)
			sh := idx[b]
			if sh == nil {
				sh = &share{q: q, batch: b}
				idx[b] = sh
				out = append(out, sh)
			}
			sh.n++
			dealt++
		}
	}
	return out
}

// reclaimExpired handles running tasks whose lease expired, oldest expiry
// first, at most p.Limit of them: canceled if their batch was asked to
// cancel, failed if they used every attempt, otherwise claimed again.
func (t *taskTx) reclaimExpired(ctx context.Context, p store.ClaimParams, expires int64) ([]store.ClaimedTask, error) {
	rows, err := t.stmt(ctx, findExpiredSQL).QueryContext(ctx, t.now, p.Limit)
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
			if _, err := t.stmt(ctx, cancelExpiredSQL).ExecContext(ctx, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("cancel expired task: %w", err)
			}
			t.deltas.Of(e.batch).Move(intent.StateRunning, intent.StateCanceled)
		case store.OutOfAttempts(e.used, p.MaxAttempts):
			msg := fmt.Sprintf("attempt %d: the lease expired (the worker stopped or crashed); no attempts left", e.attempts)
			if _, err := t.stmt(ctx, failExpiredSQL).ExecContext(ctx, msg, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("fail expired task: %w", err)
			}
			t.deltas.Of(e.batch).Move(intent.StateRunning, intent.StateFailed)
		default:
			rows, err := t.stmt(ctx, reclaimSQL).QueryContext(ctx, p.Owner, expires, t.wall, e.id, e.fence)
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
			if err := t.stmt(ctx, specSQL).QueryRowContext(ctx, cs[i].BatchID).Scan(&spec); err != nil {
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
	stmt := t.stmt(ctx, renewTaskSQL)
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

// CancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *taskTx) CancelIfRequested(ctx context.Context, l store.Lease) error {
	var batch string
	err := t.stmt(ctx, cancelLiveSQL).QueryRowContext(ctx, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cancel task %s: %w", l.TaskID, err)
	}
	return store.CancelRequested(t.deltas, batch, err == nil)
}

// SaveStep records one step, fenced; it says whether the lease was live.
func (t *taskTx) SaveStep(ctx context.Context, st store.StepSave) (bool, error) {
	res, err := t.stmt(ctx, saveStepSQL).ExecContext(ctx, st.Step, st.ProviderRef, t.wall, st.TaskID, st.Fence, t.now)
	if err != nil {
		return false, fmt.Errorf("save step of task %s: %w", st.TaskID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("save step of task %s: %w", st.TaskID, err)
	}
	return n > 0, nil
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
	out, err := store.SaveStepsIn(ctx, t, steps, store.InOrder(len(steps)))
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
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
	done, insert := t.stmt(ctx, completeSQL), t.stmt(ctx, insertAssetSQL)
	out := make([]store.CompletionResult, len(cs))
	for i, c := range cs {
		var batch, actor, assetID string
		err := done.QueryRowContext(ctx, c.Asset.ID, t.wall, c.TaskID, c.Fence, t.now).Scan(&batch, &actor, &assetID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if out[i].Err = t.CancelIfRequested(ctx, c.Lease); !store.IsItemError(out[i].Err) {
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
		t.deltas.Of(batch).Move(intent.StateRunning, intent.StateSucceeded)
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("complete tasks: commit: %w", err)
	}
	return out, nil
}

// FailTask ends a failed attempt: queued again after the backoff, or
// failed, or canceled when the batch was asked to cancel.
func (s *Store) FailTask(ctx context.Context, f store.Failure) (intent.State, error) {
	t, err := s.beginTask(ctx)
	if err != nil {
		return "", fmt.Errorf("fail task: %w", err)
	}
	defer t.rollback()
	var batch string
	var used int
	var canceling bool
	err = t.stmt(ctx, failCheckSQL).QueryRowContext(ctx, f.TaskID, f.Fence, t.now).Scan(&batch, &used, &canceling)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", store.ErrLeaseLost
	case err != nil:
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	state := store.StateAfterFailure(canceling, f.Permanent, used, f.MaxAttempts)
	runAfter := t.now + max(ttlMS(f.Backoff), 0)
	if _, err := t.stmt(ctx, failSQL).ExecContext(ctx, state, f.Error, runAfter, t.wall, f.TaskID, f.Fence, t.now); err != nil {
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	t.deltas.Of(batch).Move(intent.StateRunning, state)
	t.retryAt = time.Now().Add(f.Backoff)
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
	stmt := t.stmt(ctx, releaseTaskSQL)
	out := make([]error, len(leases))
	for i, l := range leases {
		var batch string
		var state intent.State
		err := stmt.QueryRowContext(ctx, t.now, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch, &state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out[i] = store.ErrLeaseLost
			continue
		case err != nil:
			return nil, fmt.Errorf("release task %s: %w", l.TaskID, err)
		}
		t.deltas.Of(batch).Move(intent.StateRunning, state)
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
