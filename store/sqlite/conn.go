package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"studio/store"
)

// The intent commit runs on the write connection at the driver's level,
// below database/sql, and so do the request path's point reads on the
// read pool (readRow). Through database/sql, a 12-task commit paid as much
// around its statements as SQLite spent writing the rows: a goroutine and
// a context per transaction (Tx.awaitDone), BEGIN and COMMIT parsed again
// each time, and, for a context that can end (every request's), one
// watcher goroutine per statement execution. Here the transaction's
// statements are prepared once per connection and kept on it (conn),
// BEGIN IMMEDIATE is the only step that watches the caller's context (its
// wait for the write lock is the only one that can be long), and the
// statements after it run to the end: the transaction is short, and all
// of it or none of it commits either way.

// sqliteDriver is the driver registered as "sqlite".
var sqliteDriver = func() driver.Driver {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		panic("sqlite: the driver is not registered: " + err.Error())
	}
	defer db.Close()
	return db.Driver()
}()

// openDB opens a pool on dsn whose connections are conns.
func openDB(dsn string) *sql.DB { return sql.OpenDB(connector{dsn}) }

type connector struct{ dsn string }

func (c connector) Connect(context.Context) (driver.Conn, error) {
	dc, err := sqliteDriver.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: dc, stmts: map[string]driver.Stmt{}}, nil
}

func (c connector) Driver() driver.Driver { return sqliteDriver }

// conn is the driver's connection with the statements prepared on it
// below database/sql (inWriteTx), kept by their text while it lives and
// finalized when database/sql closes it (a statement left unfinalized
// would keep the closed connection, its file descriptors and any
// transaction it had open, alive in SQLite). The methods database/sql
// looks for pass through.
type conn struct {
	driver.Conn
	// Only used under database/sql's hold of the connection:
	stmts map[string]driver.Stmt
	args  []driver.NamedValue // the arguments of the statement running
}

func (c *conn) Close() error {
	var errs []error
	for q, st := range c.stmts {
		errs = append(errs, st.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.Conn.Close())...)
}

func (c *conn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

// BeginTx begins a transaction (IMMEDIATE on the write pool). Its wait for
// the write lock ends past the bound store.WithWait set on ctx, with a
// store.FaultBusy; the transaction, once begun, lives with ctx alone (the
// driver keeps the context given here for its COMMIT).
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	d, ok := store.Wait(ctx)
	if !ok {
		return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	}
	tctx, end := context.WithCancelCause(ctx)
	var mu sync.Mutex
	begun := false
	timer := time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if !begun {
			end(errWaitBound)
		}
	})
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(tctx, opts)
	mu.Lock()
	begun = true
	mu.Unlock()
	timer.Stop()
	if err != nil {
		bound := errors.Is(context.Cause(tctx), errWaitBound) && ctx.Err() == nil
		end(nil)
		if bound {
			return nil, &store.Fault{Kind: store.FaultBusy, Err: fmt.Errorf("no write lock within %v: %w", d, err)}
		}
		return nil, err
	}
	return boundTx{tx, end}, nil
}

// errWaitBound ends a BEGIN that waited past store.WithWait's bound.
var errWaitBound = errors.New("the wait for the write lock ran out")

// boundTx is a transaction begun under a wait bound: its context is let go
// when it ends.
type boundTx struct {
	driver.Tx
	end context.CancelCauseFunc
}

func (t boundTx) Commit() error {
	defer t.end(nil)
	if err := t.Tx.Commit(); err != nil {
		return commitFault(err)
	}
	return nil
}

func (t boundTx) Rollback() error {
	defer t.end(nil)
	return t.Tx.Rollback()
}

