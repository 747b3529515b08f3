package pglock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"studio/locks"
)

// The cross-process tests start this test binary again as a child
// process (TestHelperWaiter) that waits for keys the parent holds. They
// talk over the child's stdin and stdout, one line per step:
//
//	child  -> parent "ready"            the child listens for releases (or, without
//	                                    NOTIFY, has its engine)
//	parent -> child  "go <i>"           the parent holds "k": start waiting for it
//	child  -> parent "waiting <i>"      this engine has a waiter queued on "k"
//	child  -> parent "got <i> <unixns>" fn started, at this wall time
//	child  -> parent "err <i> <msg>"    the hold failed
const (
	helperEnv     = "PGLOCK_HELPER_URL" // the child's store URL; unset: not a child
	helperNotify  = "PGLOCK_HELPER_NOTIFY"
	helperPollEnv = "PGLOCK_HELPER_POLL" // the child's poll interval
)

// TestHelperWaiter is the child process of the cross-process tests; run
// directly it does nothing.
func TestHelperWaiter(t *testing.T) {
	url := os.Getenv(helperEnv)
	if url == "" {
		t.Skip("the child process of TestReleaseWakesOtherOSProcess and BenchmarkHandoffAcrossOSProcesses; not a test of its own")
	}
	var opts []Option
	if os.Getenv(helperNotify) != "1" {
		opts = append(opts, WithoutNotify())
	}
	ctx := context.Background()
	ls, err := Open(ctx, url, opts...)
	if err != nil {
		fmt.Printf("err 0 %v\n", err)
		return
	}
	defer ls.Close()
	lockOpts := []locks.Option{locks.Wait(30 * time.Second)}
	if d, err := time.ParseDuration(os.Getenv(helperPollEnv)); err == nil {
		lockOpts = append(lockOpts, locks.PollInterval(d, d))
	}
	e := locks.New(ls, lockOpts...)
	defer e.Close()
	// The engine subscribed; its listening connection comes up on its own
	// time, and a release before that is not heard (the engine's polling
	// covers it, but this child polls once an hour).
	if ls.notify && !listeningWithin(ls, time.Minute) {
		fmt.Println("err 0 the listening connection did not come up within a minute")
		return
	}
	fmt.Println("ready")
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
			time.Sleep(100 * time.Microsecond)
		}
		if err := <-done; err != nil {
			fmt.Printf("err %s %v\n", i, err)
		}
	}
}

// child is a running TestHelperWaiter.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(t testing.TB, url string, notify bool, poll time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWaiter$", "-test.count=1")
	n := "0"
	if notify {
		n = "1"
	}
	cmd.Env = append(os.Environ(), helperEnv+"="+url, helperNotify+"="+n)
	if poll > 0 {
		cmd.Env = append(cmd.Env, helperPollEnv+"="+poll.String())
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
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
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
func (c *child) expect(t testing.TB, prefix string) []string {
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

// handoffRound: the parent holds "k", tells the child to wait for it, and
// returns once the child waits (its line was empty, so it is in line only
// after the store refused it); it answers the time from its fn's return
// to the child's fn starting (one machine, one wall clock).
func handoffRound(t testing.TB, e *locks.Engine, c *child, i int) time.Duration {
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

// TestReleaseWakesOtherOSProcess: a waiter in another OS process, polling
// only once an hour, takes the key right after this process releases it,
// five times: the NOTIFY woke it (without it, its Wait of 30 s would run
// out and the child would report the error).
func TestReleaseWakesOtherOSProcess(t *testing.T) {
	t.Parallel()
	url := withSearchPath(t, testURL(t), testSchema(t))
	ls, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()
	c := startChild(t, url, true, time.Hour)
	for i := range 5 {
		handoffRound(t, e, c, i)
	}
}

// BenchmarkHandoffAcrossOSProcesses is BenchmarkHandoffAcrossProcesses with
// the waiter in a child OS process: one op is one handoff; reported, the
// median and 90th percentile from this process's release to the child's
// fn starting. "poll": no NOTIFY, the child polls at the default 5-50 ms;
// "notify": the release's NOTIFY wakes it.
func BenchmarkHandoffAcrossOSProcesses(b *testing.B) {
	for _, mode := range []string{"poll", "notify"} {
		b.Run(mode, func(b *testing.B) {
			url := withSearchPath(b, testURL(b), testSchema(b))
			var opts []Option
			if mode == "poll" {
				opts = append(opts, WithoutNotify())
			}
			ls, err := Open(context.Background(), url, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer ls.Close()
			e := locks.New(ls)
			defer e.Close()
			c := startChild(b, url, mode == "notify", 0)
			var samples []time.Duration
			i := 0
			for b.Loop() {
				samples = append(samples, handoffRound(b, e, c, i))
				i++
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "median-ns/handoff")
			b.ReportMetric(float64(samples[len(samples)*9/10].Nanoseconds()), "p90-ns/handoff")
		})
	}
}
