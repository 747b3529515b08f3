package postgres

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"studio/store"
)

func init() { store.RegisterClassifier(classify) }

// classify reads a PostgreSQL error as a dependency fault: a connection
// that could not be made (refused, no route, the server starting or
// shutting down) or was lost (terminated by pg_terminate_backend, the
// server restarting, the network), and the server's own SQLSTATE classes
// (https://www.postgresql.org/docs/current/errcodes-appendix.html) for a
// read-only server, a full disk, too many connections, a lock not granted.
// Anything else (a constraint, a bug in a statement) is not one.
//
// A fault after the request may have reached the server is marked
// MaybeCommitted (pgconn.SafeToRetry says whether nothing was sent).
func classify(err error) *store.Fault {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return &store.Fault{Kind: store.FaultUnreachable, Err: err}
	}
	maybe := !pgconn.SafeToRetry(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		kind := pgFaults[pe.Code]
		if kind == "" && strings.HasPrefix(pe.Code, "08") { // connection_exception
			kind = store.FaultUnreachable
		}
		if kind == "" {
			return nil
		}
		// Only a connection lost mid-request leaves a commit in doubt; the
		// other classes refused the statement.
		return &store.Fault{Kind: kind, MaybeCommitted: kind == store.FaultUnreachable && maybe, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) {
		return &store.Fault{Kind: store.FaultUnreachable, MaybeCommitted: maybe, Err: err}
	}
	return nil
}

// pgFaults maps the SQLSTATE codes that are faults to their kind.
var pgFaults = map[string]store.FaultKind{
	"57P01": store.FaultUnreachable, // admin_shutdown (also pg_terminate_backend)
	"57P02": store.FaultUnreachable, // crash_shutdown
	"57P03": store.FaultUnreachable, // cannot_connect_now (starting up, shutting down)
	"25006": store.FaultReadOnly,    // read_only_sql_transaction (a standby, default_transaction_read_only)
	"53100": store.FaultFull,        // disk_full
	"53300": store.FaultBusy,        // too_many_connections
	"53000": store.FaultBusy,        // insufficient_resources
	"55P03": store.FaultBusy,        // lock_not_available (lock_timeout)
	"58030": store.FaultIO,          // io_error
}