func (c *conn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *conn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *conn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *conn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

// writeTx is one IMMEDIATE transaction on the write connection.
type writeTx struct {
	ctx context.Context // the caller's, without its cancellation
	c   *conn
}

// inWriteTx runs f in one IMMEDIATE transaction on the write connection
// and commits what f did unless f fails (or panics): then it rolls all of
// it back. When the connection's state is in doubt it is given back as
// bad, and database/sql closes it: closing a connection ends its
// transaction.
//
// The wait for the write lock, in this process (the one connection) and
// from others (busy_timeout), ends with ctx or past the bound
// store.WithWait set on it: then it answers a store.FaultBusy.
func inWriteTx(ctx context.Context, db *sql.DB, f func(*writeTx) error) error {
	wctx, cancel := boundWait(ctx)
	defer cancel()
	c, err := db.Conn(wctx)
	if err != nil {
		return waitFault(ctx, wctx, err)
	}
	defer c.Close()
	return c.Raw(func(dc any) (err error) {
		t := &writeTx{ctx: context.WithoutCancel(ctx), c: dc.(*conn)}
		st, err := t.c.stmt(t.ctx, "BEGIN IMMEDIATE")
		if err != nil {
			return err
		}
		if _, err := st.(driver.StmtExecContext).ExecContext(wctx, nil); err != nil {
			if wctx.Err() != nil {
				// The driver answers the context's end even for a BEGIN
				// that took effect: the connection may hold the lock.
				return errors.Join(waitFault(ctx, wctx, fmt.Errorf("begin: %w", err)), driver.ErrBadConn)
			}
			return fmt.Errorf("begin: %w", err)
		}
		done := false
		defer func() {
			if !done {
				if _, rerr := t.exec("ROLLBACK"); rerr != nil {
					// A failed COMMIT may have ended the transaction, or
					// not: the connection goes.
					err = errors.Join(err, fmt.Errorf("rollback: %w", rerr), driver.ErrBadConn)
				}
			}
		}()
		if err := f(t); err != nil {
			return err
		}
		if _, err := t.exec("COMMIT"); err != nil {
			return commitFault(fmt.Errorf("commit: %w", err))
		}
		done = true
		return nil
	})
}

// exec runs q with args and answers how many rows it changed.
func (t *writeTx) exec(q string, args ...any) (int64, error) {
	return t.c.exec(t.ctx, q, args)
}

// queryRow runs q with args and scans its first row into dest (see
// conn.queryRow).
func (t *writeTx) queryRow(q string, args []any, dest ...any) error {
	return t.c.queryRow(t.ctx, q, args, dest...)
}

// readRow runs q with args on a connection of the read pool db, below
// database/sql like the intent commit, and scans its first row into dest
// (see conn.queryRow). The request path's point reads (a token, a
// binding, a batch) go through it: through database/sql each one paid a
// quarter of its time around SQLite (the pool's statement look-up, Rows
// and its locks, Scan's conversions by reflection). The driver answers
// driver.ErrBadConn only from ResetSession, which db.Conn already retries
// on another connection, so a read has nothing to retry.
func readRow(ctx context.Context, db *sql.DB, q string, args []any, dest ...any) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error { return dc.(*conn).queryRow(ctx, q, args, dest...) })
}

// stmt answers the prepared statement of q, preparing it at first use.
func (c *conn) stmt(ctx context.Context, q string) (driver.Stmt, error) {
	if st := c.stmts[q]; st != nil {
		return st, nil
	}
	st, err := c.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	c.stmts[q] = st
	return st, nil
}

// bind sets c.args to args, as the driver takes them; unbind lets them
// go once the statement ran (the slice stays, for the next).
func (c *conn) bind(args []any) error {
	c.args = c.args[:0]
	for i, a := range args {
		switch v := a.(type) {
		case int:
			a = int64(v)
		case nil, int64, string, []byte:
		default:
			return fmt.Errorf("argument %d: unsupported type %T", i+1, a)
		}
		c.args = append(c.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return nil
}

func (c *conn) unbind() {
	clear(c.args)
	c.args = c.args[:0]
}

// exec runs q with args and answers how many rows it changed.
func (c *conn) exec(ctx context.Context, q string, args []any) (int64, error) {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return 0, err
	}
	if err := c.bind(args); err != nil {
		return 0, err
	}
	defer c.unbind()
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, c.args)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs q with args and scans its first row into dest (each a
// *string or *int64); no row is sql.ErrNoRows.
func (c *conn) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return err
	}
	if err := c.bind(args); err != nil {
		return err
	}
	defer c.unbind()
	rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, c.args)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(vals); err == io.EOF {
		return sql.ErrNoRows
	} else if err != nil {
		return err
	}
	if len(dest) != len(vals) {
		return fmt.Errorf("scan: %d columns into %d values", len(vals), len(dest))
	}
	for i, d := range dest {
		switch p := d.(type) {
		case *string:
			switch v := vals[i].(type) {
			case string:
				*p = v
			case []byte:
				*p = string(v)
			default:
				return fmt.Errorf("scan column %d: %T into a string", i, vals[i])
			}
		case *int64:
			v, ok := vals[i].(int64)
			if !ok {
				return fmt.Errorf("scan column %d: %T into an integer", i, vals[i])
			}
			*p = v
		default:
			return fmt.Errorf("scan column %d: unsupported destination %T", i, d)
		}
	}
	return nil
}
