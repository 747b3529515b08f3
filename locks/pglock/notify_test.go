package pglock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, key := range []string{"k", "a b", "\x00", "é:1 x", ""} {
		for _, slot := range []bool{false, true} {
			p := encodePayload(slot, key, "my schema")
			s, k, schema, ok := decodePayload(p)
			if !ok || s != slot || k != key || schema != "my schema" {
				t.Fatalf("decode(encode(%v, %q)) = %v, %q, %q, %v", slot, key, s, k, schema, ok)
			}
		}
	}
	for _, bad := range []string{"", "x 00 s", "l zz s", "l 00"} {
		if _, _, _, ok := decodePayload(bad); ok {
			t.Fatalf("decodePayload(%q) accepted", bad)
		}
	}
}

// TestReleaseWakesOtherProcess: a waiter on another pool (as in another
// process) whose poll interval is an hour still takes the key as soon as
// it is released: the NOTIFY woke it. Without it, the Wait of 30 s would
// run out first. The same for a semaphore slot.
func TestReleaseWakesOtherProcess(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	holder := locks.New(openLockDB(t, testURL(t), schema))
	t.Cleanup(func() { holder.Close() })
	ws := openLockDB(t, testURL(t), schema)
	waiter := locks.New(ws, locks.PollInterval(time.Hour, time.Hour), locks.Wait(30*time.Second))
	t.Cleanup(func() { waiter.Close() })
	if !listeningWithin(ws, time.Minute) {
		t.Fatal("the waiter's listening connection did not come up within a minute")
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
			// Release once the waiter found the key held and waits for its
			// hour-long poll: its engine's line was empty, so it is in
			// line (Waiters 1) only after the store refused it.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
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
		if err := <-got; err != nil {
			t.Fatalf("semaphore %v: the waiter in the other process: %v", sem, err)
		}
	}
}

// listeningWithin waits up to d for s's listening connection to come up
// (its LISTEN done) and says whether it did. A release before that is not
// heard, and a waiter that polls once an hour would wait out its Wait.
func listeningWithin(s *Store, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.subs.listens.Load() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// TestWithoutNotifyPolls: WithoutNotify sends no NOTIFY: a waiter with an
// hour-long poll interval is not woken, and its Wait runs out.
func TestWithoutNotifyPolls(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	holder := locks.New(openLockDB(t, testURL(t), schema, WithoutNotify()))
	t.Cleanup(func() { holder.Close() })
	waiter := locks.New(openLockDB(t, testURL(t), schema), locks.PollInterval(time.Hour, time.Hour))
	t.Cleanup(func() { waiter.Close() })
	ctx := t.Context()
	got := make(chan error, 1)
	err := holder.Hold(ctx, "k", func(context.Context, *locks.Lease) error {
		go func() {
			got <- waiter.Hold(ctx, "k", func(context.Context, *locks.Lease) error { return nil }, locks.Wait(time.Second))
		}()
		// Release only once the waiter waits: it must learn of it by
		// polling, and its poll is an hour away.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			info, err := waiter.Inspect(ctx, "k")
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
	if err := <-got; !errors.Is(err, locks.ErrTimeout) {
		t.Fatalf("waiter without a NOTIFY: %v, want ErrTimeout (polls an hour apart)", err)
	}
}

// TestOpensStudioSchema: a schema whose lock tables studio's migration
// 0002_locks made (read from the repository), with a slot taken before
// slot_limit existed, opens, and the store passes the conformance suite
// there.
func TestOpensStudioSchema(t *testing.T) {
	ddl, err := os.ReadFile(filepath.Join("..", "..", "migrations", "postgres", "0002_locks.sql"))
	if err != nil {
		t.Fatal(err)
	}
	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		schema := testSchema(t)
		url := withSearchPath(t, testURL(t), schema)
		execSQL(t, url, string(ddl))
		execSQL(t, url, `INSERT INTO lock_slots VALUES ('old', 'old', nextval('lock_fence'), now() - interval '1 hour')`)
		ls := openLockDB(t, testURL(t), schema)
		clock := newStoppedClock()
		ls.clock = clock.now
		return &lockstest.Fixture{Store: ls, Clock: clock}
	})
}

// TestCloseCancelsHungAcquire: another session holds the key's advisory
// lock in an open transaction, so the store's acquisition waits on the
// server (as on a hung connection); Close cancels it and returns, and the
// hold answers ErrClosed.
func TestCloseCancelsHungAcquire(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	ls := openLockDB(t, testURL(t), schema)
	ctx := t.Context()
	tx, err := ls.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	key := lockKey("studio.lock:" + schema + ":k")
	if _, err := tx.Exec(ctx, keyLockSQL, key); err != nil {
		t.Fatal(err)
	}
	e := locks.New(ls)
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(context.Context, *locks.Lease) error {
			t.Error("fn ran")
			return nil
		})
	}()
	// Wait until the acquisition waits on the advisory lock.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the acquisition did not wait on the advisory lock within 10 s")
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND NOT granted`,
			int64(uint64(key)>>32), int64(uint32(key))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	e.Close() // returns only if the waiting statement was canceled
	if err := <-done; !errors.Is(err, locks.ErrClosed) {
		t.Fatalf("Hold: %v, want ErrClosed", err)
	}
}
