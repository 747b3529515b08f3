package leasequeue_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"studio/leasequeue"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, capd := 500*time.Millisecond, time.Minute
	cases := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 250 * time.Millisecond},
		{1, 0.999999, 500 * time.Millisecond},
		{2, 0, 500 * time.Millisecond},
		{3, 0.5, 1500 * time.Millisecond},
		{7, 0, 16 * time.Second},
		{8, 0, 30 * time.Second}, // 64 s capped at 1 min
		{9, 0.999999, time.Minute},
		{1000, 0.5, 45 * time.Second},
	}
	for _, c := range cases {
		got := leasequeue.Backoff(base, capd, c.attempt, c.r)
		if got.Round(time.Millisecond) != c.want {
			t.Errorf("Backoff(attempt %d, r %v) = %v, want %v", c.attempt, c.r, got, c.want)
		}
	}
}

// asker is an error that asks for a wait of its own.
type asker time.Duration

func (a asker) Error() string            { return "slow down" }
func (a asker) RetryWait() time.Duration { return time.Duration(a) }

// TestRetryWait: the backoff, unless an error in the chain asks for a
// longer wait; a shorter one asked does not shorten the backoff.
func TestRetryWait(t *testing.T) {
	t.Parallel()
	base, capd := time.Second, time.Minute
	backoff := leasequeue.Backoff(base, capd, 3, 0.5)
	cases := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"no wait asked", errors.New("boom"), backoff},
		{"longer wait asked", asker(time.Hour), time.Hour},
		{"longer wait asked, wrapped", fmt.Errorf("attempt 3: %w", asker(10*time.Minute)), 10 * time.Minute},
		{"shorter wait asked", asker(time.Millisecond), backoff},
		{"no error", nil, backoff},
	}
	for _, c := range cases {
		if got := leasequeue.RetryWait(base, capd, 3, 0.5, c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
