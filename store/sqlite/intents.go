package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"studio/intent"
	"studio/store"
)

var _ store.Store = (*Store)(nil)

// LookupIntent is the plain read of a binding, outside any transaction.
// Nothing of it is remembered here: a binding goes with its batch
// (DeleteBatch), and store.Cache, above every engine, remembers it.
func (s *Store) LookupIntent(ctx context.Context, actor, requestID string) (intent.Binding, error) {
	b := intent.Binding{Actor: actor, RequestID: requestID}
	var created int64
	if err := s.read(ctx, func(t *tx) error {
		return t.queryRow(lookupIntentSQL, actor, requestID).Scan(&b.Operation, &b.Fingerprint, &b.ResourceID, &created)
	}); err != nil {
		return intent.Binding{}, interpret(err)
	}
	b.CreatedAt = fromMS(created)
	return b, nil
}

const lookupIntentSQL = `SELECT operation, fingerprint, resource_id, created_at
		FROM intents WHERE actor = ? AND request_id = ?`

// CreateIntent commits the binding and its record tree in one IMMEDIATE
// transaction, after checking the binding again inside it.
func (s *Store) CreateIntent(ctx context.Context, in intent.NewIntent) (intent.Binding, bool, error) {
	if (in.Batch == nil) == (in.Publication == nil) {
		return intent.Binding{}, false, fmt.Errorf("create intent: exactly one of batch or publication")
	}
	b := in.Binding
	now := ms(b.CreatedAt)
	var found intent.Binding
	created := false
	err := s.write(ctx, func(t *tx) error {
		// The check inside the transaction: the guarantee. The write lock
		// is held from BEGIN IMMEDIATE on, so no other writer can bind the
		// id between this insert and the rest of the tree. The insert is
		// the check: it writes nothing when the id is bound already, and
		// then the binding found is the answer (a replay or a conflict)
		// and nothing else is written.
		n, err := t.exec(bindIntentSQL, b.Actor, b.RequestID, b.Operation, b.Fingerprint, b.ResourceID, now)
		if err != nil {
			return fmt.Errorf("bind: %w", interpret(err))
		}
		if n == 0 {
			found = intent.Binding{Actor: b.Actor, RequestID: b.RequestID}
			var at int64
			if err := t.queryRow(lookupIntentSQL, b.Actor, b.RequestID).Scan(
				&found.Operation, &found.Fingerprint, &found.ResourceID, &at); err != nil {
				return fmt.Errorf("check binding: %w", interpret(err))
			}
			found.CreatedAt = fromMS(at)
			return nil
		}
		created = true
		if in.Batch != nil {
			return insertBatch(t, b, in.Batch)
		}
		return insertPublication(t, b, in.Publication)
	})
	if err != nil {
		return intent.Binding{}, false, fmt.Errorf("create intent: %w", err)
	}
	if !created {
		if found.Operation != b.Operation || found.Fingerprint != b.Fingerprint {
			return intent.Binding{}, false, &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
		}
		return found, false, nil
	}
	s.wake.Publish(store.CreatedWakes(in)...)
	// As stored (milliseconds), so this process's look-ups answer what
	// another process or a restart reads.
	b.CreatedAt = fromMS(now)
	return b, true, nil
}

// insertBatch writes the batch row and its tasks, taskChunk rows per
// statement execution (the last execution takes the rest): the driver's
// cost per execution, not SQLite's per row, is most of a small tree's
// commit.
func insertBatch(t *tx, b intent.Binding, nb *intent.NewBatch) error {
	now := ms(nb.CreatedAt)
	n := len(nb.Tasks)
	if _, err := t.exec(insertBatchSQL, nb.ID, b.Actor, b.RequestID, nb.Prompt, nb.Spec, n, n, now, now); err != nil {
		return fmt.Errorf("insert batch: %w", interpret(err))
	}
	args := make([]any, 0, 3+taskRowValues*min(n, taskChunk))
	for lo := 0; lo < n; lo += taskChunk {
		hi := min(lo+taskChunk, n)
		args = append(args[:0], nb.ID, b.Actor, now)
		for j := lo; j < hi; j++ {
			tk := &nb.Tasks[j]
			args = append(args, tk.ID, tk.Collection, tk.Frame, tk.Generator, int64(tk.Candidate))
		}
		if _, err := t.exec(taskInsertSQLs()[hi-lo], args...); err != nil {
			return fmt.Errorf("insert tasks %d..%d: %w", lo, hi-1, interpret(err))
		}
	}
	return nil
}

