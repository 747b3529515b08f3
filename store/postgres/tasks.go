package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
)

// The task methods. Leases are measured by the database's clock,
// clock_timestamp(), read by the statements themselves; every
// write of a task names its fence and checks the lease is live; the batch's
// counts move in the same transaction as its tasks, on a shard row of
// batch_counts (see deltas.apply).
//
// Locks are taken in one order so that concurrent transactions cannot
// deadlock: task rows first (several in task id order), then batch rows (in
// batch id order), then count shards (in batch id order, at the commit). The exceptions never wait: CancelBatch locks its batch
// first but takes the queued tasks with SKIP LOCKED, and claims take tasks
// with SKIP LOCKED. Row locks are FOR NO KEY UPDATE, which does not conflict
// with the key-share locks that foreign-key checks take.
//
// A task re-queued by FailTask or ReleaseTasks reads its batch's
// cancel_requested under the batch row's lock, so it cannot be re-queued
// behind a cancel that already swept the queue; a claim that meets a queued
// task of a batch asked to cancel (only left by a claim that rolled back)
// cancels it instead of running it.

// liveLease is the condition of every fenced write: this claim, still
// running, not expired by the database's clock. Its parameters are $1 id,
// $2 fence.
const liveLease = `id = $1 AND fence = $2 AND state = 'running' AND lease_expires_at > clock_timestamp()`

// claimColumns are what a claim returns of each task (t), with its
// batch's spec (b).
const claimColumns = `t.id, t.batch_id, t.actor, t.collection, t.frame, t.generator, t.candidate, t.attempts, t.fence, t.step, t.provider_ref, t.lease_expires_at, b.spec`

// claimQueuedSQL leases ready queued tasks in fair-share order. Active
// batches (with a ready task, least recently touched first, at most $5 of
// them; found by a skip scan of the queued tasks' index, tasks_queued) each offer their first $7 ready tasks in plan order; those are
// ranked round-robin across actors, then across an actor's batches, then
// within a batch, and the first $7 kept. Only then are rows locked: in
// rank order, FOR NO KEY UPDATE SKIP LOCKED, stopping at $6. The ranking reads rows without
// locking them, so a claim locks only what it takes; a task another
// claimer holds is skipped for the next in rank (hence more candidates
// than $6), and one another claimer took since this statement began fails
// the recheck of its state. A picked task of a batch asked to cancel is
// canceled instead. Parameters: $1 owner, $2 expires, $3 wall, $4 now, $5
// batches, $6 n, $7 candidates per batch, $8 generators to skip.
const claimQueuedSQL = `WITH RECURSIVE queued AS (
	(SELECT q.batch_id FROM tasks q WHERE q.state = 'queued' ORDER BY q.batch_id LIMIT 1)
	UNION ALL
	SELECT (SELECT q.batch_id FROM tasks q WHERE q.state = 'queued' AND q.batch_id > u.batch_id ORDER BY q.batch_id LIMIT 1)
	FROM queued u WHERE u.batch_id IS NOT NULL
),
active AS (
	SELECT b.id, b.actor, GREATEST(b.updated_at, c.updated_at) AS updated_at, b.cancel_requested
	FROM queued u JOIN batches b ON b.id = u.batch_id CROSS JOIN LATERAL (` + shardSums + `) c
	WHERE EXISTS (SELECT 1 FROM tasks q
		WHERE q.batch_id = b.id AND q.state = 'queued' AND q.run_after <= $4 AND NOT q.generator = ANY($8))
	ORDER BY 3, b.id LIMIT $5
),
cand AS (
	SELECT c.id, a.actor, a.id AS batch_id, a.updated_at, a.cancel_requested,
		row_number() OVER (PARTITION BY a.id ORDER BY c.id) AS rn
	FROM active a CROSS JOIN LATERAL (
		SELECT q.id FROM tasks q
		WHERE q.batch_id = a.id AND q.state = 'queued' AND q.run_after <= $4 AND NOT q.generator = ANY($8)
		ORDER BY q.id LIMIT $7) c
),
ranked AS (
	SELECT id, batch_id, updated_at, cancel_requested,
		row_number() OVER (PARTITION BY actor ORDER BY rn, updated_at, batch_id) AS arn
	FROM cand
),
top AS (
	SELECT id, batch_id, cancel_requested, row_number() OVER (ORDER BY arn, updated_at, batch_id) AS rank
	FROM ranked ORDER BY arn, updated_at, batch_id LIMIT $7
),
pick AS (
	SELECT q.id, r.batch_id, r.cancel_requested FROM top r JOIN tasks q ON q.id = r.id
	WHERE q.state = 'queued' AND q.run_after <= $4
	ORDER BY r.rank LIMIT $6
	FOR NO KEY UPDATE OF q SKIP LOCKED
)
UPDATE tasks t SET
	state = CASE WHEN p.cancel_requested THEN 'canceled' ELSE 'running' END,
	fence = t.fence + CASE WHEN p.cancel_requested THEN 0 ELSE 1 END,
	attempts = t.attempts + CASE WHEN p.cancel_requested THEN 0 ELSE 1 END,
	lease_owner = CASE WHEN p.cancel_requested THEN NULL ELSE $1 END,
	lease_expires_at = CASE WHEN p.cancel_requested THEN NULL ELSE $2::timestamptz END,
	updated_at = $3, changed_xid = pg_current_xact_id()
FROM pick p JOIN batches b ON b.id = p.batch_id WHERE t.id = p.id
RETURNING t.state, ` + claimColumns

