package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
)

// The task methods beyond the lease queue (leases.go): the fair-share
// claim order, the batches' count shards, the steps of a running task and
// its asset.

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
RETURNING t.state, t.id, t.batch_id, t.fence, t.attempts, t.lease_expires_at`

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

// CancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *taskTx) CancelIfRequested(ctx context.Context, l store.Lease) error {
	var batch string
	err := t.tx.QueryRow(ctx, taskLane.cancelLive, l.ID, l.Fence, t.wall).Scan(&batch)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("cancel task %s: %w", l.ID, err)
	}
	return store.CancelRequested(t.deltas, batch, err == nil)
}

// SaveStep records one step, fenced; it says whether the lease was live.
func (t *taskTx) SaveStep(ctx context.Context, st store.StepSave) (bool, error) {
	tag, err := t.tx.Exec(ctx, `UPDATE tasks SET step = $3, provider_ref = $4, updated_at = $5,
		generation_calls = generation_calls + $6, history = history || $7
		WHERE `+liveLease+` AND NOT `+taskCanceling, st.ID, st.Fence, st.Step, st.ProviderRef, t.wall,
		st.Calls, store.HistoryLine(st.Note))
	if err != nil {
		return false, fmt.Errorf("save step of task %s: %w", st.ID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// SaveSteps records steps and provider references, fenced, in task id
// order.
func (s *Store) SaveSteps(ctx context.Context, steps []store.StepSave) (_ []error, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(steps) == 0 {
		return nil, nil
	}
	t, err := s.beginTask(ctx)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	defer t.rollback(ctx)
	order, err := byLane(len(steps), func(i int) store.Lease { return store.Lease{Kind: store.KindTask, ID: steps[i].ID} })
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	out, err := store.SaveStepsIn(ctx, t, steps, order)
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	if err := t.commit(ctx); err != nil {
		return nil, fmt.Errorf("save steps: commit: %w", err)
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