// batchColumns are what scanBatch reads.
const batchColumns = `id, actor, request_id, prompt, task_count, created_at, queued, running, succeeded, failed, canceled, started, updated_at`

func scanBatch(r scanner) (intent.Batch, error) {
	var b intent.Batch
	// Integers scan into int64: database/sql converts an int64 column into
	// an int by formatting and parsing it again.
	var n, created, q, ru, su, fa, ca, started, updated int64
	if err := r.Scan(&b.ID, &b.Actor, &b.RequestID, &b.Prompt, &n, &created, &q, &ru, &su, &fa, &ca, &started, &updated); err != nil {
		return intent.Batch{}, err
	}
	b.TaskCount = int(n)
	b.CreatedAt = fromMS(created)
	b.Counts = intent.Counts{Queued: int(q), Running: int(ru), Succeeded: int(su), Failed: int(fa), Canceled: int(ca)}
	b.State = b.Counts.State(started != 0)
	b.UpdatedAt = fromMS(updated)
	return b, nil
}

// GetBatch reads one of the actor's batches: one point read of its row.
func (s *Store) GetBatch(ctx context.Context, actor, id string) (intent.Batch, error) {
	var b intent.Batch
	err := s.read(ctx, func(t *tx) (err error) {
		b, err = scanBatch(t.queryRow(getBatchSQL, id, actor))
		return err
	})
	if err != nil {
		return intent.Batch{}, interpret(err)
	}
	return b, nil
}

const getBatchSQL = `SELECT ` + batchColumns + ` FROM batches WHERE id = ? AND actor = ?`

func getBatch(t *tx, actor, id string) (intent.Batch, error) {
	b, err := scanBatch(t.queryRow(getBatchSQL, id, actor))
	if err != nil {
		return intent.Batch{}, interpret(err)
	}
	return b, nil
}

