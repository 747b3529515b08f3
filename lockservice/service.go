package lockservice

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"studio/locks"
)

// Limits of what a client may ask for.
const (
	// MaxNameLen is the longest lock name, in characters of NameChars.
	MaxNameLen = 64
	// MaxKeyLen is the longest key, in Unicode characters. The engine key
	// also carries the actor and the name, and the engine allows 500.
	MaxKeyLen = 300
	// MinTTL and MaxTTL bound a lease's TTL. Below half a second an HTTP
	// round trip and a renewal every ttl/3 leave no margin.
	MinTTL = 500 * time.Millisecond
	MaxTTL = time.Hour
	// DefaultTTL is the TTL of an acquire that names none.
	DefaultTTL = 30 * time.Second
	// MaxWait bounds how long one acquire waits; a client that wants to
	// wait longer asks again.
	MaxWait = time.Minute
	// MaxLimit is the largest semaphore limit.
	MaxLimit = 10000
	// DefaultRetain is how long an ended lease is remembered, so that its
	// renewals and its request id's retries answer "ended" rather than
	// "unknown".
	DefaultRetain = 10 * time.Minute
	// MaxRetained bounds how many ended leases are remembered: past it the
	// oldest are forgotten before their Retain is up.
	MaxRetained = 100_000
	// DefaultMaxPerActor bounds the leases one actor holds or waits for
	// at once.
	DefaultMaxPerActor = 10_000
)

// States of a lease.
const (
	StateHeld     = "held"     // granted, and renewed within its TTL
	StateReleased = "released" // its holder released it
	StateExpired  = "expired"  // no renewal came within its TTL: the key was freed
	StateLost     = "lost"     // the engine lost it (the store refused a renewal) or the server closed
)

// keyPrefix starts every engine key the service makes, apart from the keys
// studio itself holds ("intent\x00", "upload\x00", "generator/").
const keyPrefix = "lockapi\x00"

// Request is what an acquire asks for.
type Request struct {
	Name  string        // the lock's name: 1..MaxNameLen of [A-Za-z0-9._:-]
	Key   string        // the key within the name: 1..MaxKeyLen characters of valid UTF-8
	Limit int           // 0 for a lock; 1..MaxLimit for a semaphore of that many holders
	TTL   time.Duration // MinTTL..MaxTTL
	Wait  time.Duration // 0..MaxWait; 0 tries once
}

// same reports whether two acquires ask for the same lease, for request id
// replays: Wait may differ (a retry has less time left).
func (r Request) same(o Request) bool {
	return r.Name == o.Name && r.Key == o.Key && r.Limit == o.Limit && r.TTL == o.TTL
}

// Lease is what the service tells a holder about its lease.
type Lease struct {
	ID        string // secret: only the holder knows it
	RequestID string
	Name      string
	Key       string
	Limit     int
	Fence     int64
	TTL       time.Duration
	Expires   time.Time // when the lease ends unless renewed before
	State     string
}

// Holder is one holder of a key as Inspect shows it: no owner, no lease id.
type Holder struct {
	Fence int64
	// Expires is when the lock store's lease ends unless the engine renews
	// it (by the store's clock): where the key frees if this server dies.
	Expires time.Time
}

// Info is what Inspect answers about a key.
type Info struct {
	Name    string
	Key     string
	Limit   int
	Held    bool
	Holders []Holder
	// Waiters counts the acquires waiting for the key in this server
	// (other servers' waiters are known to no one).
	Waiters int
}

// Errors. The HTTP layer maps each to a status.
var (
	// ErrNotFound: no lease with this id for this actor (never was, another
	// actor's, or ended long enough ago to be forgotten).
	ErrNotFound = errors.New("lockservice: no such lease")
	// ErrBusy: the key was not free within the wait.
	ErrBusy = errors.New("lockservice: key is held")
	// ErrConflict: the request id was used for another acquire.
	ErrConflict = errors.New("lockservice: request id belongs to another acquire")
	// ErrLimitConflict: the semaphore key is held under another limit.
	ErrLimitConflict = errors.New("lockservice: semaphore key held under another limit")
	// ErrTooMany: the actor holds or waits for MaxPerActor leases already.
	ErrTooMany = errors.New("lockservice: too many leases held or waited for")
	// ErrClosed: the service is closing.
	ErrClosed = errors.New("lockservice: closed")
)