// countShards is how many rows of batch_counts a batch's counts may
// spread over (migration 0102 checks the bound).
const countShards = 8

// addShardSQL adds one batch's delta to a shard of its counts: a shard row
// no other transaction holds if there is one (SKIP LOCKED, never waiting),
// else a new one while there are fewer than countShards, else shard $9
// (picked at random), waited for. Parameters: $1..$5 the deltas of
// queued, running, succeeded, failed, canceled; $6 started; $7 updated_at;
// $8 batch; $9 shard.
const addShardSQL = `WITH free AS (
	SELECT shard FROM batch_counts WHERE batch_id = $8 LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
), unused AS (
	SELECT g.shard FROM generate_series(0, 7) AS g(shard)
	WHERE NOT EXISTS (SELECT 1 FROM batch_counts c WHERE c.batch_id = $8 AND c.shard = g.shard)
	ORDER BY g.shard LIMIT 1
)
INSERT INTO batch_counts AS s (batch_id, shard, queued, running, succeeded, failed, canceled, started, updated_at)
VALUES ($8, COALESCE((SELECT shard FROM free), (SELECT shard FROM unused), $9), $1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (batch_id, shard) DO UPDATE SET queued = s.queued + excluded.queued, running = s.running + excluded.running,
	succeeded = s.succeeded + excluded.succeeded, failed = s.failed + excluded.failed,
	canceled = s.canceled + excluded.canceled, started = s.started OR excluded.started,
	updated_at = GREATEST(s.updated_at, excluded.updated_at)`

// apply adds the batches' deltas to their counts, in batch id order, in
// one round trip (the statements are pipelined, and run in order). Each
// goes to a shard of the batch's counts (addShardSQL), not to the batch
// row: transactions moving tasks of one batch at once take different rows,
// and none waits on another's commit.
// A NOTIFY payload (notifySQL) rides in the same round trip.
func applyBatchDeltas(ctx context.Context, tx pgx.Tx, wall time.Time, d store.CountDeltas, notify string) error {
	if len(d) == 0 && notify == "" {
		return nil
	}
	ids := d.IDs()
	var b pgx.Batch
	for _, id := range ids {
		c := d[id]
		b.Queue(addShardSQL, c.Queued, c.Running, c.Succeeded, c.Failed, c.Canceled, c.Started, wall, id, rand.IntN(countShards))
	}
	if notify != "" {
		b.Queue(notifySQL, notify)
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("update counts: %w", err)
	}
	return nil
}

