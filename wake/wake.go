// Package wake carries "something changed" from the commit that changed
// it to whoever waits for such changes in the same process: the workers
// (new or claimable tasks), the publisher (publication items), the events
// streams (a batch's tasks changed) and the running tasks of a batch asked
// to cancel.
//
// A Hub is one process's broadcast. A store publishes on it after each
// commit (Publish never blocks the committer: it marks what is pending and
// signals a channel of capacity one); a subscriber reads what arrived since
// it last looked (Sub.Take), so a burst of commits is one wake-up. Changes
// made by other processes reach the hub through a feed the store attaches
// (Hub.Feed): PostgreSQL's LISTEN/NOTIFY, SQLite's data_version poll.
//
// A wake-up is a hint, never the record: a woken reader reads the
// database like a polling one, and every reader still polls now and then,
// so a wake-up lost or spurious costs a delay or a read, never work or an
// event.
//
//	commit --Publish--> Hub --Sub.C / Take--> runner: claim now, renew now,
//	                     |                    or claim at Event.At
//	                     '--Watch(batch)-----> events stream: read now
//	other processes --feed (NOTIFY, data_version)--> Publish
package wake

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Kind says what changed; kinds combine as bits.
type Kind uint8

// The kinds of change.
const (
	// Tasks: tasks of the batch ID were created or became claimable
	// again (handed back, or queued for a retry after Event.At).
	Tasks Kind = 1 << iota
	// Items: items of the publication ID were created or became
	// claimable again.
	Items
	// Changed: tasks of the batch ID changed (state, attempts, asset,
	// error); its events streams read.
	Changed
	// Cancel: the batch ID was asked to cancel; its running tasks stop.
	Cancel
)

// All is every kind.
const All = Tasks | Items | Changed | Cancel

// Event is one change.
type Event struct {
	Kind Kind
	// ID names the batch (Tasks, Changed, Cancel) or the publication
	// (Items); "" means any: every waiter of the kind wakes.
	ID string
	// At, when set, is when the work becomes claimable (a retry's
	// backoff): the subscriber is due then, not now.
	At time.Time
}

// maxIDs bounds the ids a subscription keeps per kind between two Takes;
// past it the kind counts as "any".
const maxIDs = 256

// Hub is one process's broadcast of changes. The zero value is not
// usable: make one with New.
type Hub struct {
	active atomic.Int64 // subscriptions + watchers: Publish's fast path when 0

	mu      sync.Mutex
	subs    map[*Sub]struct{}
	watch   map[string]*watcher
	feeds   []func(ctx context.Context)
	started bool
	closed  bool

	ctx    context.Context // ends at Close; the feeds' context
	cancel context.CancelFunc
	feedWG sync.WaitGroup
}