// InvalidError names the field of a request that is out of bounds.
type InvalidError struct {
	Field   string
	Message string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("lockservice: %s %s", e.Field, e.Message)
}

// EndedError says a lease is no longer held: it was released, it expired
// (no renewal within its TTL) or it was lost.
type EndedError struct {
	State  string // StateReleased, StateExpired or StateLost
	Reason string // for people
	At     time.Time
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("lockservice: lease %s: %s", e.State, e.Reason)
}

// Event is what the service reports to Config.Observe: an acquire's
// outcome or a lease's end. Every value is one of a small fixed set.
type Event struct {
	// Acquire is set for the outcome of an acquire: "acquired",
	// "replayed", "busy", "conflict", "invalid", "error".
	Acquire string
	// Ended is set when a held lease ends: one of the States but held.
	Ended string
}

// Config holds a Service's dependencies.
type Config struct {
	// Engine holds the keys (required).
	Engine *locks.Engine
	// Retain is how long ended leases are remembered; DefaultRetain when 0.
	Retain time.Duration
	// Now is the clock Retain is counted by; time.Now when nil. (Leases'
	// TTLs run on the real clock: the engine's store keeps them.)
	Now func() time.Time
	// MaxPerActor bounds the leases one actor holds or waits for at once;
	// DefaultMaxPerActor when 0.
	MaxPerActor int
	// Observe, when set, receives every Event; quick and concurrency-safe.
	Observe func(Event)
}

// Service holds engine locks for remote clients. Every lease lives in a
// goroutine that runs the engine's Hold; its fn waits until the client
// releases, or lets its TTL pass without a renewal, or the engine loses the
// lease. The engine meanwhile renews the store's lease every ttl/3.
type Service struct {
	cfg    Config
	base   context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	leases    map[string]*lease // by lease id
	byRequest map[requestKey]*lease
	ended     []*lease       // in the order they ended, for forgetting
	active    map[string]int // actor -> leases held or waited for
	held      int            // leases in StateHeld
	closed    bool
	running   sync.WaitGroup
}

type requestKey struct{ actor, id string }

// lease is the server side of one acquire.
type lease struct {
	id, actor, requestID string
	req                  Request

	granted chan struct{} // closed once held, or once the acquire failed
	err     error         // why the acquire failed
	release chan struct{} // closed to end the hold
	done    chan struct{} // closed once the engine has given the key back
	cancel  context.CancelFunc

	state     string // "" while waiting
	fence     int64
	deadline  time.Time // the client's: renew before it
	reason    string
	endedAt   time.Time
	listeners int  // acquire calls waiting for the outcome
	abandoned bool // every caller went away before the grant
}

// New returns a service over cfg.Engine.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil {
		return nil, errors.New("new lock service: no engine")
	}
	if cfg.Retain <= 0 {
		cfg.Retain = DefaultRetain
	}
	if cfg.MaxPerActor <= 0 {
		cfg.MaxPerActor = DefaultMaxPerActor
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	base, cancel := context.WithCancel(context.Background())
	return &Service{
		cfg: cfg, base: base, cancel: cancel,
		leases:    make(map[string]*lease),
		byRequest: make(map[requestKey]*lease),
		active:    make(map[string]int),
	}, nil
}

// Scope is the engine lock name of actor's lock name: a prefix of its own,
// then actor and name each ended by a NUL (neither may contain one: actors
// have no control characters, names only letters, digits and . _ : -). The
// engine's named lock then makes the key of (scope, key) with the scope's
// length first (locks.KeyOf), so two different (actor, name, key) triples
// never make one engine key, and none makes a key studio itself holds.
func Scope(actor, name string) string {
	return keyPrefix + actor + "\x00" + name + "\x00"
}

// named is the engine's named lock (or semaphore) of actor's name.
func (s *Service) named(actor, name string, limit int) *locks.Lock {
	if limit == 0 {
		return s.cfg.Engine.Lock(Scope(actor, name))
	}
	return s.cfg.Engine.Semaphore(limit).Lock(Scope(actor, name))
}