// taskTx is one write transaction of the task methods: the wall clock for
// updated_at, and the counts that move.
type taskTx struct {
	s      *Store
	tx     pgx.Tx
	wall   time.Time         // s.now()
	deltas store.CountDeltas // batches' counts
	pubs   store.CountDeltas // publications' counts
	// retryAt is when a failed task or item is claimable again (its
	// wake-up).
	retryAt time.Time
}

func (s *Store) beginTask(ctx context.Context) (*taskTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &taskTx{s: s, tx: tx, wall: stamp(s.now()), deltas: store.CountDeltas{}, pubs: store.CountDeltas{}}, nil
}

// dbNow reads the database's clock, for methods that need one "now" for
// several statements.
func (t *taskTx) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := t.tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	return now, nil
}

func (t *taskTx) commit(ctx context.Context) error {
	wakes := append(store.TaskWakes(t.deltas, t.retryAt), store.ItemWakes(t.pubs, t.retryAt)...)
	if err := applyBatchDeltas(ctx, t.tx, t.wall, t.deltas, t.s.payload(wakes)); err != nil {
		return err
	}
	if err := applyPublicationDeltas(ctx, t.tx, t.wall, t.pubs); err != nil {
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return err
	}
	// Every task whose state moved moved its batch's counts.
	t.s.wakes.hub.Publish(wakes...)
	return nil
}

// rollback ends the transaction if commit did not; its error is of no use
// after a commit or a failure already reported.
func (t *taskTx) rollback(ctx context.Context) { _ = t.tx.Rollback(ctx) }

// lockBatches locks the batch rows in id order and answers which were
// asked to cancel.
func (t *taskTx) lockBatches(ctx context.Context, ids []string) (map[string]bool, error) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := t.tx.Query(ctx, `SELECT id, cancel_requested FROM batches WHERE id = ANY ($1) ORDER BY id FOR NO KEY UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock batches: %w", err)
	}
	canceling := map[string]bool{}
	var id string
	var c bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error {
		canceling[id] = c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("lock batches: %w", err)
	}
	return canceling, nil
}

// ClaimTasks leases up to p.Limit tasks: expired leases first, then queued
// tasks in fair-share order, in one transaction.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	if p.Owner == "" || p.Limit < 1 || p.TTL <= 0 {
		return nil, fmt.Errorf("claim tasks: need an owner, a limit >= 1 and a ttl > 0")
	}
	// An idle worker polls: one read says whether a claim may find
	// anything (a batch with queued tasks, ready or not, or an expired
	// lease) before a transaction is begun for it.
	var maybe bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'queued')
		OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running' AND lease_expires_at <= clock_timestamp())`).Scan(&maybe); err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if !maybe {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	defer t.rollback(ctx)
	now, claimed, err := t.reclaimExpired(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	expires := now.Add(ttlRoundUp(p.TTL))
	if n := p.Limit - len(claimed); n > 0 {
		rows, err := t.tx.Query(ctx, claimQueuedSQL, p.Owner, expires, t.wall, now, max(2*n, 8), n, 2*n+8, skipList(p.SkipGenerators))
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
		fresh, canceled, err := scanClaims(rows, true)
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
		for _, c := range fresh {
			t.deltas.Of(c.BatchID).Move(intent.StateQueued, intent.StateRunning)
		}
		for _, batch := range canceled {
			t.deltas.Of(batch).Move(intent.StateQueued, intent.StateCanceled)
		}
		claimed = append(claimed, fresh...)
	}
	shareSpecs(claimed)
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("claim tasks: commit: %w", err)
	}
	return claimed, nil
}

