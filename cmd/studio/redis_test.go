package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"studio/internal/testskip"
	"studio/locks"
	"studio/store"
)

// testRedisURL is the Redis of the tests of the Redis lock store: the one
// STUDIO_TEST_REDIS_URL names, else the one development and CI machines
// run at 127.0.0.1:6379; "" when none answers, which fails the test under
// STUDIO_TEST_REDIS=1 (CI sets it).
func testRedisURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("STUDIO_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	o, err := redis.ParseURL(u)
	if err == nil {
		c := redis.NewClient(o)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = c.Ping(ctx).Err()
	}
	if err != nil {
		if os.Getenv("STUDIO_TEST_REDIS") == "1" {
			t.Fatalf("STUDIO_TEST_REDIS=1 but no Redis answers at %s: %v", u, err)
		}
		testskip.Redis.Announce()
		t.Logf("no Redis answers at %s (%v): the Redis parts of this test do not run", u, err)
		return ""
	}
	return u
}

// ownRedisServer starts a redis-server of the test's own on a free port,
// without persistence, killed when the test ends; "" (and a log line)
// when redis-server is not installed, which fails the test under
// STUDIO_TEST_REDIS=1.
func ownRedisServer(t *testing.T) (url string, kill, restart func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("STUDIO_TEST_REDIS") == "1" {
			t.Fatal("STUDIO_TEST_REDIS=1 but redis-server is not on PATH")
		}
		testskip.Redis.Announce()
		t.Skip("redis-server is not on PATH: this test kills and restarts a Redis of its own")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		o, _ := redis.ParseURL(url)
		c := redis.NewClient(o)
		defer c.Close()
		for range 500 {
			if c.Ping(context.Background()).Err() == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("redis-server on port %d did not answer", port)
	}
	kill = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	start()
	t.Cleanup(kill)
	return url, kill, start
}

// TestLockRedisOutageIs503: a server whose lock store is a Redis that dies
// answers acquires 503 with Retry-After (a dependency fault, not a 500);
// once Redis is back (empty: it had no persistence) the key is free again,
// with a larger fence than before.
func TestLockRedisOutageIs503(t *testing.T) {
	t.Parallel()
	url, kill, restart := ownRedisServer(t)
	srv := startLockServerIn(t, t.TempDir(), url)
	c := lockHTTP{srv}
	first, status, err := c.acquire("holders", "outage", 30000, 0)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("acquire: %d %v", status, err)
	}
	kill()
	acquire := func() (*http.Response, httpLease, error) {
		var l httpLease
		resp, err := c.client().do(context.Background(), http.MethodPost, "/v1/locks/acquire", map[string]any{
			"request_id": fmt.Sprintf("outage-%d", lockRequests.Add(1)), "name": "holders", "key": "outage-2", "ttl_ms": 30000,
		}, &l)
		return resp, l, err
	}
	resp, _, err := acquire()
	if err != nil && resp == nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire while Redis is down: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	restart()
	// The server's connections to the dead Redis fail once each before
	// new ones are made.
	for i := 0; ; i++ {
		resp, l, err := acquire()
		if err != nil && resp == nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusCreated {
			if l.Fence <= first.Fence {
				t.Fatalf("fence %d after Redis came back, not above %d", l.Fence, first.Fence)
			}
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || i == 50 {
			t.Fatalf("acquire after Redis came back: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisReply is an error answer of Redis, as go-redis returns it
// (redis.Error: an error with RedisError).
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestRedisFault: what the Redis lock store's errors become. The outage
// test above sees a refused connection, which the PostgreSQL classifier
// also reads as unreachable; Redis's own refusals (a replica, a server
// loading its data, out of memory) only redisFault reads.
func TestRedisFault(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		kind store.FaultKind // "" for none
	}{
		{fmt.Errorf("acquire lock: %w", redisReply("READONLY You can't write against a read only replica.")), store.FaultReadOnly},
		{redisReply("LOADING Redis is loading the dataset in memory"), store.FaultBusy},
		{redisReply("BUSY Redis is busy running a script."), store.FaultBusy},
		{redisReply("MASTERDOWN Link with MASTER is down"), store.FaultUnreachable},
		{redisReply("OOM command not allowed when used memory > 'maxmemory'."), store.FaultFull},
		{fmt.Errorf("acquire lock: %w", refused), store.FaultUnreachable},
		{redisReply("ERR Error running script"), ""},
		{fmt.Errorf("acquire lock: %w", context.Canceled), ""},
		{fmt.Errorf("acquire slot: %w", locks.ErrLimitConflict), ""},
		{fmt.Errorf("acquire lock: %w", locks.ErrFenceExhausted), ""},
	} {
		got := redisFault(c.err)
		var f *store.Fault
		isFault := errors.As(got, &f)
		switch {
		case c.kind == "" && (isFault || got != c.err):
			t.Errorf("%v: %v, want it unchanged", c.err, got)
		case c.kind != "" && (!isFault || f.Kind != c.kind || !errors.Is(got, c.err)):
			t.Errorf("%v: %v, want a %s fault wrapping it", c.err, got, c.kind)
		}
	}
	if redisFault(nil) != nil {
		t.Error("redisFault(nil) is not nil")
	}
}
