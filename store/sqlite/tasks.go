package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
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

// claimableSQL says whether a claim may find something: a batch with
// queued tasks (ready or not), or an expired lease.
const claimableSQL = `SELECT EXISTS (SELECT 1 FROM batches WHERE queued > 0)
	OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running'
		AND lease_expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER))`

// activeBatchesSQL lists the batches that have a ready queued task, least
// recently touched first: the candidates of a claim's round-robin. The
// generators of a JSON array (ClaimParams.SkipGenerators) are left out.
const activeBatchesSQL = `SELECT b.id, b.actor FROM batches b
	WHERE b.queued > 0 AND EXISTS (SELECT 1 FROM tasks q
		WHERE q.batch_id = b.id AND q.state = 'queued' AND q.run_after <= ?
		AND q.generator NOT IN (SELECT value FROM json_each(?)))
	ORDER BY b.updated_at, b.id LIMIT ?`

// nextChangeSQL is the change_seq of a task a statement changes (state,
// attempts, asset, error): one above the last one stamped. The trigger of
// migration 0006 moves task_change_clock up to it; SQLite has one writer,
// so the values are in commit order.
const nextChangeSQL = `(SELECT n + 1 FROM task_change_clock)`

// claimBatchSQL leases the first ready queued tasks of one batch, in plan
// order. Parameters: owner, expires, wall, batch, now, skipped generators
// (a JSON array), limit.
const claimBatchSQL = `UPDATE tasks SET state = 'running', fence = fence + 1, attempts = attempts + 1,
	lease_owner = ?, lease_expires_at = ?, updated_at = ?, change_seq = ` + nextChangeSQL + `
WHERE id IN (SELECT q.id FROM tasks q
	WHERE q.batch_id = ? AND q.state = 'queued' AND q.run_after <= ?
	AND q.generator NOT IN (SELECT value FROM json_each(?))
	ORDER BY q.id LIMIT ?)
RETURNING ` + claimColumns

