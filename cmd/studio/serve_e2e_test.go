package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/intent"
)

type batchAnswer struct {
	ID        string       `json:"id"`
	RequestID string       `json:"request_id"`
	State     intent.State `json:"state"`
	TaskCount int          `json:"task_count"`
}

func generation(requestID string, frames ...string) map[string]any {
	return map[string]any{
		"request_id": requestID,
		"prompt":     "a knight in the rain, side view",
		"sets":       []map[string]any{{"collection": "walk-cycle", "frames": frames}},
		"candidates": 3,
		"subjects":   []string{"knight"},
		"seed":       7,
	}
}

// startMain runs the whole program in this process on port 0.
func startMain(t *testing.T, cfg Config) (*Main, *bytes.Buffer) {
	t.Helper()
	var stdout bytes.Buffer
	m := NewMain(cfg, modeServe, &stdout, io.Discard)
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, &stdout
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.Addr = "127.0.0.1:0"
	cfg.Workers = 0
	cfg.Grace = time.Second
	return cfg
}

func TestServeInProcess(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	m, stdout := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	if !strings.Contains(stdout.String(), token) {
		t.Fatalf("the first token was not printed: %q", stdout.String())
	}
	fi, err := os.Stat(filepath.Join(cfg.Data, "token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	ctx := context.Background()
	c := newClient(t, m.Addr(), token)

	var first batchAnswer
	resp, err := c.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01", "f02"), &first)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp.Status, err)
	}
	if first.TaskCount != 12 || resp.Header.Get("Location") != "/v1/batches/"+first.ID || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("create answered %+v, headers %v", first, resp.Header)
	}
	var again batchAnswer
	resp, err = c.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01", "f02"), &again)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || again.ID != first.ID {
		t.Fatalf("replay: %v %v %+v", resp.Status, err, again)
	}
	var problem struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	resp, err = c.do(ctx, "POST", "/v1/generations", generation("walk-1", "f02", "f01"), &problem)
	if err != nil || resp.StatusCode != http.StatusConflict || problem.Detail != "The request ID already belongs to different input." {
		t.Fatalf("conflict: %v %v %+v", resp.Status, err, problem)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("conflict content type %q", ct)
	}

	// A token for another actor: alice's id is not bob's, and bob cannot
	// see alice's batch.
	bobToken, err := createToken(ctx, m.store, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bob := newClient(t, m.Addr(), bobToken)
	resp, err = bob.do(ctx, "GET", "/v1/batches/"+first.ID, nil, nil)
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob reads local's batch: %v %v", resp.Status, err)
	}
	var bobs batchAnswer
	resp, err = bob.do(ctx, "POST", "/v1/generations", generation("walk-1", "f02", "f01"), &bobs)
	if err != nil || resp.StatusCode != http.StatusCreated || bobs.ID == first.ID {
		t.Fatalf("bob's own walk-1: %v %v", resp.Status, err)
	}

	// Restart on the same data: no new token, the id is still bound.
	m.Close()
	m2, stdout2 := startMain(t, cfg)
	if stdout2.Len() != 0 || readToken(t, cfg.Data) != token {
		t.Fatalf("a restart made a new token: %q", stdout2.String())
	}
	c2 := newClient(t, m2.Addr(), token)
	resp, err = c2.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01", "f02"), &again)
	if err != nil || resp.StatusCode != http.StatusOK || again.ID != first.ID {
		t.Fatalf("replay after restart: %v %v", resp.Status, err)
	}
	resp, err = c2.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01"), nil)
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("conflict after restart: %v %v", resp.Status, err)
	}
}

// Two serve processes on one data directory, racing duplicates of the same
// ids through both: one batch per id. With the database lock store the
// planning lock holds across the processes too: one plan per id.
func TestTwoServeProcessesOneDataDir(t *testing.T) {
	t.Parallel()
	for _, lockStore := range []string{"memory", "db"} {
		t.Run(lockStore, func(t *testing.T) {
			t.Parallel()
			raceTwoServeProcesses(t, lockStore)
		})
	}
}

func raceTwoServeProcesses(t *testing.T, lockStore string) {
	data := t.TempDir()
	env := []string{"STUDIO_DATA=" + data, "STUDIO_WORKERS=0", "STUDIO_LOCK_STORE=" + lockStore}
	a := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	b := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	token := readToken(t, data)
	if strings.Count(a.stdout.String()+b.stdout.String(), "Created a token") != 1 {
		t.Fatalf("first token printed %d times", strings.Count(a.stdout.String()+b.stdout.String(), "Created a token"))
	}
	clients := []*client{newClient(t, a.Addr, token), newClient(t, b.Addr, token)}
	const ids, tries = 8, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // request id -> batch ids
	created := map[string]int{}
	for i := 0; i < ids; i++ {
		rid := fmt.Sprintf("race-%d", i)
		seen[rid] = map[string]bool{}
		for j := 0; j < tries; j++ {
			wg.Add(1)
			go func(c *client) {
				defer wg.Done()
				var out batchAnswer
				resp, err := c.do(context.Background(), "POST", "/v1/generations", generation(rid, "f01", "f02"), &out)
				if err != nil {
					t.Errorf("%s: %v", rid, err)
					return
				}
				if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
					t.Errorf("%s: status %d", rid, resp.StatusCode)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				seen[rid][out.ID] = true
				if resp.StatusCode == http.StatusCreated {
					created[rid]++
				}
			}(clients[j%2])
		}
	}
	wg.Wait()
	for rid, batches := range seen {
		if len(batches) != 1 || created[rid] != 1 {
			t.Errorf("%s: %d batches named, %d created; want 1 and 1", rid, len(batches), created[rid])
		}
	}
	var list struct {
		Items []batchAnswer `json:"items"`
	}
	if _, err := clients[0].do(context.Background(), "GET", "/v1/batches?limit=500", nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != ids {
		t.Fatalf("%d batches stored, want %d", len(list.Items), ids)
	}
	for _, p := range []*proc{a, b} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	}
	plans := strings.Count(a.logs.String(), `"msg":"planned"`) + strings.Count(b.logs.String(), `"msg":"planned"`)
	switch {
	case lockStore == "db" && plans != ids:
		t.Fatalf("%d plans for %d ids with the shared lock store, want one each", plans, ids)
	case plans < ids:
		t.Fatalf("%d plans for %d ids", plans, ids)
	}
	t.Logf("lock store %s: %d plans for %d ids x %d tries", lockStore, plans, ids, tries)
}

