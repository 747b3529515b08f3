package main

import (
	"context"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"studio/store/postgres/pgtest"
)

// TestPostgresPoolExhaustedIs503: every connection of the pool is taken
// (one, held by a create that waits for a table lock an administrator
// holds). A request that needs a connection waits --db-wait for one, not
// until the lock is let go, and answers 503 "The database is busy." with
// Retry-After; once the lock is released both creates make their batch,
// once.
func TestPostgresPoolExhaustedIs503(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	app := "studio-pool-" + schema
	u, err := neturl.Parse(withAppName(t, url, app))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	cfg := testConfig(t)
	cfg.Database = u.String()
	cfg.DBWait = 300 * time.Millisecond
	m, _ := startMain(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()

	admin, tx := lockIntents(t, url)
	type answer struct {
		resp *http.Response
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		var a answer
		a.resp, a.err = c.do(ctx, "POST", "/v1/generations", generation("pool-1", "f01"), nil)
		first <- a
	}()
	waitFor(t, time.Minute, "the first create to hold the pool's connection, waiting for the lock", func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		return err == nil && n == 1
	})

	// Bounded by the client too, so that a server that waits on fails
	// the test rather than hanging it.
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/batches", nil},
		{"POST", "/v1/generations", generation("pool-2", "f01")},
	} {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		var p faultProblem
		resp, err := c.do(rctx, r.method, r.path, r.body, &p)
		took := time.Since(start)
		cancel()
		expectFault(t, resp, err, p, http.StatusServiceUnavailable, "2", "The database is busy.")
		if strings.Contains(p.Detail, "unknown") {
			t.Fatalf("%s %s never had a connection, yet its outcome is unknown: %q", r.method, r.path, p.Detail)
		}
		t.Logf("%s %s with the pool exhausted: %d in %v (--db-wait %v)", r.method, r.path, resp.StatusCode, took.Round(time.Millisecond), cfg.DBWait)
	}
	select {
	case a := <-first:
		t.Fatalf("the first create ended while the lock was held: %v %v", a.resp, a.err)
	default:
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-first; a.err != nil || a.resp.StatusCode != http.StatusCreated {
		t.Fatalf("the first create once the lock was released: %v %v", a.resp, a.err)
	}
	if resp, err := c.do(ctx, "POST", "/v1/generations", generation("pool-2", "f01"), nil); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the retry of the second create: %v %v", resp, err)
	}
	for _, id := range []string{"pool-1", "pool-2"} {
		if n := batchesWithRequestID(t, c, id); n != 1 {
			t.Fatalf("%d batches for %s, want 1", n, id)
		}
	}
	metricsText := getText(t, c, "/metrics")
	if !strings.Contains(metricsText, `studio_database_faults_total{kind="busy"} 2`) {
		t.Fatalf("the busy faults are not counted:\n%s", grepLines(metricsText, "database_faults"))
	}
}
