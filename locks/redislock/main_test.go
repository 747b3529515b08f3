package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"studio/internal/testskip"
)

// The tests need a Redis: the one STUDIO_TEST_REDIS_URL names, else the
// one development and CI machines run at 127.0.0.1:6379, else a
// redis-server (Debian's package) started on a free port. With none of
// them the tests skip, saying so; under STUDIO_TEST_REDIS=1 (CI sets it)
// they fail instead.
const (
	envURL      = "STUDIO_TEST_REDIS_URL"
	envRequired = "STUDIO_TEST_REDIS"
	defaultURL  = "redis://127.0.0.1:6379/0"
)

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
	started    *redisServer // the server testURL started, if it did
)

func TestMain(m *testing.M) {
	code := m.Run()
	if started != nil {
		started.kill()
	}
	os.Exit(code)
}

func testURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if u := os.Getenv(envURL); u != "" {
			serverURL = u
			return
		}
		if answers(defaultURL) {
			serverURL = defaultURL
			return
		}
		// Shared by every test; TestMain kills it at the end.
		started, serverErr = startRedis()
		if serverErr == nil {
			serverURL = started.url
		}
	})
	if serverURL == "" {
		testskip.Redis.Announce()
		msg := fmt.Sprintf("the Redis tests need a Redis: set %s, run one at 127.0.0.1:6379 or put redis-server on PATH (%v)", envURL, serverErr)
		if os.Getenv(envRequired) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return serverURL
}

// answers reports whether a Redis answers PING at url within a second.
func answers(url string) bool {
	o, err := redis.ParseURL(url)
	if err != nil {
		return false
	}
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}

// redisServer is a redis-server this test binary started, without
// persistence, as the machines' own runs.
type redisServer struct {
	port int
	url  string
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a free port and waits until it
// answers.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{port: port, url: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	return r, r.start(bin)
}

// start runs the server (again, after a kill) on its port.
func (r *redisServer) start(bin string) error {
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		return err
	}
	for range 500 {
		if answers(r.url) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	return fmt.Errorf("redis-server on port %d did not answer within 5 s", r.port)
}

// kill ends the server with SIGKILL: without persistence its data is
// gone.
func (r *redisServer) kill() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// ownRedis starts a redis-server of the test's own (to kill and restart),
// skipping without the program (failing under STUDIO_TEST_REDIS=1).
func ownRedis(t *testing.T) *redisServer {
	t.Helper()
	r, err := startRedis()
	if err != nil {
		msg := fmt.Sprintf("this test kills and restarts a redis-server of its own: %v", err)
		if os.Getenv(envRequired) == "1" {
			t.Fatal(msg)
		}
		testskip.Redis.Announce()
		t.Skip(msg)
	}
	t.Cleanup(r.kill)
	return r
}

// testPrefix is a key prefix of the test's own; its keys are deleted when
// the test ends.
func testPrefix(t testing.TB, url string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "studio-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		o, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		c := redis.NewClient(o)
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}

// openStore opens a store on url under prefix, closed when the test ends.
func openStore(t testing.TB, url, prefix string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, append([]Option{WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// listeningWithin waits until s's pub/sub subscription is confirmed.
func listeningWithin(s *Store, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.subs.listens.Load() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
