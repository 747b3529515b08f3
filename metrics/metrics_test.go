package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.uber.org/goleak"

	"studio/intent"
	"studio/locks"
	"studio/metrics"
	"studio/metrics/metricstest"
	"studio/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRequestsAndIntents(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	url := serve(t, m)
	before := metricstest.Get(t, url)
	if got := before.Value("studio_intents_total", "operation", "generation", "outcome", "created"); got != 0 || !before.Has("studio_intents_total") {
		t.Fatalf("intents before: %v (present: %v); want a series at 0", got, before.Has("studio_intents_total"))
	}

	m.Request("POST", "/v1/generations", 201, time.Millisecond)
	m.Request("POST", "/v1/generations", 200, time.Millisecond)
	m.Request("POST", "/v1/generations", 400, time.Millisecond) // refused by decoding
	m.Request("POST", "/v1/generations", 415, time.Millisecond) // refused by decoding
	m.Request("POST", "/v1/generations", 422, time.Millisecond) // the service counts it
	m.Request("GET", "/v1/batches/{id}", 404, time.Millisecond)
	m.Request("GET", "", 404, time.Millisecond)
	m.Intent(intent.OpGeneration, intent.OutcomeCreated)
	m.Intent(intent.OpGeneration, intent.OutcomeReplayed)
	m.Intent(intent.OpGeneration, intent.OutcomeInvalid)

	after := metricstest.Get(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"studio_http_requests_total", []string{"route", "/v1/generations"}, 5},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "201"}, 1},
		{"studio_http_requests_total", []string{"route", "/v1/batches/{id}", "status", "404", "method", "GET"}, 1},
		{"studio_http_requests_total", []string{"route", "unmatched"}, 1},
		{"studio_http_request_duration_seconds", []string{"route", "/v1/generations"}, 5},
		{"studio_intents_total", []string{"outcome", "created"}, 1},
		{"studio_intents_total", []string{"outcome", "replayed"}, 1},
		{"studio_intents_total", []string{"outcome", "invalid"}, 3},
		{"studio_intents_total", []string{"outcome", "conflict"}, 0},
	} {
		if got := after.Delta(before, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

type fakePlanner struct{ err error }

func (p fakePlanner) PlanGeneration(context.Context, string, *intent.GenerationInput) ([]intent.PlannedTask, error) {
	return nil, p.err
}

type fakeStore struct {
	intent.IntentStore
	created bool
	err     error
}

func (s fakeStore) CreateIntent(context.Context, intent.NewIntent) (intent.Binding, bool, error) {
	return intent.Binding{}, s.created, s.err
}

func TestPlanAndCommitDurations(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	ctx := context.Background()
	refused := &intent.Error{Code: intent.EUnprocessable, Message: "no"}
	for _, err := range []error{nil, nil, refused} {
		if _, got := m.Planner(fakePlanner{err}).PlanGeneration(ctx, "a", &intent.GenerationInput{}); got != err {
			t.Fatalf("planner error %v, want %v", got, err)
		}
	}
	conflict := &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage}
	for _, s := range []fakeStore{{created: true}, {created: true}, {}, {err: conflict}, {err: errors.New("disk")}} {
		if _, created, err := m.IntentStore(s).CreateIntent(ctx, intent.NewIntent{}); created != s.created || err != s.err {
			t.Fatalf("store answered %v %v, want %v %v", created, err, s.created, s.err)
		}
	}
	got := metricstest.Get(t, serve(t, m))
	for _, c := range []struct {
		name, outcome string
		want          float64
	}{
		{"studio_plan_duration_seconds", "ok", 2},
		{"studio_plan_duration_seconds", "refused", 1},
		{"studio_commit_duration_seconds", "created", 2},
		{"studio_commit_duration_seconds", "existing", 1},
		{"studio_commit_duration_seconds", "conflict", 1},
		{"studio_commit_duration_seconds", "error", 1},
	} {
		if v := got.Value(c.name, "outcome", c.outcome); v != c.want {
			t.Errorf("%s{outcome=%q} has %v samples, want %v", c.name, c.outcome, v, c.want)
		}
	}
}

// TestLockWaitsAndHolds: a holder and a waiter on one key each observe one
// wait and one hold; a waiter that gives up observes nothing; the hold of a
// fn that sleeps lasts at least that long.
func TestLockWaitsAndHolds(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	l := m.Locker("intent", locks.Keyed{E: e})
	ctx := context.Background()

	held, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		l.Hold(ctx, "k", func(context.Context) error {
			close(held)
			<-release
			time.Sleep(20 * time.Millisecond) // a hold that lasts, on purpose: its observed length is checked
			return nil
		})
	})
	<-held
	// Gives up while the key is held: never runs.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	ran := false
	if err := l.Hold(short, "k", func(context.Context) error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("a hold of a held key ran (%v) or did not fail: %v", ran, err)
	}
	wg.Go(func() { l.Hold(ctx, "k", func(context.Context) error { return nil }) })
	close(release)
	wg.Wait()

	got := metricstest.Get(t, serve(t, m))
	if n := got.Value("studio_lock_wait_seconds", "lock", "intent"); n != 2 {
		t.Errorf("lock waits observed: %v, want 2", n)
	}
	if n := got.Value("studio_lock_hold_seconds", "lock", "intent"); n != 2 {
		t.Errorf("lock holds observed: %v, want 2", n)
	}
	if s := got.Sum("studio_lock_hold_seconds", "lock", "intent"); s < 0.020 {
		t.Errorf("lock holds sum to %vs, less than the 20ms one holder slept", s)
	}
}

