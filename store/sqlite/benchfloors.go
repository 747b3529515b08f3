package sqlite

import (
	"context"

	"studio/intent"
)

// BenchFloors are the bare statements `studio bench` measures this store
// against: the least the same work can cost on SQLite, with nothing
// around it (no check, no error translation).
type BenchFloors struct{ s *Store }

// NewBenchFloors returns the floors of s.
func NewBenchFloors(s *Store) BenchFloors { return BenchFloors{s: s} }

// Commit inserts a tree's rows (binding, batch, tasks) in one IMMEDIATE
// transaction, the way the store writes them (at the driver's level, the
// statements prepared once, the tasks taskChunk rows per execution), but
// with a bare insert of the binding instead of the store's check.
func (f BenchFloors) Commit(ctx context.Context, in intent.NewIntent) error {
	bd := in.Binding
	return f.s.write(ctx, func(t *tx) error {
		if _, err := t.exec(insertIntentSQL, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, bd.CreatedAt.UnixMilli()); err != nil {
			return err
		}
		return insertBatch(t, bd, in.Batch)
	})
}

// Replay reads the binding and the batch by primary key on the read pool,
// as bare (unprepared) statements, the columns an answer needs scanned
// into bare variables.
func (f BenchFloors) Replay(ctx context.Context, actor, requestID string) error {
	db := f.s.readDB
	var op, fp, rid string
	var at int64
	if err := db.QueryRowContext(ctx, `SELECT operation, fingerprint, resource_id, created_at FROM intents WHERE actor = ? AND request_id = ?`,
		actor, requestID).Scan(&op, &fp, &rid, &at); err != nil {
		return err
	}
	var id, act, req, prompt string
	var n, q, r, su, fl, c int
	var started bool
	var created, updated int64
	return db.QueryRowContext(ctx, `SELECT id, actor, request_id, prompt, task_count, queued, running, succeeded, failed, canceled, started, created_at, updated_at
		FROM batches WHERE id = ? AND actor = ?`, rid, actor).Scan(&id, &act, &req, &prompt, &n, &q, &r, &su, &fl, &c, &started, &created, &updated)
}
