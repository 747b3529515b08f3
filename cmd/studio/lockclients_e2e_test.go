package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"studio/internal/testskip"
	"studio/locks"
	"studio/locks/redislock"
	"studio/locks/sqlitelock"
	"studio/lockservice"
)

// The lock clients' tests: a real `studio serve`, the Python client's
// unittest suite and the TypeScript client's node --test suite against it,
// then holders in Go, Python and Node on one key.

// lockServer is a studio serve process with the tokens of two actors.
type lockServer struct {
	proc         *proc
	url          string
	token, other string
}

func startLockServer(t *testing.T) *lockServer {
	t.Helper()
	return startLockServerIn(t, t.TempDir(), "memory")
}

// startLockServerIn starts a server on the data directory (several may
// share one) with the lock store given.
func startLockServerIn(t *testing.T, data, lockStore string) *lockServer {
	t.Helper()
	p := startProcess(t, []string{"STUDIO_DATA=" + data, "STUDIO_WORKERS=0", "STUDIO_LOCK_STORE=" + lockStore}, "serve", "--addr", "127.0.0.1:0")
	out, err := exec.Command(studioBinary(t), "token", "create", "--actor", "other", "--data", data).Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		t.Fatal("token create printed nothing")
	}
	return &lockServer{proc: p, url: "http://" + p.Addr, token: readToken(t, data), other: fields[len(fields)-1]}
}

func (s *lockServer) env() []string {
	return append(os.Environ(), "STUDIO_URL="+s.url, "STUDIO_SERVER="+s.url, "STUDIO_TOKEN="+s.token, "STUDIO_TOKEN_OTHER="+s.other)
}

// clientDir is a client's directory in the repository.
func clientDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// requiredTools are the programs STUDIO_TEST_LOCK_CLIENTS=1 (CI sets it)
// requires: the lock clients' own runtimes, on every CI machine (.ci/run
// installs Bun from npm when it is missing, and the Debian-packaged crates
// the Rust client builds against).
var requiredTools = map[string]bool{"python3": true, "node": true, "bun": true, "cargo": true}

// toolPath returns the path of a program, or "" when it is missing; a
// missing required one fails the test when STUDIO_TEST_LOCK_CLIENTS=1.
func toolPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if requiredTools[name] && os.Getenv("STUDIO_TEST_LOCK_CLIENTS") == "1" {
			t.Fatalf("STUDIO_TEST_LOCK_CLIENTS=1 but %s is not on PATH", name)
		}
		return ""
	}
	return p
}

// needTool returns the path of a program, or skips the test naming it
// (fails instead, for the required ones, under STUDIO_TEST_LOCK_CLIENTS=1).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p := toolPath(t, name)
	if p == "" {
		testskip.Announce("Lock client ("+name+")", "put "+name+" on PATH to run them")
		t.Skipf("%s is not on PATH: the lock client tests that run under %s are skipped", name, name)
	}
	return p
}

// runSuite runs a client's test suite against the server and fails the
// test with its output if it fails, or if it ran nothing or skipped.
func runSuite(t *testing.T, srv *lockServer, dir string, check func(out string) error, name string, args ...string) {
	t.Helper()
	// The first cargo test compiles the Rust client's dependencies: minutes
	// on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = srv.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	if err := check(string(out)); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s passed", name, strings.Join(args, " "))
}

