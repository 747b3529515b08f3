package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the second connection that holds the write lock

	"studio/metrics"
	"studio/store"
	"studio/store/postgres/pgtest"
	"studio/store/sqlite/sqlitetest"
)

// The fault tests cause each fault of the database for real and check the
// answer a client gets (status, Retry-After, detail), that a retry with the
// same request id after it makes exactly one batch, and that the database
// is intact once the fault has passed.

// faultProblem is a problem answer with what the fault tests check.
type faultProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// expectFault checks a fault answer: its status, Retry-After and detail.
func expectFault(t *testing.T, resp *http.Response, err error, p faultProblem, status int, retryAfter, detail string) {
	t.Helper()
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if resp.StatusCode != status || p.Status != status {
		t.Fatalf("answered %d (%+v), want %d", resp.StatusCode, p, status)
	}
	if got := resp.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("Retry-After %q, want %q", got, retryAfter)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
	if !strings.HasPrefix(p.Detail, detail) {
		t.Fatalf("detail %q, want it to begin %q", p.Detail, detail)
	}
}

// batchesWithRequestID counts the actor's batches bound to requestID.
func batchesWithRequestID(t *testing.T, c *client, requestID string) int {
	t.Helper()
	var page struct {
		Items []struct {
			RequestID string `json:"request_id"`
		} `json:"items"`
	}
	resp, err := c.do(context.Background(), "GET", "/v1/batches?limit=500", nil, &page)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list batches: %v %v", resp, err)
	}
	n := 0
	for _, b := range page.Items {
		if b.RequestID == requestID {
			n++
		}
	}
	return n
}

// checkSQLiteIntegrity runs PRAGMA integrity_check on the database file.
func checkSQLiteIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q, %v", res, err)
	}
}

// TestSQLiteBusyIs503: another connection holds the write lock (BEGIN
// IMMEDIATE, as a backup tool or a sqlite3 shell left in a transaction
// would). A create waits --db-wait, not the 10 s busy timeout, and answers
// 503 "The database is busy." with Retry-After; reads still answer. Once
// the lock is released the retry with the same id creates the batch, once.
func TestSQLiteBusyIs503(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DBWait = 200 * time.Millisecond
	m, _ := startMain(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()

	release := sqlitetest.HoldWriteLock(t, filepath.Join(cfg.Data, "studio.db"))

	var p faultProblem
	resp, err := c.do(ctx, "POST", "/v1/generations", generation("busy-1", "f01", "f02"), &p)
	expectFault(t, resp, err, p, http.StatusServiceUnavailable, "2", "The database is busy.")
	if strings.Contains(p.Detail, "unknown") {
		t.Fatalf("a create that never had the write lock says its outcome is unknown: %q", p.Detail)
	}
	// Reads go on beside the writer (WAL), and the process is ready.
	if n := batchesWithRequestID(t, c, "busy-1"); n != 0 {
		t.Fatalf("%d batches while the lock was held", n)
	}
	if resp, err := c.do(ctx, "GET", "/readyz", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz while busy: %v %v", resp, err)
	}

	release()
	resp, err = c.do(ctx, "POST", "/v1/generations", generation("busy-1", "f01", "f02"), nil)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry after the lock was released: %v %v", resp, err)
	}
	if n := batchesWithRequestID(t, c, "busy-1"); n != 1 {
		t.Fatalf("%d batches after the retry, want 1", n)
	}
	metricsText := getText(t, c, "/metrics")
	if !strings.Contains(metricsText, `studio_database_faults_total{kind="busy"} 1`) {
		t.Fatalf("the busy fault is not counted:\n%s", grepLines(metricsText, "database_faults"))
	}
	checkSQLiteIntegrity(t, filepath.Join(cfg.Data, "studio.db"))
}

// getText answers the body of a GET that must answer 200.
func getText(t *testing.T, c *client, path string) string {
	t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", path, resp.Status, err)
	}
	return string(b)
}

