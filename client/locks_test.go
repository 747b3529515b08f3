package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/client"
	"studio/internal/testsignal"
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

// TestLockRenewsBeyondTTL: a lease held two and a half TTLs is still
// held, by the server too, thanks to its renewals.
func TestLockRenewsBeyondTTL(t *testing.T) {
	s := newStack(t, false)
	front, _, renewed := stallRenewals(t, s, 0, nil)
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	// A 2 s TTL: a renewal (due every 667 ms) late by more than about
	// 1.3 s on a loaded machine would lose it. Four renewals answered take
	// the lease past its TTL (they are due at 0.67, 1.33, 2 and 2.67 s).
	l, err := c.Hold(ctx, "jobs", "long", client.LockOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	renewed.wait(t, 4, "renewals answered")
	if err := l.Err(); err != nil {
		t.Fatalf("after four renewals: %v", err)
	}
	if _, err := c.TryHold(ctx, "jobs", "long", client.LockOptions{}); !errors.Is(err, client.ErrLockBusy) {
		t.Fatalf("TryHold after four renewals: %v, want busy", err)
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
	case <-time.After(testsignal.Patience(t)):
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
				time.Sleep(2 * time.Millisecond) // work inside the lock, on purpose: an overlap would show
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
// key is held answers the context's end (and that the key was busy), and
// leaves nothing waiting or held for it.
func TestLockHoldGivesUpWithItsContext(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "busy", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, wait := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		short, cancel := context.WithTimeout(ctx, wait)
		got, err := c.Hold(short, "jobs", "busy", client.LockOptions{})
		cancel()
		if err == nil {
			got.Release(ctx)
			t.Fatal("a Hold of a held key answered a lease")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait %v: %v, want the context's deadline", wait, err)
		}
	}
	// The server drops a waiter whose caller went away as it notices: a
	// poll, since no event of the server tells of it.
	var info *client.LockInfo
	for deadline := time.Now().Add(testsignal.Patience(t)); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if info, err = c.InspectLock(ctx, "jobs", "busy", 0); err != nil || info.Waiters == 0 {
			break
		}
	}
	if err != nil || info.Waiters != 0 || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence {
		t.Errorf("after the abandoned waits: %+v, %v", info, err)
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

// stallRenewals is a proxy front that holds renewals back: the first
// `first` of them (all when first < 0) get no answer until the caller
// gives up; answer, when set, answers the others itself. tries counts the
// renewals that reach it, renewed those the server answered 200.
func stallRenewals(t *testing.T, s *stack, first int, answer func(w http.ResponseWriter)) (front string, tries, renewed *signal) {
	tries, renewed = &signal{}, &signal{}
	stop := make(chan struct{})
	front = proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/locks/renew" {
				if i := tries.add(); first < 0 || i <= first {
					// Read whole, so that net/http notices the caller going.
					io.Copy(io.Discard, r.Body)
					select {
					case <-r.Context().Done():
					case <-stop:
					}
					return
				}
				if answer != nil {
					answer(w)
					return
				}
				rec := &statusRecorder{ResponseWriter: w}
				next.ServeHTTP(rec, r)
				if rec.status == http.StatusOK {
					renewed.add()
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { close(stop) }) // before the front closes: it waits for its handlers
	return front, tries, renewed
}

// statusRecorder notes the status an answer was written with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// signal counts events (a renewal tried, a renewal answered) and lets a
// test wait for the nth, in place of sleeping for as long as n should take.
type signal struct {
	mu    sync.Mutex
	n     int
	waits map[int][]chan struct{}
}

// add counts one event and returns the count.
func (s *signal) add() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	for _, ch := range s.waits[s.n] {
		close(ch)
	}
	delete(s.waits, s.n)
	return s.n
}

// count is the events so far.
func (s *signal) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// wait returns once n events have happened; it fails the test if that
// takes over a minute (a hang, not a slow machine).
func (s *signal) wait(t *testing.T, n int, what string) {
	t.Helper()
	s.mu.Lock()
	ch := make(chan struct{})
	if s.n >= n {
		close(ch)
	} else {
		if s.waits == nil {
			s.waits = map[int][]chan struct{}{}
		}
		s.waits[n] = append(s.waits[n], ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(testsignal.Patience(t)):
		t.Fatalf("%s: %d of %d", what, s.count(), n)
	}
}

// TestLockLostByTheLocalClock: renewals that never get an answer lose
// the lease within its TTL, by this program's clock alone.
func TestLockLostByTheLocalClock(t *testing.T) {
	s := newStack(t, false)
	front, _, _ := stallRenewals(t, s, -1, nil)
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "stalled", client.LockOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(testsignal.Patience(t)):
		t.Fatal("the lease's context did not end")
	}
	if !errors.Is(l.Err(), client.ErrLeaseLost) {
		t.Fatalf("Err %v, want ErrLeaseLost", l.Err())
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Release(rctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Release: %v, want ErrLeaseLost", err)
	}
}

// TestLockOneStalledRenewalIsNotALoss: a renewal try that hangs is cut
// after a third of the TTL and tried again; the lease holds.
func TestLockOneStalledRenewalIsNotALoss(t *testing.T) {
	s := newStack(t, false)
	front, _, renewed := stallRenewals(t, s, 1, nil)
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	// The first renewal, at 1 s, stalls and is cut at 2 s; the next, sent
	// then, has a second to land before the 3 s TTL ends. The test waits
	// for renewals answered after the stalled one until the lease has
	// outlived its first TTL.
	start := time.Now()
	l, err := c.Hold(ctx, "jobs", "hiccup", client.LockOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; time.Since(start) <= 3*time.Second; n++ {
		renewed.wait(t, n, "renewals answered after the stalled one")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("after one stalled renewal: %v", err)
	}
	if _, err := c.TryHold(ctx, "jobs", "hiccup", client.LockOptions{}); !errors.Is(err, client.ErrLockBusy) {
		t.Fatalf("TryHold after the stalled renewal: %v, want busy", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLockRenewal404IsALoss: a server that no longer knows the lease
// (404, as after its restart) loses it at once.
func TestLockRenewal404IsALoss(t *testing.T) {
	s := newStack(t, false)
	front, tries, _ := stallRenewals(t, s, 0, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"detail":"Not found."}`)
	})
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "forgotten", client.LockOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	select {
	case <-l.Context().Done():
	case <-time.After(testsignal.Patience(t)):
		t.Fatal("a 404 on renewal did not lose the lease")
	}
	// Renewals come every 2 s; lost by the local clock instead, at the
	// 6 s TTL, the lease would have seen more than one.
	if n := tries.count(); n != 1 {
		t.Fatalf("the lease was lost after %d renewal tries, want 1 (answered 404)", n)
	}
	if !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) {
		t.Fatalf("cause %v", context.Cause(l.Context()))
	}
}

// TestLockHoldAsksAgainAfter423: when a request's own wait runs out (a
// 423) while the caller's does not, Hold asks again with the same
// request id and body.
func TestLockHoldAsksAgainAfter423(t *testing.T) {
	s := newStack(t, false)
	var bodies []string
	var mu sync.Mutex
	front := proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/locks/acquire" {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(body))
				first := len(bodies) == 1
				mu.Unlock()
				if first {
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusLocked)
					io.WriteString(w, `{"type":"about:blank","title":"Locked","status":423,"detail":"The key is held."}`)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			next.ServeHTTP(w, r)
		})
	})
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "again", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	mu.Lock()
	got := slices.Clone(bodies)
	mu.Unlock()
	if len(got) != 2 || got[0] != got[1] {
		t.Errorf("acquire bodies %q, want the same one twice", got)
	}
	if _, err := c.TryHold(ctx, "jobs", "again", client.LockOptions{}); !errors.Is(err, client.ErrLockBusy) {
		t.Errorf("TryHold: %v, want busy", err)
	}
}

// TestLockAcquireRetryAfterTheLeaseEnded: the answer of an acquire is
// lost and its retry comes after the granted lease's TTL (the server
// answers 410 for that id): Hold asks anew under a new id and holds the
// key.
func TestLockAcquireRetryAfterTheLeaseEnded(t *testing.T) {
	s := newStack(t, false)
	var tries atomic.Int32
	front := proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/locks/acquire" {
				switch tries.Add(1) {
				case 1:
					next.ServeHTTP(&discard{header: http.Header{}}, r) // granted...
					panic(http.ErrAbortHandler)                        // ...and the answer lost
				case 2:
					time.Sleep(900 * time.Millisecond) // past the 500 ms TTL: time passes on purpose
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "late", client.LockOptions{TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if n := tries.Load(); n != 3 {
		t.Errorf("%d acquire tries, want 3 (granted and lost, 410, anew)", n)
	}
	info, err := c.InspectLock(ctx, "jobs", "late", 0)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence {
		t.Errorf("inspect: %+v, %v", info, err)
	}
}

// TestLockReleaseConcurrent: two Releases at once both answer when the
// key is free, the same answer.
func TestLockReleaseConcurrent(t *testing.T) {
	s := newStack(t, false)
	c := lockClient(t, s.URL, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "twice", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = l.Release(ctx) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("releases: %v", errs)
	}
	next, err := c.TryHold(ctx, "jobs", "twice", client.LockOptions{})
	if err != nil {
		t.Fatalf("after both releases: %v", err)
	}
	next.Release(ctx)
}

// TestLockReleaseBoundedByItsContext: a Release while a renewal hangs
// ends the renewal and frees the key, within its own context.
func TestLockReleaseBoundedByItsContext(t *testing.T) {
	s := newStack(t, false)
	front, tries, _ := stallRenewals(t, s, -1, nil)
	c := lockClient(t, front, s.Token)
	ctx := context.Background()
	l, err := c.Hold(ctx, "jobs", "busy-renewal", client.LockOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tries.wait(t, 1, "a renewal under way") // it comes at 1 s
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		t.Fatalf("Release during a hanging renewal: %v", err)
	}
	next, err := c.TryHold(ctx, "jobs", "busy-renewal", client.LockOptions{})
	if err != nil {
		t.Fatalf("the key after the release: %v", err)
	}
	next.Release(ctx)
}
