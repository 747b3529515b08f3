package main

import (
	"context"
	"database/sql"
	neturl "net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store/postgres/pgtest"
	"studio/store/sqlite/sqlitetest"
)

// A task whose lease expired while the database could not be reached does
// not count that try against its attempts: the worker could not renew the
// lease, it did not crash. Each test runs one task (a slow one, so it is
// running when the outage begins) with --max-attempts 1 and a 1 s lease,
// keeps the database from it until the lease has expired and the worker
// has given the try up, then lets them go. The task is taken back and
// succeeds, its attempts counting both tries, instead of failing with
// "no attempts left".

// writeOutage keeps the database from the worker's writes while it is
// held.
type writeOutage struct {
	// givenUp is a line the worker logs once it has given the try up.
	givenUp       string
	hold, release func(t *testing.T)
	// expired says whether the task's lease expired, by the database's
	// clock (a read, which the outage lets through).
	expired func(t *testing.T, taskID string) bool
}

func runOutageAttempts(t *testing.T, cfg Config, o writeOutage) {
	cfg.Workers = 1
	cfg.LeaseTTL = time.Second
	cfg.MaxAttempts = 1
	cfg.LogLevel = "debug"
	m, logs := startMainLogged(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", grepLines(logs.String(), "0"))
		}
	})
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()

	var b batchAnswer
	resp, err := c.do(ctx, "POST", "/v1/generations", workGeneration("outage-1", 1, 1, []string{"sketch"}, map[string]any{"delay_ms": 4000}), &b)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v %v", resp, err)
	}
	var task taskAnswer
	pollFor(t, time.Minute, "the task to run", func() bool {
		ts := tasksOf(t, c, b.ID)
		task = ts[0]
		return len(ts) == 1 && ts[0].State == intent.StateRunning
	})

	o.hold(t)
	released := false
	t.Cleanup(func() {
		if !released {
			o.release(t)
		}
	})
	pollFor(t, time.Minute, "the lease to expire during the outage", func() bool { return o.expired(t, task.ID) })
	pollFor(t, time.Minute, "the worker to give the try up", func() bool {
		return strings.Contains(logs.String(), o.givenUp)
	})
	o.release(t)
	released = true

	fb := waitEnded(t, c, b.ID)
	ts := tasksOf(t, c, b.ID)
	if fb.State != intent.StateSucceeded || len(ts) != 1 || ts[0].State != intent.StateSucceeded {
		msg := ""
		if len(ts) == 1 && ts[0].Error != nil {
			msg = *ts[0].Error
		}
		t.Fatalf("after the outage the batch is %s, its task %+v (%s): the outage burned its attempt", fb.State, ts, msg)
	}
	if ts[0].Attempts != 2 {
		t.Fatalf("the task claimed %d times, want 2 (the try the outage cut short, and the one after)", ts[0].Attempts)
	}
	t.Logf("after the outage: batch %s, task attempts %d", fb.State, ts[0].Attempts)
}

// waitEnded waits until every task of the batch has ended.
func waitEnded(t *testing.T, c *client, id string) batchAnswer {
	t.Helper()
	var b batchAnswer
	pollFor(t, time.Minute, "the batch to end", func() bool {
		resp, err := c.do(context.Background(), "GET", "/v1/batches/"+id, nil, &b)
		return err == nil && resp.StatusCode == 200 &&
			(b.State == intent.StateSucceeded || b.State == intent.StateFailed || b.State == intent.StateCanceled)
	})
	return b
}

// TestSQLiteOutageBurnsNoAttempt: the outage is a second connection that
// holds the write lock (BEGIN IMMEDIATE).
func TestSQLiteOutageBurnsNoAttempt(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	path := filepath.Join(cfg.Data, "studio.db")
	ctx := context.Background()
	var other *sql.DB
	var release func()
	runOutageAttempts(t, cfg, writeOutage{
		givenUp: "lease lost",
		hold: func(t *testing.T) {
			var err error
			if other, err = sql.Open("sqlite", "file:"+path); err != nil { // reads during the outage
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			release = sqlitetest.HoldWriteLock(t, path)
		},
		release: func(t *testing.T) { release() },
		expired: func(t *testing.T, taskID string) bool {
			var n int
			if err := other.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE id = ? AND state = 'running'
				AND lease_expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)`, taskID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
	})
}

// TestPostgresOutageBurnsNoAttempt: the outage is the server going away
// (its port refuses connections, those open are cut), as in a restart or
// a network partition.
func TestPostgresOutageBurnsNoAttempt(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	cfg := testConfig(t)
	cfg.Database = u.String()
	ctx := context.Background()
	probe, err := pgx.Connect(ctx, url) // not through the proxy
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { probe.Close(context.Background()) })
	runOutageAttempts(t, cfg, writeOutage{
		givenUp: "database outage began",
		hold:    func(t *testing.T) { proxy.stop() },
		release: func(t *testing.T) { proxy.start(proxy.addr) },
		expired: func(t *testing.T, taskID string) bool {
			var n int
			if err := probe.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE id = $1 AND state = 'running'
				AND lease_expires_at <= clock_timestamp()`, taskID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
	})
}