func TestLockClients(t *testing.T) {
	t.Parallel()
	srv := startLockServer(t)

	t.Run("python unittest", func(t *testing.T) {
		t.Parallel()
		py := needTool(t, "python3")
		runSuite(t, srv, clientDir(t, "python"), func(out string) error {
			if !strings.Contains(out, "\nOK") || strings.Contains(out, "skipped") || !strings.Contains(out, "Ran ") {
				return fmt.Errorf("not every test ran and passed")
			}
			return nil
		}, py, "-m", "unittest", "-v")
	})
	t.Run("node test", func(t *testing.T) {
		t.Parallel()
		node := needTool(t, "node")
		runSuite(t, srv, clientDir(t, "typescript"), func(out string) error {
			if !strings.Contains(out, "# fail 0") || !strings.Contains(out, "# skipped 0") || strings.Contains(out, "# pass 0") {
				return fmt.Errorf("not every test ran and passed")
			}
			return nil
		}, node, "--test")
	})
	t.Run("bun test", func(t *testing.T) {
		t.Parallel()
		bun := needTool(t, "bun")
		runSuite(t, srv, clientDir(t, "typescript"), func(out string) error {
			if !strings.Contains(out, " 0 fail") || strings.Contains(out, "(skip)") || strings.Contains(out, " 0 pass") {
				return fmt.Errorf("not every test ran and passed")
			}
			return nil
		}, bun, "test", "./test/locks.test.js")
	})
	t.Run("cargo test", func(t *testing.T) {
		t.Parallel()
		cargo := needTool(t, "cargo")
		runSuite(t, srv, clientDir(t, "rust"), func(out string) error {
			// The unit tests, then the README's example as a doctest: two
			// results, both ok, nothing skipped.
			if strings.Count(out, "test result: ok.") != 2 || strings.Contains(out, "SKIPPED") ||
				strings.Contains(out, " 0 passed") || !strings.Contains(out, "README.md - (line") && !strings.Contains(out, "src/lib.rs - (line") {
				return fmt.Errorf("not every test ran and passed")
			}
			return nil
		}, cargo, "test")
	})
}

