package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"studio/metrics/metricstest"
	_ "studio/store/sqlite" // the "sqlite" driver for the test's own connection
)

// logLine is one JSON log line, decoded loosely.
type logLine map[string]any

func parseLogs(t *testing.T, logs string) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// find returns the lines with msg whose fields include want.
func find(lines []logLine, msg string, want map[string]any) []logLine {
	var out []logLine
next:
	for _, l := range lines {
		if l["msg"] != msg {
			continue
		}
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// TestMetricsAndLogsOfAScenario runs the program, scrapes /metrics, creates
// a batch, replays it, sends a conflict, a body the decoder refuses and one
// the planner refuses, scrapes again and checks that each counter moved by
// exactly its share; then reads the logs: one line per request with its
// method, route, status, duration in ms, actor and request id, one per
// batch created or replayed, and never the token or a body.
func TestMetricsAndLogsOfAScenario(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DebugAddr = "127.0.0.1:0"
	logs := &syncBuffer{}
	m := NewMain(cfg, modeServe, &syncBuffer{}, logs)
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)
	ctx := context.Background()
	scrapeURL := "http://" + m.Addr() + "/metrics"
	before := metricstest.Get(t, scrapeURL)

	const prompt = "a knight in the rain, side view" // the body's text: never logged
	steps := []struct {
		name string
		body map[string]any
		want int
	}{
		{"create", generation("walk-1", "f01", "f02"), http.StatusCreated},
		{"replay", generation("walk-1", "f01", "f02"), http.StatusOK},
		{"conflict", generation("walk-1", "f02", "f01"), http.StatusConflict},
		{"undecodable", func() map[string]any { g := generation("walk-2", "f01"); g["bogus"] = 1; return g }(), http.StatusBadRequest},
		{"unplannable", func() map[string]any { g := generation("walk-3", "f01"); g["providers"] = []string{"nope"}; return g }(), http.StatusUnprocessableEntity},
	}
	for _, s := range steps {
		resp, err := c.do(ctx, "POST", "/v1/generations", s.body, nil)
		if err != nil || resp.StatusCode != s.want {
			t.Fatalf("%s: %v %v, want %d", s.name, resp.Status, err, s.want)
		}
	}
	// A wrong token is refused and not logged either.
	const wrongToken = "stu_wrong-token-never-logged"
	if resp, err := newClient(t, m.Addr(), wrongToken).do(ctx, "GET", "/v1/batches", nil, nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v %v", resp.Status, err)
	}
	after := metricstest.Get(t, scrapeURL)

	for _, w := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"studio_intents_total", []string{"operation", "generation", "outcome", "created"}, 1},
		{"studio_intents_total", []string{"operation", "generation", "outcome", "replayed"}, 1},
		{"studio_intents_total", []string{"operation", "generation", "outcome", "conflict"}, 1},
		{"studio_intents_total", []string{"operation", "generation", "outcome", "invalid"}, 2},
		{"studio_intents_total", []string{"operation", "generation", "outcome", "error"}, 0},
		{"studio_http_requests_total", []string{"method", "POST", "route", "/v1/generations"}, 5},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "201"}, 1},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "200"}, 1},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "409"}, 1},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "400"}, 1},
		{"studio_http_requests_total", []string{"route", "/v1/generations", "status", "422"}, 1},
		// Refused before routing within /v1: the route is the mount's.
		{"studio_http_requests_total", []string{"route", "/v1/*", "status", "401"}, 1},
		{"studio_http_requests_total", []string{"route", "/metrics", "status", "200"}, 1}, // the first scrape
		{"studio_http_request_duration_seconds", []string{"route", "/v1/generations"}, 5},
		// Planned: the create and the unplannable; the replay and the
		// conflict were answered from the binding.
		{"studio_plan_duration_seconds", []string{"outcome", "ok"}, 1},
		{"studio_plan_duration_seconds", []string{"outcome", "refused"}, 1},
		{"studio_commit_duration_seconds", []string{"outcome", "created"}, 1},
		{"studio_commit_duration_seconds", nil, 1},
		// The keyed lock: only the tries whose id was not bound yet (the
		// create and the unplannable); a replay and a conflict are
		// answered from the plain read before the lock.
		{"studio_lock_wait_seconds", []string{"lock", "intent"}, 2},
		{"studio_lock_hold_seconds", []string{"lock", "intent"}, 2},
		// 2 frames x auto (2 generators) x 3 candidates.
		{"studio_tasks", []string{"state", "queued"}, 12},
		{"studio_tasks", []string{"state", "running"}, 0},
	} {
		if got := after.Delta(before, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, got, w.want)
		}
	}
	for _, pool := range []string{"write", "read"} {
		if after.Value("studio_go_sql_max_open_connections", "db_name", pool) < 1 {
			t.Errorf("no pool statistics for the %s pool", pool)
		}
	}

	// The debug listener serves pprof and /metrics; the public one serves
	// no pprof.
	lines := parseLogs(t, logs.String())
	dbg := find(lines, "debug server", nil)
	if len(dbg) != 1 {
		t.Fatalf("debug server lines: %v", dbg)
	}
	for _, path := range []string{"/debug/pprof/", "/metrics"} {
		resp, err := http.Get("http://" + dbg[0]["addr"].(string) + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("debug %s: %v %v", path, resp.Status, err)
		}
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + m.Addr() + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("public /debug/pprof/: %v %v, want 404", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	// Logs.
	m.Close()
	lines = parseLogs(t, logs.String())
	text := logs.String()
	for _, secret := range []string{token, wrongToken, prompt, "Bearer"} {
		if strings.Contains(text, secret) {
			t.Errorf("the logs hold %q", secret)
		}
	}
	reqs := find(lines, "request", map[string]any{"route": "/v1/generations", "method": "POST", "actor": "local"})
	if len(reqs) != len(steps) {
		t.Fatalf("%d request lines for /v1/generations, want %d:\n%s", len(reqs), len(steps), text)
	}
	for i, l := range reqs {
		if l["status"] != float64(steps[i].want) {
			t.Errorf("request line %d: status %v, want %d", i, l["status"], steps[i].want)
		}
		if d, ok := l["duration_ms"].(float64); !ok || d <= 0 {
			t.Errorf("request line %d: duration_ms %v", i, l["duration_ms"])
		}
		if _, ok := l["duration"]; ok {
			t.Errorf("request line %d: a duration in nanoseconds too", i)
		}
		if l["level"] != "INFO" || l["time"] == nil {
			t.Errorf("request line %d: level %v, time %v", i, l["level"], l["time"])
		}
	}
	for i, id := range []string{"walk-1", "walk-1", "walk-1", "", "walk-3"} {
		if got, _ := reqs[i]["request_id"].(string); got != id {
			t.Errorf("request line %d: request_id %q, want %q", i, got, id)
		}
	}
	if n := len(find(lines, "request", map[string]any{"route": "/v1/*", "status": float64(401)})); n != 1 {
		t.Errorf("%d lines for the refused token, want 1", n)
	}
	for _, msg := range []string{"batch created", "batch replayed"} {
		got := find(lines, msg, map[string]any{"actor": "local", "request_id": "walk-1", "tasks": float64(12)})
		if len(got) != 1 || got[0]["batch_id"] == "" || got[0]["batch_id"] == nil {
			t.Errorf("%q lines: %v", msg, got)
		}
	}
	if n := len(find(lines, "batch created", nil)) + len(find(lines, "batch replayed", nil)); n != 2 {
		t.Errorf("%d batch lines, want 2", n)
	}
}

// TestLogDurationsAndLevel: a duration is written in milliseconds under
// key_ms, in JSON and in text; an int is left alone; --log-level drops
// what is below it.
func TestLogDurationsAndLevel(t *testing.T) {
	t.Parallel()
	var b syncBuffer
	log := newLogger(&b, "info")
	log.Debug("dropped")
	log.Info("kept", "duration", 1500*time.Microsecond, "count", 7)
	var l logLine
	if err := json.Unmarshal([]byte(b.String()), &l); err != nil {
		t.Fatalf("not one JSON line: %q", b.String())
	}
	if l["msg"] != "kept" || l["duration_ms"] != 1.5 || l["count"] != float64(7) || l["duration"] != nil {
		t.Fatalf("JSON line %v", l)
	}
	var text strings.Builder
	slog.New(slog.NewTextHandler(&text, &slog.HandlerOptions{ReplaceAttr: readableDurations})).
		Info("kept", "duration", 2*time.Millisecond)
	if !strings.Contains(text.String(), " duration_ms=2\n") && !strings.HasSuffix(text.String(), "duration_ms=2\n") {
		t.Fatalf("text line %q", text.String())
	}
}

// TestMetricsAndLogsOfWorkers runs the program with workers: a batch that
// drains, a batch whose tasks fail once each and then succeed, and a task
// whose lease is taken from under its worker (its fence bumped in the
// database, as another worker's claim would). The attempt counters, the
// lost leases and the task gauge move by exactly that, and the logs have a
// line per failed attempt and per lost lease, naming the task, never the
// token or the prompt.
func TestMetricsAndLogsOfWorkers(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 2
	cfg.RetryBase = 10 * time.Millisecond
	// Short enough that the worker renews (and so finds the bumped fence)
	// within seconds, long enough that no lease is lost to a loaded
	// machine: the counts below are exact.
	cfg.LeaseTTL = 6 * time.Second
	logs := &syncBuffer{}
	m := NewMain(cfg, modeServe, &syncBuffer{}, logs)
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	token := readToken(t, cfg.Data)
	f := &farm{t: t, data: cfg.Data, c: newClient(t, m.Addr(), token)}
	scrapeURL := "http://" + m.Addr() + "/metrics"
	before := metricstest.Get(t, scrapeURL)

	// 12 tasks that drain, and 2 that fail once each, then succeed.
	drained := f.generate(f.c, workGeneration("drain-1", 2, 3, nil, nil))
	flaky := f.generate(f.c, workGeneration("flaky-1", 1, 1, nil, map[string]any{"fail_attempts": 1}))
	for _, id := range []string{drained.ID, flaky.ID} {
		b := f.waitBatch(f.c, id, 30*time.Second, "the batch to drain", batchEnded)
		if b.Counts.Succeeded != b.TaskCount {
			t.Fatalf("batch %s ended %+v", id, b.Counts)
		}
	}
	// One slow task: once it runs, its fence moves on, as when another
	// worker claims it after its lease expired.
	slow := f.generate(f.c, workGeneration("slow-1", 1, 1, []string{"sketch"}, map[string]any{"delay_ms": 60000}))
	f.waitBatch(f.c, slow.ID, 30*time.Second, "the slow task to run", func(b fullBatch) bool { return b.Counts.Running == 1 })
	// A connection of the test's own: the program's store is behind its
	// cache and metrics wrappers.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(cfg.Data, "studio.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE tasks SET fence = fence + 1, lease_owner = 'someone-else' WHERE batch_id = ? AND state = 'running'`, slow.ID); err != nil {
		t.Fatal(err)
	}
	var after metricstest.Scrape
	pollFor(t, 30*time.Second, "the worker to find its lease lost", func() bool {
		after = metricstest.Get(t, scrapeURL)
		return after.Delta(before, "studio_task_leases_lost_total") > 0
	})

	for _, w := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"studio_task_attempts_total", []string{"outcome", "succeeded"}, 14},
		{"studio_task_attempts_total", []string{"outcome", "retried"}, 2},
		{"studio_task_attempts_total", []string{"outcome", "lost"}, 1},
		{"studio_task_attempts_total", []string{"outcome", "failed"}, 0},
		{"studio_task_leases_lost_total", nil, 1},
		{"studio_tasks", []string{"state", "succeeded"}, 14},
		{"studio_tasks", []string{"state", "running"}, 1}, // the slow task, until its new "holder" ends it
		{"studio_tasks", []string{"state", "queued"}, 0},
		{"studio_intents_total", []string{"outcome", "created"}, 3},
	} {
		if got := after.Delta(before, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, got, w.want)
		}
	}

	m.Close()
	text := logs.String()
	for _, secret := range []string{token, "a robot waving", "Bearer"} {
		if strings.Contains(text, secret) {
			t.Errorf("the logs hold %q", secret)
		}
	}
	lines := parseLogs(t, text)
	failed := find(lines, "task failed; will retry", map[string]any{"batch": flaky.ID, "attempt": float64(1), "component": "worker"})
	if len(failed) != 2 {
		t.Errorf("%d lines of failed attempts, want 2:\n%s", len(failed), text)
	}
	for _, l := range failed {
		if id, _ := l["task"].(string); id == "" || l["err"] == nil {
			t.Errorf("a failure line without its task or error: %v", l)
		}
	}
	if lost := find(lines, "lease lost: the task is left to its new holder, nothing recorded", map[string]any{"batch": slow.ID}); len(lost) != 1 {
		t.Errorf("%d lines of lost leases, want 1:\n%s", len(lost), text)
	}
	if n := len(find(lines, "batch created", nil)); n != 3 {
		t.Errorf("%d batch created lines, want 3", n)
	}
}
