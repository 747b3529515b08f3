// Package retryafter reads the Retry-After header (RFC 9110, section
// 10.2.3): how long a server asks its client to wait before the next try.
package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Longest is the longest wait Parse answers: larger values (a delay in
// seconds past what a Duration holds, a date centuries ahead) saturate
// here instead of overflowing. Callers bound the wait they honour
// themselves.
const Longest = time.Duration(math.MaxInt64)

// Parse reads v, a Retry-After value: delay-seconds (a non-negative
// integer) or an HTTP-date, as of now. It answers the wait, or false
// when v is empty or neither form; a date already past is a wait of 0.
func Parse(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(Longest/time.Second) {
			return Longest, true // only digits: too large for int64 or for a Duration
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// isDigits says whether v is one or more ASCII digits: delay-seconds has
// no sign, no space, no fraction.
func isDigits(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}