// Check validates a request, filling in nothing; the errors name fields.
func (r Request) Check() error {
	if err := checkName(r.Name); err != nil {
		return err
	}
	if err := checkKey(r.Key); err != nil {
		return err
	}
	switch {
	case r.Limit < 0 || r.Limit > MaxLimit:
		return &InvalidError{"limit", fmt.Sprintf("must be 0 (a lock) or 1..%d (a semaphore)", MaxLimit)}
	case r.TTL < MinTTL || r.TTL > MaxTTL:
		return &InvalidError{"ttl_ms", fmt.Sprintf("must be %d..%d", MinTTL.Milliseconds(), MaxTTL.Milliseconds())}
	case r.Wait < 0 || r.Wait > MaxWait:
		return &InvalidError{"wait_ms", fmt.Sprintf("must be 0..%d", MaxWait.Milliseconds())}
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return &InvalidError{"name", fmt.Sprintf("must be 1..%d characters", MaxNameLen)}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return &InvalidError{"name", "must contain only letters, digits and . _ : -"}
		}
	}
	return nil
}

func checkKey(key string) error {
	if !utf8.ValidString(key) {
		return &InvalidError{"key", "must be valid UTF-8"}
	}
	if n := utf8.RuneCountInString(key); n == 0 || n > MaxKeyLen {
		return &InvalidError{"key", fmt.Sprintf("must be 1..%d characters", MaxKeyLen)}
	}
	return nil
}

