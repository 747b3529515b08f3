package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
)

// BenchFloors are the bare statements `studio bench` measures this store
// against: the least the same work can cost on PostgreSQL, with nothing
// around it.
type BenchFloors struct{ s *Store }

// NewBenchFloors returns the floors of s.
func NewBenchFloors(s *Store) BenchFloors { return BenchFloors{s} }

// Commit inserts a tree's rows (binding, batch, tasks) in one transaction
// with the store's own batch insert (the tasks in one COPY), after a bare
// insert of the binding instead of the store's check.
func (f BenchFloors) Commit(ctx context.Context, in intent.NewIntent) error {
	bd, nb := in.Binding, in.Batch
	rows := taskRows(bd.Actor, nb) // made before the transaction, as the store does
	return pgx.BeginFunc(ctx, f.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, bd.CreatedAt); err != nil {
			return err
		}
		return insertBatch(ctx, tx, bd, nb, rows, "")
	})
}

// Replay reads the binding and the batch by primary key, the columns an
// answer needs scanned into bare variables.
func (f BenchFloors) Replay(ctx context.Context, actor, requestID string) error {
	var op, fp, rid string
	var at time.Time
	if err := f.s.pool.QueryRow(ctx, `SELECT operation, fingerprint, resource_id, created_at FROM intents WHERE actor = $1 AND request_id = $2`,
		actor, requestID).Scan(&op, &fp, &rid, &at); err != nil {
		return err
	}
	var id, act, req, prompt string
	var n, q, r, su, fl, c int
	var started bool
	var created, updated time.Time
	return f.s.pool.QueryRow(ctx, `SELECT id, actor, request_id, prompt, task_count, queued, running, succeeded, failed, canceled, started, created_at, updated_at
		FROM batches WHERE id = $1 AND actor = $2`, rid, actor).Scan(&id, &act, &req, &prompt, &n, &q, &r, &su, &fl, &c, &started, &created, &updated)
}
