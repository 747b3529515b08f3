package locks

import (
	"context"
	"errors"
	"testing"
	"time"
)

// closeNow calls Close. The store calls of these tests end only when
// their context is canceled: if Close did not cancel them, it would never
// return and the test would fail at the package's timeout.
func closeNow(t *testing.T, e *Engine) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	<-done
}

// TestCloseCancelsAcquireInFlight: a store call that would wait forever
// (a hung connection, a busy database) is canceled by Close; the hold
// returns ErrClosed and whatever the call may have taken is given back.
func TestCloseCancelsAcquireInFlight(t *testing.T) {
	m := NewMemoryStore()
	inside := make(chan struct{})
	h := &hookStore{Store: m}
	h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
		close(inside)
		<-ctx.Done() // only a cancel ends it
		return 0, false, ctx.Err()
	}
	e := New(h)
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error {
			t.Error("fn ran")
			return nil
		})
	}()
	<-inside
	closeNow(t, e)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Hold whose acquisition Close canceled: %v, want ErrClosed", err)
	}
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("%d releases after an acquisition of unknown outcome, want 1 (the give-back)", n)
	}
	assertIdle(t, e, m)
}

// TestCloseCancelsReleaseAfterGrace: the release of a hold that Close
// ended gets CloseGrace, then is canceled; the hold reports ErrRelease
// joined to ErrClosed, and Close returns.
func TestCloseCancelsReleaseAfterGrace(t *testing.T) {
	m := NewMemoryStore()
	h := &hookStore{Store: m}
	h.release = func(ctx context.Context, key, owner string) (bool, error) {
		<-ctx.Done() // a hung connection
		return false, ctx.Err()
	}
	e := New(h)
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(ctx context.Context, _ *Lease) error {
			close(running)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-running
	start := time.Now()
	closeNow(t, e)
	if took := time.Since(start); took < CloseGrace {
		t.Fatalf("Close returned after %v: the release did not get its grace of %v", took, CloseGrace)
	}
	err := <-done
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrRelease) {
		t.Fatalf("Hold: %v, want ErrClosed joined with ErrRelease", err)
	}
}

// TestCloseCancelsRenewalInFlight: a renewal stuck in the store ends when
// Close ends fn and its renewals.
func TestCloseCancelsRenewalInFlight(t *testing.T) {
	m := NewMemoryStore()
	h := &hookStore{Store: m}
	renewing := make(chan struct{}, 1)
	h.renew = func(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
		select {
		case renewing <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return false, ctx.Err()
	}
	// Renewals start a third of the TTL in; a long TTL keeps a loaded
	// machine from losing the lease before the first one starts.
	e := New(h, TTL(3*time.Second))
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(ctx context.Context, _ *Lease) error {
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-renewing:
	case err := <-done:
		t.Fatalf("Hold returned before its first renewal: %v", err)
	}
	closeNow(t, e)
	<-done
	assertIdle(t, e, m)
}
