package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// One transaction style. Every method of the store runs its SQL in one of
// two helpers, each a transaction on one connection:
//
//	s.write(ctx, func(t *tx) error)  BEGIN IMMEDIATE on the one write connection
//	s.read(ctx, func(t *tx) error)   BEGIN (one snapshot) on a read connection
//
// f's statements go through t (exec, queryRow, query); what f did commits
// unless f fails (or panics), and then all of it rolls back. Work that must
// follow the commit (waking readers of the batches that moved) is
// registered with t.afterCommit.
//
// Both run below database/sql, at the driver's level. Through database/sql
// a 12-task commit paid as much around its statements as SQLite spent
// writing the rows: a goroutine and a context per transaction
// (Tx.awaitDone), every statement parsed again or looked up in the pool's
// cache, and, for a context that can end (every request's), one watcher
// goroutine per statement execution. Here every statement is prepared once
// per connection and kept on it by its text (conn.stmts), so the worker's
// many small transactions and the request path's point reads parse
// nothing. Only the wait for a connection and, for a write, BEGIN
// IMMEDIATE (whose wait for the write lock is the only one that can be
// long) watch the caller's context; the statements after it run to the
// end: a transaction is short, and all of it or none of it commits either
// way.

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
// (tx), kept by their text while it lives and finalized when database/sql
// closes it (a statement left unfinalized would keep the closed
// connection, its file descriptors and any transaction it had open, alive
// in SQLite). The methods database/sql looks for pass through.
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

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
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

// tx is one transaction on one connection (see write and read).
type tx struct {
	ctx   context.Context // the caller's, without its cancellation
	c     *conn
	after []func()
}

// write runs f in one IMMEDIATE transaction on the write connection.
func (s *Store) write(ctx context.Context, f func(*tx) error) error {
	return inTx(ctx, s.writeDB, "BEGIN IMMEDIATE", true, f)
}

// read runs f in one read transaction on a connection of the read pool:
// every statement of f reads one snapshot.
func (s *Store) read(ctx context.Context, f func(*tx) error) error {
	return inTx(ctx, s.readDB, "BEGIN", false, f)
}