// The task methods' statements (prepared once per connection: conn.go).
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
	saveStepSQL = `UPDATE tasks SET step = ?, provider_ref = ?, updated_at = ?,
		generation_calls = generation_calls + ?, history = history || ?
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

// leaseTx is one write transaction of the lease methods (tasks and
// publication items): the database's clock, the wall clock for
// updated_at, and the parents' counts that move (batches', publications').
type leaseTx struct {
	*tx
	now     int64 // database clock, ms
	wall    int64 // s.now(), ms
	batches store.CountDeltas
	pubs    store.CountDeltas
	// retryAt is when a failed task or item is claimable again (its
	// wake-up).
	retryAt time.Time
}

// leaseWrite runs f in one write transaction (s.write) as a leaseTx, and
// moves the parents' counts before it commits, in id order. Once it has
// committed, the readers of the batches that moved are woken.
func (s *Store) leaseWrite(ctx context.Context, f func(*leaseTx) error) error {
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

// ClaimTasks leases up to p.Limit tasks: expired leases first, then queued
// tasks in fair-share order, in one transaction.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim tasks: need an owner, a limit >= 1 and a ttl > 0")
	}
	// An idle worker polls: it asks the read pool first, and takes the
	// write lock only when there may be something to claim.
	var maybe bool
	if err := s.read(ctx, func(t *tx) error { return t.queryRow(claimableSQL).Scan(&maybe) }); err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if !maybe {
		return nil, nil
	}
	var claimed []store.ClaimedTask
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		expires := t.now + ttlMS(p.TTL)
		var err error
		if claimed, err = t.reclaimExpired(p, expires); err != nil {
			return err
		}
		if n := p.Limit - len(claimed); n > 0 {
			fresh, err := t.claimQueued(p.Owner, expires, n, skipJSON(p.SkipGenerators))
			if err != nil {
				return err
			}
			claimed = append(claimed, fresh...)
		}
		return t.attachSpecs(claimed)
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
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
func (t *leaseTx) claimQueued(owner string, expires int64, n int, skip string) ([]store.ClaimedTask, error) {
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
	var out []store.ClaimedTask
	for len(out) < n && len(actors) > 0 {
		shares := roundRobin(actors, n-len(out))
		for _, sh := range shares {
			rows, err := t.query(claimBatchSQL, owner, expires, t.wall, sh.batch, t.now, skip, sh.n)
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
			d := t.batches.Of(sh.batch)
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
func (t *leaseTx) reclaimExpired(p store.ClaimParams, expires int64) ([]store.ClaimedTask, error) {
	rows, err := t.query(findExpiredSQL, t.now, p.Limit)
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
			if _, err := t.exec(cancelExpiredSQL, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("cancel expired task: %w", err)
			}
			t.batches.Of(e.batch).Move(intent.StateRunning, intent.StateCanceled)
		case store.OutOfAttempts(e.used, p.MaxAttempts):
			msg := fmt.Sprintf("attempt %d: the lease expired (the worker stopped or crashed); no attempts left", e.attempts)
			if _, err := t.exec(failExpiredSQL, msg, t.wall, e.id, e.fence); err != nil {
				return nil, fmt.Errorf("fail expired task: %w", err)
			}
			t.batches.Of(e.batch).Move(intent.StateRunning, intent.StateFailed)
		default:
			rows, err := t.query(reclaimSQL, p.Owner, expires, t.wall, e.id, e.fence)
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

func scanClaims(rows *rows) ([]store.ClaimedTask, error) {
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
func (t *leaseTx) attachSpecs(cs []store.ClaimedTask) error {
	specs := map[string][]byte{}
	for i := range cs {
		spec, ok := specs[cs[i].BatchID]
		if !ok {
			if err := t.queryRow(specSQL, cs[i].BatchID).Scan(&spec); err != nil {
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
	var expires int64
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		expires = t.now + ttlMS(p.TTL)
		for _, l := range p.Leases {
			var canceling bool
			err := t.queryRow(renewTaskSQL, expires, l.TaskID, l.Fence, t.now, p.Owner).Scan(&canceling)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				res.Lost = append(res.Lost, l.TaskID)
			case err != nil:
				return fmt.Errorf("renew lease of task %s: %w", l.TaskID, err)
			case canceling:
				res.Canceled = append(res.Canceled, l.TaskID)
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

// CancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *leaseTx) CancelIfRequested(_ context.Context, l store.Lease) error {
	var batch string
	err := t.queryRow(cancelLiveSQL, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cancel task %s: %w", l.TaskID, err)
	}
	return store.CancelRequested(t.batches, batch, err == nil)
}

// SaveStep records one step, fenced; it says whether the lease was live.
func (t *leaseTx) SaveStep(_ context.Context, st store.StepSave) (bool, error) {
	n, err := t.exec(saveStepSQL, st.Step, st.ProviderRef, t.wall,
		st.Calls, store.HistoryLine(st.Note), st.TaskID, st.Fence, t.now)
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
	var out []error
	err := s.leaseWrite(ctx, func(t *leaseTx) (err error) {
		out, err = store.SaveStepsIn(ctx, t, steps, store.InOrder(len(steps)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
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
	out := make([]store.CompletionResult, len(cs))
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		for i, c := range cs {
			var batch, actor, assetID string
			err := t.queryRow(completeSQL, c.Asset.ID, t.wall, c.TaskID, c.Fence, t.now).Scan(&batch, &actor, &assetID)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				if out[i].Err = t.CancelIfRequested(ctx, c.Lease); !store.IsItemError(out[i].Err) {
					return out[i].Err
				}
				continue
			case err != nil:
				return fmt.Errorf("complete task %s: %w", c.TaskID, err)
			}
			if assetID == c.Asset.ID {
				a := c.Asset
				if _, err := t.exec(insertAssetSQL, a.ID, actor, c.TaskID, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, t.wall); err != nil {
					return fmt.Errorf("complete task %s: insert asset: %w", c.TaskID, interpret(err))
				}
			}
			out[i].AssetID = assetID
			t.batches.Of(batch).Move(intent.StateRunning, intent.StateSucceeded)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	return out, nil
}

// FailTask ends a failed attempt: queued again after the backoff, or
// failed, or canceled when the batch was asked to cancel.
func (s *Store) FailTask(ctx context.Context, f store.Failure) (intent.State, error) {
	var state intent.State
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		var batch string
		var used int
		var canceling bool
		err := t.queryRow(failCheckSQL, f.TaskID, f.Fence, t.now).Scan(&batch, &used, &canceling)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrLeaseLost
		case err != nil:
			return fmt.Errorf("fail task %s: %w", f.TaskID, err)
		}
		state = store.StateAfterFailure(canceling, f.Permanent, used, f.MaxAttempts)
		runAfter := t.now + max(ttlMS(f.Backoff), 0)
		if _, err := t.exec(failSQL, state, f.Error, runAfter, t.wall, f.TaskID, f.Fence, t.now); err != nil {
			return fmt.Errorf("fail task %s: %w", f.TaskID, err)
		}
		t.batches.Of(batch).Move(intent.StateRunning, state)
		t.retryAt = time.Now().Add(f.Backoff)
		return nil
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return "", store.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("fail task: %w", err)
	}
	return state, nil
}

// ReleaseTasks hands leases back: queued at once, or canceled.
func (s *Store) ReleaseTasks(ctx context.Context, leases []store.Lease) ([]error, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	out := make([]error, len(leases))
	err := s.leaseWrite(ctx, func(t *leaseTx) error {
		for i, l := range leases {
			var batch string
			var state intent.State
			err := t.queryRow(releaseTaskSQL, t.now, t.wall, l.TaskID, l.Fence, t.now).Scan(&batch, &state)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				out[i] = store.ErrLeaseLost
				continue
			case err != nil:
				return fmt.Errorf("release task %s: %w", l.TaskID, err)
			}
			t.batches.Of(batch).Move(intent.StateRunning, state)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("release tasks: %w", err)
	}
	return out, nil
}

// AssetForTask reads the asset stored for a task.
func (s *Store) AssetForTask(ctx context.Context, taskID string) (intent.Asset, error) {
	var a intent.Asset
	err := s.read(ctx, func(t *tx) (err error) {
		a, err = scanAsset(t.queryRow(`SELECT `+assetColumns+` FROM assets WHERE task_id = ?`, taskID))
		return err
	})
	return a, err
}

// BlobInUse says whether an asset names the bytes of sha256.
func (s *Store) BlobInUse(ctx context.Context, sha256 string) (bool, error) {
	var in bool
	if err := s.read(ctx, func(t *tx) error {
		return t.queryRow(`SELECT EXISTS (SELECT 1 FROM assets WHERE sha256 = ?)`, sha256).Scan(&in)
	}); err != nil {
		return false, fmt.Errorf("blob in use: %w", err)
	}
	return in, nil
}

// skipJSON is ClaimParams.SkipGenerators as the JSON array the claim's
// json_each reads.
func skipJSON(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	b, err := json.Marshal(ids)
	if err != nil { // a []string always marshals
		panic(err)
	}
	return string(b)
}
