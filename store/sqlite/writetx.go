package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The intent commit runs on the write connection at the driver's level,
// below database/sql. Through database/sql, a 12-task commit paid as much
// around its statements as SQLite spent writing the rows: a goroutine and
// a context per transaction (Tx.awaitDone), BEGIN and COMMIT parsed again
// each time, and, for a context that can end (every request's), one
// watcher goroutine per statement execution. Here the transaction's
// statements are prepared once per connection and kept, BEGIN IMMEDIATE
// is the only step that watches the caller's context (its wait for the
// write lock is the only one that can be long), and the statements after
// it run to the end: the transaction is short, and all of it or none of
// it commits either way.

// driverStmts are the write connection's statements, prepared at their
// first use and kept by their text for as long as that connection lives.
type driverStmts struct {
	mu    sync.Mutex
	conn  any // the driver connection the statements belong to
	stmts map[string]driver.Stmt
}

// on answers the statements of conn, forgetting those of a connection
// database/sql has replaced (they went with it).
func (d *driverStmts) on(conn any) map[string]driver.Stmt {
	if d.conn != conn || d.stmts == nil {
		d.conn, d.stmts = conn, map[string]driver.Stmt{}
	}
	return d.stmts
}

// close finalizes the statements on their connection (the write pool's
// one, which must be idle).
func (d *driverStmts) close(db *sql.DB) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.stmts) == 0 {
		return nil
	}
	c, err := db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(conn any) error {
		var errs []error
		if conn == d.conn {
			for _, st := range d.stmts {
				errs = append(errs, st.Close())
			}
		}
		d.conn, d.stmts = nil, nil
		return errors.Join(errs...)
	})
}

// writeTx is one IMMEDIATE transaction on the write connection.
type writeTx struct {
	ctx   context.Context // the caller's, without its cancellation
	conn  any
	stmts map[string]driver.Stmt
	args  []driver.NamedValue
}

// inWriteTx runs f in one IMMEDIATE transaction on the write connection
// with the statements of d, and commits what f did unless f fails (or
// panics): then it rolls all of it back.
func inWriteTx(ctx context.Context, db *sql.DB, d *driverStmts, f func(*writeTx) error) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	return c.Raw(func(conn any) (err error) {
		t := &writeTx{ctx: context.WithoutCancel(ctx), conn: conn, stmts: d.on(conn)}
		st, err := t.stmt("BEGIN IMMEDIATE")
		if err != nil {
			return err
		}
		// The wait for the write lock (busy_timeout) ends with ctx.
		if _, err := st.(driver.StmtExecContext).ExecContext(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		done := false
		defer func() {
			if !done {
				if _, rerr := t.exec("ROLLBACK"); rerr != nil {
					// The connection's state is unknown (a failed COMMIT
					// may have ended the transaction, or not): its
					// statements are finalized and database/sql drops it
					// and opens another.
					for q, st := range t.stmts {
						st.Close()
						delete(t.stmts, q)
					}
					err = errors.Join(err, fmt.Errorf("rollback: %w", rerr), driver.ErrBadConn)
				}
			}
		}()
		if err := f(t); err != nil {
			return err
		}
		if _, err := t.exec("COMMIT"); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		done = true
		return nil
	})
}

// stmt answers the prepared statement of q, preparing it at first use.
func (t *writeTx) stmt(q string) (driver.Stmt, error) {
	if st := t.stmts[q]; st != nil {
		return st, nil
	}
	st, err := t.conn.(driver.ConnPrepareContext).PrepareContext(t.ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	t.stmts[q] = st
	return st, nil
}

// bind sets t.args to args, as the driver takes them.
func (t *writeTx) bind(args []any) error {
	t.args = t.args[:0]
	for i, a := range args {
		switch v := a.(type) {
		case int:
			a = int64(v)
		case nil, int64, string, []byte:
		default:
			return fmt.Errorf("argument %d: unsupported type %T", i+1, a)
		}
		t.args = append(t.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return nil
}

// exec runs q with args and answers how many rows it changed.
func (t *writeTx) exec(q string, args ...any) (int64, error) {
	st, err := t.stmt(q)
	if err != nil {
		return 0, err
	}
	if err := t.bind(args); err != nil {
		return 0, err
	}
	res, err := st.(driver.StmtExecContext).ExecContext(t.ctx, t.args)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs q with args and scans its first row into dest (each a
// *string or *int64); no row is sql.ErrNoRows.
func (t *writeTx) queryRow(q string, args []any, dest ...any) error {
	st, err := t.stmt(q)
	if err != nil {
		return err
	}
	if err := t.bind(args); err != nil {
		return err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(t.ctx, t.args)
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
