package retryafter_test

import (
	"testing"
	"time"

	"studio/internal/retryafter"
)

func TestParse(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"   ", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"007", 7 * time.Second, true},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", retryafter.Longest, true},              // one second past a Duration
		{"99999999999999999999999", retryafter.Longest, true}, // past int64
		{"Thu, 03 Dec 2026 10:00:30 GMT", 30 * time.Second, true},
		{"Thursday, 03-Dec-26 10:01:00 GMT", time.Minute, true}, // RFC 850, obsolete but allowed
		{"Thu Dec  3 10:00:05 2026", 5 * time.Second, true},     // asctime
		{"Thu, 03 Dec 2026 09:00:00 GMT", 0, true},              // already past
		{"Thu, 03 Dec 2026 10:00:30 +0100", 0, false},           // not an HTTP-date
	}
	for _, tc := range tests {
		got, ok := retryafter.Parse(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