// ttlRoundUp rounds a lease length up to whole microseconds, what
// timestamptz keeps: a lease never ends before its holder expects.
func ttlRoundUp(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// reclaimExpired reads the database's clock (the claim's "now") and
// handles running tasks whose lease expired by it, oldest expiry first, at
// most p.Limit of them, skipping any another transaction holds: canceled if
// their batch was asked to cancel, failed if they used every attempt,
// otherwise claimed again under a new fence.
func (t *taskTx) reclaimExpired(ctx context.Context, p store.ClaimParams) (time.Time, []store.ClaimedTask, error) {
	rows, err := t.tx.Query(ctx, `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
		SELECT now.t, e.id, e.batch_id, e.fence, e.attempts, e.used, e.cancel_requested
		FROM now LEFT JOIN LATERAL (
			SELECT t.id, t.batch_id, t.fence, t.attempts, t.attempts - t.released AS used,
				(SELECT b.cancel_requested FROM batches b WHERE b.id = t.batch_id) AS cancel_requested
			FROM tasks t
			WHERE t.state = 'running' AND t.lease_expires_at <= now.t
			ORDER BY t.lease_expires_at LIMIT $1
			FOR NO KEY UPDATE OF t SKIP LOCKED) e ON true`, p.Limit)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("find expired leases: %w", err)
	}
	type expired struct {
		id, batch       string
		fence           int64
		attempts, used  int
		cancelRequested bool
	}
	var found []expired
	var now time.Time
	var id, batch *string
	var fence *int64
	var attempts, used *int
	var cancelRequested *bool
	if _, err := pgx.ForEachRow(rows, []any{&now, &id, &batch, &fence, &attempts, &used, &cancelRequested}, func() error {
		if id != nil {
			found = append(found, expired{*id, *batch, *fence, *attempts, *used, *cancelRequested})
		}
		return nil
	}); err != nil {
		return time.Time{}, nil, fmt.Errorf("find expired leases: %w", err)
	}
	expires := now.Add(ttlRoundUp(p.TTL))
	var claimed []store.ClaimedTask
	for _, e := range found {
		switch {
		case e.cancelRequested:
			if _, err := t.tx.Exec(ctx, `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = $1,
				changed_xid = pg_current_xact_id() WHERE id = $2 AND fence = $3`, t.wall, e.id, e.fence); err != nil {
				return time.Time{}, nil, fmt.Errorf("cancel expired task: %w", err)
			}
			t.deltas.Of(e.batch).Move(intent.StateRunning, intent.StateCanceled)
		case store.OutOfAttempts(e.used, p.MaxAttempts):
			msg := fmt.Sprintf("attempt %d: the lease expired (the worker stopped or crashed); no attempts left", e.attempts)
			if _, err := t.tx.Exec(ctx, `UPDATE tasks SET state = 'failed', error = $1, lease_owner = NULL, lease_expires_at = NULL, updated_at = $2,
				changed_xid = pg_current_xact_id() WHERE id = $3 AND fence = $4`, msg, t.wall, e.id, e.fence); err != nil {
				return time.Time{}, nil, fmt.Errorf("fail expired task: %w", err)
			}
			t.deltas.Of(e.batch).Move(intent.StateRunning, intent.StateFailed)
		default:
			rows, err := t.tx.Query(ctx, `UPDATE tasks t SET fence = fence + 1, attempts = attempts + 1,
				lease_owner = $1, lease_expires_at = $2, updated_at = $3, changed_xid = pg_current_xact_id() FROM batches b
				WHERE b.id = t.batch_id AND t.id = $4 AND t.fence = $5 RETURNING t.state, `+claimColumns,
				p.Owner, expires, t.wall, e.id, e.fence)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("reclaim expired task: %w", err)
			}
			cs, _, err := scanClaims(rows, false)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("reclaim expired task: %w", err)
			}
			claimed = append(claimed, cs...)
		}
	}
	return now, claimed, nil
}

