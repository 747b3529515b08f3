package locks

import (
	"fmt"
	"time"
)

// Defaults of the options.
const (
	// DefaultTTL is the lease length when no TTL option is given.
	DefaultTTL = 30 * time.Second
	// DefaultPollMin and DefaultPollMax bound the backoff of a waiter that
	// polls the store because another process holds the key.
	DefaultPollMin = 5 * time.Millisecond
	DefaultPollMax = 50 * time.Millisecond
)

// An Option tunes an engine (given to New, it sets the default of every
// hold) or one hold (given to Hold or TryHold, it overrides the default).
type Option func(*settings)

type settings struct {
	ttl     time.Duration
	wait    time.Duration // < 0: no limit
	maxHold time.Duration // <= 0: no limit
	pollMin time.Duration
	pollMax time.Duration
	err     error // the first invalid option
}

func defaultSettings() settings {
	return settings{ttl: DefaultTTL, wait: -1, pollMin: DefaultPollMin, pollMax: DefaultPollMax}
}

func (s settings) with(opts []Option) settings {
	if len(opts) == 0 {
		return s
	}
	return s.apply(opts)
}

// apply is with's slow path: s escapes to the options, so it is apart
// from with, which copies settings without an allocation.
//
//go:noinline
func (s settings) apply(opts []Option) settings {
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}

func (s *settings) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
}

// TTL sets the lease length, between MinTTL and MaxTTL (DefaultTTL if not
// given). The engine renews the lease every ttl/3 while fn runs, so pick a
// TTL well above the store's round trip: it is also how long a key stays
// taken after a holder's process dies.
func TTL(d time.Duration) Option {
	return func(s *settings) {
		if err := CheckTTL(d); err != nil {
			s.fail("TTL %v outside %v..%v", d, MinTTL, MaxTTL)
			return
		}
		s.ttl = d
	}
}

// Wait bounds how long Hold waits for the key before it gives up with a
// *TimeoutError (matching ErrTimeout). Wait(0) does not wait: Hold runs fn
// exactly when TryHold would (the key has room in the store and no waiter
// of this engine is queued) and otherwise fails with a *TimeoutError whose
// Wait is 0. Without it Hold waits until its context ends.
func Wait(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 {
			s.fail("negative Wait %v", d)
			return
		}
		s.wait = d
	}
}

// MaxHold ends fn's context d after fn starts, with cause ErrMaxHold. The
// lease is released when fn returns, as always. Without it fn may hold the
// key for as long as it runs and renewals succeed.
func MaxHold(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.fail("MaxHold %v must be positive", d)
			return
		}
		s.maxHold = d
	}
}

// PollInterval sets the backoff of a waiter whose key is held by another
// process (or another engine on the same store): it retries after min,
// doubling up to max, each with up to 50% jitter. A release inside this
// engine wakes the next waiter at once, without polling.
func PollInterval(min, max time.Duration) Option {
	return func(s *settings) {
		if min <= 0 || max < min {
			s.fail("PollInterval %v..%v", min, max)
			return
		}
		s.pollMin, s.pollMax = min, max
	}
}
