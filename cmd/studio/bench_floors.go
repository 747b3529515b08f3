package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store/postgres"
	"studio/store/sqlite"
)

// benchFloors are the bare statements the bench measures the store
// against, per engine: the least the same work can cost.
type benchFloors interface {
	// commit inserts a tree's rows (binding, batch, tasks) in one
	// transaction, with no check and nothing else.
	commit(ctx context.Context, in intent.NewIntent) error
	// replay reads the binding and the batch by primary key, the columns
	// an answer needs scanned into bare variables.
	replay(ctx context.Context, actor, requestID string) error
}

// sqliteFloors: one IMMEDIATE transaction, one prepared statement for the
// tasks; reads on the read pool.
type sqliteFloors struct{ s *sqlite.Store }

func (f sqliteFloors) commit(ctx context.Context, in intent.NewIntent) error {
	tx, err := f.s.DB().BeginTx(ctx, nil)
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

func (f sqliteFloors) replay(ctx context.Context, actor, requestID string) error {
	db := f.s.ReadDB()
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

// postgresFloors: one transaction, the tasks in one COPY (as the store
// writes them); reads on the pool.
type postgresFloors struct{ s *postgres.Store }

func (f postgresFloors) commit(ctx context.Context, in intent.NewIntent) error {
	bd, nb := in.Binding, in.Batch
	return pgx.BeginFunc(ctx, f.s.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, bd.CreatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7)`, nb.ID, bd.Actor, bd.RequestID, nb.Prompt, nb.Spec, len(nb.Tasks), nb.CreatedAt); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"},
			[]string{"id", "batch_id", "actor", "collection", "frame", "generator", "candidate", "created_at", "updated_at"},
			pgx.CopyFromSlice(len(nb.Tasks), func(j int) ([]any, error) {
				t := &nb.Tasks[j]
				return []any{t.ID, nb.ID, bd.Actor, t.Collection, t.Frame, t.Generator, int32(t.Candidate), nb.CreatedAt, nb.CreatedAt}, nil
			}))
		return err
	})
}

func (f postgresFloors) replay(ctx context.Context, actor, requestID string) error {
	var op, fp, rid string
	var at time.Time
	if err := f.s.Pool().QueryRow(ctx, `SELECT operation, fingerprint, resource_id, created_at FROM intents WHERE actor = $1 AND request_id = $2`,
		actor, requestID).Scan(&op, &fp, &rid, &at); err != nil {
		return err
	}
	var id, act, req, prompt string
	var n, q, r, su, fl, c int
	var started bool
	var created, updated time.Time
	return f.s.Pool().QueryRow(ctx, `SELECT id, actor, request_id, prompt, task_count, queued, running, succeeded, failed, canceled, started, created_at, updated_at
		FROM batches WHERE id = $1 AND actor = $2`, rid, actor).Scan(&id, &act, &req, &prompt, &n, &q, &r, &su, &fl, &c, &started, &created, &updated)
}
