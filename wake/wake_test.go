package wake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func signaled(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestSubscribeKinds: a subscription hears the kinds it asked for and no
// other, and Take says which kinds and ids came.
func TestSubscribeKinds(t *testing.T) {
	t.Parallel()
	h := New()
	defer h.Close()
	tasks := h.Subscribe(Tasks | Cancel)
	defer tasks.Close()
	items := h.Subscribe(Items)
	defer items.Close()
	h.Publish(Event{Kind: Tasks, ID: "b1"}, Event{Kind: Changed | Cancel, ID: "b2"})
	if !signaled(tasks.C()) {
		t.Fatal("the tasks subscription was not signaled")
	}
	if signaled(items.C()) {
		t.Fatal("the items subscription was signaled by tasks and cancels")
	}
	p := tasks.Take(time.Now())
	if p.Due != Tasks|Cancel {
		t.Fatalf("due %b, want tasks|cancel", p.Due)
	}
	if ids, all := p.IDs(Cancel); all || !slices.Equal(ids, []string{"b2"}) {
		t.Fatalf("cancel ids %v all %v, want [b2]", ids, all)
	}
	if ids, all := p.IDs(Changed); all || len(ids) != 0 {
		t.Fatalf("changed ids %v all %v: not subscribed", ids, all)
	}
	if p := tasks.Take(time.Now()); p.Due != 0 || !p.Next.IsZero() {
		t.Fatalf("a second Take found %+v", p)
	}
}

// TestPublishCoalesces: a burst of events before the subscriber looks is
// one signal, and one Take has every id; a subscriber that never reads
// does not block the publisher.
func TestPublishCoalesces(t *testing.T) {
	t.Parallel()
	h := New()
	defer h.Close()
	s := h.Subscribe(Tasks)
	defer s.Close()
	deaf := h.Subscribe(Tasks) // never read
	defer deaf.Close()
	for i := range 1000 {
		h.Publish(Event{Kind: Tasks, ID: fmt.Sprint("b", i%10)})
	}
	if !signaled(s.C()) {
		t.Fatal("not signaled")
	}
	if signaled(s.C()) {
		t.Fatal("signaled twice for one burst")
	}
	ids, all := s.Take(time.Now()).IDs(Tasks)
	if all || len(ids) != 10 {
		t.Fatalf("ids %v all %v, want the 10 batches", ids, all)
	}
	// Too many ids to keep: any.
	for i := range maxIDs + 1 {
		h.Publish(Event{Kind: Tasks, ID: fmt.Sprint("x", i)})
	}
	if _, all := s.Take(time.Now()).IDs(Tasks); !all {
		t.Fatal("more than maxIDs ids did not turn into any")
	}
	h.Publish(Event{Kind: Tasks})
	if _, all := s.Take(time.Now()).IDs(Tasks); !all {
		t.Fatal("an event with no id did not mean any")
	}
}

// TestEventAt: an event due later is Next until its time, then due.
func TestEventAt(t *testing.T) {
	t.Parallel()
	h := New()
	defer h.Close()
	s := h.Subscribe(Tasks)
	defer s.Close()
	now := time.Unix(1000, 0)
	h.Publish(Event{Kind: Tasks, ID: "a", At: now.Add(2 * time.Second)}, Event{Kind: Tasks, ID: "b", At: now.Add(time.Second)})
	p := s.Take(now)
	if p.Due != 0 || !p.Next.Equal(now.Add(time.Second)) {
		t.Fatalf("before its time: due %b next %v, want nothing due, next in 1s", p.Due, p.Next)
	}
	h.Publish(Event{Kind: Tasks, ID: "a", At: now.Add(time.Second)})
	if p := s.Take(now.Add(time.Second)); p.Due != Tasks || !p.Next.IsZero() {
		t.Fatalf("at its time: due %b next %v, want tasks due", p.Due, p.Next)
	}
}

// TestWatch: a Changed or Cancel event closes the channels of its id's
// watchers and no other; an event with no id wakes every watcher; a later
// Watch gets a new channel; released watchers leave nothing behind.
func TestWatch(t *testing.T) {
	t.Parallel()
	h := New()
	defer h.Close()
	a1, ra1 := h.Watch("a")
	a2, ra2 := h.Watch("a")
	b, rb := h.Watch("b")
	h.Publish(Event{Kind: Tasks, ID: "a"})
	if signaled(a1) {
		t.Fatal("a Tasks event woke a watcher")
	}
	h.Publish(Event{Kind: Changed, ID: "a"}, Event{Kind: Changed, ID: "c"})
	if !signaled(a1) || !signaled(a2) {
		t.Fatal("watchers of a not woken")
	}
	if signaled(b) {
		t.Fatal("b woken by a's change")
	}
	a3, ra3 := h.Watch("a")
	if signaled(a3) {
		t.Fatal("a new watch is closed already")
	}
	h.Publish(Event{Kind: Cancel})
	if !signaled(a3) || !signaled(b) {
		t.Fatal("an event of any id did not wake every watcher")
	}
	for _, r := range []func(){ra1, ra2, ra3, rb, rb} {
		r()
	}
	_, r := h.Watch("d")
	r()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.watch) != 0 || h.active.Load() != 0 {
		t.Fatalf("left behind: %d ids, %d active", len(h.watch), h.active.Load())
	}
}