// inTx runs f between begin and COMMIT on a connection of db, and rolls
// back what f did when it fails. watch says whether begin waits (for the
// write lock) and so ends with ctx. When the connection's state is in
// doubt it is given back as bad, and database/sql closes it: closing a
// connection ends its transaction.
//
// A write's wait, for the one write connection and then for the write lock
// (busy_timeout, other processes), also ends past the bound store.WithWait
// set on ctx, with a store.FaultBusy.
func inTx(ctx context.Context, db *sql.DB, begin string, watch bool, f func(*tx) error) error {
	wctx := ctx
	if watch {
		var cancel context.CancelFunc
		wctx, cancel = boundWait(ctx)
		defer cancel()
	}
	c, err := db.Conn(wctx)
	if err != nil {
		return waitFault(ctx, wctx, err)
	}
	defer c.Close()
	t := &tx{ctx: context.WithoutCancel(ctx)}
	err = c.Raw(func(dc any) (err error) {
		t.c = dc.(*conn)
		st, err := t.c.stmt(t.ctx, begin)
		if err != nil {
			return err
		}
		bctx := t.ctx
		if watch {
			bctx = wctx
		}
		if _, err := st.(driver.StmtExecContext).ExecContext(bctx, nil); err != nil {
			if bctx.Err() != nil {
				// The driver answers the context's end even for a BEGIN
				// that took effect: the connection may hold the lock.
				return errors.Join(waitFault(ctx, bctx, fmt.Errorf("begin: %w", err)), driver.ErrBadConn)
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
	if err != nil {
		return err
	}
	for _, g := range t.after {
		g()
	}
	return nil
}

// afterCommit runs g once the transaction has committed (never if it
// rolls back), after the connection is given back.
func (t *tx) afterCommit(g func()) { t.after = append(t.after, g) }

// exec runs q with args and answers how many rows it changed.
func (t *tx) exec(q string, args ...any) (int64, error) {
	st, err := t.c.stmt(t.ctx, q)
	if err != nil {
		return 0, err
	}
	if err := t.c.bind(args); err != nil {
		return 0, err
	}
	defer t.c.unbind()
	res, err := st.(driver.StmtExecContext).ExecContext(t.ctx, t.c.args)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execScript runs q, which may hold several statements, unprepared (a
// migration: run once, never kept).
func (t *tx) execScript(q string) error {
	_, err := t.c.ExecContext(t.ctx, q, nil)
	return err
}

// query runs q with args; its rows must be closed before the next
// statement of t runs.
func (t *tx) query(q string, args ...any) (*rows, error) {
	st, err := t.c.stmt(t.ctx, q)
	if err != nil {
		return nil, err
	}
	if err := t.c.bind(args); err != nil {
		return nil, err
	}
	defer t.c.unbind() // the driver binds them before it answers
	r, err := st.(driver.StmtQueryContext).QueryContext(t.ctx, t.c.args)
	if err != nil {
		return nil, err
	}
	return &rows{r: r, vals: make([]driver.Value, len(r.Columns()))}, nil
}

// queryRow is the first row of q with args: its Scan answers
// sql.ErrNoRows when there is none.
func (t *tx) queryRow(q string, args ...any) row { return row{t: t, q: q, args: args} }

// row is a query whose first row Scan reads.
type row struct {
	t    *tx
	q    string
	args []any
}

// Scan runs the query and scans its first row into dest (see assign).
func (r row) Scan(dest ...any) error {
	rs, err := r.t.query(r.q, r.args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	if !rs.Next() {
		if rs.err != nil {
			return rs.err
		}
		return sql.ErrNoRows
	}
	return rs.Scan(dest...)
}

// rows are the rows of a query, read like database/sql's.
type rows struct {
	r    driver.Rows
	vals []driver.Value
	err  error
}

// Next moves to the next row; false at the end or on an error (Err).
func (r *rows) Next() bool {
	if r.err != nil {
		return false
	}
	if err := r.r.Next(r.vals); err != nil {
		if err != io.EOF {
			r.err = err
		}
		return false
	}
	return true
}

// Scan copies the current row into dest (see assign).
func (r *rows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("scan: %d columns into %d values", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("scan column %d: %w", i, err)
		}
	}
	return nil
}

// Err is the error that ended Next, if any.
func (r *rows) Err() error { return r.err }

// Close ends the query.
func (r *rows) Close() error { return r.r.Close() }

// assign stores a column's value in dest: a *string (or a pointer to a
// type whose kind is string), *int64, *int (or another integer kind),
// *bool, *[]byte, or *sql.NullString.
func assign(dest any, v driver.Value) error {
	switch p := dest.(type) {
	case *string:
		switch v := v.(type) {
		case string:
			*p = v
		case []byte:
			*p = string(v)
		default:
			return fmt.Errorf("%T into a string", v)
		}
	case *int64:
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%T into an integer", v)
		}
		*p = n
	case *int:
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%T into an integer", v)
		}
		*p = int(n)
	case *bool:
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%T into a boolean", v)
		}
		*p = n != 0
	case *[]byte:
		switch v := v.(type) {
		case []byte:
			*p = v
		case string:
			*p = []byte(v)
		case nil:
			*p = nil
		default:
			return fmt.Errorf("%T into bytes", v)
		}
	case *sql.NullString:
		if v == nil {
			*p = sql.NullString{}
			return nil
		}
		p.Valid = true
		return assign(&p.String, v)
	default:
		rv := reflect.ValueOf(dest)
		if rv.Kind() != reflect.Pointer || rv.IsNil() {
			return fmt.Errorf("unsupported destination %T", dest)
		}
		e := rv.Elem()
		switch e.Kind() {
		case reflect.String:
			var s string
			if err := assign(&s, v); err != nil {
				return err
			}
			e.SetString(s)
		case reflect.Int, reflect.Int32, reflect.Int64:
			var n int64
			if err := assign(&n, v); err != nil {
				return err
			}
			e.SetInt(n)
		default:
			return fmt.Errorf("unsupported destination %T", dest)
		}
	}
	return nil
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
		case bool:
			a = int64(0)
			if v {
				a = int64(1)
			}
		case nil, int64, string, []byte:
		default:
			rv := reflect.ValueOf(a)
			switch rv.Kind() {
			case reflect.String:
				a = rv.String()
			case reflect.Int, reflect.Int32, reflect.Int64:
				a = rv.Int()
			default:
				return fmt.Errorf("argument %d: unsupported type %T", i+1, a)
			}
		}
		c.args = append(c.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	return nil
}

func (c *conn) unbind() {
	clear(c.args)
	c.args = c.args[:0]
}
