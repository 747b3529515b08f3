package leasequeue

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Jitter spreads d over [d/2, d], so that idle runners do not poll in step.
func Jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Backoff is the wait before the next try after attempt (1-based) failed:
// base·2^(attempt-1), at most max, with equal jitter (half of it fixed,
// the other half scaled by r in [0, 1)).
func Backoff(base, max time.Duration, attempt int, r float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}

// RetryWait is the wait before the next try after attempt (1-based)
// failed with err: Backoff, or longer when an error in err's chain asks
// for a wait of its own through a RetryWait method (a provider's or a
// receiver's 429 or 503 with Retry-After; the asker bounds what it asks).
// A permanent failure is not tried again, whatever this answers.
func RetryWait(base, max time.Duration, attempt int, r float64, err error) time.Duration {
	d := Backoff(base, max, attempt, r)
	var asker interface{ RetryWait() time.Duration }
	if errors.As(err, &asker) {
		if asked := asker.RetryWait(); asked > d {
			d = asked
		}
	}
	return d
}
