package pglock

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

// helperEnv is the child's store URL (search_path included); unset: not a
// child. See lockstest.StartWaiter.
const helperEnv = "PGLOCK_HELPER_URL"

// TestHelperWaiter is the child process of the cross-process tests; run
// directly it does nothing.
func TestHelperWaiter(t *testing.T) {
	url := os.Getenv(helperEnv)
	if url == "" {
		t.Skip("the child process of TestReleaseWakesOtherOSProcess and BenchmarkHandoffAcrossOSProcesses; not a test of its own")
	}
	w := lockstest.WaitingFromEnv()
	var opts []Option
	if !w.Notify {
		opts = append(opts, WithoutNotify())
	}
	ls, err := Open(context.Background(), url, opts...)
	if err != nil {
		lockstest.WaiterFailed(err)
		return
	}
	defer ls.Close()
	lockstest.ServeWaiter(ls, w, func() error {
		// The engine subscribed; its listening connection comes up on its
		// own time, and a release before that is not heard (the engine's
		// polling covers it, but this child may poll once an hour).
		if w.Notify && !listeningWithin(ls, time.Minute) {
			return errors.New("the listening connection did not come up within a minute")
		}
		return nil
	})
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
	c := lockstest.StartWaiter(t, "TestHelperWaiter", lockstest.Waiting{Notify: true, Poll: time.Hour}, helperEnv+"="+url)
	for i := range 5 {
		c.Handoff(t, e, i)
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
			c := lockstest.StartWaiter(b, "TestHelperWaiter", lockstest.Waiting{Notify: mode == "notify"}, helperEnv+"="+url)
			var samples []time.Duration
			i := 0
			for b.Loop() {
				samples = append(samples, c.Handoff(b, e, i))
				i++
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "median-ns/handoff")
			b.ReportMetric(float64(samples[len(samples)*9/10].Nanoseconds()), "p90-ns/handoff")
		})
	}
}
