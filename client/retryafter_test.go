package client

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestBackoffGrowsWithJitterWithinBounds(t *testing.T) {
	c := &Client{retry: Retry{Base: 100 * time.Millisecond, Max: time.Second}}
	for try, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 30: time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := c.backoff(try)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", try, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("backoff(%d): %d distinct waits in 200: no jitter", try, len(seen))
		}
	}
}
