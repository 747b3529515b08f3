package metrics

import (
	"context"
	"time"

	"studio/intent"
)

// Planner returns p timed into studio_plan_duration_seconds.
func (m *Metrics) Planner(p intent.Planner) intent.Planner { return timedPlanner{p, m} }

type timedPlanner struct {
	p intent.Planner
	m *Metrics
}

func (t timedPlanner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	start := time.Now()
	tasks, err := t.p.PlanGeneration(ctx, actor, in)
	outcome := "ok"
	if err != nil {
		outcome = "refused"
	}
	t.m.planSeconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return tasks, err
}

// IntentStore returns s with CreateIntent timed into
// studio_commit_duration_seconds; the other methods pass through.
func (m *Metrics) IntentStore(s intent.IntentStore) intent.IntentStore { return timedStore{s, m} }

type timedStore struct {
	intent.IntentStore
	m *Metrics
}

func (t timedStore) CreateIntent(ctx context.Context, in intent.NewIntent) (intent.Binding, bool, error) {
	start := time.Now()
	b, created, err := t.IntentStore.CreateIntent(ctx, in)
	var outcome string
	switch {
	case err == nil && created:
		outcome = "created"
	case err == nil:
		outcome = "existing"
	case intent.ErrorCode(err) == intent.EConflict:
		outcome = "conflict"
	default:
		outcome = "error"
	}
	t.m.commitSeconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return b, created, err
}

// Locker returns l timed into studio_lock_wait_seconds and
// studio_lock_hold_seconds under the label lock=name (a fixed name of the
// lock's purpose, never its key). A Hold whose fn never ran (the wait ended
// first) observes nothing.
func (m *Metrics) Locker(name string, l intent.Locker) intent.Locker {
	return timedLocker{l: l, wait: m.lockWait.WithLabelValues(name), hold: m.lockHold.WithLabelValues(name)}
}

type timedLocker struct {
	l          intent.Locker
	wait, hold interface{ Observe(float64) }
}

func (t timedLocker) Hold(ctx context.Context, key string, fn func(context.Context) error) error {
	asked := time.Now()
	return t.l.Hold(ctx, key, func(ctx context.Context) error {
		start := time.Now()
		t.wait.Observe(start.Sub(asked).Seconds())
		defer func() { t.hold.Observe(time.Since(start).Seconds()) }()
		return fn(ctx)
	})
}
