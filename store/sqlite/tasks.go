package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"studio/intent"
	"studio/store"
)

// The task methods beyond the lease queue (leases.go): the steps of a
// running task, fenced like every write of the queue, and its asset.

// saveStepSQL records a task's step while its lease is live and its batch
// was not asked to cancel, with the paid calls made since the last record
// and a line of history. Parameters: step, ref, wall, calls, history, id,
// fence, now.
const saveStepSQL = `UPDATE tasks SET step = ?, provider_ref = ?, updated_at = ?,
		generation_calls = generation_calls + ?, history = history || ?
	WHERE id = ? AND fence = ? AND state = 'running' AND lease_expires_at > ?
		AND NOT (SELECT cancel_requested FROM batches WHERE batches.id = tasks.batch_id)`

// SaveSteps records steps and provider references, fenced.
func (s *Store) SaveSteps(ctx context.Context, steps []store.StepSave) (_ []error, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(steps) == 0 {
		return nil, nil
	}
	var out []error
	err = s.leaseWrite(ctx, func(t *leaseTx) (err error) {
		out, err = store.SaveStepsIn(ctx, t, steps, store.InOrder(len(steps)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("save steps: %w", err)
	}
	return out, nil
}

// SaveStep records one step, fenced; it says whether the lease was live.
func (t *leaseTx) SaveStep(_ context.Context, st store.StepSave) (bool, error) {
	n, err := t.exec(saveStepSQL, st.Step, st.ProviderRef, t.wall,
		st.Calls, store.HistoryLine(st.Note), st.ID, st.Fence, t.now)
	if err != nil {
		return false, fmt.Errorf("save step of task %s: %w", st.ID, err)
	}
	return n > 0, nil
}

// CancelIfRequested ends a live lease whose batch was asked to cancel: the
// task becomes canceled. It answers ErrTaskCanceled when it did, and
// ErrLeaseLost when the lease is not live.
func (t *leaseTx) CancelIfRequested(_ context.Context, l store.Lease) error {
	return t.cancelIfRequested(taskLane, l)
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