// TestLockCounterAcrossLanguages: holders in Go, Python and Node increment
// one counter in a file, read-modify-write, under one lock; the count comes
// out exact and every holder's fence is above the last one written. Once
// on one server, once on two servers sharing a database (--lock-store db),
// once on two servers with databases of their own sharing a Redis
// (--lock-store redis://...), each language's holders split between them.
func TestLockCounterAcrossLanguages(t *testing.T) {
	t.Parallel()
	t.Run("one server", func(t *testing.T) {
		t.Parallel()
		srv := startLockServer(t)
		lockCounter(t, []*lockServer{srv})
	})
	t.Run("two servers, db lock store", func(t *testing.T) {
		t.Parallel()
		data := t.TempDir()
		a := startLockServerIn(t, data, "db")
		b := startLockServerIn(t, data, "db")
		// Besides the HTTP holders, Go holders that use the locks package
		// directly on the same database, on the engine key the servers
		// make of (actor, name, key).
		ls, err := sqlitelock.Open(context.Background(), filepath.Join(data, "studio.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		eng := locks.New(ls)
		t.Cleanup(func() { eng.Close() })
		lockCounter(t, []*lockServer{a, b}, eng.Lock(lockservice.Scope("local", "shared")))
	})
	t.Run("two servers on databases of their own, redis lock store", func(t *testing.T) {
		t.Parallel()
		u := testRedisURL(t)
		if u == "" {
			t.Skip("no Redis: see the log line above")
		}
		// Each server keeps its own SQLite file; only Redis is shared.
		a := startLockServerIn(t, t.TempDir(), u)
		b := startLockServerIn(t, t.TempDir(), u)
		ls, err := redislock.Open(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		eng := locks.New(ls)
		t.Cleanup(func() { eng.Close() })
		lockCounter(t, []*lockServer{a, b}, eng.Lock(lockservice.Scope("local", "shared")))
	})
}

// lockCounter runs the counter with holders spread over the servers and,
// when direct is set, two more holders that hold direct's key in-process.
func lockCounter(t *testing.T, servers []*lockServer, direct ...*locks.Lock) {
	path := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(path, []byte("0 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const perHolder = 12
	key := "counter-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var wg sync.WaitGroup
	holders := 0
	errs := make(chan error, 32)
	for i := range 2 {
		holders++
		srv := servers[i%len(servers)]
		wg.Go(func() {
			errs <- goCounter(srv, "shared", key, path, perHolder)
		})
	}
	for _, l := range direct {
		for range 2 {
			holders++
			wg.Go(func() {
				for range perHolder {
					err := l.Hold(context.Background(), key, func(ctx context.Context, lease *locks.Lease) error {
						return incrementFile(path, lease.Fence())
					}, locks.TTL(10*time.Second), locks.Wait(2*time.Minute))
					if err != nil {
						errs <- fmt.Errorf("engine holder: %w", err)
						return
					}
				}
				errs <- nil
			})
		}
	}
	langs := 1
	for _, c := range []struct{ tool, dir string }{{"python3", "python"}, {"node", "typescript"}} {
		bin := toolPath(t, c.tool)
		if bin == "" {
			t.Logf("%s is not installed: the counter runs without the %s holders", c.tool, c.dir)
			continue
		}
		langs++
		for i := range 2 {
			holders++
			var cmd *exec.Cmd
			if c.dir == "python" {
				cmd = exec.Command(bin, "-m", "tests.holder", "counter", "shared", key, path, strconv.Itoa(perHolder))
			} else {
				cmd = exec.Command(bin, "tools/holder.js", "counter", "shared", key, path, strconv.Itoa(perHolder))
			}
			cmd.Dir = clientDir(t, c.dir)
			cmd.Env = servers[(i+1)%len(servers)].env()
			wg.Go(func() {
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "done") {
					errs <- fmt.Errorf("%s holder: %v\n%s", c.tool, err, out)
					return
				}
				errs <- nil
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Fields(string(b))
	if len(parts) != 2 || parts[0] != strconv.Itoa(holders*perHolder) {
		t.Fatalf("counter file %q after %d holders x %d increments (%d languages)", b, holders, perHolder, langs)
	}
	t.Logf("%d holders in %d languages on %d servers (%d in-process on the store): %d increments, exact", holders, langs, len(servers), 2*len(direct), holders*perHolder)
}

// TestLockKilledClientFreesAfterTTL: a Python or Node holder killed with
// SIGKILL keeps the key until its TTL passes without a renewal; then a
// waiter gets it with a larger fence.
func TestLockKilledClientFreesAfterTTL(t *testing.T) {
	t.Parallel()
	srv := startLockServer(t)
	for _, lang := range []string{"python", "node"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			h := startHolder(t, srv, lang, "killed-"+lang, 3*time.Second)
			if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			h.cmd.Wait()
			killed := time.Now()
			c := lockHTTP{srv}
			// Dead, but within its TTL: still held.
			if info := c.inspect(t, "killed-"+lang); !info.Held || len(info.Holders) != 1 || info.Holders[0].Fence != h.fence {
				t.Fatalf("right after the kill: %+v, want held at fence %d", info, h.fence)
			}
			l, status, err := c.acquire("holders", "killed-"+lang, 5000, 30000)
			if err != nil || status != http.StatusCreated {
				t.Fatalf("waiter: %d %v", status, err)
			}
			if l.Fence <= h.fence {
				t.Fatalf("fence %d after the killed holder's %d", l.Fence, h.fence)
			}
			t.Logf("the key of the killed %s holder (TTL 3s) went to the waiter %v after the kill", lang, time.Since(killed).Round(100*time.Millisecond))
			c.release(l.LeaseID)
		})
	}
}

// TestLockKilledServerFreesAfterTTL: two servers share a database
// (--lock-store db); the one that granted a lease is killed with SIGKILL;
// the other's waiter gets the key once the store's lease runs out, with a
// larger fence.
func TestLockKilledServerFreesAfterTTL(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a := startLockServerIn(t, data, "db")
	b := startLockServerIn(t, data, "db")
	l, status, err := lockHTTP{a}.acquire("holders", "server-dies", 3000, 0)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("acquire on a: %d %v", status, err)
	}
	if _, status, err := (lockHTTP{b}).acquire("holders", "server-dies", 3000, 0); err != nil || status != http.StatusLocked {
		t.Fatalf("b while a holds: %d %v, want 423", status, err)
	}
	a.proc.signal(syscall.SIGKILL)
	a.proc.wait(30 * time.Second)
	l2, status, err := lockHTTP{b}.acquire("holders", "server-dies", 3000, 30000)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("waiter on b: %d %v", status, err)
	}
	if l2.Fence <= l.Fence {
		t.Fatalf("fence %d after the dead server's %d", l2.Fence, l.Fence)
	}
	lockHTTP{b}.release(l2.LeaseID)
}

// TestLockLostLeaseSeenByHolder: a holder stopped (SIGSTOP) past its TTL
// loses the key to another holder; once continued it reports the loss.
func TestLockLostLeaseSeenByHolder(t *testing.T) {
	t.Parallel()
	srv := startLockServer(t)
	for _, lang := range []string{"python", "node"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			key := "paused-" + lang
			h := startHolder(t, srv, lang, key, 1500*time.Millisecond)
			if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			c := lockHTTP{srv}
			l, status, err := c.acquire("holders", key, 30000, 30000)
			if err != nil || status != http.StatusCreated {
				h.cmd.Process.Signal(syscall.SIGCONT)
				t.Fatalf("second holder: %d %v", status, err)
			}
			if l.Fence <= h.fence {
				t.Fatalf("fence %d after the paused holder's %d", l.Fence, h.fence)
			}
			if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			select {
			case line := <-h.lines:
				if !strings.HasPrefix(line, "lost") {
					t.Fatalf("the paused holder said %q, want lost", line)
				}
				t.Logf("the %s holder, continued: %q", lang, line)
			case <-time.After(30 * time.Second):
				t.Fatal("the paused holder never reported its lease lost")
			}
			c.release(l.LeaseID)
		})
	}
}

// holderProc is a Python or Node process holding a key (tests/holder.py,
// tools/holder.js "hold").
type holderProc struct {
	cmd   *exec.Cmd
	fence int64
	lines chan string // what it prints after "held"
}

func startHolder(t *testing.T, srv *lockServer, lang, key string, ttl time.Duration) *holderProc {
	t.Helper()
	var cmd *exec.Cmd
	switch lang {
	case "python":
		cmd = exec.Command(needTool(t, "python3"), "-m", "tests.holder", "hold", "holders", key, strconv.FormatFloat(ttl.Seconds(), 'f', -1, 64))
		cmd.Dir = clientDir(t, "python")
	case "node":
		cmd = exec.Command(needTool(t, "node"), "tools/holder.js", "hold", "holders", key, strconv.FormatInt(ttl.Milliseconds(), 10))
		cmd.Dir = clientDir(t, "typescript")
	}
	cmd.Env = srv.env()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s holder's stderr:\n%s", lang, stderr.String())
		}
	})
	h := &holderProc{cmd: cmd, lines: make(chan string, 8)}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			if n == 0 {
				first <- sc.Text()
			} else {
				h.lines <- sc.Text()
			}
			n++
		}
		if n == 0 {
			close(first)
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-first:
		f := strings.Fields(line)
		if !ok || len(f) != 2 || f[0] != "held" {
			t.Fatalf("%s holder said %q, want held FENCE\n%s", lang, line, stderr.String())
		}
		if h.fence, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s holder did not take the key\n%s", lang, stderr.String())
	}
	return h
}

