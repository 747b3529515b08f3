package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"studio/store"
)

// pool is the connection pool as the store's methods use it: pgxpool's,
// with the wait for a connection bounded by store.WithWait. A request of
// the API (which sets the bound, --db-wait) that finds every connection
// in use gets a busy fault (a 503 with Retry-After) once the bound has
// passed instead of waiting on, and one that waits for a new connection
// the server does not open in time an unreachable fault; the statement, once it has its connection, runs under the caller's
// context alone. Calls without the bound (workers, migrations) wait as
// pgxpool does. (The store sends no batches and copies nothing: a method
// that starts to would get pgxpool's, unbounded, until it is added here.)
type pool struct {
	*pgxpool.Pool
}

// acquire takes a connection, waiting at most the bound of ctx.
func (p pool) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	d, ok := store.Wait(ctx)
	if !ok {
		return p.Pool.Acquire(ctx)
	}
	bounded, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := p.Pool.Acquire(bounded)
	if err != nil && ctx.Err() == nil && bounded.Err() != nil {
		// Every connection in use: busy. Room in the pool, but no new
		// connection opened in time: the server does not answer.
		st := p.Pool.Stat()
		kind := store.FaultBusy
		if st.AcquiredConns() < st.MaxConns() {
			kind = store.FaultUnreachable
		}
		return nil, &store.Fault{Kind: kind, Err: fmt.Errorf("no database connection within %v (%d of %d in use): %w",
			d.Round(time.Millisecond), st.AcquiredConns(), st.MaxConns(), err)}
	}
	return c, err
}

// Acquire takes a connection (acquire); the caller releases it.
func (p pool) Acquire(ctx context.Context) (*pgxpool.Conn, error) { return p.acquire(ctx) }

// Exec runs sql on a connection of the pool.
func (p pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

// Query runs sql on a connection of the pool, released when the rows
// are closed (or read to their end).
func (p pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &poolRows{Rows: rows, c: c}, nil
}

// QueryRow runs sql on a connection of the pool, released by Scan.
func (p pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return (*rowsRow)(rows.(*poolRows))
}

// Begin starts a transaction on a connection of the pool, released when
// it commits or rolls back.
func (p pool) Begin(ctx context.Context) (pgx.Tx, error) { return p.BeginTx(ctx, pgx.TxOptions{}) }

// BeginTx starts a transaction with opts (Begin). Under the bound of
// ctx (store.WithWait), a read-write transaction's waits for row and
// table locks are bounded the same (lock_timeout, set in the BEGIN's own
// round trip): a write that would queue behind another transaction's
// lock for longer (an operator's LOCK TABLE, a long migration) answers
// a busy fault instead of hanging the request.
func (p pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if d, ok := store.Wait(ctx); ok && opts == (pgx.TxOptions{}) {
		opts.BeginQuery = fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d", max(d.Milliseconds(), 1))
	}
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &poolTx{Tx: tx, c: c}, nil
}

// poolRows releases its connection once closed.
type poolRows struct {
	pgx.Rows
	c *pgxpool.Conn
}

func (r *poolRows) Close() {
	r.Rows.Close()
	if r.c != nil {
		r.c.Release()
		r.c = nil
	}
}

func (r *poolRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// rowsRow is pgx.Row over poolRows: the first row, as pgx reads one.
type rowsRow poolRows

func (r *rowsRow) Scan(dest ...any) error {
	rows := (*poolRows)(r)
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// errRow is a pgx.Row that answers err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// poolTx releases its connection once it ends.
type poolTx struct {
	pgx.Tx
	c *pgxpool.Conn
}

func (t *poolTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *poolTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

func (t *poolTx) release() {
	if t.c != nil {
		t.c.Release()
		t.c = nil
	}
}