// scanClaims reads claimed tasks (state first). With canceledToo, rows
// that came back canceled are not claims: their batch ids are answered.
func scanClaims(rows pgx.Rows, canceledToo bool) ([]store.ClaimedTask, []string, error) {
	var out []store.ClaimedTask
	var canceled []string
	var c store.ClaimedTask
	var state string
	var exp *time.Time
	_, err := pgx.ForEachRow(rows, []any{&state, &c.TaskID, &c.BatchID, &c.Actor, &c.Collection, &c.Frame, &c.Generator, &c.Candidate,
		&c.Attempt, &c.Fence, &c.Step, &c.ProviderRef, &exp, &c.Spec}, func() error {
		if intent.State(state) != intent.StateRunning {
			if !canceledToo {
				return fmt.Errorf("task %s claimed in state %s", c.TaskID, state)
			}
			canceled = append(canceled, c.BatchID)
			return nil
		}
		c.ExpiresAt = exp.UTC()
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, canceled, nil
}

// shareSpecs makes the tasks of one batch share one spec slice.
func shareSpecs(cs []store.ClaimedTask) {
	specs := map[string][]byte{}
	for i := range cs {
		if spec, ok := specs[cs[i].BatchID]; ok {
			cs[i].Spec = spec
		} else {
			specs[cs[i].BatchID] = cs[i].Spec
		}
	}
}

// sortedLeases orders item indexes by task id, so transactions that write
// several tasks lock them in one order.
func sortedLeases(n int, id func(i int) string) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmpString(id(a), id(b)) })
	return idx
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RenewLeases extends the owner's live leases, in one statement.
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
	defer t.rollback(ctx)
	idx := sortedLeases(len(p.Leases), func(i int) string { return p.Leases[i].TaskID })
	ids := make([]string, len(idx))
	fences := make([]int64, len(idx))
	for j, i := range idx {
		ids[j], fences[j] = p.Leases[i].TaskID, p.Leases[i].Fence
	}
	// The leases are locked in task id order (the sorted input, ordinality
	// kept), then renewed.
	rows, err := t.tx.Query(ctx, `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
		l AS (
			SELECT t.id FROM tasks t JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, fence, ord)
				ON t.id = u.id AND t.fence = u.fence
			WHERE t.state = 'running' AND t.lease_expires_at > (SELECT now.t FROM now) AND t.lease_owner = $3
			ORDER BY u.ord FOR NO KEY UPDATE OF t
		)
		UPDATE tasks t SET lease_expires_at = (SELECT now.t FROM now) + $4::interval FROM l WHERE t.id = l.id
		RETURNING t.id, (SELECT b.cancel_requested FROM batches b WHERE b.id = t.batch_id), t.lease_expires_at`,
		ids, fences, p.Owner, ttlRoundUp(p.TTL))
	if err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	renewed := map[string]bool{}
	var id string
	var canceling bool
	var expires time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &canceling, &expires}, func() error {
		renewed[id] = canceling
		return nil
	}); err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	for _, l := range p.Leases {
		canceling, ok := renewed[l.TaskID]
		switch {
		case !ok:
			res.Lost = append(res.Lost, l.TaskID)
		case canceling:
			res.Canceled = append(res.Canceled, l.TaskID)
		}
	}
	if err := t.commit(ctx); err != nil {
		return store.RenewResult{}, fmt.Errorf("renew leases: commit: %w", err)
	}
	if len(renewed) > 0 {
		res.ExpiresAt = expires.UTC()
	}
	return res, nil
}

// CancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *taskTx) CancelIfRequested(ctx context.Context, l store.Lease) error {
	var batch string
	err := t.tx.QueryRow(ctx, `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = $3,
		changed_xid = pg_current_xact_id() WHERE `+liveLease+` AND (SELECT b.cancel_requested FROM batches b WHERE b.id = tasks.batch_id)
		RETURNING batch_id`, l.TaskID, l.Fence, t.wall).Scan(&batch)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("cancel task %s: %w", l.TaskID, err)
	}
	return store.CancelRequested(t.deltas, batch, err == nil)
}

// notCanceling is true while the task's batch was not asked to cancel.
const notCanceling = `NOT (SELECT b.cancel_requested FROM batches b WHERE b.id = tasks.batch_id)`