// lockHTTP is the Go holder: the lock API over net/http, as a client in
// any language would speak it.
type lockHTTP struct{ srv *lockServer }

type httpLease struct {
	LeaseID string `json:"lease_id"`
	Fence   int64  `json:"fence"`
}

type httpInfo struct {
	Held    bool `json:"held"`
	Holders []struct {
		Fence int64 `json:"fence"`
	} `json:"holders"`
}

// lockRequests numbers the Go holder's acquires, for their request ids.
var lockRequests atomic.Int64

func (c lockHTTP) client() *client {
	return &client{base: c.srv.url, token: c.srv.token, http: &http.Client{Timeout: 2 * time.Minute}}
}

// acquire takes the key, waiting up to waitMs; status 201 means held.
func (c lockHTTP) acquire(name, key string, ttlMs, waitMs int) (httpLease, int, error) {
	var l httpLease
	resp, err := c.client().do(context.Background(), http.MethodPost, "/v1/locks/acquire", map[string]any{
		"request_id": fmt.Sprintf("go-%d-%d", os.Getpid(), lockRequests.Add(1)),
		"name":       name, "key": key, "ttl_ms": ttlMs, "wait_ms": waitMs,
	}, &l)
	if err != nil {
		return l, 0, err
	}
	return l, resp.StatusCode, nil
}

