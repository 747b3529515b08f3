package leasequeue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"studio/leasequeue"
	"studio/wake"
)

// hourly is a poll that never comes within a test: what the runner does
// in time was woken.
const hourly = time.Hour

// wakingQueue is a queue whose items' parent is their name up to "/", and
// that tells of each claim on claimed.
type wakingQueue struct {
	*queue
	claimed chan int
}

func newWakingQueue() *wakingQueue {
	return &wakingQueue{queue: newQueue(0), claimed: make(chan int, 100)}
}

func (q *wakingQueue) Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]string, error) {
	out, err := q.queue.Claim(ctx, owner, limit, ttl)
	q.claimed <- len(out)
	return out, err
}

func (q *wakingQueue) Parent(item string) string { p, _, _ := strings.Cut(item, "/"); return p }

func (q *wakingQueue) add(items ...string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, items...)
}

// idle waits for a claim that finds nothing.
func (q *wakingQueue) idle(t *testing.T) {
	t.Helper()
	for n := range q.claimed {
		if n == 0 {
			return
		}
	}
}

func startWaking(t *testing.T, q *wakingQueue, hub *wake.Hub) *leasequeue.Runner[string] {
	t.Helper()
	r, err := leasequeue.New(leasequeue.Config{Options: leasequeue.Options{Owner: "test", Concurrency: 2, PollMin: hourly, PollMax: hourly,
		LeaseTTL: 3 * hourly, Wake: hub}, Leases: q, WakeOn: wake.Tasks}, leasequeue.Handler[string](q))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

// TestWakeClaims: a runner that polls once an hour claims new work as soon
// as its hub says there is some, and work due later when it is due; events
// of other kinds do not make it claim.
func TestWakeClaims(t *testing.T) {
	t.Parallel()
	hub := wake.New()
	defer hub.Close()
	q := newWakingQueue()
	ran := make(chan string, 10)
	q.run = func(_ context.Context, item string) { ran <- item }
	r := startWaking(t, q, hub)
	q.idle(t)
	q.add("b1/t1")
	hub.Publish(wake.Event{Kind: wake.Items, ID: "p"}, wake.Event{Kind: wake.Changed, ID: "b1"})
	hub.Publish(wake.Event{Kind: wake.Tasks, ID: "b1"})
	if got := <-ran; got != "b1/t1" {
		t.Fatalf("ran %q", got)
	}
	q.idle(t)
	q.add("b2/t1")
	hub.Publish(wake.Event{Kind: wake.Tasks, ID: "b2", At: time.Now().Add(20 * time.Millisecond)})
	if got := <-ran; got != "b2/t1" {
		t.Fatalf("ran %q", got)
	}
	if st := r.Stats(); st.Claims < 3 || st.Empty < 2 {
		t.Fatalf("stats %+v: want at least 3 claims, 2 of them empty", st)
	}
}

// TestWakeCancels: a cancel of a parent ends its items' contexts with
// ErrCanceled at once, and no other's; a cancel of any parent renews every
// lease at once, and the renewal's answer cancels.
func TestWakeCancels(t *testing.T) {
	t.Parallel()
	hub := wake.New()
	defer hub.Close()
	q := newWakingQueue()
	causes := make(chan string, 10)
	started := make(chan struct{}, 10)
	q.run = func(ctx context.Context, item string) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- item + ": " + context.Cause(ctx).Error()
	}
	renewed := make(chan []string, 10)
	q.renew = func(items []string) (lost, canceled []string, err error) {
		renewed <- items
		return nil, []string{"b2/t1"}, nil
	}
	q.add("b1/t1", "b2/t1")
	startWaking(t, q, hub)
	<-started
	<-started
	hub.Publish(wake.Event{Kind: wake.Cancel, ID: "b1"})
	if got := <-causes; got != "b1/t1: "+leasequeue.ErrCanceled.Error() {
		t.Fatalf("cancel of b1: %s", got)
	}
	hub.Publish(wake.Event{Kind: wake.Cancel})
	if items := <-renewed; len(items) != 1 || items[0] != "b2/t1" {
		t.Fatalf("renewed %v, want b2/t1", items)
	}
	if got := <-causes; got != "b2/t1: "+leasequeue.ErrCanceled.Error() {
		t.Fatalf("cancel of any: %s", got)
	}
}
