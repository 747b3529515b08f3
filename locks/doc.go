// Package locks gives mutual exclusion on named keys across goroutines and
// processes: Hold runs a function while no one else holds the key,
// Semaphore lets up to N hold it, and every holder gets a fence to guard the
// writes it makes. It depends on nothing of studio; a Store keeps the
// leases: MemoryStore in one process; across processes
// studio/locks/sqlitelock (one SQLite file), studio/locks/pglock
// (PostgreSQL), or any Store that passes lockstest.Run.
//
// Engine.Inspect shows who holds a key (fences and expiries, never
// owners) and how many wait; Engine.Lock names a family of keys with its
// own defaults:
//
//	summaries := e.Lock("summaries", locks.TTL(30*time.Second))
//	err := summaries.Hold(ctx, chatID, fn)
//
//	e := locks.New(store)
//	defer e.Close()
//	err := e.Hold(ctx, "report:2024-06", func(ctx context.Context, l *locks.Lease) error {
//		return build(ctx, l.Fence())
//	}, locks.TTL(30*time.Second), locks.Wait(time.Minute))
//
// # Owners, leases and fences
//
// Every acquisition draws a fresh owner that no other acquisition uses:
// its engine's 128 random bits and a counter, in hex. The store records (key, owner, fence, expiry) and that
// record is the lease. Renew and Release name the owner and change nothing
// unless it still holds a live lease, so a holder that has lost its lease
// can never touch the next holder's.
//
// A lease lasts its TTL from its last renewal, measured by the store's
// clock alone: the database's clock for a SQL store, so processes whose
// clocks disagree still agree on expiry. While fn runs, the engine renews
// every TTL/3, one renewal at a time. If the store answers that the lease
// is gone, or renewals keep failing until the lease's time is up by the
// local clock (time.Now's monotonic reading, counted from when the last
// good renewal was sent, so never later than the store's expiry), fn's context ends with a
// *LeaseLostError as its cause (context.Cause), exactly once, and Hold
// returns that error. A lease that ran out is never renewed.
//
// A lease can still end while fn is busy (a pause longer than the TTL, a
// partition): then two holders may briefly both believe they hold the key.
// The fence settles it. Each acquisition of a key gets a fence larger than
// every earlier fence of that key, across releases, expiries and restarts
// of the store, and never above MaxFence (2^53-1, exact in a float64 and so
// in JSON). Send the fence with every write the lock protects, and have the
// resource refuse a fence lower than the highest it has seen; in SQL:
//
//	UPDATE reports SET body = ?, fence = ?
//	 WHERE id = ? AND fence <= ?   -- 0 rows: a newer holder wrote; stop
//
// The late holder's write then fails instead of overwriting the newer
// holder's work. See Example (Fencing).
//
// # States of a lease
//
// In the store, per key (a semaphore has up to N leases per key):
//
//	           Acquire (fence = next)
//	┌──────┐ ────────────────────────► ┌─────────────────────────┐
//	│ free │                           │ held(owner, fence, exp) │ ◄─┐ Renew by owner,
//	└──────┘ ◄──────────────────────── └─────────────────────────┘ ──┘ before exp:
//	         Release by owner                   │                        exp = now + ttl
//	    ▲                                        │ store clock reaches exp
//	    └────────────────────────────────────────┘ (expired = free: Renew and
//	                                                Release by the old owner fail)
//
// In the engine, per Hold call:
//
//	waiting ──grant──► running fn ──fn returns or panics──► releasing ──► done
//	   │                   │ renew refused, or failing past the TTL
//	   │                   └──► lost: fn's context ends (cause *LeaseLostError),
//	   │                        then releasing as above; Hold returns the loss
//	   └── ctx ends, Wait runs out (*TimeoutError), Close (ErrClosed): done,
//	       nothing held
//
// A grant that races with the caller giving up is given back at once: a
// Hold either runs fn or leaves nothing behind. A panic in fn releases the
// key and goes on up; a release that fails never hides fn's own error (it
// is joined, wrapping ErrRelease). fn's context ends before the key is
// released, so goroutines fn left behind see it first.
//
// fn's context is context.WithCancelCause of the caller's, and it also
// carries the acquisitions, so that the caller giving up or Close cancels
// them. Renewals and releases must outlive it: they carry the caller's
// values without its cancel (context.WithoutCancel), and Close cancels
// them only CloseGrace after it begins.
//
// # Waiting and fairness
//
// Within one Engine, waiters for a key are served in the order they called
// Hold (FIFO): only the first in line asks the store, and a release in this
// engine wakes exactly the next waiter, with no polling. A Semaphore grants
// its slots in the same order. TryHold never jumps the line: with a waiter
// queued, the key is not free.
//
// Across engines (other processes, or several engines on one store) there
// is no queue: the store knows only who holds a key, not who waits. The
// first waiter of each engine asks the store again after a backoff of 5 ms
// doubling to 50 ms with jitter (PollInterval), so when a key is released
// the next holder is whichever engine asks first: its own next waiter
// usually, as that one is woken at once. There is no ordering and no
// starvation bound between processes; bound the wait with Wait or ctx. A
// store that is a Notifier (pglock, through LISTEN/NOTIFY) wakes the first
// waiter of each engine as soon as another process releases the key, so
// the handoff costs a notification and one acquisition instead of up to a
// poll interval; polling stays the fallback.
//
// # Keys and limits
//
// A key is any valid UTF-8 string of 1 to MaxKeyLen (500) characters,
// U+0000 included, compared byte for byte: no case folding, no Unicode
// normalization (NFC and NFD spellings are different keys), no hashing. A
// lock and a semaphore of the same name are different keys. TTLs range
// from MinTTL (1 ms) to MaxTTL (30 days); stores counting in milliseconds
// round up.
package locks