func (c lockHTTP) renew(id string) (int, error) {
	resp, err := c.client().do(context.Background(), http.MethodPost, "/v1/locks/renew", map[string]any{"lease_id": id}, nil)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

func (c lockHTTP) release(id string) (int, error) {
	resp, err := c.client().do(context.Background(), http.MethodPost, "/v1/locks/release", map[string]any{"lease_id": id}, nil)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

func (c lockHTTP) inspect(t *testing.T, key string) httpInfo {
	t.Helper()
	var info httpInfo
	q := url.Values{"name": {"holders"}, "key": {key}}
	if _, err := c.client().do(context.Background(), http.MethodGet, "/v1/locks/inspect?"+q.Encode(), nil, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// goCounter increments the counter file n times under the lock, renewing
// each lease every ttl/3 while it works, as the other clients do.
func goCounter(srv *lockServer, name, key, path string, n int) error {
	c := lockHTTP{srv}
	for range n {
		l, status, err := c.acquire(name, key, 10000, 60000)
		for err == nil && status == http.StatusLocked {
			l, status, err = c.acquire(name, key, 10000, 60000)
		}
		if err != nil || status != http.StatusCreated {
			return fmt.Errorf("go acquire: %d %v", status, err)
		}
		stop := make(chan struct{})
		renewed := make(chan error, 1)
		go func() {
			tick := time.NewTicker(10 * time.Second / 3)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					renewed <- nil
					return
				case <-tick.C:
					if st, err := c.renew(l.LeaseID); err != nil || st != http.StatusOK {
						renewed <- fmt.Errorf("go renew: %d %v", st, err)
						return
					}
				}
			}
		}()
		werr := incrementFile(path, l.Fence)
		close(stop)
		if err := <-renewed; err != nil {
			return err
		}
		if werr != nil {
			return werr
		}
		if st, err := c.release(l.LeaseID); err != nil || st != http.StatusOK {
			return fmt.Errorf("go release: %d %v", st, err)
		}
	}
	return nil
}

// incrementFile reads "count fence", checks fence grows, writes count+1.
func incrementFile(path string, fence int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var count, last int64
	if _, err := fmt.Sscan(string(b), &count, &last); err != nil {
		return fmt.Errorf("counter file %q: %w", b, err)
	}
	if fence <= last {
		return fmt.Errorf("fence %d after %d", fence, last)
	}
	time.Sleep(time.Millisecond) // widen the window a lost update needs
	return os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", count+1, fence), 0o600)
}

// TestLockShutdown: on SIGTERM a waiting acquire answers 503 at once
// instead of holding the shutdown up for its wait, a held lease ends, and
// the server exits 0.
func TestLockShutdown(t *testing.T) {
	t.Parallel()
	srv := startLockServer(t)
	c := lockHTTP{srv}
	if _, status, err := c.acquire("holders", "shutdown", 30000, 0); err != nil || status != http.StatusCreated {
		t.Fatalf("acquire: %d %v", status, err)
	}
	waiter := make(chan int, 1)
	go func() {
		_, status, err := c.acquire("holders", "shutdown", 30000, 60000)
		if err != nil {
			t.Logf("waiter: %v", err)
		}
		waiter <- status
	}()
	for c.inspectWaiters(t, "shutdown") == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	srv.proc.signal(syscall.SIGTERM)
	sent := time.Now()
	select {
	case status := <-waiter:
		if status != http.StatusServiceUnavailable {
			t.Fatalf("waiting acquire on shutdown: %d, want 503", status)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting acquire was not answered on shutdown")
	}
	answered := time.Since(sent)
	if code := srv.proc.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	t.Logf("after SIGTERM: the waiter answered in %v, the process exited in %v", answered.Round(time.Millisecond), time.Since(sent).Round(time.Millisecond))
}

func (c lockHTTP) inspectWaiters(t *testing.T, key string) int {
	t.Helper()
	var info struct {
		Waiters int `json:"waiters"`
	}
	q := url.Values{"name": {"holders"}, "key": {key}}
	if _, err := c.client().do(context.Background(), http.MethodGet, "/v1/locks/inspect?"+q.Encode(), nil, &info); err != nil {
		t.Fatal(err)
	}
	return info.Waiters
}
