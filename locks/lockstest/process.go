package lockstest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"studio/locks"
)

// Handoffs between OS processes. A store's test starts its own test binary
// again as a child process (StartWaiter) whose test function opens the
// store and calls ServeWaiter: the child then waits for keys the parent
// holds. They talk over the child's stdin and stdout, one line per step:
//
//	child  -> parent "ready"            the child's engine is up (and hears releases)
//	parent -> child  "go <i>"           the parent holds "k": start waiting for it
//	child  -> parent "waiting <i>"      the child's engine has a waiter queued on "k"
//	child  -> parent "got <i> <unixns>" fn started, at this wall time
//	child  -> parent "err <i> <msg>"    the hold failed (i 0: the child could not start)

// The child's settings, in its environment.
const (
	envWaiterNotify = "LOCKSTEST_WAITER_NOTIFY" // "1": its store hears releases
	envWaiterPoll   = "LOCKSTEST_WAITER_POLL"   // its engine's poll interval, if set
)

// Waiting is how a child started by StartWaiter waits: whether its store
// hears releases from other processes (a Notifier with notifications
// on), and its engine's poll interval (0: the default).
type Waiting struct {
	Notify bool
	Poll   time.Duration
}

// WaitingFromEnv answers, in the child, how it is to wait.
func WaitingFromEnv() Waiting {
	w := Waiting{Notify: os.Getenv(envWaiterNotify) == "1"}
	w.Poll, _ = time.ParseDuration(os.Getenv(envWaiterPoll))
	return w
}

// ServeWaiter is the child's side: an engine on s, as w says, whose holds
// wait up to 30 s. ready, if not nil, runs once the engine is up and
// answers whether it may start (a store that hears releases only once its
// subscription is confirmed says so). It returns when stdin ends.
func ServeWaiter(s locks.Store, w Waiting, ready func() error) {
	opts := []locks.Option{locks.Wait(30 * time.Second)}
	if w.Poll > 0 {
		opts = append(opts, locks.PollInterval(w.Poll, w.Poll))
	}
	e := locks.New(s, opts...)
	defer e.Close()
	if ready != nil {
		if err := ready(); err != nil {
			WaiterFailed(err)
			return
		}
	}
	fmt.Println("ready")
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		i, ok := strings.CutPrefix(in.Text(), "go ")
		if !ok {
			continue
		}
		done := make(chan error, 1)
		go func() {
			done <- e.Hold(ctx, "k", func(context.Context, *locks.Lease) error {
				fmt.Printf("got %s %d\n", i, time.Now().UnixNano())
				return nil
			})
		}()
		for len(done) == 0 { // until it waits, or it is done without waiting
			if info, err := e.Inspect(ctx, "k"); err == nil && info.Waiters == 1 {
				fmt.Printf("waiting %s\n", i)
				break
			}
			time.Sleep(100 * time.Microsecond) // polls a condition: nothing in another process can signal it
		}
		if err := <-done; err != nil {
			fmt.Printf("err %s %v\n", i, err)
		}
	}
}

// WaiterFailed tells the parent, from the child, that it could not start.
func WaiterFailed(err error) { fmt.Printf("err 0 %v\n", err) }

// Waiter is a child process serving ServeWaiter.
type Waiter struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// StartWaiter runs this test binary again with only the test named run,
// which calls ServeWaiter as w says, with env added to its environment
// (the store's own settings), and waits for it to be ready. The child
// ends with the test.
func StartWaiter(t testing.TB, run string, w Waiting, env ...string) *Waiter {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	notify := "0"
	if w.Notify {
		notify = "1"
	}
	cmd.Env = append(append(os.Environ(), env...), envWaiterNotify+"="+notify)
	if w.Poll > 0 {
		cmd.Env = append(cmd.Env, envWaiterPoll+"="+w.Poll.String())
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Waiter{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		c.in.Close()
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child process: %v", err)
		}
	})
	c.expect(t, "ready")
	return c
}

// expect reads the child's lines up to one that starts with prefix and
// returns its fields; an "err" line fails the test.
func (c *Waiter) expect(t testing.TB, prefix string) []string {
	t.Helper()
	for c.out.Scan() {
		f := strings.Fields(c.out.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "err" {
			t.Fatalf("child: %s", c.out.Text())
		}
		if f[0] == prefix {
			return f
		}
	}
	t.Fatalf("child ended before %q: %v", prefix, c.out.Err())
	return nil
}

// Handoff holds "k" on e, tells the child to wait for it, and returns once
// the child waits (its line was empty, so it is in line only after its
// store refused it); it answers the time from fn's return to the child's
// fn starting (one machine, one wall clock).
func (c *Waiter) Handoff(t testing.TB, e *locks.Engine, i int) time.Duration {
	t.Helper()
	var released time.Time
	err := e.Hold(context.Background(), "k", func(context.Context, *locks.Lease) error {
		if _, err := fmt.Fprintf(c.in, "go %d\n", i); err != nil {
			return err
		}
		c.expect(t, "waiting")
		released = time.Now()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f := c.expect(t, "got")
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, ns).Sub(released)
}
