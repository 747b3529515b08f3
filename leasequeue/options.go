package leasequeue

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"studio/wake"
)

// Defaults of Options.
const (
	DefaultConcurrency = 4
	DefaultLeaseTTL    = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultRetryBase   = 500 * time.Millisecond
	DefaultRetryMax    = time.Minute
	DefaultGrace       = 10 * time.Second
	DefaultPollMin     = 20 * time.Millisecond
	DefaultPollMax     = time.Second
	// DefaultWokenPollMax is PollMax's default with Options.Wake: the
	// wake-ups bring the work, the poll is the safety net (a lease that
	// expired in a process that died, a retry's backoff over in another
	// process on SQLite).
	DefaultWokenPollMax = 5 * time.Second
)

// Options configure a worker of a lease queue, whatever its kind: the
// runner's leases and claims and the retry policy of failed attempts.
// worker.Config (tasks) and publish.Config (publication items) embed
// them, and Config passes them to the Runner. Zero fields take the
// defaults above.
type Options struct {
	// Owner names the leases; "<kind>-<16 hex digits>", random, by
	// default.
	Owner string
	// Concurrency is how many items run at once.
	Concurrency int
	// LeaseTTL is the lease length; leases are renewed every third of it.
	LeaseTTL time.Duration
	// MaxAttempts is how many failed tries make an item failed.
	MaxAttempts int
	// RetryBase is the wait after a first failure; it doubles per attempt,
	// with jitter, up to RetryMax (see RetryWait).
	RetryBase, RetryMax time.Duration
	// Grace is how long Stop lets running items end before it ends their
	// contexts with ErrStopping; either way their leases are handed back.
	Grace time.Duration
	// PollMin and PollMax bound the wait between claims that found nothing
	// (doubling from PollMin, with jitter); PollMax is DefaultWokenPollMax
	// by default when Wake is set.
	PollMin, PollMax time.Duration
	// Wake, when set, is the store's hub: the runner claims as soon as
	// work is there, not at its next poll (Config.WakeOn), and a cancel
	// stops the items of the parent it names (see Parenter). The polls
	// stay: they find what no event told of (a lease that expired in a
	// process that died, work of a process the hub does not hear).
	Wake *wake.Hub
	// Logger gets the runner's and the handler's lines; nil discards.
	Logger *slog.Logger
	// Now is the local clock for lease deadlines; time.Now by default.
	Now func() time.Time
}

// WithDefaults answers o with its zero fields set to the defaults, the
// owner made of prefix and random digits.
func (o Options) WithDefaults(prefix string) (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	def(&o.LeaseTTL, DefaultLeaseTTL)
	def(&o.RetryBase, DefaultRetryBase)
	def(&o.RetryMax, DefaultRetryMax)
	def(&o.Grace, DefaultGrace)
	def(&o.PollMin, DefaultPollMin)
	if o.Wake != nil {
		def(&o.PollMax, DefaultWokenPollMax)
	}
	def(&o.PollMax, DefaultPollMax)
	o.PollMax = max(o.PollMax, o.PollMin)
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Owner == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return o, fmt.Errorf("make an owner: %w", err)
		}
		o.Owner = prefix + "-" + hex.EncodeToString(b[:])
	}
	return o, nil
}
