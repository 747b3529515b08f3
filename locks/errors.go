package locks

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error the engine returns for these cases matches
// one of them with errors.Is; TimeoutError and LeaseLostError carry details
// for errors.As.
var (
	// ErrTimeout: the Wait option ran out before the key was free.
	ErrTimeout = errors.New("locks: timed out waiting")
	// ErrLeaseLost: the lease expired or was taken before fn returned, so
	// fn no longer held the key.
	ErrLeaseLost = errors.New("locks: lease lost")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("locks: engine closed")
	// ErrMaxHold: fn ran longer than the MaxHold option allowed; it is the
	// cause of fn's context then.
	ErrMaxHold = errors.New("locks: max hold time reached")
	// ErrInvalid: a key, TTL, limit or option out of range.
	ErrInvalid = errors.New("locks: invalid argument")
	// ErrFenceExhausted: the store has handed out MaxFence and refuses
	// further acquisitions rather than pass 2^53-1.
	ErrFenceExhausted = errors.New("locks: fences exhausted")
	// ErrRelease wraps a failure to release a lease after fn returned. The
	// key stays taken until the lease's TTL runs out; fn's own result is
	// unchanged (the two are joined).
	ErrRelease = errors.New("locks: release failed")
	// ErrLimitConflict: a semaphore key is held under one limit and an
	// acquisition asked for another. One key, one limit, everywhere.
	ErrLimitConflict = errors.New("locks: semaphore key held under another limit")
)

// TimeoutError is returned by Hold when the Wait option ran out. It matches
// ErrTimeout.
type TimeoutError struct {
	Key  string        // the key waited for
	Wait time.Duration // how long the caller was willing to wait
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("locks: key %q not free within %v", e.Key, e.Wait)
}

// Is reports whether target is ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// LeaseLostError says a lease ended before fn returned: the store refused a
// renewal (the lease had expired and may belong to someone else now), or
// renewals failed until the lease's time ran out. It is the cause of fn's
// context (context.Cause) and what Hold returns. It matches ErrLeaseLost.
type LeaseLostError struct {
	Key   string
	Fence int64
	// Err is the last renewal error when renewals failed; nil when the
	// store answered that the lease was gone.
	Err error
}

func (e *LeaseLostError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("locks: lease on %q (fence %d) lost: renewal failed until it ran out: %v", e.Key, e.Fence, e.Err)
	}
	return fmt.Sprintf("locks: lease on %q (fence %d) lost: it expired before renewal", e.Key, e.Fence)
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the renewal error, if any.
func (e *LeaseLostError) Unwrap() error { return e.Err }