// TestRace: publishers, subscribers and watchers from many goroutines;
// the hub ends empty.
func TestRace(t *testing.T) {
	t.Parallel()
	h := New()
	defer h.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprint(i % 3)
				switch g % 3 {
				case 0:
					h.Publish(Event{Kind: All, ID: id})
				case 1:
					s := h.Subscribe(Tasks | Changed)
					h.Publish(Event{Kind: Tasks, ID: id})
					<-s.C()
					s.Take(time.Now())
					s.Close()
				default:
					_, r := h.Watch(id)
					r()
				}
			}
		})
	}
	wg.Wait()
	if n := h.active.Load(); n != 0 {
		t.Fatalf("%d subscriptions or watchers left", n)
	}
}

// TestFeed: a feed starts with the first listener, publishes into the
// hub, and ends at Close.
func TestFeed(t *testing.T) {
	t.Parallel()
	h := New()
	started := make(chan struct{})
	ended := make(chan struct{})
	h.Feed(func(ctx context.Context) {
		close(started)
		h.Publish(Event{Kind: Items, ID: "p"})
		<-ctx.Done()
		close(ended)
	})
	select {
	case <-started:
		t.Fatal("the feed started with nobody listening")
	default:
	}
	s := h.Subscribe(Items)
	<-started
	<-s.C()
	if ids, _ := s.Take(time.Now()).IDs(Items); !slices.Equal(ids, []string{"p"}) {
		t.Fatalf("ids %v, want the feed's [p]", ids)
	}
	s.Close()
	h.Close()
	<-ended
}

func TestCodec(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1765000000123)
	evs := []Event{{Kind: Tasks, ID: "0192-a", At: at}, {Kind: Changed | Cancel, ID: "0192-b"}, {Kind: Items}}
	s := Encode(evs)
	got, ok := Decode(s)
	want := []Event{{Kind: Tasks, ID: "0192-a", At: at}, {Kind: Changed, ID: "0192-b"}, {Kind: Cancel, ID: "0192-b"}, {Kind: Items}}
	if !ok || len(got) != len(want) {
		t.Fatalf("Decode(%q) = %v, %v", s, got, ok)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || got[i].ID != want[i].ID || !got[i].At.Equal(want[i].At) {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var many []Event
	for i := range 500 {
		many = append(many, Event{Kind: Changed, ID: fmt.Sprintf("01923456-7890-7abc-def0-%012d", i)}, Event{Kind: Tasks, ID: "z"})
	}
	s = Encode(many)
	if len(s) > MaxEncoded {
		t.Fatalf("encoded %d bytes, more than %d", len(s), MaxEncoded)
	}
	got, ok = Decode(s)
	if !ok || len(got) != 2 || got[0].ID != "" || got[1].ID != "" {
		t.Fatalf("a long list did not become its kinds with any id: %v", got)
	}
	for _, bad := range []string{",", "q1", "t1@x", "t a", "t1,"} {
		if _, ok := Decode(bad); ok {
			t.Fatalf("Decode(%q) accepted", bad)
		}
	}
}
