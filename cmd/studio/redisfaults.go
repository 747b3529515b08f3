package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"studio/locks"
	"studio/locks/redislock"
	"studio/store"
)

// redisFaults is the Redis lock store as the program uses it: an error
// of Redis itself (unreachable, loading its data, a read-only replica) is
// a dependency fault, which the API answers with 503 and Retry-After like
// a database fault, never 500. Subscribe comes from the embedded store.
type redisFaults struct{ *redislock.Store }

// redisFault reads err as a store.Fault when it is Redis's; other errors
// (the caller's context, the locks package's own) pass unchanged.
func redisFault(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, locks.ErrInvalid) || errors.Is(err, locks.ErrLimitConflict) || errors.Is(err, locks.ErrFenceExhausted) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "READONLY"):
			return &store.Fault{Kind: store.FaultReadOnly, Err: err}
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "BUSY"), strings.HasPrefix(msg, "TRYAGAIN"):
			return &store.Fault{Kind: store.FaultBusy, Err: err}
		case strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "CLUSTERDOWN"):
			return &store.Fault{Kind: store.FaultUnreachable, Err: err}
		case strings.HasPrefix(msg, "OOM"):
			return &store.Fault{Kind: store.FaultFull, Err: err}
		}
		return err // an answer of Redis to a script it ran: a bug, not a fault
	}
	// No answer: the connection refused, reset or timed out, the pool
	// closed.
	return &store.Fault{Kind: store.FaultUnreachable, MaybeCommitted: true, Err: err}
}

// Acquire implements locks.Store.
func (s redisFaults) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	f, ok, err := s.Store.Acquire(ctx, key, owner, ttl)
	return f, ok, redisFault(err)
}

// Renew implements locks.Store.
func (s redisFaults) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Renew(ctx, key, owner, ttl)
	return ok, redisFault(err)
}

// Release implements locks.Store.
func (s redisFaults) Release(ctx context.Context, key, owner string) (bool, error) {
	ok, err := s.Store.Release(ctx, key, owner)
	return ok, redisFault(err)
}

// AcquireSlot implements locks.Store.
func (s redisFaults) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	f, ok, err := s.Store.AcquireSlot(ctx, key, owner, limit, ttl)
	return f, ok, redisFault(err)
}

// RenewSlot implements locks.Store.
func (s redisFaults) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ok, err := s.Store.RenewSlot(ctx, key, owner, ttl)
	return ok, redisFault(err)
}

// ReleaseSlot implements locks.Store.
func (s redisFaults) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	ok, err := s.Store.ReleaseSlot(ctx, key, owner)
	return ok, redisFault(err)
}

// Inspect implements locks.Store.
func (s redisFaults) Inspect(ctx context.Context, key string) (locks.KeyState, error) {
	st, err := s.Store.Inspect(ctx, key)
	return st, redisFault(err)
}

// InspectSlots implements locks.Store.
func (s redisFaults) InspectSlots(ctx context.Context, key string) (locks.KeyState, error) {
	st, err := s.Store.InspectSlots(ctx, key)
	return st, redisFault(err)
}
