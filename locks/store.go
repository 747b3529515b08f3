package locks

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Limits of keys, TTLs and fences. Every store keeps them; the engine checks
// keys and TTLs before it calls a store.
const (
	// MaxKeyLen is the longest key, in Unicode characters (runes).
	MaxKeyLen = 500
	// MinTTL is the shortest lease.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease: 30 days, past what 32 bits of
	// milliseconds can hold.
	MaxTTL = 30 * 24 * time.Hour
	// MaxFence is the largest fence a store hands out: 2^53-1, the largest
	// integer a float64 (and so a JSON number in most languages) holds
	// exactly. Past it a store refuses acquisitions with ErrFenceExhausted.
	MaxFence int64 = 1<<53 - 1
)

// Store keeps leases where every process that must agree on them can see
// them. Implementations: MemoryStore (one process), sqlitelock.Store and
// pglock.Store (across processes), and any store that passes lockstest.Run.
//
// The store's clock alone decides expiry: a lease acquired or renewed with
// ttl at store time t lives while the store's time is before t+ttl. An
// expired lease does not exist for any method: it cannot be renewed or
// released, and the key (or slot) is free.
//
// Owners are opaque strings chosen by the caller, unique per acquisition and
// never reused (the engine's are 128 random bits per engine and a counter),
// of at most 64 bytes of printable ASCII. Inspect never shows them. Renew and Release are
// compare-and-set on the owner, so a caller whose lease expired and was
// taken by someone else changes nothing.
//
// Locks (Acquire, Renew, Release) and semaphore slots (AcquireSlot,
// RenewSlot, ReleaseSlot) are two separate key spaces: a lock "k" and a
// semaphore "k" do not see each other.
//
// Keys are compared byte for byte: no case folding, no Unicode
// normalization, no hashing. Callers pass keys that CheckKey accepts and
// TTLs between MinTTL and MaxTTL.
type Store interface {
	// Acquire takes the lock key for owner for ttl if no live lease holds
	// it. Of any number of concurrent callers on a free or expired key
	// exactly one gets ok. The fence is drawn atomically with the check: it
	// is larger than every fence this store handed out before for the key
	// (across releases, expiries and restarts), and at most MaxFence; past
	// that the store answers ErrFenceExhausted.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (fence int64, ok bool, err error)
	// Renew extends owner's live lease on key to ttl from now (store
	// time). It answers false, changing nothing, when owner does not hold a
	// live lease on key.
	Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// Release ends owner's lease on key. It answers false when owner did
	// not hold a live lease on key; a lease of another owner is untouched.
	Release(ctx context.Context, key, owner string) (bool, error)

	// AcquireSlot takes one of limit slots of the semaphore key for owner
	// for ttl, if fewer than limit live slots are held. Of concurrent
	// callers never more win than there are free slots. Fences as Acquire:
	// each larger than every earlier slot's fence of the key. A store
	// records each slot's limit: while the key has a live slot taken under
	// another limit, it answers an error matching ErrLimitConflict and
	// takes nothing.
	AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (fence int64, ok bool, err error)
	// RenewSlot extends owner's live slot of key, as Renew.
	RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// ReleaseSlot ends owner's slot of key, as Release.
	ReleaseSlot(ctx context.Context, key, owner string) (bool, error)

	// Inspect answers the live lease of the lock key, if any, by the
	// store's clock, without its owner.
	Inspect(ctx context.Context, key string) (KeyState, error)
	// InspectSlots answers the live slots of the semaphore key, by the
	// store's clock, without their owners.
	InspectSlots(ctx context.Context, key string) (KeyState, error)
}

// Notifier is a Store that tells when a lease may have been released by
// another process, so that the engine's waiters ask at once instead of at
// their next poll. The engine subscribes in New and stops in Close.
// Polling stays the fallback: a notification can be lost (a dropped
// connection) and an expiry notifies no one.
type Notifier interface {
	// Subscribe calls released(slot, key) after a lease of key (a lock,
	// or a semaphore slot when slot is true) was released by any process,
	// until stop is called. released must return quickly; it may be called
	// from any goroutine.
	Subscribe(released func(slot bool, key string)) (stop func())
}

// KeyState is what a store knows of one key at one instant of its clock:
// the live leases (never their owners). Stores fill it for Inspect and
// InspectSlots; the engine adds what only it knows (see Info).
type KeyState struct {
	// Now is the store's clock when it answered: compare Expires with
	// it, not with the local clock.
	Now time.Time
	// Holders are the live leases, by fence, smallest first: at most one
	// for a lock, at most the limit for a semaphore.
	Holders []Holder
	// Limit is the limit the live slots of a semaphore were acquired
	// under; 0 for a lock, a free key, or a store that does not keep it.
	Limit int
}

// Holder is one live lease as Inspect shows it: its fence and when it
// ends, never its owner.
type Holder struct {
	Fence int64
	// Expires is when the lease ends unless renewed, by the store's clock.
	Expires time.Time
	// Left is Expires minus the store's time when it answered.
	Left time.Duration
}

// CheckKey reports whether key is a valid lock key: valid UTF-8, 1 to
// MaxKeyLen characters. Any character is allowed, U+0000 included.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	}
	if n := utf8.RuneCountInString(key); n > MaxKeyLen {
		return fmt.Errorf("%w: key has %d characters, at most %d allowed", ErrInvalid, n, MaxKeyLen)
	}
	return nil
}

// LimitConflict is the error of an AcquireSlot refused because key is
// held under limit held, not asked (ErrLimitConflict).
func LimitConflict(key string, held, asked int) error {
	return fmt.Errorf("acquire slot: %w: %q is held under limit %d, asked %d", ErrLimitConflict, key, held, asked)
}

// CheckLimit reports whether limit is a valid semaphore limit: at least 1.
func CheckLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: semaphore limit %d, at least 1 allowed", ErrInvalid, limit)
	}
	return nil
}

// CheckTTL reports whether ttl lies between MinTTL and MaxTTL.
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v outside %v..%v", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// TTLMillis converts a TTL to whole milliseconds for a store that counts in
// them, rounding up: a store must never end a lease before the holder
// expects it to end.
func TTLMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}