func TestAttemptsAndLeases(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.Attempt(metrics.AttemptSucceeded)
	m.Attempt(metrics.AttemptSucceeded)
	m.Attempt(metrics.AttemptRetried)
	m.Attempt(metrics.AttemptLost)
	m.LeaseLost()
	got := metricstest.Get(t, serve(t, m))
	for outcome, want := range map[string]float64{"succeeded": 2, "retried": 1, "lost": 1, "failed": 0, "canceled": 0, "released": 0} {
		if v := got.Value("studio_task_attempts_total", "outcome", outcome); v != want {
			t.Errorf("attempts{outcome=%q} = %v, want %v", outcome, v, want)
		}
	}
	if v := got.Value("studio_task_leases_lost_total"); v != 1 {
		t.Errorf("leases lost = %v, want 1", v)
	}
}

// TestTasksAndPools reads the task gauge and the pool statistics of a real
// SQLite store, and checks that a failing count leaves the rest of the
// answer served.
func TestTasksAndPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := metrics.New()
	if err := m.TaskStates(s.CountTasks); err != nil {
		t.Fatal(err)
	}
	for name, db := range map[string]*sql.DB{"write": s.DB(), "read": s.ReadDB()} {
		if err := m.DBPool(name, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DBPool("write", s.DB()); err == nil {
		t.Error("a second pool named write was registered")
	}
	url := serve(t, m)
	got := metricstest.Get(t, url)
	for _, state := range []string{"queued", "running", "succeeded", "failed", "canceled"} {
		if v, ok := got.Value("studio_tasks", "state", state), got.Has("studio_tasks"); v != 0 || !ok {
			t.Errorf("tasks{state=%q} = %v (present %v), want 0", state, v, ok)
		}
	}
	if v := got.Value("studio_go_sql_max_open_connections", "db_name", "write"); v != 1 {
		t.Errorf("write pool max open = %v, want 1", v)
	}
	if v := got.Value("studio_go_sql_max_open_connections", "db_name", "read"); v != 4 {
		t.Errorf("read pool max open = %v, want 4", v)
	}

	// A count that fails: the scrape still answers, with everything else.
	failing := metrics.New()
	failing.TaskStates(func(context.Context) (intent.Counts, error) { return intent.Counts{}, errors.New("database is down") })
	failing.Intent(intent.OpGeneration, intent.OutcomeCreated)
	resp, err := http.Get(serve(t, failing))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := metricstest.Parse(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape with a failing count: %v %v", resp.Status, err)
	}
	if body.Has("studio_tasks") || body.Value("studio_intents_total", "outcome", "created") != 1 {
		t.Errorf("a failing count: tasks present %v, intents %v", body.Has("studio_tasks"), body.Value("studio_intents_total", "outcome", "created"))
	}
}

// TestNamesLint runs the Prometheus linter over every family: units in
// names, _total on counters, help on everything.
func TestNamesLint(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.TaskStates(func(context.Context) (intent.Counts, error) { return intent.Counts{Queued: 1}, nil })
	m.Request("GET", "/healthz", 200, time.Millisecond)
	m.Planner(fakePlanner{}).PlanGeneration(context.Background(), "a", &intent.GenerationInput{})
	serve(t, m) // the handler registers nothing of its own
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "studio_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is outside studio_ (and go_, process_)", name)
		}
	}
}

func TestGeneratorCalls(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	g, err := m.Generators([]string{"gpt", "comfy"}, []string{"timeout", "rate_limited"}, []string{"lost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generators([]string{"gpt"}, nil, nil); err == nil {
		t.Fatal("registering the generator metrics twice passed")
	}
	url := serve(t, m)
	before := metricstest.Get(t, url)
	if !before.Has("studio_generator_errors_total") || before.Value("studio_generator_errors_total", "generator", "comfy", "class", "timeout") != 0 {
		t.Fatal("the error series are not declared at zero")
	}
	g.Call("gpt", "generate", "", 2*time.Second)
	g.Call("gpt", "generate", "rate_limited", 10*time.Millisecond)
	g.Call("comfy", "history", "", time.Millisecond)
	after := metricstest.Get(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"studio_generator_calls_total", []string{"generator", "gpt", "call", "generate"}, 2},
		{"studio_generator_calls_total", []string{"generator", "comfy", "call", "history"}, 1},
		{"studio_generator_errors_total", []string{"generator", "gpt", "class", "rate_limited"}, 1},
		{"studio_generator_errors_total", []string{"generator", "comfy", "class", "rate_limited"}, 0},
	} {
		if got := after.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if !after.Has("studio_generator_call_duration_seconds") {
		t.Error("no call duration histogram")
	}
}
