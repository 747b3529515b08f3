package sqlite

import (
	"context"
	"fmt"

	"studio/intent"
	"studio/store"
)

// BatchChanges reads a batch and its tasks changed after p.Since, in one
// read transaction. A position is a value of task_change_clock (migration
// 0006): SQLite has one writer, so the counter, bumped inside each write
// transaction, is in commit order, and everything at or below the value a
// reader sees has committed.
func (s *Store) BatchChanges(ctx context.Context, p store.ChangesParams) (store.Changes, error) {
	var out store.Changes
	err := s.read(ctx, func(t *tx) error {
		b, err := getBatch(t, p.Actor, p.BatchID)
		if err != nil {
			return err
		}
		out = store.Changes{Batch: b}
		if err := t.queryRow(`SELECT n FROM task_change_clock`).Scan(&out.Position); err != nil {
			return err
		}
		if p.Since < 0 {
			return nil
		}
		if p.Until > p.Since && p.Until < out.Position {
			out.Position = p.Until
		}
		out.Tasks, err = collect(t, scanTask, `SELECT `+taskColumns+` FROM tasks
			WHERE batch_id = ? AND change_seq > ? AND change_seq <= ? ORDER BY id`, p.BatchID, p.Since, out.Position)
		return err
	})
	if err != nil {
		return store.Changes{}, fmt.Errorf("batch changes: %w", err)
	}
	return out, nil
}

// ListPublications pages the actor's publications, newest first.
func (s *Store) ListPublications(ctx context.Context, p store.ListParams) ([]intent.Publication, error) {
	out, err := pageNewestFirst(ctx, s, `SELECT `+publicationColumns+` FROM publications`, p, scanPublication)
	if err != nil {
		return nil, fmt.Errorf("list publications: %w", err)
	}
	return out, nil
}

// pageNewestFirst runs from (a SELECT of one table's columns, without a
// WHERE) over the actor's rows after p.After, newest first (ids are
// drawn in time order), at most p.Limit of them.
func pageNewestFirst[T any](ctx context.Context, s *Store, from string, p store.ListParams, scan func(scanner) (T, error)) ([]T, error) {
	q := from + ` WHERE actor = ?`
	args := []any{p.Actor}
	if p.After != "" {
		q += ` AND id < ?`
		args = append(args, p.After)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, p.Limit)
	var out []T
	err := s.read(ctx, func(t *tx) (err error) {
		out, err = collect(t, scan, q, args...)
		return err
	})
	return out, err
}

// scanner is a row to scan: a row of tx.queryRow, or the current row of
// tx.query's rows.
type scanner interface{ Scan(dest ...any) error }

// collect runs q with args and scans every row it answers.
func collect[T any](t *tx, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
