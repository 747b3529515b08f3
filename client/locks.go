package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// The lock service (docs/locks.md, "The lock service over HTTP"): a key
// held by this program, under the token's actor, with a fence, renewed in
// the background while the program works.

// ErrLockBusy is the error of a TryHold whose key is held now (a 423):
// match it with errors.Is.
var ErrLockBusy = errors.New("lock busy")

// ErrLeaseLost is the cause of a Lease's context once the lease ended
// before its release: the server refused a renewal (410: it expired or
// the server lost it; 404: the server no longer knows it), or no renewal
// got through within the TTL by this program's clock. Match it with
// errors.Is on Lease.Err or context.Cause(lease.Context()).
var ErrLeaseLost = errors.New("lease lost")

// errReleased is the cause of a released lease's context.
var errReleased = errors.New("lease released")

// maxLockWait is the longest wait of one acquire request (the server's
// bound on wait_ms); a longer Hold asks again.
const maxLockWait = 60 * time.Second

// LockOptions shape an acquire.
type LockOptions struct {
	// TTL is how long the server keeps the key after the last renewal:
	// 500 ms to 1 h, 30 s when 0. The lease renews every TTL/3.
	TTL time.Duration
	// Limit makes the key a semaphore of Limit slots (1 to 10,000); 0 is a
	// lock.
	Limit int
}

// Lease is a key held through the lock service. It renews itself every
// TTL/3 until Release, or until it is lost: then its context ends with
// ErrLeaseLost, and the holder must stop writing under its fence.
type Lease struct {
	// ID is the lease's secret id (it travels in bodies only).
	ID string
	// RequestID named the acquire: one per Hold, sent on every try.
	RequestID string
	Name, Key string
	Limit     int
	// Fence is larger than every earlier fence of the key: send it with
	// each write the lease protects.
	Fence int64
	TTL   time.Duration

	c      *Client
	ctx    context.Context // ends when the lease does
	cancel context.CancelCauseFunc
	// renewCtx ends the renewals (stopRenew, by Release); done is closed
	// when the renewal loop ended.
	renewCtx    context.Context
	stopRenew   context.CancelFunc
	done        chan struct{}
	startedOnce sync.Once // closes done once: the loop's end, or stopRenewals before it ran
	mu          sync.Mutex
	deadline    time.Time // by this program's clock: the last confirmed expiry
	releaseOnce sync.Once
	released    chan struct{} // closed when Release's one run ended
	releaseErr  error
}

