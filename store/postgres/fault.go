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

// classify reads a PostgreSQL error as a dependency fault, or nil when it
// is not one (a constraint, a bug in a statement: a 500).
//
//   - A connection that could not be made is unreachable (refused, no
//     route, a name that does not resolve, the server starting or shutting
//     down), unless the server itself answered with a fault of another
//     kind (too many connections: busy).
//   - The server's own SQLSTATE classes
//     (https://www.postgresql.org/docs/current/errcodes-appendix.html):
//     a read-only server, a full disk, too many connections, a lock not
//     granted, a connection exception.
//   - A live connection lost (terminated by pg_terminate_backend, reset,
//     closed, the server restarting) is unreachable.
//   - A live connection that did not answer within a deadline set on it
//     is busy: the server is slow or the link stalled, and it is not known
//     to be down. (A deadline of the caller's context is not a fault at
//     all; one that --db-wait set is made a busy fault where the store
//     waits for a connection.)
//
// Any other network error is not classified: a bug until shown otherwise.
// A fault after the request may have reached the server is marked
// MaybeCommitted (pgconn.SafeToRetry says whether nothing was sent).
func classify(err error) *store.Fault {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Nothing was sent: no commit in doubt.
		if errors.As(err, &pe) {
			if kind := pgFaults[pe.Code]; kind != "" {
				return &store.Fault{Kind: kind, Err: err}
			}
		}
		return &store.Fault{Kind: store.FaultUnreachable, Err: err}
	}
	maybe := !pgconn.SafeToRetry(err)
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
	if errors.As(err, &ne) && ne.Timeout() {
		return &store.Fault{Kind: store.FaultBusy, MaybeCommitted: maybe, Err: err}
	}
	if connectionLost(err) {
		return &store.Fault{Kind: store.FaultUnreachable, MaybeCommitted: maybe, Err: err}
	}
	return nil
}

// connectionLost says whether err is the end of a connection: the server
// or the network closed or reset it, or it could not be reached.
func connectionLost(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed),
		errors.As(err, &dns):
		return true
	case errors.As(err, &op):
		// A read, write or dial of the connection that failed.
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
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
