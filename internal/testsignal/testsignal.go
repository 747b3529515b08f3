// Package testsignal lets a test wait for something to happen instead of
// for time to pass (after River's testsignal): the code under test, or a
// fake beside it, signals when the thing happened, and the test waits for
// that signal. A loaded machine then makes a test slower, never wrong.
//
// A wait that nothing ends is a bug of the program or of the test: it
// fails the test shortly before the test binary's own deadline (go test
// -timeout), with what it waited for, rather than hanging until the
// binary panics.
package testsignal

import (
	"sync"
	"testing"
	"time"
)

// Signal carries values from the code under test to a test: Signal never
// blocks (up to its buffer), Wait takes the next value.
type Signal[T any] struct {
	ch chan T
}

// New makes a signal that holds up to buffer values not yet waited for.
func New[T any](buffer int) *Signal[T] {
	return &Signal[T]{ch: make(chan T, buffer)}
}

// Signal sends v to the next Wait; with the buffer full it drops v, so
// that the code under test never blocks on a test that stopped waiting.
func (s *Signal[T]) Signal(v T) {
	select {
	case s.ch <- v:
	default:
	}
}

// C is the channel of the values, for a select.
func (s *Signal[T]) C() <-chan T { return s.ch }

// Wait answers the next value, failing tb if none comes before the test
// binary's deadline.
func (s *Signal[T]) Wait(tb testing.TB, what string) T {
	tb.Helper()
	guard := time.NewTimer(Patience(tb))
	defer guard.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-guard.C:
		tb.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// Changes tells waiters that something they watch may have changed: the
// code under test (or a fake) calls Notify after each change, and a test
// waits for a condition over the changed state with Until.
type Changes struct {
	mu sync.Mutex
	ch chan struct{} // closed by the next Notify
}

// Notify wakes every Until waiting, to check its condition again.
func (c *Changes) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// Next answers a channel closed by the next Notify. Take it before
// looking at the state, then wait on it: a change in between is not
// missed.
func (c *Changes) Next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Until returns once cond holds, checking it at first and after every
// Notify; it fails tb if cond does not hold before the test binary's
// deadline.
func (c *Changes) Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Until(tb, what, func() (<-chan struct{}, func()) { return c.Next(), func() {} }, cond)
}

// Until returns once cond holds, checking it at first and each time the
// channel next answers is closed (next is called before each check, and
// the release it answers after); it fails tb if cond does not hold before
// the test binary's deadline. A store's wake hub (wake.Hub.Watch) is such
// a next.
func Until(tb testing.TB, what string, next func() (<-chan struct{}, func()), cond func() bool) {
	tb.Helper()
	guard := time.NewTimer(Patience(tb))
	defer guard.Stop()
	for {
		ch, release := next()
		if cond() {
			release()
			return
		}
		select {
		case <-ch:
			release()
		case <-guard.C:
			release()
			tb.Fatalf("gave up waiting for %s", what)
		}
	}
}

// Patience is how long a wait of the test may last: until shortly before
// the test binary's deadline (go test -timeout, 10 minutes by default),
// or 5 minutes without one (a benchmark).
func Patience(tb testing.TB) time.Duration {
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			left := time.Until(dl)
			return max(left-left/10-5*time.Second, left/2)
		}
	}
	return 5 * time.Minute
}
