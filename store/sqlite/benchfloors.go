package sqlite

import (
	"context"

	"studio/intent"
)

// BenchFloors are the bare statements `studio bench` measures this store
// against: the least the same work can cost on SQLite, with nothing
// around it (no check, no error translation, no prepared reads).
type BenchFloors struct{ s *Store }

// NewBenchFloors returns the floors of s.
func NewBenchFloors(s *Store) BenchFloors { return BenchFloors{s} }

// Commit inserts a tree's rows (binding, batch, tasks) in one IMMEDIATE
// transaction, with one prepared statement for the tasks.
func (f BenchFloors) Commit(ctx context.Context, in intent.NewIntent) error {
	tx, err := f.s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	bd, nb := in.Binding, in.Batch
	now := bd.CreatedAt.UnixMilli()
	if _, err := tx.ExecContext(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, now); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, nb.ID, bd.Actor, bd.RequestID, nb.Prompt, nb.Spec, len(nb.Tasks), len(nb.Tasks), now, now); err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, batch_id, actor, collection, frame, generator, candidate, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, t := range nb.Tasks {
		if _, err := stmt.ExecContext(ctx, t.ID, nb.ID, bd.Actor, t.Collection, t.Frame, t.Generator, t.Candidate, now, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Replay reads the binding and the batch by primary key on the read pool,
// as bare (unprepared) statements, the columns an answer needs scanned
// into bare variables.
func (f BenchFloors) Replay(ctx context.Context, actor, requestID string) error {
	db := f.s.read
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