// TestMigrateSaysWhatItApplied: `studio migrate` names each migration it
// applies, and says when there was none to apply.
func TestMigrateSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--data", data}, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "applied 0001_core\n") || !strings.Contains(out.String(), "migrations applied: the database is up to date") {
		t.Fatalf("first migrate printed %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"migrate", "--data", data}, &out, &errb); code != 0 {
		t.Fatalf("migrate again: %d %s", code, errb.String())
	}
	if got := out.String(); got != "no migrations to apply: the database is up to date\n" {
		t.Fatalf("second migrate printed %q", got)
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	var out, errb bytes.Buffer
	ctx := context.Background()
	if code := run(ctx, []string{"migrate", "--data", data}, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	out.Reset()
	if code := run(ctx, []string{"token", "create", "--actor", "alice", "--data", data}, &out, &errb); code != 0 {
		t.Fatalf("token create: %d %s", code, errb.String())
	}
	if tok := strings.TrimSpace(out.String()); !strings.HasPrefix(tok, "stu_") || len(tok) < 20 {
		t.Fatalf("token create printed %q", out.String())
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		// A bad value is a usage error (2), as studio help states.
		{"no command", nil, 2},
		{"unknown command", []string{"frobnicate"}, 2},
		{"help", []string{"help"}, 0},
		{"token without actor", []string{"token", "create", "--data", data}, 2},
		{"bad flag", []string{"serve", "--no-such-flag"}, 2},
		{"bad lock store", []string{"serve", "--data", data, "--lock-store", "paper"}, 2},
		{"bad log level", []string{"serve", "--data", data, "--log-level", "loud"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o, e bytes.Buffer
			if code := run(ctx, tc.args, &o, &e); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, e.String())
			}
		})
	}
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Setenv("STUDIO_ADDR", "127.0.0.1:9999")
	t.Setenv("STUDIO_MAX_BATCH_TASKS", "12")
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdServe, &cfg, io.Discard)
	if err := fs.Parse([]string{"--addr", "127.0.0.1:1234"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(); err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:1234" {
		t.Fatalf("the flag did not win over the environment: %s", cfg.Addr)
	}
	if cfg.MaxBatchTasks != 12 {
		t.Fatalf("the environment did not win over the default: %d", cfg.MaxBatchTasks)
	}
	if cfg.Workers != 4 {
		t.Fatalf("default workers %d", cfg.Workers)
	}
	t.Setenv("STUDIO_WORKERS", "many")
	cfg = DefaultConfig()
	fs, applyEnv = newFlagSet(cmdServe, &cfg, io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(); err == nil || !strings.Contains(err.Error(), "STUDIO_WORKERS") {
		t.Fatalf("a bad variable was not named: %v", err)
	}
}

// An answered 201 survives a crash of the process (SIGKILL right after the
// answer), in both synchronous modes: the retry after restart is a replay
// of the same batch, not a new one.
func TestAnswered201SurvivesKill(t *testing.T) {
	t.Parallel()
	for _, sync := range []string{"FULL", "NORMAL"} {
		t.Run(sync, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			env := []string{"STUDIO_DATA=" + data, "STUDIO_WORKERS=0", "STUDIO_SQLITE_SYNCHRONOUS=" + sync}
			p := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
			token := readToken(t, data)
			c := newClient(t, p.Addr, token)
			ctx := context.Background()
			ids := map[string]string{}
			for i := 0; i < 20; i++ {
				rid := fmt.Sprintf("crash-%d", i)
				var out batchAnswer
				resp, err := c.do(ctx, "POST", "/v1/generations", generation(rid, "f01", "f02"), &out)
				if err != nil || resp.StatusCode != http.StatusCreated {
					t.Fatalf("%s: %v %v", rid, resp, err)
				}
				ids[rid] = out.ID
			}
			p.signal(syscall.SIGKILL)
			p.wait(30 * time.Second)

			q := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
			c = newClient(t, q.Addr, token)
			for rid, id := range ids {
				var out batchAnswer
				resp, err := c.do(ctx, "POST", "/v1/generations", generation(rid, "f01", "f02"), &out)
				if err != nil || resp.StatusCode != http.StatusOK || out.ID != id {
					t.Fatalf("%s after kill -9: status %v, batch %s, want a replay of %s (%v)", rid, resp.StatusCode, out.ID, id, err)
				}
			}
		})
	}
}
