package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
)

// BatchChanges reads a batch and its tasks changed after p.Since, in one
// REPEATABLE READ snapshot. A position p means "every transaction with an
// id below p has ended": it is the snapshot's xmin (migration 0006). A
// task stamped by transaction x is at position x+1, so the changes in
// (Since, Position] are the tasks with Since <= changed_xid < Position.
// A change whose transaction id is at or above the xmin may be committed
// already (then Pending is set) but is handed out only by a later read,
// once every transaction below it has ended: transaction ids are not in
// commit order, and handing it out now could let a reader step over a
// smaller id that commits later.
func (s *Store) BatchChanges(ctx context.Context, p store.ChangesParams) (store.Changes, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.Changes{}, fmt.Errorf("batch changes: %w", err)
	}
	defer tx.Rollback(ctx)
	var out store.Changes
	// The first statement takes the transaction's snapshot.
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&out.Position); err != nil {
		return store.Changes{}, fmt.Errorf("batch changes: %w", err)
	}
	horizon := out.Position
	if out.Batch, err = getBatch(ctx, tx, p.Actor, p.BatchID); err != nil {
		return store.Changes{}, err
	}
	if p.Since < 0 {
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE batch_id = $1 AND changed_xid >= $2::bigint::text::xid8)`,
			p.BatchID, horizon).Scan(&out.Pending); err != nil {
			return store.Changes{}, fmt.Errorf("batch changes: %w", err)
		}
		return out, nil
	}
	if p.Until > p.Since && p.Until < out.Position {
		out.Position = p.Until
	}
	// One pass over the batch's tasks changed at or after Since (or the
	// horizon, if lower: a cursor from elsewhere): those in [Since,
	// Position) are the changes, those at or after the horizon make the
	// read pending. Position 0 stamps a task never changed: never a
	// change.
	from := max(p.Since, 1)
	rows, err := tx.Query(ctx, `SELECT `+taskColumns+`, changed_xid::text::bigint FROM tasks
		WHERE batch_id = $1 AND changed_xid >= $2::bigint::text::xid8
		ORDER BY id`, p.BatchID, min(from, horizon))
	if err != nil {
		return store.Changes{}, fmt.Errorf("batch changes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var x int64
		t, err := scanTask(withColumn{rows, &x})
		if err != nil {
			return store.Changes{}, fmt.Errorf("batch changes: %w", err)
		}
		if x >= from && x < out.Position {
			out.Tasks = append(out.Tasks, t)
		}
		if x >= horizon {
			out.Pending = true
		}
	}
	if err := rows.Err(); err != nil {
		return store.Changes{}, fmt.Errorf("batch changes: %w", err)
	}
	return out, nil
}

// withColumn scans a row with one column more than its scanner asks for,
// the last, into extra.
type withColumn struct {
	pgx.Rows
	extra any
}

func (w withColumn) Scan(dest ...any) error { return w.Rows.Scan(append(dest, w.extra)...) }

// ListPublications pages the actor's publications, newest first.
func (s *Store) ListPublications(ctx context.Context, p store.ListParams) ([]intent.Publication, error) {
	out, err := pageNewestFirst(ctx, s.pool, `SELECT `+publicationColumns+` FROM publications`, "", p, scanPublication)
	if err != nil {
		return nil, fmt.Errorf("list publications: %w", err)
	}
	return out, nil
}

// pageNewestFirst runs from (a SELECT of one table, without a WHERE) over
// the actor's rows after p.After, newest first (ids are drawn in time
// order), at most p.Limit of them. col prefixes the actor and id columns:
// the table's alias and a dot, or "".
func pageNewestFirst[T any](ctx context.Context, pool querier, from, col string, p store.ListParams, scan func(pgx.Row) (T, error)) ([]T, error) {
	q := from + ` WHERE ` + col + `actor = $1`
	args := []any{p.Actor}
	if p.After != "" {
		args = append(args, p.After)
		q += fmt.Sprintf(` AND %sid < $%d`, col, len(args))
	}
	args = append(args, p.Limit)
	q += fmt.Sprintf(` ORDER BY %sid DESC LIMIT $%d`, col, len(args))
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
}
