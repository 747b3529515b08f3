package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"studio/blob"
)

// FaultKind names a class of fault of what the store depends on (the
// database, the disk under it): not a bug of studio and not a fault of the
// caller's input, but a condition that passes. The set is closed and small,
// so it can be a metric label.
type FaultKind string

// The fault kinds.
const (
	// FaultBusy: the database did not grant its write lock within the
	// wait the caller allowed (another process holds it).
	FaultBusy FaultKind = "busy"
	// FaultUnreachable: no connection to the database, or it was lost
	// (refused, terminated, the server shutting down or restarting).
	FaultUnreachable FaultKind = "unreachable"
	// FaultFull: the volume or the database has no space left.
	FaultFull FaultKind = "full"
	// FaultReadOnly: the database or its volume accepts no writes.
	FaultReadOnly FaultKind = "read_only"
	// FaultIO: the database could not read or write its files.
	FaultIO FaultKind = "io"
	// FaultAssetStore: the store of asset bytes (an object store) cannot
	// be reached or refuses (blob.ErrUnavailable).
	FaultAssetStore FaultKind = "asset_store"
)

// Dependency names what a fault of the kind is a fault of: "database"
// (its volume included) or "asset store".
func (k FaultKind) Dependency() string {
	if k == FaultAssetStore {
		return "asset store"
	}
	return "database"
}

// FaultKinds lists every kind of fault of the database, in a fixed order:
// the kind labels of studio_database_faults_total. FaultAssetStore is
// counted apart, by studio_asset_store_faults_total.
var FaultKinds = []FaultKind{FaultBusy, FaultUnreachable, FaultFull, FaultReadOnly, FaultIO}

// Fault is a dependency fault: the kind, whether a write may have
// committed all the same, and the error it was read from.
type Fault struct {
	Kind FaultKind
	// MaybeCommitted says the fault came when a commit may already have
	// taken effect (a connection lost after the statement was sent, a
	// failed COMMIT): the caller cannot know the outcome, and a retry of an
	// idempotent intent finds it out.
	MaybeCommitted bool
	// Err is the engine's error.
	Err error
}

// Error says the kind and the engine's error.
func (f *Fault) Error() string {
	return fmt.Sprintf("%s fault (%s): %v", f.Kind.Dependency(), f.Kind, f.Err)
}

// Unwrap answers the engine's error.
func (f *Fault) Unwrap() error { return f.Err }

// Classifier reads an engine's error: the fault it is, or nil when it is
// not one. Each engine registers its own with RegisterClassifier; the
// classification is the engine's, in one function.
type Classifier func(error) *Fault

var classifiers struct {
	sync.RWMutex
	list []Classifier
}

// RegisterClassifier adds an engine's classifier to those FaultOf asks.
// An engine package calls it once, from init.
func RegisterClassifier(c Classifier) {
	classifiers.Lock()
	defer classifiers.Unlock()
	classifiers.list = append(classifiers.list, c)
}

// FaultOf answers the dependency fault err is, or nil: a *Fault in err's
// chain, else what a registered engine classifier reads in it, else an
// operating system error that says the volume is full, read-only or
// failing (from the asset files, say). Context errors are not faults: a
// caller that went away or ran out of time is not told the database is
// down.
func FaultOf(err error) *Fault {
	if err == nil {
		return nil
	}
	var f *Fault
	if errors.As(err, &f) {
		return f
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if errors.Is(err, blob.ErrUnavailable) {
		return &Fault{Kind: FaultAssetStore, Err: err}
	}
	classifiers.RLock()
	list := classifiers.list
	classifiers.RUnlock()
	for _, c := range list {
		if f := c(err); f != nil {
			return f
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &Fault{Kind: FaultFull, Err: err}
	case errors.Is(err, syscall.EROFS):
		return &Fault{Kind: FaultReadOnly, Err: err}
	case errors.Is(err, syscall.EIO):
		return &Fault{Kind: FaultIO, Err: err}
	}
	return nil
}

// waitKey is the context key of WithWait.
type waitKey struct{}

// WithWait bounds how long the store waits for the database on calls made
// with the returned context: for its write lock (SQLite: another process
// holding it; this process's own writers queued before) and for a
// connection. Past it the call answers a FaultBusy (or FaultUnreachable)
// instead of waiting on. The API sets it so that a client gets a quick
// 503; background work keeps the engine's own, longer waits.
func WithWait(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, waitKey{}, d)
}

// Wait answers the bound WithWait set on ctx, if any.
func Wait(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(waitKey{}).(time.Duration)
	return d, ok
}
