package worker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"studio/generator"
)

// Defaults of BreakerConfig.
const (
	// DefaultBreakerThreshold: this many outage failures in a row (no
	// answer, a timeout, a 5xx) open a generator's breaker.
	DefaultBreakerThreshold = 3
	// DefaultBreakerCooldown is how long a breaker stays open before its
	// first half-open probe; each failed probe doubles it, up to
	// DefaultBreakerMaxCooldown.
	DefaultBreakerCooldown    = 5 * time.Second
	DefaultBreakerMaxCooldown = 2 * time.Minute
)

// BreakerConfig configures Breakers. Zero fields take the defaults.
type BreakerConfig struct {
	Threshold   int
	Cooldown    time.Duration
	MaxCooldown time.Duration
	// Logger gets one line when a breaker opens and one when it closes.
	Logger *slog.Logger
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

// Breakers is a circuit breaker per remote generator. While a
// generator's breaker is open, claims skip its tasks (they stay queued,
// no attempt spent) and a task of it already claimed is handed back; the
// other generators' tasks run as before.
//
//	closed --Threshold outage failures in a row--> open
//	open --Cooldown passed: one Probe (GET /models, GET /system_stats)--> closed if it answers,
//	                                                                    open again, Cooldown doubled (up to MaxCooldown), if not
//
// A generator that answers anything, even a refusal of a job (4xx), is
// up: only no answer, a timeout or a 5xx counts. The start-up probe
// (ProbeAll) opens the breaker of a generator that does not answer.
// A breaker is per process: each worker process finds an outage on its
// own.
type Breakers struct {
	cfg     BreakerConfig
	probers map[string]generator.Prober
	// probed, when set (by a test), is called when a half-open probe has
	// ended and its answer is recorded.
	probed func(id string)

	mu sync.Mutex
	st map[string]*breaker
}

type breaker struct {
	failures int
	open     bool
	probing  bool
	retryAt  time.Time
	cooldown time.Duration
	since    time.Time
	lastErr  string
}

// NewBreakers makes a breaker for each generator of the registry that can
// be probed (the remote ones).
func NewBreakers(reg *generator.Registry, cfg BreakerConfig) *Breakers {
	probers := map[string]generator.Prober{}
	for _, id := range reg.IDs() {
		g, _ := reg.Get(id)
		if p, ok := g.(generator.Prober); ok {
			probers[id] = p
		}
	}
	return newBreakers(probers, cfg)
}

// newBreakers makes a breaker for each of probers.
func newBreakers(probers map[string]generator.Prober, cfg BreakerConfig) *Breakers {
	if cfg.Threshold <= 0 {
		cfg.Threshold = DefaultBreakerThreshold
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultBreakerCooldown
	}
	if cfg.MaxCooldown < cfg.Cooldown {
		cfg.MaxCooldown = max(DefaultBreakerMaxCooldown, cfg.Cooldown)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &Breakers{cfg: cfg, probers: probers, st: map[string]*breaker{}}
	for id := range probers {
		b.st[id] = &breaker{since: cfg.Now()}
	}
	return b
}

// ProbeAll probes every remote generator at once and opens the breaker of
// each that does not answer, with one log line for it. It returns when
// every probe has answered or ctx ends.
func (b *Breakers) ProbeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for id, p := range b.probers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.Probe(ctx)
			if err == nil || ctx.Err() != nil {
				return
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			s := b.st[id]
			if generator.Outage(err) {
				b.openLocked(id, s, err, "does not answer at start")
			} else {
				b.cfg.Logger.Warn("generator answers its probe with an error", "generator", id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Result records how a task of the generator ended: nil or an error that
// is not an outage closes the count; an outage counts, and opens the
// breaker at the threshold. It answers whether err is an outage the
// breaker counted (the task is then handed back, not failed).
func (b *Breakers) Result(id string, err error) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.st[id]
	if !ok {
		return false
	}
	if !generator.Outage(err) {
		if err == nil || generator.ErrorClass(err) != "" {
			s.failures = 0 // the provider answered
		}
		return false
	}
	s.failures++
	s.lastErr = err.Error()
	if !s.open && s.failures >= b.cfg.Threshold {
		b.openLocked(id, s, err, "fails with outage errors")
	}
	return true
}

func (b *Breakers) openLocked(id string, s *breaker, err error, why string) {
	now := b.cfg.Now()
	if !s.open {
		s.open, s.since, s.cooldown = true, now, b.cfg.Cooldown
		b.cfg.Logger.Warn("generator "+why+": its tasks stay queued until it answers again",
			"generator", id, "err", err, "probe_in", s.cooldown.String())
	}
	s.lastErr = err.Error()
	s.retryAt = now.Add(s.cooldown)
}

// Open reports whether the generator's breaker is open.
func (b *Breakers) Open(id string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.st[id]
	return ok && s.open
}

// Skip lists the generators whose breaker is open, for a claim; for each
// whose cool-down has passed it starts the half-open probe (one at a
// time), which closes the breaker if the generator answers.
func (b *Breakers) Skip() []string {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	now := b.cfg.Now()
	for id, s := range b.st {
		if !s.open {
			continue
		}
		out = append(out, id)
		if !s.probing && !now.Before(s.retryAt) {
			s.probing = true
			go b.probe(id)
		}
	}
	slices.Sort(out)
	return out
}

// probe is the half-open probe of an open breaker.
func (b *Breakers) probe(id string) {
	err := b.probers[id].Probe(context.Background())
	if b.probed != nil {
		defer b.probed(id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.st[id]
	s.probing = false
	if err == nil || !generator.Outage(err) {
		s.open, s.failures, s.lastErr, s.since = false, 0, "", b.cfg.Now()
		b.cfg.Logger.Info("generator answers again: its tasks run", "generator", id)
		return
	}
	s.cooldown = min(2*s.cooldown, b.cfg.MaxCooldown)
	s.lastErr = err.Error()
	s.retryAt = b.cfg.Now().Add(s.cooldown)
}

// GeneratorHealth is how one remote generator stands.
type GeneratorHealth struct {
	ID string `json:"id"`
	// State is "up" or "down" (its breaker open: its tasks wait).
	State string `json:"state"`
	// Since is when it entered the state.
	Since time.Time `json:"since"`
	// Error is the last outage error while down.
	Error string `json:"error,omitempty"`
}

// Health answers every remote generator's state, by id.
func (b *Breakers) Health() []GeneratorHealth {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]GeneratorHealth, 0, len(b.st))
	for id, s := range b.st {
		h := GeneratorHealth{ID: id, State: "up", Since: s.since.UTC()}
		if s.open {
			h.State, h.Error = "down", s.lastErr
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b GeneratorHealth) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
