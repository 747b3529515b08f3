package redislock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

// stoppedClock is the lock store's clock in tests.
type stoppedClock struct{ ns atomic.Int64 }

func newStoppedClock() *stoppedClock {
	c := &stoppedClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *stoppedClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *stoppedClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }

func TestLockStoreConformance(t *testing.T) {
	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		url := testURL(t)
		prefix := testPrefix(t, url)
		clock := newStoppedClock()
		s := openStore(t, url, prefix)
		s.clock = clock.now
		return &lockstest.Fixture{
			Store: s,
			Clock: clock,
			Reopen: func(t *testing.T) locks.Store {
				s.Close()
				s = openStore(t, url, prefix)
				s.clock = clock.now
				return s
			},
			SetFence: func(t *testing.T, v int64) {
				if err := s.Client().Set(t.Context(), prefix+"fence", v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				s.seen.Store(v) // the store's own floor moves with it
			},
		}
	})
}

// TestLockStoreRealClock runs on the Redis server's clock: leases end by
// it, and their keys carry a PEXPIRE that drops them then.
func TestLockStoreRealClock(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	prefix := testPrefix(t, url)
	s := openStore(t, url, prefix)
	ctx := t.Context()
	if _, ok, err := s.Acquire(ctx, "long", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if left := s.Client().PTTL(ctx, prefix+"l:long").Val(); left <= 59*time.Minute || left > time.Hour {
		t.Fatalf("the lease's key expires in %v, want within the hour", left)
	}
	if _, ok, err := s.Acquire(ctx, "long", "b", time.Hour); err != nil || ok {
		t.Fatalf("second Acquire: %v, %v; want refused", ok, err)
	}
	if _, ok, err := s.AcquireSlot(ctx, "long", "a", 2, time.Hour); err != nil || !ok {
		t.Fatalf("AcquireSlot: %v, %v", ok, err)
	}
	for _, k := range []string{prefix + "s:long", prefix + "h:long"} {
		if left := s.Client().PTTL(ctx, k).Val(); left <= 59*time.Minute || left > time.Hour {
			t.Fatalf("%s expires in %v, want within the hour", k, left)
		}
	}
	lockstest.ShortLeasesEnd(t, s, func() {
		for _, k := range []string{prefix + "l:short", prefix + "s:short", prefix + "h:short"} {
			if n := s.Client().Exists(ctx, k).Val(); n != 0 {
				t.Fatalf("%s still exists after its lease's TTL", k)
			}
		}
	})
}

// TestLockEngineAcrossStores: two engines, each on its own client (as two
// processes), meet only in Redis.
func TestLockEngineAcrossStores(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	prefix := testPrefix(t, url)
	lockstest.EnginesExclude(t, func(t *testing.T) locks.Store { return openStore(t, url, prefix) })
}

func TestOpenRefusesBadURL(t *testing.T) {
	_, err := Open(t.Context(), "redis://user:secret@[::1")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open of a bad URL: %v; want an error that does not quote it", err)
	}
}