// SaveStep records one step, fenced; it says whether the lease was live.
func (t *taskTx) SaveStep(ctx context.Context, st store.StepSave) (bool, error) {
	tag, err := t.tx.Exec(ctx, `UPDATE tasks SET step = $3, provider_ref = $4, updated_at = $5,
		generation_calls = generation_calls + $6, history = history || $7
		WHERE `+liveLease+` AND `+notCanceling, st.TaskID, st.Fence, st.Step, st.ProviderRef, t.wall,
		st.Calls, store.HistoryLine(st.Note))
	if err != nil {
		return false, fmt.Errorf("save step of task %s: %w", st.TaskID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// SaveSteps records steps and provider references, fenced, in task id
// order.
func (s *Store) SaveSteps(ctx context.Context, steps []store.StepSave) ([]error, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	defer t.rollback(ctx)
	order := sortedLeases(len(steps), func(i int) string { return steps[i].TaskID })
	out, err := store.SaveStepsIn(ctx, t, steps, order)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("save steps: commit: %w", err)
	}
	return out, nil
}

// completeSQL ends one live lease, fenced: canceled when its batch was
// asked to cancel, else succeeded, naming the asset already stored for the
// task, if any, else the new one, which it inserts only when the task
// succeeded naming it. It answers the task's batch, asset and new state,
// or no row when the lease is not live. Parameters: $1 task, $2 fence, $3
// asset id, $4 wall, $5 sha256, $6 content type, $7 size, $8 width, $9
// height.
const completeSQL = `WITH done AS (
		UPDATE tasks SET state = CASE WHEN ` + canceling + ` THEN 'canceled' ELSE 'succeeded' END,
			error = CASE WHEN ` + canceling + ` THEN error END,
			asset_id = CASE WHEN ` + canceling + ` THEN asset_id
				ELSE COALESCE((SELECT a.id FROM assets a WHERE a.task_id = tasks.id), $3) END,
			lease_owner = NULL, lease_expires_at = NULL, updated_at = $4, changed_xid = pg_current_xact_id()
		WHERE ` + liveLease + `
		RETURNING id, batch_id, actor, asset_id, state
	), ins AS (
		INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		SELECT $3, done.actor, done.id, $5::text, $6::text, $7::bigint, $8::integer, $9::integer, $4 FROM done
		WHERE done.state = 'succeeded' AND done.asset_id = $3
	)
	SELECT batch_id, COALESCE(asset_id, ''), state FROM done`

// canceling is true once the task's batch was asked to cancel.
const canceling = `(SELECT b.cancel_requested FROM batches b WHERE b.id = tasks.batch_id)`

// CompleteTasks marks tasks succeeded with their assets, fenced (or
// canceled, when their batch was asked to cancel): one statement per task
// (completeSQL), all sent in one round trip.
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
	defer t.rollback(ctx)
	// The fenced statements go in one round trip, in task id order (the
	// statements of a pipeline run in order).
	out := make([]store.CompletionResult, len(cs))
	order := sortedLeases(len(cs), func(i int) string { return cs[i].TaskID })
	var b pgx.Batch
	for _, i := range order {
		c := cs[i]
		a := c.Asset
		b.Queue(completeSQL, c.TaskID, c.Fence, a.ID, t.wall, a.SHA256, a.ContentType, a.Size, a.Width, a.Height)
	}
	br := t.tx.SendBatch(ctx, &b)
	for _, i := range order {
		var batch, assetID, state string
		err := br.QueryRow().Scan(&batch, &assetID, &state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			out[i].Err = store.ErrLeaseLost
			continue
		case err != nil:
			_ = br.Close()
			return nil, fmt.Errorf("complete task %s: %w", cs[i].TaskID, interpret(err))
		}
		d := t.deltas.Of(batch)
		if intent.State(state) == intent.StateCanceled {
			out[i].Err = store.ErrTaskCanceled
			d.Move(intent.StateRunning, intent.StateCanceled)
			continue
		}
		out[i].AssetID = assetID
		d.Move(intent.StateRunning, intent.StateSucceeded)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("complete tasks: %w", interpret(err))
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("complete tasks: commit: %w", interpret(err))
	}
	return out, nil
}

// FailTask ends a failed attempt: queued again after the backoff, or
// failed, or canceled when the batch was asked to cancel. The task row is
// locked, then its batch's, and only then is cancel_requested read: a cancel
// either committed before (the task ends canceled) or waits for this
// transaction and then finds the task queued and cancels it.
func (s *Store) FailTask(ctx context.Context, f store.Failure) (intent.State, error) {
	t, err := s.beginTask(ctx)
	if err != nil {
		return "", fmt.Errorf("fail task: %w", err)
	}
	defer t.rollback(ctx)
	var batch string
	var used int
	err = t.tx.QueryRow(ctx, `SELECT batch_id, attempts - released FROM tasks WHERE `+liveLease+` FOR NO KEY UPDATE`,
		f.TaskID, f.Fence).Scan(&batch, &used)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", store.ErrLeaseLost
	case err != nil:
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	canceling, err := t.lockBatches(ctx, []string{batch})
	if err != nil {
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	state := store.StateAfterFailure(canceling[batch], f.Permanent, used, f.MaxAttempts)
	if _, err := t.tx.Exec(ctx, `UPDATE tasks SET state = $3, error = $4, run_after = clock_timestamp() + $5::interval,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = $6, changed_xid = pg_current_xact_id() WHERE id = $1 AND fence = $2`,
		f.TaskID, f.Fence, state, f.Error, ttlRoundUp(max(f.Backoff, 0)), t.wall); err != nil {
		return "", fmt.Errorf("fail task %s: %w", f.TaskID, err)
	}
	t.deltas.Of(batch).Move(intent.StateRunning, state)
	t.retryAt = time.Now().Add(f.Backoff)
	if err := t.commit(ctx); err != nil {
		return "", fmt.Errorf("fail task: commit: %w", err)
	}
	return state, nil
}

// ReleaseTasks hands leases back: queued at once, or canceled. As in
// FailTask, the tasks are locked, then their batches, and only then is
// cancel_requested read.
func (s *Store) ReleaseTasks(ctx context.Context, leases []store.Lease) ([]error, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("release tasks: %w", err)
	}
	defer t.rollback(ctx)
	out := make([]error, len(leases))
	live := map[int]string{} // item -> batch
	var batches []string
	for _, i := range sortedLeases(len(leases), func(i int) string { return leases[i].TaskID }) {
		l := leases[i]
		var batch string
		err := t.tx.QueryRow(ctx, `SELECT batch_id FROM tasks WHERE `+liveLease+` FOR NO KEY UPDATE`,
			l.TaskID, l.Fence).Scan(&batch)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			out[i] = store.ErrLeaseLost
			continue
		case err != nil:
			return nil, fmt.Errorf("release task %s: %w", l.TaskID, err)
		}
		live[i] = batch
		batches = append(batches, batch)
	}
	if len(live) > 0 {
		canceling, err := t.lockBatches(ctx, batches)
		if err != nil {
			return nil, fmt.Errorf("release tasks: %w", err)
		}
		for i, batch := range live {
			state := intent.StateQueued
			if canceling[batch] {
				state = intent.StateCanceled
			}
			if _, err := t.tx.Exec(ctx, `UPDATE tasks SET state = $3, released = released + 1, run_after = clock_timestamp(),
				lease_owner = NULL, lease_expires_at = NULL, updated_at = $4, changed_xid = pg_current_xact_id() WHERE id = $1 AND fence = $2`,
				leases[i].TaskID, leases[i].Fence, state, t.wall); err != nil {
				return nil, fmt.Errorf("release task %s: %w", leases[i].TaskID, err)
			}
			t.deltas.Of(batch).Move(intent.StateRunning, state)
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("release tasks: commit: %w", err)
	}
	return out, nil
}

// AssetForTask reads the asset stored for a task.
func (s *Store) AssetForTask(ctx context.Context, taskID string) (intent.Asset, error) {
	return scanAsset(s.pool.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets WHERE task_id = $1`, taskID))
}

// BlobInUse says whether an asset names the bytes of sha256.
func (s *Store) BlobInUse(ctx context.Context, sha256 string) (bool, error) {
	var in bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE sha256 = $1)`, sha256).Scan(&in); err != nil {
		return false, fmt.Errorf("blob in use: %w", err)
	}
	return in, nil
}

// skipList is ClaimParams.SkipGenerators as a text[] parameter, never
// NULL (NOT x = ANY('{}') holds for every x).
func skipList(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
