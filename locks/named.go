package locks

import (
	"context"
	"fmt"
	"strconv"
)

// Lock is a named family of keys with its own defaults: Hold(ctx, id, fn)
// holds the key of (name, id), so that each id is a lock of its own and
// the options given once apply to all:
//
//	summaries := e.Lock("summaries", locks.TTL(30*time.Second))
//	err := summaries.Hold(ctx, chatID, fn)
//
// A Lock made from a Semaphore (Semaphore.Lock) holds one of the
// semaphore's slots of each id instead. A Lock is a value to keep and
// share; it holds nothing itself.
type Lock struct {
	e    *Engine
	name string
	t    target
	s    settings
}

// Lock returns the named lock name on this engine, with opts as the
// defaults of its holds (over the engine's, under each call's). It panics,
// with an error matching ErrInvalid, when name is not a valid key or an
// option is invalid: names and options are usually constants, as for
// regexp.MustCompile; check a name that comes from outside with CheckKey.
func (e *Engine) Lock(name string, opts ...Option) *Lock {
	return e.named(target{}, name, opts)
}

// Lock returns the named semaphore name: each id has up to the
// semaphore's limit holders. It panics as Engine.Lock.
func (s *Semaphore) Lock(name string, opts ...Option) *Lock {
	return s.e.named(s.target(), name, opts)
}

func (e *Engine) named(t target, name string, opts []Option) *Lock {
	if err := CheckKey(name); err != nil {
		panic(fmt.Errorf("locks: lock name: %w", err))
	}
	s := e.defaults.with(opts)
	if s.err != nil {
		panic(fmt.Errorf("locks: lock %q: %w", name, s.err))
	}
	return &Lock{e: e, name: name, t: t, s: s}
}

// KeyOf is the store key of id under the lock name: the length of name in
// bytes, a colon, name, a colon, id (KeyOf("summaries", "42") is
// "9:summaries:42"). The length comes first, so no other (name, id) pair
// gives the same key, whatever characters either holds. A plain key spelled
// the same way is the same key: Engine.Hold(ctx, KeyOf(n, id), ...)
// excludes Lock(n).Hold(ctx, id, ...).
func KeyOf(name, id string) string {
	return strconv.Itoa(len(name)) + ":" + name + ":" + id
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Limit returns how many may hold one id at once: 1 for a lock, the
// semaphore's limit for a named semaphore.
func (l *Lock) Limit() int { return l.t.capacity() }

// Key returns the store key of id: KeyOf(Name(), id).
func (l *Lock) Key(id string) string { return KeyOf(l.name, id) }

// Hold holds id under this lock and runs fn, as Engine.Hold does with the
// key KeyOf(name, id); opts override the lock's defaults for this call.
// An id that makes the key longer than MaxKeyLen fails with ErrInvalid.
func (l *Lock) Hold(ctx context.Context, id string, fn func(ctx context.Context, lease *Lease) error, opts ...Option) error {
	_, err := l.e.hold(ctx, l.t, l.Key(id), fn, l.s, opts, false)
	return err
}

// TryHold runs fn holding id only if it is free now, as Engine.TryHold.
func (l *Lock) TryHold(ctx context.Context, id string, fn func(ctx context.Context, lease *Lease) error, opts ...Option) (ran bool, err error) {
	return l.e.hold(ctx, l.t, l.Key(id), fn, l.s, opts, true)
}

// Inspect tells who holds id under this lock, as Engine.Inspect.
func (l *Lock) Inspect(ctx context.Context, id string) (Info, error) {
	return l.e.inspect(ctx, l.t, l.Key(id))
}
