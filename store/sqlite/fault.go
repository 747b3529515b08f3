package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"studio/store"
)

func init() { store.RegisterClassifier(classify) }

// classify reads a SQLite error as a dependency fault, by its primary
// result code (https://sqlite.org/rescode.html): BUSY and LOCKED past the
// busy timeout, FULL, READONLY, IOERR and CANTOPEN. Any other error (a
// constraint, a bug in a statement, a corrupt file) is not one.
func classify(err error) *store.Fault {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	var kind store.FaultKind
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		kind = store.FaultBusy
	case sqlite3.SQLITE_FULL:
		kind = store.FaultFull
	case sqlite3.SQLITE_READONLY:
		kind = store.FaultReadOnly
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
		kind = store.FaultIO
	default:
		return nil
	}
	return &store.Fault{Kind: kind, Err: err}
}

// boundWait answers the context for a wait for the write lock: ctx, bounded
// by the wait store.WithWait set on it, if any.
func boundWait(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := store.Wait(ctx); ok {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// waitFault answers err, the end of a wait for the write lock bounded by
// boundWait: a FaultBusy when the bound ran out while the caller's own
// context was still live, err itself otherwise.
func waitFault(ctx, bounded context.Context, err error) error {
	if err == nil || ctx.Err() != nil || bounded.Err() == nil {
		return err
	}
	d, _ := store.Wait(ctx)
	return &store.Fault{Kind: store.FaultBusy, Err: fmt.Errorf("no write lock within %v: %w", d.Round(time.Millisecond), err)}
}

// commitFault marks a fault of COMMIT that may have come after the commit
// took effect: an I/O error (a failed fsync of the WAL, say). A COMMIT
// refused for a full volume, a read-only file or the lock did not commit:
// SQLite writes the commit record last.
func commitFault(err error) error {
	if f := store.FaultOf(err); f != nil && f.Kind == store.FaultIO {
		return &store.Fault{Kind: f.Kind, MaybeCommitted: true, Err: err}
	}
	return err
}