// New returns a hub with no subscribers.
func New() *Hub {
	h := &Hub{subs: map[*Sub]struct{}{}, watch: map[string]*watcher{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// Feed adds a source of changes made elsewhere (another process): run is
// started in its own goroutine at the first Subscribe or Watch (or now,
// if there was one), publishes what it learns with Publish, and returns
// when its context ends, at Close.
func (h *Hub) Feed(run func(ctx context.Context)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.feeds = append(h.feeds, run)
	if h.started {
		h.startFeed(run)
	}
}

// startFeeds runs the feeds once somebody listens. h.mu is held.
func (h *Hub) startFeedsLocked() {
	if h.started || h.closed {
		return
	}
	h.started = true
	for _, f := range h.feeds {
		h.startFeed(f)
	}
}

func (h *Hub) startFeed(run func(ctx context.Context)) {
	h.feedWG.Add(1)
	go func() {
		defer h.feedWG.Done()
		run(h.ctx)
	}()
}

// Close stops the feeds and waits for them. Subscriptions stay usable but
// hear only what is published in this process.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.feedWG.Wait()
}

// Publish tells the subscribers and watchers of each event's kind. It
// never blocks on them: each subscription marks what is pending and gets
// one signal however many events come before it looks.
func (h *Hub) Publish(evs ...Event) {
	if h.active.Load() == 0 || len(evs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.add(evs) {
			select {
			case s.c <- struct{}{}:
			default:
			}
		}
	}
	if len(h.watch) == 0 {
		return
	}
	for _, ev := range evs {
		if ev.Kind&(Changed|Cancel) == 0 {
			continue
		}
		if ev.ID == "" {
			for id := range h.watch {
				h.wakeLocked(id)
			}
			continue
		}
		h.wakeLocked(ev.ID)
	}
}

// Subscribe returns a subscription to the events of the given kinds.
// Close it when done.
func (h *Hub) Subscribe(kinds Kind) *Sub {
	s := &Sub{h: h, kinds: kinds, c: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[s] = struct{}{}
	h.active.Add(1)
	h.startFeedsLocked()
	return s
}

// Sub is one subscription: C signals that something arrived, Take says
// what.
type Sub struct {
	h     *Hub
	kinds Kind
	c     chan struct{}
	once  sync.Once

	mu      sync.Mutex
	due     Kind // kinds of events due now
	ids     map[Kind]map[string]struct{}
	anyID   Kind      // kinds for which an event named no id, or too many
	next    time.Time // the earliest At of events not due yet
	nextFor Kind
}

// C receives a value when events arrived since the last Take (one value
// for any number of them).
func (s *Sub) C() <-chan struct{} { return s.c }

// add books the events of the subscription's kinds; it says whether any
// were. s.h.mu is held.
func (s *Sub) add(evs []Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := false
	for _, ev := range evs {
		k := ev.Kind & s.kinds
		if k == 0 {
			continue
		}
		got = true
		if !ev.At.IsZero() {
			if s.next.IsZero() || ev.At.Before(s.next) {
				s.next = ev.At
			}
			s.nextFor |= k
		} else {
			s.due |= k
		}
		for b := Kind(1); b != 0 && b <= k; b <<= 1 {
			if k&b == 0 || s.anyID&b != 0 {
				continue
			}
			if ev.ID == "" {
				s.anyID |= b
				delete(s.ids, b)
				continue
			}
			if s.ids == nil {
				s.ids = map[Kind]map[string]struct{}{}
			}
			m := s.ids[b]
			if m == nil {
				m = map[string]struct{}{}
				s.ids[b] = m
			}
			if len(m) >= maxIDs {
				s.anyID |= b
				delete(s.ids, b)
				continue
			}
			m[ev.ID] = struct{}{}
		}
	}
	return got
}

// Pending is what a Take found.
type Pending struct {
	// Due are the kinds of events due now.
	Due Kind
	// Next, when set, is the earliest time an event taken becomes due (a
	// retry's backoff): the subscriber looks again then.
	Next time.Time
	ids  map[Kind]map[string]struct{}
	any  Kind
}

// IDs answers the ids of the events of kind k taken, or all=true when one
// of them named any id (or there were too many to keep).
func (p Pending) IDs(k Kind) (ids []string, all bool) {
	if p.any&k != 0 {
		return nil, true
	}
	for id := range p.ids[k] {
		ids = append(ids, id)
	}
	return ids, false
}

// Take returns what arrived since the last Take and forgets it. Events
// whose At has come (by now) are due.
func (s *Sub) Take(now time.Time) Pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := Pending{Due: s.due, ids: s.ids, any: s.anyID}
	if !s.next.IsZero() {
		if s.next.After(now) {
			p.Next = s.next
		} else {
			p.Due |= s.nextFor
		}
	}
	s.due, s.ids, s.anyID, s.next, s.nextFor = 0, nil, 0, time.Time{}, 0
	return p
}

// Close ends the subscription; it may be called more than once.
func (s *Sub) Close() {
	s.once.Do(func() {
		s.h.mu.Lock()
		defer s.h.mu.Unlock()
		delete(s.h.subs, s)
		s.h.active.Add(-1)
	})
}

// watcher is the waiters of one id.
type watcher struct {
	ch chan struct{}
	n  int
}

// Watch returns a channel closed by the next Changed or Cancel event of
// id (or of any id), and the release to call once the caller no longer
// waits on it. A later Watch gets a new channel.
func (h *Hub) Watch(id string) (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.watch[id]
	if w == nil {
		w = &watcher{ch: make(chan struct{})}
		h.watch[id] = w
	}
	w.n++
	h.active.Add(1)
	h.startFeedsLocked()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.watch[id] != w {
				return // woken: Publish counted it out
			}
			w.n--
			h.active.Add(-1)
			if w.n == 0 {
				delete(h.watch, id)
			}
		})
	}
}

// wakeLocked wakes the waiters of one id. h.mu is held.
func (h *Hub) wakeLocked(id string) {
	if w := h.watch[id]; w != nil {
		close(w.ch)
		delete(h.watch, id)
		h.active.Add(-int64(w.n))
	}
}
