package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"studio/intent"
	"studio/store"
)

var _ store.Store = (*Store)(nil)

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// LookupIntent is the plain read of a binding, outside any transaction.
func (s *Store) LookupIntent(ctx context.Context, actor, requestID string) (intent.Binding, error) {
	return lookupIntent(ctx, s.pool, actor, requestID)
}

func lookupIntent(ctx context.Context, q querier, actor, requestID string) (intent.Binding, error) {
	b := intent.Binding{Actor: actor, RequestID: requestID}
	err := q.QueryRow(ctx, `SELECT operation, fingerprint, resource_id, created_at
		FROM intents WHERE actor = $1 AND request_id = $2`, actor, requestID).
		Scan(&b.Operation, &b.Fingerprint, &b.ResourceID, &b.CreatedAt)
	if err != nil {
		return intent.Binding{}, interpret(err)
	}
	b.CreatedAt = b.CreatedAt.UTC()
	return b, nil
}

// CreateIntent commits the binding and its record tree in one transaction.
//
// Under READ COMMITTED a check-then-insert would let two tries both see no
// binding; so the binding goes in first, with ON CONFLICT DO NOTHING. The
// primary key (actor, request_id) makes a second inserter of the same key
// wait until the first commits or rolls back: after a commit its insert does
// nothing and it reads the committed binding (a new statement sees it, at
// READ COMMITTED), after a rollback its insert goes in and it carries on as
// the owner. Only the owner of the inserted row writes the batch and tasks,
// so exactly one tree is ever made per binding.
func (s *Store) CreateIntent(ctx context.Context, in intent.NewIntent) (intent.Binding, bool, error) {
	if (in.Batch == nil) == (in.Publication == nil) {
		return intent.Binding{}, false, fmt.Errorf("create intent: exactly one of batch or publication")
	}
	b := in.Binding
	b.CreatedAt = stamp(b.CreatedAt)
	var rows [][]any
	if in.Batch != nil {
		rows = taskRows(b.Actor, in.Batch) // encoded before BEGIN
	}

	wakes := store.CreatedWakes(in)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return intent.Binding{}, false, fmt.Errorf("create intent: %w", err)
	}
	defer tx.Rollback(ctx)

	tag, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (actor, request_id) DO NOTHING`,
		b.Actor, b.RequestID, b.Operation, b.Fingerprint, b.ResourceID, b.CreatedAt)
	if err != nil {
		return intent.Binding{}, false, fmt.Errorf("create intent: bind: %w", interpret(err))
	}
	if tag.RowsAffected() == 0 {
		// Bound already, by a transaction that has committed.
		found, err := lookupIntent(ctx, tx, b.Actor, b.RequestID)
		if err != nil {
			return intent.Binding{}, false, fmt.Errorf("create intent: read binding: %w", err)
		}
		if found.Operation != b.Operation || found.Fingerprint != b.Fingerprint {
			return intent.Binding{}, false, &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
		}
		return found, false, nil
	}
	if in.Batch != nil {
		err = insertBatch(ctx, tx, b, in.Batch, rows, s.payload(wakes))
	} else if err = insertPublication(ctx, tx, b, in.Publication); err == nil {
		err = s.notify(ctx, tx, wakes)
	}
	if err != nil {
		return intent.Binding{}, false, fmt.Errorf("create intent: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return intent.Binding{}, false, fmt.Errorf("create intent: commit: %w", interpret(err))
	}
	s.wakes.hub.Publish(wakes...)
	return b, true, nil
}

// taskColumnsIn are the columns CopyFrom fills, in taskRows' order.
var taskColumnsIn = []string{"id", "batch_id", "actor", "collection", "frame", "generator", "candidate", "created_at", "updated_at"}

// taskRows lays the tasks out for CopyFrom.
func taskRows(actor string, nb *intent.NewBatch) [][]any {
	now := stamp(nb.CreatedAt)
	rows := make([][]any, len(nb.Tasks))
	for i := range nb.Tasks {
		t := &nb.Tasks[i]
		rows[i] = []any{t.ID, nb.ID, actor, t.Collection, t.Frame, t.Generator, int32(t.Candidate), now, now}
	}
	return rows
}

// insertBatch writes the batch row (with the NOTIFY of notify, a payload,
// in the same round trip), then every task in one COPY.
func insertBatch(ctx context.Context, tx pgx.Tx, b intent.Binding, nb *intent.NewBatch, rows [][]any, notify string) error {
	now := stamp(nb.CreatedAt)
	n := len(nb.Tasks)
	var q pgx.Batch
	q.Queue(`INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7)`, nb.ID, b.Actor, b.RequestID, nb.Prompt, nb.Spec, n, now)
	if notify != "" {
		q.Queue(notifySQL, notify)
	}
	if err := tx.SendBatch(ctx, &q).Close(); err != nil {
		return fmt.Errorf("insert batch: %w", interpret(err))
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, taskColumnsIn, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("insert tasks: %w", interpret(err))
	}
	return nil
}

// batchSelect reads batches (b) with their counts: the batch row's plus
// the sum of its shards in batch_counts (migration 0102), in one statement,
// so the counts agree with the tasks at every read.
const batchSelect = `SELECT b.id, b.actor, b.request_id, b.prompt, b.task_count,
	b.queued + c.queued, b.running + c.running, b.succeeded + c.succeeded, b.failed + c.failed, b.canceled + c.canceled,
	b.started OR c.started, b.created_at, GREATEST(b.updated_at, c.updated_at)
	FROM batches b CROSS JOIN LATERAL (` + shardSums + `) c`

// shardSums sums the shards of batch b.id (one row, zeros when none).
const shardSums = `SELECT COALESCE(sum(s.queued), 0) AS queued, COALESCE(sum(s.running), 0) AS running,
	COALESCE(sum(s.succeeded), 0) AS succeeded, COALESCE(sum(s.failed), 0) AS failed,
	COALESCE(sum(s.canceled), 0) AS canceled, COALESCE(bool_or(s.started), false) AS started,
	max(s.updated_at) AS updated_at
	FROM batch_counts s WHERE s.batch_id = b.id`

func scanBatch(r pgx.Row) (intent.Batch, error) {
	var b intent.Batch
	var started bool
	if err := r.Scan(&b.ID, &b.Actor, &b.RequestID, &b.Prompt, &b.TaskCount,
		&b.Counts.Queued, &b.Counts.Running, &b.Counts.Succeeded, &b.Counts.Failed, &b.Counts.Canceled,
		&started, &b.CreatedAt, &b.UpdatedAt); err != nil {
		return intent.Batch{}, err
	}
	b.State = b.Counts.State(started)
	b.CreatedAt, b.UpdatedAt = b.CreatedAt.UTC(), b.UpdatedAt.UTC()
	return b, nil
}

// GetBatch reads one of the actor's batches.
func (s *Store) GetBatch(ctx context.Context, actor, id string) (intent.Batch, error) {
	return getBatch(ctx, s.pool, actor, id)
}

func getBatch(ctx context.Context, q querier, actor, id string) (intent.Batch, error) {
	b, err := scanBatch(q.QueryRow(ctx, batchSelect+` WHERE b.id = $1 AND b.actor = $2`, id, actor))
	if err != nil {
		return intent.Batch{}, interpret(err)
	}
	return b, nil
}

// ListBatches pages the actor's batches, newest first.
func (s *Store) ListBatches(ctx context.Context, p store.ListParams) ([]intent.Batch, error) {
	out, err := pageNewestFirst(ctx, s.pool, batchSelect, "b.", p, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return out, nil
}

const taskColumns = `id, batch_id, collection, frame, generator, candidate, state, attempts, asset_id, error, updated_at, generation_calls, history`

func scanTask(r pgx.Row) (intent.Task, error) {
	var t intent.Task
	var history string
	if err := r.Scan(&t.ID, &t.BatchID, &t.Collection, &t.Frame, &t.Generator, &t.Candidate,
		&t.State, &t.Attempts, &t.AssetID, &t.Error, &t.UpdatedAt, &t.GenerationCalls, &history); err != nil {
		return intent.Task{}, err
	}
	t.History = store.HistoryLines(history)
	t.UpdatedAt = t.UpdatedAt.UTC()
	return t, nil
}

// ListTasks pages one of the actor's batch's tasks in plan order. The
// ownership check and the page need not share a snapshot: a batch deleted
// between the two answers an empty page, as it would a moment later.
func (s *Store) ListTasks(ctx context.Context, batchID string, p store.ListParams) ([]intent.Task, error) {
	var owned bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM batches WHERE id = $1 AND actor = $2)`,
		batchID, p.Actor).Scan(&owned); err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	if !owned {
		return nil, &intent.Error{Code: intent.ENotFound, Message: "Not found."}
	}
	q := `SELECT ` + taskColumns + ` FROM tasks WHERE batch_id = $1`
	args := []any{batchID}
	if p.State != "" {
		args = append(args, p.State)
		q += fmt.Sprintf(` AND state = $%d`, len(args))
	}
	if p.After != "" {
		args = append(args, p.After)
		q += fmt.Sprintf(` AND id > $%d`, len(args))
	}
	args = append(args, p.Limit)
	q += fmt.Sprintf(` ORDER BY id LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	defer rows.Close()
	var out []intent.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// CancelBatch cancels the queued tasks now and asks running ones to stop.
// The batch row is locked first, and the queued tasks are taken with SKIP
// LOCKED, so the cancel never waits on a task row while holding the batch
// (the task methods lock tasks, then batches). A queued task it skips is
// being claimed at that moment: it runs and stops at its next step, or, if
// that claim rolls back, the next claim cancels it. Tasks re-queued by
// FailLease or ReleaseLeases read cancel_requested under the batch's lock, so
// they either come before this sweep or end canceled themselves. The
// sweep's counts move on the batch row, which it holds; the task methods
// move theirs on count shards (batch_counts), so the answer is read back
// summed.
func (s *Store) CancelBatch(ctx context.Context, actor, id string) (intent.Batch, error) {
	var out intent.Batch
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked string
		if err := tx.QueryRow(ctx, `SELECT id FROM batches WHERE id = $1 AND actor = $2 FOR NO KEY UPDATE`, id, actor).Scan(&locked); err != nil {
			return interpret(err)
		}
		b, err := getBatch(ctx, tx, actor, id)
		if err != nil {
			return err
		}
		if b.Counts.Queued+b.Counts.Running == 0 {
			out = b // ended: nothing changes
			return nil
		}
		now := stamp(s.now())
		tag, err := tx.Exec(ctx, `UPDATE tasks SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL, updated_at = $1,
			changed_xid = pg_current_xact_id() WHERE id IN (SELECT q.id FROM tasks q WHERE q.batch_id = $2 AND q.state = 'queued' FOR NO KEY UPDATE SKIP LOCKED)`, now, id)
		if err != nil {
			return err
		}
		n := tag.RowsAffected()
		if _, err := tx.Exec(ctx, `UPDATE batches SET queued = queued - $1, canceled = canceled + $1,
			cancel_requested = true, updated_at = $2 WHERE id = $3`, n, now, id); err != nil {
			return err
		}
		if out, err = getBatch(ctx, tx, actor, id); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.CancelWakes(id))
	})
	if err != nil {
		if intent.ErrorCode(err) == intent.ENotFound {
			return intent.Batch{}, err
		}
		return intent.Batch{}, fmt.Errorf("cancel batch: %w", err)
	}
	s.wakes.hub.Publish(store.CancelWakes(id)...)
	return out, nil
}

// GetAsset reads one of the actor's assets.
func (s *Store) GetAsset(ctx context.Context, actor, id string) (intent.Asset, error) {
	return getAsset(ctx, s.pool, actor, id)
}

const assetColumns = `id, actor, task_id, sha256, content_type, size, width, height, created_at`

func scanAsset(r pgx.Row) (intent.Asset, error) {
	var a intent.Asset
	if err := r.Scan(&a.ID, &a.Actor, &a.TaskID, &a.SHA256, &a.ContentType, &a.Size, &a.Width, &a.Height, &a.CreatedAt); err != nil {
		return intent.Asset{}, interpret(err)
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return a, nil
}

func getAsset(ctx context.Context, q querier, actor, id string) (intent.Asset, error) {
	return scanAsset(q.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets WHERE id = $1 AND actor = $2`, id, actor))
}

// CountTokens counts stored tokens.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	return n, nil
}

// CreateTokenIfNone stores the first token. At READ COMMITTED two racing
// "insert where none exists" could both see none, so the check and the
// insert run under a transaction-scoped advisory lock keyed by the schema:
// the second try waits, then sees the first's token.
func (s *Store) CreateTokenIfNone(ctx context.Context, actor, tokenHash string) (bool, error) {
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey("studio.first-token:"+s.schema)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO tokens (hash, actor, created_at)
			SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM tokens)`, tokenHash, actor, stamp(s.now()))
		if err != nil {
			return interpret(err)
		}
		created = tag.RowsAffected() == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("create first token: %w", err)
	}
	return created, nil
}
