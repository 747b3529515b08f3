package sqlite

import (
	"context"

	"studio/intent"
)

// BenchFloors are the bare statements `studio bench` measures this store
// against: the least the same work can cost on SQLite, with nothing
// around it (no check, no error translation).
type BenchFloors struct {
	s     *Store
	stmts *commitStmts // the floor's own, prepared as the store's are
}

// NewBenchFloors returns the floors of s.
func NewBenchFloors(s *Store) BenchFloors { return BenchFloors{s: s, stmts: &commitStmts{bare: true}} }

// Commit inserts a tree's rows (binding, batch, tasks) in one IMMEDIATE
// transaction, with the statements the store writes them with (the tasks
// taskChunk rows per execution), prepared once across transactions.
func (f BenchFloors) Commit(ctx context.Context, in intent.NewIntent) error {
	bd, nb := in.Binding, in.Batch
	inserts, err := f.stmts.taskInserts(ctx, f.s.write, len(nb.Tasks))
	if err != nil {
		return err
	}
	if err := f.stmts.prepare(ctx, f.s.write); err != nil {
		return err
	}
	tx, err := f.s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := bd.CreatedAt.UnixMilli()
	if _, err := tx.StmtContext(ctx, f.stmts.insertIntent).ExecContext(ctx, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, now); err != nil {
		return err
	}
	// The store's own batch and task inserts: the floor follows the schema
	// and the chunking; what it leaves out is the store's check, its error
	// translation only runs on an error.
	if err := insertBatch(ctx, tx, f.stmts.insertBatch, inserts, bd, nb); err != nil {
		return err
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
