package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"studio/generator"
	"studio/internal/testsignal"
)

// fakeProber answers each Probe with the next error the test sends, and
// tells of each call.
type fakeProber struct {
	called  *testsignal.Signal[struct{}]
	answers chan error
}

func (p *fakeProber) Probe(ctx context.Context) error {
	p.called.Signal(struct{}{})
	return <-p.answers
}

// fakeClock is a clock that moves only when the test moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestBreakerCooldownDoubles: three outage failures in a row open the
// breaker; no probe before the cool-down (5 s) has passed; one half-open
// probe at a time after it; each failed probe doubles the cool-down up to
// 2 minutes; a probe answered (even with a refusal) closes the breaker,
// and the next opening starts again from 5 s. The clock is the test's:
// no time passes.
func TestBreakerCooldownDoubles(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	p := &fakeProber{called: testsignal.New[struct{}](1), answers: make(chan error)}
	b := newBreakers(map[string]generator.Prober{"remote": p}, BreakerConfig{Now: clock.Now})
	probed := testsignal.New[string](1)
	b.probed = probed.Signal

	down := &generator.ProviderError{Generator: "remote", Class: generator.ClassUnavailable, Status: 503, Message: "down"}
	refused := &generator.ProviderError{Generator: "remote", Class: generator.ClassRejected, Status: 404, Message: "no such model"}

	probing := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.st["remote"].probing
	}
	// skip claims at now and says whether a probe began.
	skip := func(now time.Time) bool {
		t.Helper()
		clock.set(now)
		if got := b.Skip(); len(got) != 1 || got[0] != "remote" {
			t.Fatalf("at %v: Skip = %v, want the open breaker's generator", now.Sub(t0), got)
		}
		return probing()
	}
	// answer lets the probe in flight answer err and waits until its
	// answer is recorded.
	answer := func(err error) {
		t.Helper()
		p.called.Wait(t, "the probe")
		p.answers <- err
		probed.Wait(t, "the probe's answer recorded")
	}

	for i := 1; i <= DefaultBreakerThreshold; i++ {
		if b.Open("remote") {
			t.Fatalf("open after %d failures, want %d", i-1, DefaultBreakerThreshold)
		}
		if !b.Result("remote", down) {
			t.Fatal("an outage error was not counted")
		}
	}
	if !b.Open("remote") {
		t.Fatalf("closed after %d outage failures", DefaultBreakerThreshold)
	}

	at := t0
	cooldown := DefaultBreakerCooldown
	var seen []time.Duration
	for range 7 {
		if skip(at.Add(cooldown - time.Nanosecond)) {
			t.Fatalf("a probe began %v into a cool-down of %v", cooldown-time.Nanosecond, cooldown)
		}
		at = at.Add(cooldown)
		if !skip(at) {
			t.Fatalf("no probe when the cool-down of %v had passed", cooldown)
		}
		// Half-open: one probe at a time, however late the next claim.
		if !skip(at.Add(time.Hour)) {
			t.Fatal("the probe in flight was forgotten")
		}
		clock.set(at)
		answer(down)
		if !b.Open("remote") {
			t.Fatal("a probe that failed closed the breaker")
		}
		seen = append(seen, cooldown)
		cooldown = min(2*cooldown, DefaultBreakerMaxCooldown)
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second,
		80 * time.Second, 2 * time.Minute, 2 * time.Minute}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("cool-downs %v, want %v", seen, want)
		}
	}

	// A provider that answers, even with a refusal, is up.
	at = at.Add(cooldown)
	if !skip(at) {
		t.Fatal("no probe after the longest cool-down")
	}
	answer(refused)
	if b.Open("remote") || len(b.Skip()) != 0 {
		t.Fatal("a probe answered with a refusal left the breaker open")
	}
	if h := b.Health(); len(h) != 1 || h[0].State != "up" || !h[0].Since.Equal(at) {
		t.Fatalf("health %+v, want up since %v", h, at)
	}

	// Opened again, it waits the first cool-down, not the last.
	for range DefaultBreakerThreshold {
		b.Result("remote", down)
	}
	if skip(at.Add(DefaultBreakerCooldown - time.Nanosecond)) {
		t.Fatal("a probe began before the first cool-down of a new outage had passed")
	}
	if !skip(at.Add(DefaultBreakerCooldown)) {
		t.Fatal("no probe after the first cool-down of a new outage")
	}
	answer(nil)
	if b.Open("remote") {
		t.Fatal("a probe answered left the breaker open")
	}
}