// ListBatches pages the actor's batches, newest first.
func (s *Store) ListBatches(ctx context.Context, p store.ListParams) ([]intent.Batch, error) {
	out, err := pageNewestFirst(ctx, s, `SELECT `+batchColumns+` FROM batches`, p, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return out, nil
}

const taskColumns = `id, batch_id, collection, frame, generator, candidate, state, attempts, asset_id, error, updated_at, generation_calls, history`

func scanTask(r scanner) (intent.Task, error) {
	var t intent.Task
	var asset, errText sql.NullString
	var updated int64
	var history string
	if err := r.Scan(&t.ID, &t.BatchID, &t.Collection, &t.Frame, &t.Generator, &t.Candidate,
		&t.State, &t.Attempts, &asset, &errText, &updated, &t.GenerationCalls, &history); err != nil {
		return intent.Task{}, err
	}
	t.History = store.HistoryLines(history)
	if asset.Valid {
		t.AssetID = &asset.String
	}
	if errText.Valid {
		t.Error = &errText.String
	}
	t.UpdatedAt = fromMS(updated)
	return t, nil
}

// taskStates are every state a task row can hold.
var taskStates = []intent.State{intent.StateQueued, intent.StateRunning, intent.StateSucceeded, intent.StateFailed, intent.StateCanceled}

// ListTasks pages one of the actor's batch's tasks in plan order.
func (s *Store) ListTasks(ctx context.Context, batchID string, p store.ListParams) ([]intent.Task, error) {
	// One index serves both listings, tasks_by_batch_state (batch_id,
	// state, id): a state's tasks in id order, or every state's merged in
	// id order (a compound SELECT of one ordered range per state, which
	// SQLite merges without sorting the batch).
	states := []intent.State{p.State}
	if p.State == "" {
		states = taskStates
	}
	var q strings.Builder
	var args []any
	for i, st := range states {
		if i > 0 {
			q.WriteString(` UNION ALL `)
		}
		q.WriteString(`SELECT ` + taskColumns + ` FROM tasks WHERE batch_id = ? AND state = ? AND id > ?`)
		args = append(args, batchID, st, p.After)
	}
	q.WriteString(` ORDER BY id LIMIT ?`)
	args = append(args, p.Limit)
	var out []intent.Task
	err := s.read(ctx, func(t *tx) error {
		var one int
		if err := t.queryRow(`SELECT 1 FROM batches WHERE id = ? AND actor = ?`, batchID, p.Actor).Scan(&one); err != nil {
			return interpret(err)
		}
		var err error
		out, err = collect(t, scanTask, q.String(), args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// CancelBatch cancels the queued tasks now and asks running ones to stop.
func (s *Store) CancelBatch(ctx context.Context, actor, id string) (intent.Batch, error) {
	var b intent.Batch
	err := s.write(ctx, func(t *tx) error {
		var err error
		if b, err = getBatch(t, actor, id); err != nil {
			return err
		}
		if b.Counts.Queued+b.Counts.Running == 0 {
			return nil // ended: nothing changes
		}
		now := ms(s.now())
		n, err := t.exec(`UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = ?,
			change_seq = `+nextChangeSQL+` WHERE batch_id = ? AND state = 'queued'`, now, id)
		if err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE batches SET queued = queued - ?, canceled = canceled + ?,
			cancel_requested = 1, updated_at = ? WHERE id = ?`, n, n, now, id); err != nil {
			return err
		}
		t.afterCommit(func() { s.wake.Publish(store.CancelWakes(id)...) })
		b, err = getBatch(t, actor, id)
		return err
	})
	if err != nil {
		return intent.Batch{}, fmt.Errorf("cancel batch: %w", err)
	}
	return b, nil
}

// GetAsset reads one of the actor's assets.
func (s *Store) GetAsset(ctx context.Context, actor, id string) (intent.Asset, error) {
	var a intent.Asset
	err := s.read(ctx, func(t *tx) (err error) {
		a, err = scanAsset(t.queryRow(`SELECT `+assetColumns+` FROM assets WHERE id = ? AND actor = ?`, id, actor))
		return err
	})
	return a, err
}

// assetColumns are what scanAsset reads of an asset.
const assetColumns = `id, actor, task_id, sha256, content_type, size, width, height, created_at`

// scanAsset reads an asset (assetColumns); ENotFound when there is none.
func scanAsset(r scanner) (intent.Asset, error) {
	var a intent.Asset
	var task sql.NullString
	var created int64
	if err := r.Scan(&a.ID, &a.Actor, &task, &a.SHA256, &a.ContentType, &a.Size, &a.Width, &a.Height, &created); err != nil {
		return intent.Asset{}, interpret(err)
	}
	if task.Valid {
		a.TaskID = &task.String
	}
	a.CreatedAt = fromMS(created)
	return a, nil
}

// CountTokens counts stored tokens.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.read(ctx, func(t *tx) error { return t.queryRow(`SELECT COUNT(*) FROM tokens`).Scan(&n) }); err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	return n, nil
}

// CreateTokenIfNone stores the first token; the IMMEDIATE transaction makes
// the count and the insert one step.
func (s *Store) CreateTokenIfNone(ctx context.Context, actor, tokenHash string) (bool, error) {
	var n int64
	err := s.write(ctx, func(t *tx) (err error) {
		n, err = t.exec(`INSERT INTO tokens (hash, actor, created_at)
			SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tokens)`, tokenHash, actor, ms(s.now()))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("create first token: %w", interpret(err))
	}
	return n == 1, nil
}
