package leasequeue_test

import (
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