// grepLines answers the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// mountSmallVolume mounts a size-limited tmpfs for the test, or skips the
// test saying why (mounting needs root and a kernel that allows it, as in
// a CI container run as root).
func mountSmallVolume(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("skipped: cannot mount a size-limited tmpfs for the full-disk test (%v); run as root where mount is allowed", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillVolume writes a file in dir until the volume has no space left, and
// answers its path.
func fillVolume(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// The last bytes: a block may still have room for less than buf.
	for n := 32 << 10; n > 0; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return path
}

// TestFullVolumeIs507: the data directory is on a volume that fills up.
// Creates answer 507 "The data volume is full." with Retry-After, /readyz
// answers 503 naming the free space, workers log the outage once when it
// begins and once when it ends; once space is freed the retry with the
// same id creates the batch, once, its tasks run, and the database is
// intact.
func TestFullVolumeIs507(t *testing.T) {
	t.Parallel()
	vol := mountSmallVolume(t, "24m")
	cfg := testConfig(t)
	cfg.Data = filepath.Join(vol, "data")
	cfg.Workers = 1
	cfg.MinFreeMiB = 1
	m, logs := startMainLogged(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()
	if resp, err := c.do(ctx, "GET", "/readyz", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz before: %v %v", resp, err)
	}

	filler := fillVolume(t, vol)
	var p faultProblem
	// A create is a handful of pages; the WAL may still have room for a
	// few from before. Try until one does not fit.
	var resp *http.Response
	var err error
	for i := 0; ; i++ {
		p = faultProblem{}
		resp, err = c.do(ctx, "POST", "/v1/generations", generation(fmt.Sprintf("full-%d", i), "f01", "f02"), &p)
		if err != nil || resp.StatusCode != http.StatusCreated || i == 50 {
			break
		}
	}
	expectFault(t, resp, err, p, http.StatusInsufficientStorage, "60", "The data volume is full.")
	failedID := ""
	for i := 0; ; i++ {
		if id := fmt.Sprintf("full-%d", i); batchesWithRequestID(t, c, id) == 0 {
			failedID = id
			break
		}
	}
	var rp faultProblem
	resp, err = c.do(ctx, "GET", "/readyz", nil, &rp)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(rp.Detail, "below the floor of 1.0 MiB") ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("readyz on a full volume: %v %+v %v", resp, rp, err)
	}
	if resp, err := c.do(ctx, "GET", "/healthz", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz on a full volume: %v %v", resp, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var b batchAnswer
	resp, err = c.do(ctx, "POST", "/v1/generations", generation(failedID, "f01", "f02"), &b)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry after space was freed: %v %v", resp, err)
	}
	if n := batchesWithRequestID(t, c, failedID); n != 1 {
		t.Fatalf("%d batches after the retry, want 1", n)
	}
	if resp, err := c.do(ctx, "GET", "/readyz", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz after: %v %v", resp, err)
	}
	waitFor(t, time.Minute, "the batch to end", func() bool {
		var now batchAnswer
		resp, err := c.do(ctx, "GET", "/v1/batches/"+b.ID, nil, &now)
		return err == nil && resp.StatusCode == http.StatusOK && now.State == "succeeded"
	})
	m.Close()
	checkSQLiteIntegrity(t, filepath.Join(cfg.Data, "studio.db"))
	out := logs.String()
	if n := strings.Count(out, "database outage began"); n < 1 {
		t.Fatalf("the outage was not logged:\n%s", out)
	}
	if began, ended := strings.Count(out, "database outage began"), strings.Count(out, "database outage ended"); began != ended {
		t.Fatalf("%d outages began, %d ended:\n%s", began, ended, out)
	}
	t.Logf("the create answered %d %q after %s; the outage log:\n%s", p.Status, p.Detail, failedID, grepLines(out, "outage"))
	if strings.Contains(out, "claim failed") || strings.Contains(out, "internal error") {
		t.Fatalf("a fault was logged as an error:\n%s", out)
	}
}

// withAppName answers url with application_name set, so that the test can
// find the backends of the process under test in pg_stat_activity (and
// only those: other tests share the server).
func withAppName(t *testing.T, raw, name string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPostgresTerminatedIs503: the connection serving a create is killed
// with pg_terminate_backend while the create waits for a table lock (as
// an administrator or a failover would kill it). The create answers 503
// "The database is unreachable." with Retry-After and says its outcome is
// unknown; the retry with the same id makes exactly one batch, whole.
func TestPostgresTerminatedIs503(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	app := "studio-fault-" + schema
	cfg := testConfig(t)
	cfg.Database = withAppName(t, url, app)
	m, _ := startMain(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()

	_, tx := lockIntents(t, url)
	type answer struct {
		resp *http.Response
		err  error
		p    faultProblem
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.resp, a.err = c.do(ctx, "POST", "/v1/generations", generation("terminated-1", "f01", "f02"), &a.p)
		done <- a
	}()
	probe, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	var pid int
	waitFor(t, time.Minute, "the create to wait for the table lock", func() bool {
		err := probe.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' LIMIT 1`, app).Scan(&pid)
		return err == nil
	})
	var killed bool
	if err := probe.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend: %v %v", killed, err)
	}
	a := <-done
	expectFault(t, a.resp, a.err, a.p, http.StatusServiceUnavailable, "5", "The database is unreachable.")
	if !strings.HasSuffix(a.p.Detail, "The outcome is unknown: retry with the same request id.") {
		t.Fatalf("a create cut off mid-statement does not say its outcome is unknown: %q", a.p.Detail)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var b batchAnswer
	resp, err := c.do(ctx, "POST", "/v1/generations", generation("terminated-1", "f01", "f02"), &b)
	if err != nil || (resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK) {
		t.Fatalf("retry: %v %v", resp, err)
	}
	if n := batchesWithRequestID(t, c, "terminated-1"); n != 1 {
		t.Fatalf("%d batches after the retry, want 1", n)
	}
	checkTaskCount(t, c, b)
}

// checkTaskCount checks that the batch has all of its tasks: the tree
// committed whole.
func checkTaskCount(t *testing.T, c *client, b batchAnswer) {
	t.Helper()
	var tasks struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	resp, err := c.do(context.Background(), "GET", "/v1/batches/"+b.ID+"/tasks?limit=500", nil, &tasks)
	if err != nil || resp.StatusCode != http.StatusOK || len(tasks.Items) != b.TaskCount || b.TaskCount == 0 {
		t.Fatalf("tasks of %s: %d of %d (%v %v)", b.ID, len(tasks.Items), b.TaskCount, resp, err)
	}
}

// tcpProxy forwards connections to a server and can stop (its port then
// refuses connections, as a server that is down does) and start again on
// the same address.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	p.start("127.0.0.1:0")
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) start(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

// stop closes the listener and every connection through it.
func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPostgresRefusedIs503: the database server goes away (its port
// refuses connections). Creates and /readyz answer 503 "The database is
// unreachable." with Retry-After; each runner (workers, publisher) logs
// the outage once when it begins and once when it ends; once the server
// is back the retry with the same id makes exactly one batch, and its
// tasks run without a failed attempt.
func TestPostgresRefusedIs503(t *testing.T) {
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
	cfg.Workers = 1
	m, logs := startMainLogged(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()

	proxy.stop()
	var p faultProblem
	resp, err := c.do(ctx, "POST", "/v1/generations", generation("refused-1", "f01", "f02"), &p)
	expectFault(t, resp, err, p, http.StatusServiceUnavailable, "5", "The database is unreachable.")
	p = faultProblem{}
	resp, err = c.do(ctx, "GET", "/readyz", nil, &p)
	expectFault(t, resp, err, p, http.StatusServiceUnavailable, "5", "The database is unreachable.")
	waitFor(t, time.Minute, "the workers to see the outage", func() bool {
		return strings.Count(logs.String(), "database outage began") >= 2 // the API's and the workers'
	})

	proxy.start(proxy.addr)
	var b batchAnswer
	resp, err = c.do(ctx, "POST", "/v1/generations", generation("refused-1", "f01", "f02"), &b)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry once the server is back: %v %v", resp, err)
	}
	if n := batchesWithRequestID(t, c, "refused-1"); n != 1 {
		t.Fatalf("%d batches after the retry, want 1", n)
	}
	checkTaskCount(t, c, b)
	waitFor(t, time.Minute, "the batch to succeed", func() bool {
		var now batchAnswer
		resp, err := c.do(ctx, "GET", "/v1/batches/"+b.ID, nil, &now)
		return err == nil && resp.StatusCode == http.StatusOK && now.State == "succeeded"
	})
	waitFor(t, time.Minute, "every outage to end", func() bool {
		out := logs.String()
		return strings.Count(out, "database outage began") == strings.Count(out, "database outage ended")
	})
	out := logs.String()
	began := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "database outage began") {
			var e struct {
				SeenBy string `json:"seen_by"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatal(err)
			}
			began[e.SeenBy]++
		}
	}
	for who, n := range began {
		if n != 1 {
			t.Fatalf("%s logged %d outages for one:\n%s", who, n, grepLines(out, "outage"))
		}
	}
	if strings.Contains(out, "claim failed") || strings.Contains(out, "internal error") || strings.Contains(out, `"level":"ERROR"`) {
		t.Fatalf("a fault was logged as an error:\n%s", out)
	}
	t.Logf("outage log:\n%s", grepLines(out, "outage"))
}

// TestFaultKindsAreMetricLabels: the metric's kind labels are the store's
// fault kinds, every one of them.
func TestFaultKindsAreMetricLabels(t *testing.T) {
	var kinds []string
	for _, k := range store.FaultKinds {
		kinds = append(kinds, string(k))
	}
	if !slices.Equal(kinds, metrics.FaultKinds) {
		t.Fatalf("store kinds %v, metric labels %v", kinds, metrics.FaultKinds)
	}
}

// TestVersion: studio --version says the build, and exits 0.
func TestVersion(t *testing.T) {
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "studio ") ||
		!strings.Contains(out.String(), "go1.") {
		t.Fatalf("--version: exit %d, %q, %q", code, out.String(), errb.String())
	}
}

// lockIntents holds an ACCESS EXCLUSIVE lock on the intents table of the
// database at url, in an open transaction, so that every statement on the
// table waits; rolling tx back releases it. Both end with the test.
func lockIntents(t *testing.T, url string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `LOCK TABLE intents IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return admin, tx
}

// startMainLogged runs the program in serve mode, as startMain does, and
// returns what it logs.
func startMainLogged(t *testing.T, cfg Config) (*Main, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	m := NewMain(cfg, modeServe, io.Discard, logs)
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, logs
}
