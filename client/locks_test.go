package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/client"
)

// lockClient is a client of the stack with quick retries.
func lockClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(token),
		client.WithRetry(client.Retry{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLockHoldTryInspectRelease: a held key is busy for TryHold and
// shows in InspectLock with the lease's fence; released, it is free, and
// the next lease's fence is larger.
func TestLockHoldTryInspectRelease(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "chat-42", client.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "jobs" || l.Key != "chat-42" || l.Fence <= 0 || l.TTL != 5*time.Second || l.ID == "" || l.RequestID == "" {
		t.Fatalf("lease %+v", l)
	}
	if _, err := c.TryHold(ctx, "jobs", "chat-42", client.LockOptions{}); !errors.Is(err, client.ErrLockBusy) {
		t.Fatalf("TryHold of a held key: %v, want ErrLockBusy", err)
	}
	info, err := c.InspectLock(ctx, "jobs", "chat-42", 0)
	if err != nil || !info.Held || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("a second release: %v", err)
	}
	if l.Err() != nil || l.Context().Err() == nil {
		t.Errorf("released lease: Err %v, context %v", l.Err(), l.Context().Err())
	}
	next, err := c.TryHold(ctx, "jobs", "chat-42", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Fence <= l.Fence {
		t.Errorf("fence %d after %d", next.Fence, l.Fence)
	}
	if info, err := c.InspectLock(ctx, "jobs", "other", 0); err != nil || info.Held {
		t.Errorf("another key: %+v, %v", info, err)
	}
}

// TestLockRenewsBeyondTTL: a lease held three TTLs is still held, by the
// server too, thanks to its renewals.
func TestLockRenewsBeyondTTL(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "long", client.LockOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1800 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("after 3 TTLs: %v", err)
	}
	if _, err := c.TryHold(ctx, "jobs", "long", client.LockOptions{}); !errors.Is(err, client.ErrLockBusy) {
		t.Fatalf("TryHold after 3 TTLs: %v, want busy", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLockLostEndsTheContext: a lease the server ended behind the
// holder's back (released here by its id, as an expiry or a restart
// would) is lost at the next renewal: its context ends with
// ErrLeaseLost, and Release says so.
func TestLockLostEndsTheContext(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "lost", client.LockOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/locks/release", bytes.NewReader([]byte(`{"lease_id":"`+l.ID+`"}`)))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease's context did not end")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(l.Err(), client.ErrLeaseLost) {
		t.Errorf("Err %v", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Release of a lost lease: %v, want ErrLeaseLost", err)
	}
}

// TestLockHoldersExclude: 8 goroutines, each with its own client, take
// one key 5 times each; never two inside at once, every fence larger
// than the one before, and waiters get the key as it is released.
func TestLockHoldersExclude(t *testing.T) {
	s := newStack(t, false)
	ctx := context.Background()
	var inside atomic.Int32
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	for range 8 {
		c := lockClient(t, s.URL, s.Token)
		wg.Go(func() {
			for range 5 {
				l, err := c.Hold(ctx, "jobs", "shared", client.LockOptions{TTL: 5 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside at once", n)
				}
				mu.Lock()
				fences = append(fences, l.Fence)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(fences) != 40 {
		t.Fatalf("%d leases, want 40", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d after %d", fences[i], fences[i-1])
		}
	}
}

// TestLockHoldGivesUpWithItsContext: a Hold whose context ends while the
// key is held answers the context's end and leaves nothing waiting or
// held for it.
func TestLockHoldGivesUpWithItsContext(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "busy", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if got, err := c.Hold(short, "jobs", "busy", client.LockOptions{}); err == nil {
		got.Release(ctx)
		t.Fatal("a Hold of a held key answered a lease")
	}
	info, err := c.InspectLock(ctx, "jobs", "busy", 0)
	if err != nil || info.Waiters != 0 || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence {
		t.Errorf("after the abandoned wait: %+v, %v", info, err)
	}
}

// TestLockSemaphore: a key with Limit 2 has two holders at once, not
// three.
func TestLockSemaphore(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	o := client.LockOptions{Limit: 2}
	a, err := c.TryHold(ctx, "pool", "gpu", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.TryHold(ctx, "pool", "gpu", o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if _, err := c.TryHold(ctx, "pool", "gpu", o); !errors.Is(err, client.ErrLockBusy) {
		t.Fatalf("a third slot: %v, want busy", err)
	}
	if info, err := c.InspectLock(ctx, "pool", "gpu", 2); err != nil || len(info.Holders) != 2 {
		t.Errorf("inspect: %+v, %v", info, err)
	}
}

// TestLockAcquireAnswerLost: the first answer to an acquire is cut on
// the way back; the retry, with the same request id, answers the lease
// the server granted, and no second lease holds the key.
func TestLockAcquireAnswerLost(t *testing.T) {
	s := newStack(t, false)
	var cut atomic.Bool
	var ids sync.Map
	front := proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/locks/acquire" {
				body, _ := io.ReadAll(r.Body)
				ids.Store(string(body), true)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if cut.CompareAndSwap(false, true) {
					rec := &discard{header: http.Header{}}
					next.ServeHTTP(rec, r)      // the server grants the lease...
					panic(http.ErrAbortHandler) // ...and the answer never arrives
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "cut", client.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if !cut.Load() {
		t.Fatal("no answer was cut")
	}
	n := 0
	ids.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d distinct acquire bodies, want 1 (one request id, one body)", n)
	}
	info, err := c.InspectLock(ctx, "jobs", "cut", 0)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence {
		t.Errorf("inspect: %+v, %v; want one holder with fence %d", info, err, l.Fence)
	}
}

// discard is a ResponseWriter that drops the answer.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