// TestFencesGrowAcrossRedisRestart: a redis-server without persistence
// killed with SIGKILL and started again has lost every key, the fence
// counter too. Fences still grow: for the store that saw the old ones,
// and for a store opened afterwards that never did (lifted to the
// server's clock). The leases are gone: the key is free at once.
func TestFencesGrowAcrossRedisRestart(t *testing.T) {
	t.Parallel()
	r := ownRedis(t)
	s := openStore(t, r.url, DefaultPrefix)
	ctx := t.Context()
	var last int64
	for i := range 3 {
		f, ok, err := s.Acquire(ctx, "k", fmt.Sprint("o", i), time.Hour)
		if err != nil || !ok || f <= last {
			t.Fatalf("Acquire %d: %d, %v, %v", i, f, ok, err)
		}
		last = f
		if i < 2 {
			if ok, err := s.Release(ctx, "k", fmt.Sprint("o", i)); err != nil || !ok {
				t.Fatalf("Release %d: %v, %v", i, ok, err)
			}
		}
	}
	slot, ok, err := s.AcquireSlot(ctx, "k", "slot", 1, time.Hour)
	if err != nil || !ok || slot <= last {
		t.Fatalf("AcquireSlot: %d, %v, %v", slot, ok, err)
	}
	last = slot
	r.kill()
	if err := r.start(r.cmd.Path); err != nil {
		t.Fatal(err)
	}
	// First a store that never saw the old fences (a process started
	// after the restart): only the server's clock keeps its fence above.
	fresh := openStore(t, r.url, DefaultPrefix)
	g, ok, err := fresh.AcquireSlot(ctx, "k", "fresh", 3, time.Hour)
	if err != nil || !ok || g <= last {
		t.Fatalf("a new store's slot after the restart: %d, %v, %v; want above %d", g, ok, err, last)
	}
	// Then the old store: its client reconnects on its own (the first
	// call may see the broken connection); the old lease died with the
	// data, so the key is free.
	var f int64
	for range 50 {
		if f, ok, err = s.Acquire(ctx, "k", "after", time.Hour); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !ok {
		t.Fatalf("Acquire after the restart: %v, %v", ok, err)
	}
	if f <= g {
		t.Fatalf("fence %d after the restart, not above %d", f, g)
	}
}

// TestFenceFloorWhenTheCounterFallsBehind: when the counter is found
// behind a fence this store handed out (its key lost, with fences ahead
// of the clock), the store lifts the fence above that one and says so in
// its log.
func TestFenceFloorWhenTheCounterFallsBehind(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	prefix := testPrefix(t, url)
	var logged bytes.Buffer
	var mu sync.Mutex
	s := openStore(t, url, prefix, WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))))
	ctx := t.Context()
	high := locks.MaxFence - 100
	if err := s.Client().Set(ctx, prefix+"fence", high, 0).Err(); err != nil {
		t.Fatal(err)
	}
	f, ok, err := s.Acquire(ctx, "k", "a", time.Hour)
	if err != nil || !ok || f != high+1 {
		t.Fatalf("Acquire: %d, %v, %v; want %d", f, ok, err, high+1)
	}
	mu.Lock()
	quiet := logged.Len() == 0
	mu.Unlock()
	if !quiet {
		t.Fatalf("logged on an ordinary acquisition: %s", logged.String())
	}
	if err := s.Client().Del(ctx, prefix+"fence").Err(); err != nil {
		t.Fatal(err)
	}
	g, ok, err := s.AcquireSlot(ctx, "k", "b", 1, time.Hour)
	if err != nil || !ok || g != f+1 {
		t.Fatalf("AcquireSlot after the counter was lost: %d, %v, %v; want %d", g, ok, err, f+1)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "fence counter was behind") {
		t.Fatalf("no warning logged: %q", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, key := range []string{"k", "a b", "\x00", "é:1 x", ""} {
		for _, slot := range []bool{false, true} {
			s, k, ok := decodePayload(encodePayload(slot, key))
			if !ok || s != slot || k != key {
				t.Fatalf("decode(encode(%v, %q)) = %v, %q, %v", slot, key, s, k, ok)
			}
		}
	}
	for _, bad := range []string{"", "x 00", "l zz", "l"} {
		if _, _, ok := decodePayload(bad); ok {
			t.Fatalf("decodePayload(%q) accepted", bad)
		}
	}
}

// TestReleaseWakesOtherStore: a waiter on another client (as in another
// process) whose poll interval is an hour still takes the key as soon as
// it is released: the published release woke it. Without it, the Wait of
// 30 s would run out first. The same for a semaphore slot; and, without
// notifications, the Wait does run out.
func TestReleaseWakesOtherStore(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			t.Parallel()
			url := testURL(t)
			prefix := testPrefix(t, url)
			var opts []Option
			if !notify {
				opts = append(opts, WithoutNotify())
			}
			holder := locks.New(openStore(t, url, prefix, opts...))
			t.Cleanup(func() { holder.Close() })
			ws := openStore(t, url, prefix, opts...)
			wait := 30 * time.Second
			if !notify {
				wait = 500 * time.Millisecond
			}
			waiter := locks.New(ws, locks.PollInterval(time.Hour, time.Hour), locks.Wait(wait))
			t.Cleanup(func() { waiter.Close() })
			if notify && !listeningWithin(ws, time.Minute) {
				t.Fatal("the waiter's subscription was not confirmed within a minute")
			}
			ctx := t.Context()
			for _, sem := range []bool{false, true} {
				hold := func(e *locks.Engine, fn func(context.Context, *locks.Lease) error) error {
					if sem {
						return e.Semaphore(1).Hold(ctx, "k", fn)
					}
					return e.Hold(ctx, "k", fn)
				}
				got := make(chan error, 1)
				err := hold(holder, func(context.Context, *locks.Lease) error {
					go func() {
						got <- hold(waiter, func(context.Context, *locks.Lease) error { return nil })
					}()
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
						info, err := waiter.Inspect(ctx, "k")
						if sem {
							info, err = waiter.InspectSemaphore(ctx, "k")
						}
						if err != nil {
							return err
						}
						if info.Waiters == 1 {
							return nil
						}
						time.Sleep(time.Millisecond)
					}
					return errors.New("the waiter did not queue within 10 s")
				})
				if err != nil {
					t.Fatal(err)
				}
				err = <-got
				switch {
				case notify && err != nil:
					t.Fatalf("semaphore=%v: the waiter was not woken by the release: %v", sem, err)
				case !notify && !errors.Is(err, locks.ErrTimeout):
					t.Fatalf("semaphore=%v, without notifications: %v; want the wait to run out", sem, err)
				}
			}
		})
	}
}