// leaseAnswer is the lease as the server writes it.
type leaseAnswer struct {
	LeaseID   string `json:"lease_id"`
	RequestID string `json:"request_id"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	Limit     int    `json:"limit"`
	Fence     int64  `json:"fence"`
	TTLMS     int64  `json:"ttl_ms"`
}

// LockInfo is what InspectLock answers of a key.
type LockInfo struct {
	Name    string       `json:"name"`
	Key     string       `json:"key"`
	Limit   int          `json:"limit"`
	Held    bool         `json:"held"`
	Holders []LockHolder `json:"holders"`
	// Waiters are the acquires waiting on the server asked.
	Waiters int `json:"waiters"`
}

// LockHolder is one holder of a key: its fence and when the store frees
// the key unless renewed.
type LockHolder struct {
	Fence     int64     `json:"fence"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Hold waits for the key name/key of the token's actor until it is free
// or ctx ends, and returns its lease. One request id names every try of
// the acquire, so an answer lost on the way (a dropped connection, a
// 502/503/504) is asked again and answers the lease the server granted,
// never a second one. A wait longer than a minute asks again every
// minute (the server's longest wait per request), and may lose its place
// in line then.
func (c *Client) Hold(ctx context.Context, name, key string, o LockOptions) (*Lease, error) {
	return c.acquire(ctx, name, key, o, true)
}

// TryHold takes the key if it is free now; an error wrapping ErrLockBusy
// when it is not.
func (c *Client) TryHold(ctx context.Context, name, key string, o LockOptions) (*Lease, error) {
	return c.acquire(ctx, name, key, o, false)
}

func (c *Client) acquire(ctx context.Context, name, key string, o LockOptions, wait bool) (*Lease, error) {
	if o.TTL == 0 {
		o.TTL = 30 * time.Second
	}
	id, err := NewRequestID()
	if err != nil {
		return nil, err
	}
	for {
		waitFor, untilDeadline := time.Duration(0), false
		if wait {
			waitFor = maxLockWait
			if d, ok := ctx.Deadline(); ok && time.Until(d) <= waitFor {
				waitFor, untilDeadline = time.Until(d), true
			}
			if waitFor < time.Millisecond {
				return nil, fmt.Errorf("acquire %s/%s: %w: %w", name, key, ErrLockBusy, context.DeadlineExceeded)
			}
		}
		acq := lockCall("/v1/locks/acquire", map[string]any{"request_id": id, "name": name, "key": key,
			"ttl_ms": o.TTL.Milliseconds(), "wait_ms": waitFor.Milliseconds(), "limit": o.Limit})
		acq.timeout = waitFor + c.retry.AttemptTimeout
		a, err := c.do(ctx, acq)
		if StatusOf(err) == http.StatusLocked {
			switch {
			case !wait:
				return nil, fmt.Errorf("acquire %s/%s: %w: %w", name, key, ErrLockBusy, err)
			case untilDeadline || ctx.Err() != nil:
				// The wait ran to the caller's deadline (or its context
				// ended): the same error however the two raced.
				return nil, fmt.Errorf("acquire %s/%s: %w: %w", name, key, ErrLockBusy, context.DeadlineExceeded)
			}
			continue // the request's minute ran out, not the caller's wait: ask again
		}
		if StatusOf(err) == http.StatusGone {
			// A try's answer was lost and the lease it granted ended before
			// this retry came (its TTL passed): that lease is nobody's.
			// Ask anew, under a new id.
			if id, err = NewRequestID(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("acquire %s/%s (request id %s): %w", name, key, id, err)
		}
		var la leaseAnswer
		if err := decode(a, &la); err != nil {
			return nil, fmt.Errorf("acquire %s/%s (request id %s): %w", name, key, id, err)
		}
		l := c.newLease(la)
		if a.status == http.StatusOK && a.header.Get("Idempotent-Replayed") == "true" {
			// An earlier try's lease, granted at a time this program does
			// not know: renew it now, which says whether it still holds
			// and from when its TTL counts.
			if err := l.renewOnce(ctx); err != nil {
				l.stopRenewals()
				if errors.Is(err, ErrLeaseLost) {
					if id, err = NewRequestID(); err != nil {
						return nil, err
					}
					continue // it ended before this program saw it: ask anew
				}
				return nil, fmt.Errorf("acquire %s/%s (request id %s): %w", name, key, id, err)
			}
		}
		go l.renewLoop()
		return l, nil
	}
}

// newLease makes the lease of an acquire's answer, its local deadline
// one TTL from now (the answer's arrival: the grant came before).
func (c *Client) newLease(la leaseAnswer) *Lease {
	ttl := time.Duration(la.TTLMS) * time.Millisecond
	ctx, cancel := context.WithCancelCause(context.Background())
	rctx, rcancel := context.WithCancel(ctx)
	return &Lease{ID: la.LeaseID, RequestID: la.RequestID, Name: la.Name, Key: la.Key, Limit: la.Limit, Fence: la.Fence,
		TTL: ttl, c: c, ctx: ctx, cancel: cancel, renewCtx: rctx, stopRenew: rcancel, deadline: time.Now().Add(ttl),
		done: make(chan struct{}), released: make(chan struct{})}
}

// Context is canceled when the lease ends: with ErrLeaseLost as its
// cause when it was lost, once it is released otherwise.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held, and wraps ErrLeaseLost (with the
// reason) once it was lost.
func (l *Lease) Err() error {
	if cause := context.Cause(l.ctx); cause != nil && !errors.Is(cause, errReleased) {
		return cause
	}
	return nil
}

// lose ends the lease as lost, for why, and answers why.
func (l *Lease) lose(why string) error {
	l.cancel(fmt.Errorf("%w: %s/%s, fence %d: %s", ErrLeaseLost, l.Name, l.Key, l.Fence, why))
	return l.Err()
}

// renewLoop renews the lease every TTL/3 until it is released or lost.
func (l *Lease) renewLoop() {
	defer l.startedOnce.Do(func() { close(l.done) })
	t := time.NewTicker(max(l.TTL/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.renewCtx.Done():
			return
		case <-t.C:
		}
		_ = l.renewOnce(l.renewCtx)
	}
}

// stopRenewals ends the renewals (a loop not started counts as ended).
func (l *Lease) stopRenewals() {
	l.stopRenew()
	l.startedOnce.Do(func() { close(l.done) })
}

// renewOnce renews the lease within its local deadline, each try within
// a third of the TTL (so that one stalled connection leaves time for
// others). A refusal (410, 404), or no renewal through by the deadline,
// loses it; an error while ctx ends (a release) judges nothing.
func (l *Lease) renewOnce(ctx context.Context) error {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	sent := time.Now()
	if !sent.Before(deadline) {
		return l.lose("no renewal got through within the TTL")
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	renew := lockCall("/v1/locks/renew", map[string]string{"lease_id": l.ID})
	renew.timeout = max(min(l.TTL/3, time.Until(deadline)), time.Millisecond)
	_, err := l.c.do(rctx, renew)
	switch s := StatusOf(err); {
	case err == nil:
		l.mu.Lock()
		l.deadline = sent.Add(l.TTL)
		l.mu.Unlock()
		return nil
	case s == http.StatusGone || s == http.StatusNotFound:
		return l.lose(fmt.Sprintf("the server refused the renewal: %v", err))
	case ctx.Err() != nil:
		return err // stopped (a release), or the caller's end
	case !time.Now().Before(deadline):
		return l.lose(fmt.Sprintf("no renewal got through within the TTL: %v", err))
	}
	return err // the next renewal tries again, while the deadline allows
}

// Release frees the key (the next waiter may hold it when Release
// returns) and stops the renewals. It answers an error wrapping
// ErrLeaseLost if the lease had been lost (the work it protected was not
// protected to the end). On any other error (ctx ended, the server
// unreachable) the key is not known to be freed: the server frees it one
// TTL after the last renewal at the latest. Release runs once: a later or
// concurrent call waits for that one and answers the same.
func (l *Lease) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() {
		l.releaseErr = l.release(ctx)
		close(l.released)
	})
	select {
	case <-l.released:
		return l.releaseErr
	case <-ctx.Done():
		return fmt.Errorf("release %s/%s: %w", l.Name, l.Key, ctx.Err())
	}
}

func (l *Lease) release(ctx context.Context) error {
	l.stopRenew() // a renewal under way ends now
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("release %s/%s: %w", l.Name, l.Key, ctx.Err())
	}
	rel := lockCall("/v1/locks/release", map[string]string{"lease_id": l.ID})
	if err := l.Err(); err != nil {
		_, _ = l.c.do(ctx, rel) // free it anyway if the server still has it
		return err
	}
	_, err := l.c.do(ctx, rel)
	switch s := StatusOf(err); {
	case err == nil:
		l.cancel(errReleased)
		return nil
	case s == http.StatusGone || s == http.StatusNotFound:
		return l.lose(fmt.Sprintf("the server refused the release: %v", err))
	default:
		l.cancel(errReleased)
		return fmt.Errorf("release %s/%s: %w", l.Name, l.Key, err)
	}
}

// lockCall is a POST of v, as JSON, to a lock route. v is a map of
// strings and numbers: its encoding cannot fail.
func lockCall(path string, v any) call {
	body, _ := json.Marshal(v)
	return call{method: http.MethodPost, path: path, header: http.Header{"Content-Type": {"application/json"}}, body: body}
}

// InspectLock answers what the server knows of a key of the token's
// actor: whether it is held, its holders' fences and expiries, and how
// many acquires wait for it on that server. limit is 0 for a lock, or
// the semaphore's.
func (c *Client) InspectLock(ctx context.Context, name, key string, limit int) (*LockInfo, error) {
	var info LockInfo
	q := url.Values{"name": {name}, "key": {key}, "limit": {strconv.Itoa(limit)}}
	if err := c.getJSON(ctx, "/v1/locks/inspect", q, &info); err != nil {
		return nil, fmt.Errorf("inspect %s/%s: %w", name, key, err)
	}
	return &info, nil
}
