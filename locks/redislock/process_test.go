package redislock

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

// The child's store: its URL (unset: not a child) and key prefix. See
// lockstest.StartWaiter.
const (
	helperEnv    = "REDISLOCK_HELPER_URL"
	helperPrefix = "REDISLOCK_HELPER_PREFIX"
)

// TestHelperWaiter is the child process of the cross-process tests; run
// directly it does nothing.
func TestHelperWaiter(t *testing.T) {
	url := os.Getenv(helperEnv)
	if url == "" {
		t.Skip("the child process of TestReleaseWakesOtherOSProcess and BenchmarkHandoffAcrossOSProcesses; not a test of its own")
	}
	w := lockstest.WaitingFromEnv()
	opts := []Option{WithPrefix(os.Getenv(helperPrefix))}
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
		// The engine subscribed; its subscription is confirmed on its own
		// time, and a release before that is not heard (the engine's
		// polling covers it, but this child may poll once an hour).
		if w.Notify && !listeningWithin(ls, time.Minute) {
			return errors.New("the subscription was not confirmed within a minute")
		}
		return nil
	})
}

// childEnv is the environment that points the child at url and prefix.
func childEnv(url, prefix string) []string {
	return []string{helperEnv + "=" + url, helperPrefix + "=" + prefix}
}

// TestReleaseWakesOtherOSProcess: a waiter in another OS process, polling
// only once an hour, takes the key right after this process releases it,
// five times: the published release woke it (without it, its Wait of 30 s
// would run out and the child would report the error).
func TestReleaseWakesOtherOSProcess(t *testing.T) {
	t.Parallel()
	url := testURL(t)
	prefix := testPrefix(t, url)
	ls, err := Open(t.Context(), url, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()
	c := lockstest.StartWaiter(t, "TestHelperWaiter", lockstest.Waiting{Notify: true, Poll: time.Hour}, childEnv(url, prefix)...)
	for i := range 5 {
		c.Handoff(t, e, i)
	}
}

// BenchmarkHandoffAcrossOSProcesses is BenchmarkHandoffAcrossProcesses with
// the waiter in a child OS process: one op is one handoff; reported, the
// median and 90th percentile from this process's release to the child's
// fn starting. "poll": no notifications, the child polls at the default
// 5-50 ms; "notify": the release's message wakes it.
func BenchmarkHandoffAcrossOSProcesses(b *testing.B) {
	for _, mode := range []string{"poll", "notify"} {
		b.Run(mode, func(b *testing.B) {
			url := testURL(b)
			prefix := testPrefix(b, url)
			opts := []Option{WithPrefix(prefix)}
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
			c := lockstest.StartWaiter(b, "TestHelperWaiter", lockstest.Waiting{Notify: mode == "notify"}, childEnv(url, prefix)...)
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