// Acquire takes the key for actor, waiting up to r.Wait, and answers the
// lease. requestID names the acquire: a retry with the same actor, request
// id and request (Wait aside) while the lease is held answers that lease
// again (replayed true) instead of taking a second one; while the first try
// still waits, the retry waits for its outcome. A retry after the lease
// ended answers an *EndedError; with another request, ErrConflict. An
// acquire that got nothing binds nothing: its retry asks again.
//
// If every caller waiting for an acquire goes away before the key is
// granted, the acquire is given up. A grant whose answer is lost stays held
// until its TTL passes without a renewal, unless a retry claims it.
func (s *Service) Acquire(ctx context.Context, actor, requestID string, r Request) (l Lease, replayed bool, err error) {
	defer func() { s.observeAcquire(replayed, err) }()
	if err := r.Check(); err != nil {
		return Lease{}, false, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Lease{}, false, ErrClosed
	}
	s.forget(s.cfg.Now())
	rk := requestKey{actor, requestID}
	x := s.byRequest[rk]
	joined := x != nil
	switch {
	case x == nil && s.active[actor] >= s.cfg.MaxPerActor:
		s.mu.Unlock()
		return Lease{}, false, ErrTooMany
	case x == nil:
		id, err := newLeaseID()
		if err != nil {
			s.mu.Unlock()
			return Lease{}, false, err
		}
		hctx, cancel := context.WithCancel(s.base)
		x = &lease{
			id: id, actor: actor, requestID: requestID, req: r,
			granted: make(chan struct{}), release: make(chan struct{}),
			done: make(chan struct{}), cancel: cancel,
		}
		s.leases[id] = x
		s.byRequest[rk] = x
		s.active[actor]++
		s.running.Add(1)
		go s.hold(hctx, x)
	case !x.req.same(r):
		s.mu.Unlock()
		return Lease{}, false, ErrConflict
	case x.state == StateHeld:
		v := x.view()
		s.mu.Unlock()
		return v, true, nil
	case x.state != "":
		err := x.endedError()
		s.mu.Unlock()
		return Lease{}, false, err
	}
	x.listeners++
	s.mu.Unlock()

	select {
	case <-x.granted:
	case <-ctx.Done():
		s.mu.Lock()
		x.listeners--
		if x.listeners == 0 && x.state == "" {
			x.abandoned = true
			x.cancel()
		}
		s.mu.Unlock()
		return Lease{}, false, fmt.Errorf("acquire: %w", context.Cause(ctx))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x.listeners--
	if x.err != nil {
		return Lease{}, false, x.err
	}
	if x.state != StateHeld {
		return Lease{}, false, x.endedError()
	}
	return x.view(), joined, nil
}

// hold runs the engine's Hold for x until the client is done with it.
func (s *Service) hold(ctx context.Context, x *lease) {
	defer s.running.Done()
	fn := func(hctx context.Context, el *locks.Lease) error {
		s.mu.Lock()
		if x.abandoned || s.closed {
			s.mu.Unlock()
			return nil
		}
		x.state = StateHeld
		s.held++
		x.fence = el.Fence()
		x.deadline = time.Now().Add(x.req.TTL)
		close(x.granted)
		s.mu.Unlock()

		timer := time.NewTimer(x.req.TTL)
		defer timer.Stop()
		for {
			select {
			case <-x.release:
				return nil
			case <-timer.C:
				s.mu.Lock()
				d := time.Until(x.deadline)
				if d > 0 {
					s.mu.Unlock()
					timer.Reset(d)
					continue
				}
				s.expireLocked(x)
				s.mu.Unlock()
				return nil
			case <-hctx.Done():
				cause := context.Cause(hctx)
				s.mu.Lock()
				switch {
				case errors.Is(cause, locks.ErrLeaseLost):
					s.endLocked(x, StateLost, "the lock store no longer has it (it expired there before a renewal)")
				case errors.Is(cause, locks.ErrClosed) || s.closed:
					s.endLocked(x, StateLost, "the server is shutting down")
				default:
					s.endLocked(x, StateReleased, "given up")
				}
				s.mu.Unlock()
				return nil
			}
		}
	}
	err := s.named(x.actor, x.req.Name, x.req.Limit).Hold(ctx, x.req.Key, fn, locks.TTL(x.req.TTL), locks.Wait(x.req.Wait))
	s.mu.Lock()
	defer s.mu.Unlock()
	if x.state == "" { // never held
		switch {
		case errors.Is(err, locks.ErrTimeout):
			x.err = ErrBusy
		case errors.Is(err, locks.ErrClosed) || s.closed:
			x.err = ErrClosed
		case errors.Is(err, locks.ErrLimitConflict):
			x.err = ErrLimitConflict
		case x.abandoned:
			x.err = fmt.Errorf("acquire: %w", context.Canceled)
		case err != nil:
			x.err = fmt.Errorf("acquire %q: %w", x.req.Key, err)
		default:
			x.err = ErrClosed // fn returned before holding: closed or abandoned
		}
		close(x.granted)
		// An acquire that got nothing binds nothing.
		delete(s.leases, x.id)
		if s.byRequest[requestKey{x.actor, x.requestID}] == x {
			delete(s.byRequest, requestKey{x.actor, x.requestID})
		}
	} else if x.state == StateHeld {
		s.endLocked(x, StateLost, "the engine ended it")
	}
	if s.active[x.actor]--; s.active[x.actor] == 0 {
		delete(s.active, x.actor)
	}
	close(x.done)
	x.cancel()
}

// expireLocked ends x as expired: no renewal came within its TTL. s.mu
// is held.
func (s *Service) expireLocked(x *lease) {
	s.endLocked(x, StateExpired, fmt.Sprintf("no renewal came within its TTL of %v", x.req.TTL))
}

// endLocked records the end of a held lease. s.mu is held.
func (s *Service) endLocked(x *lease, state, reason string) {
	if x.state != StateHeld {
		return
	}
	x.state, x.reason, x.endedAt = state, reason, s.cfg.Now()
	s.held--
	s.ended = append(s.ended, x)
	if s.cfg.Observe != nil {
		s.cfg.Observe(Event{Ended: state})
	}
}

// forget drops leases that ended more than Retain ago. s.mu is held.
func (s *Service) forget(now time.Time) {
	n := 0
	for n < len(s.ended) && (now.Sub(s.ended[n].endedAt) > s.cfg.Retain || len(s.ended)-n > MaxRetained) {
		x := s.ended[n]
		delete(s.leases, x.id)
		if s.byRequest[requestKey{x.actor, x.requestID}] == x {
			delete(s.byRequest, requestKey{x.actor, x.requestID})
		}
		s.ended[n] = nil
		n++
	}
	if n > 0 {
		s.ended = s.ended[n:]
	}
}

// find returns actor's lease id. s.mu is held.
func (s *Service) find(actor, id string) (*lease, error) {
	x := s.leases[id]
	if x == nil || x.actor != actor || x.state == "" {
		return nil, ErrNotFound
	}
	return x, nil
}

// Renew extends actor's lease by its TTL from now. A lease that is no
// longer held answers an *EndedError, also when its TTL passed a moment ago
// and the server had not yet noticed: a renewal after expiry never revives
// a lease.
func (s *Service) Renew(ctx context.Context, actor, id string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(s.cfg.Now())
	x, err := s.find(actor, id)
	if err != nil {
		return Lease{}, err
	}
	now := time.Now()
	if x.state == StateHeld && !now.Before(x.deadline) {
		s.expireLocked(x)
		close(x.release)
	}
	if x.state != StateHeld {
		return Lease{}, x.endedError()
	}
	// Only ever later: the holder's timer, when it fires, finds the new
	// deadline and waits again.
	x.deadline = now.Add(x.req.TTL)
	return x.view(), nil
}

// Release ends actor's lease and returns once the engine has given the key
// back (or ctx ends). Releasing a released lease again answers it again; a
// lease that expired or was lost answers an *EndedError, so that the holder
// learns that its work was not protected to the end.
func (s *Service) Release(ctx context.Context, actor, id string) (Lease, error) {
	s.mu.Lock()
	x, err := s.find(actor, id)
	if err != nil {
		s.mu.Unlock()
		return Lease{}, err
	}
	if x.state == StateHeld {
		if time.Now().Before(x.deadline) {
			s.endLocked(x, StateReleased, "released by its holder")
		} else {
			s.expireLocked(x)
		}
		close(x.release)
	}
	v := x.view()
	var ended error
	if x.state != StateReleased {
		ended = x.endedError()
	}
	s.mu.Unlock()
	select {
	case <-x.done:
	case <-ctx.Done():
		return Lease{}, fmt.Errorf("release: %w", context.Cause(ctx))
	}
	if ended != nil {
		return Lease{}, ended
	}
	return v, nil
}

// Inspect answers what the lock store knows of actor's key (its holders'
// fences and store expiries, never lease ids) and the acquires waiting for
// it in this server. limit 0 inspects the lock; a positive one the
// semaphore key (the limit answered is the one its holders took it under).
func (s *Service) Inspect(ctx context.Context, actor, name, key string, limit int) (Info, error) {
	if err := checkName(name); err != nil {
		return Info{}, err
	}
	if err := checkKey(key); err != nil {
		return Info{}, err
	}
	if limit < 0 || limit > MaxLimit {
		return Info{}, &InvalidError{"limit", fmt.Sprintf("must be 0 (a lock) or 1..%d (a semaphore)", MaxLimit)}
	}
	ei, err := s.named(actor, name, limit).Inspect(ctx, key)
	if err != nil {
		return Info{}, fmt.Errorf("inspect: %w", err)
	}
	info := Info{Name: name, Key: key, Held: ei.Held, Waiters: ei.Waiters, Holders: make([]Holder, 0, len(ei.Holders))}
	if limit > 0 {
		info.Limit = ei.Limit
	}
	for _, h := range ei.Holders {
		info.Holders = append(info.Holders, Holder{Fence: h.Fence, Expires: h.Expires})
	}
	return info, nil
}

// Close ends every lease (their renewals answer "lost") and every waiting
// acquire (ErrClosed), and returns once the engine has given every key
// back. Later calls answer ErrClosed.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.running.Wait()
	return nil
}

// Held counts the leases held now, for a gauge.
func (s *Service) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (x *lease) view() Lease {
	state := x.state
	return Lease{
		ID: x.id, RequestID: x.requestID, Name: x.req.Name, Key: x.req.Key, Limit: x.req.Limit,
		Fence: x.fence, TTL: x.req.TTL, Expires: x.deadline, State: state,
	}
}

func (x *lease) endedError() error {
	return &EndedError{State: x.state, Reason: x.reason, At: x.endedAt}
}

func (s *Service) observeAcquire(replayed bool, err error) {
	if s.cfg.Observe == nil {
		return
	}
	var ie *InvalidError
	outcome := "acquired"
	switch {
	case err == nil && replayed:
		outcome = "replayed"
	case err == nil:
	case errors.Is(err, ErrBusy):
		outcome = "busy"
	case errors.Is(err, ErrConflict), errors.Is(err, ErrLimitConflict):
		outcome = "conflict"
	case errors.As(err, &ie):
		outcome = "invalid"
	default:
		outcome = "error"
	}
	s.cfg.Observe(Event{Acquire: outcome})
}

// newLeaseID returns 128 random bits, base64url: the holder's secret.
func newLeaseID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new lease id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
