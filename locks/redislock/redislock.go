// Package redislock is a locks.Store on Redis: leases that every process
// using the same Redis (and key prefix) shares, and a release that wakes
// the waiters of other processes at once (pub/sub). It opens alone, from a
// URL (Open) or an existing go-redis client (New), and depends on nothing
// but package locks and github.com/redis/go-redis/v9.
//
//	ls, err := redislock.Open(ctx, "redis://127.0.0.1:6379/0")
//	if err != nil { ... }
//	defer ls.Close()
//	e := locks.New(ls)
//	defer e.Close()
//
// Every operation is one Lua script, run atomically by Redis: acquire,
// renew and release compare the owner; a semaphore's slots are a sorted
// set scored by expiry; fences come from one counter. Expiry is decided by
// the Redis server's clock (TIME, in microseconds), and each lease's keys
// carry a PEXPIRE that drops them once they have run out.
//
// # Fences and lost data
//
// A fence is drawn from one counter (INCR) that only grows, and is lifted
// to at least the Redis server's clock in microseconds (about 1.8e15 in
// 2026, below locks.MaxFence until the year 2255) and to one above the
// highest fence this Store has seen. A Redis without persistence (no RDB,
// no AOF), restarted, starts with no counter; a replica promoted in a
// failover may lack the last increments. Lifting to the clock keeps fences
// growing across both as long as the server's clock does not go back
// (after a failover: is not behind the old primary's) by more than the
// time since the last fence: every Lua call takes longer than a
// microsecond, so the counter never runs ahead of the clock. Lifting to
// the highest fence seen keeps this Store's fences growing even then, and
// is logged as a warning: it means the counter was behind, so fences of
// other processes, which have not seen that fence, may not be larger than
// it. The leases themselves are lost with the data: after a restart
// without persistence every key is free, and a failover can drop leases
// the replica had not received, so two holders may overlap; the fences
// still tell their writes apart.
//
// A Redis Cluster is not supported: the fence counter is one key, which
// every script touches.
package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix begins every Redis key and the pub/sub channel of a store
// opened without WithPrefix.
const DefaultPrefix = "studio:locks:"

// An Option tunes a store made by Open or New.
type Option func(*Store)

// WithPrefix makes the store keep its keys (and publish its releases)
// under prefix instead of DefaultPrefix: stores of different prefixes in
// one Redis do not see each other.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithoutNotify makes the store neither publish its releases nor
// subscribe to others': waiters in other processes then poll
// (locks.PollInterval). For comparisons.
func WithoutNotify() Option { return func(s *Store) { s.notify = false } }

// WithLogger sets where the store reports a fence counter found behind
// the fences it has seen (slog.Default when unset).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// Store is the locks.Store of a Redis server.
type Store struct {
	rdb    *redis.Client
	own    bool // Open made the client: Close closes it
	prefix string
	notify bool
	log    *slog.Logger

	// seen is the highest fence this store has handed out or inspected:
	// no fence it hands out is at or below it.
	seen atomic.Int64
	subs subscribers

	// clock replaces the Redis server's clock when set: tests stop it.
	// Keys then get no PEXPIRE (they would expire by the real clock).
	clock func() time.Time
}

// Open connects to the Redis at url (redis://[user:password@]host:port/db
// or rediss:// for TLS) and checks that it answers. Close closes the
// connection pool.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		// The parse error may quote the URL, password and all.
		return nil, errors.New("redislock: open: the URL does not parse as a Redis URL (redis://host:port/db)")
	}
	rdb := redis.NewClient(o)
	s, err := New(ctx, rdb, opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// New returns the lock store on rdb (a client of one server, or of a
// Sentinel-managed primary from redis.NewFailoverClient) and checks that
// it answers. Close leaves rdb open.
func New(ctx context.Context, rdb *redis.Client, opts ...Option) (*Store, error) {
	s := &Store{rdb: rdb, prefix: DefaultPrefix, notify: true}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	return s, nil
}

// Close stops the pub/sub connection and, if Open made the client, closes
// it. Calls in flight end with the client.
func (s *Store) Close() error {
	s.subs.closeAll()
	if s.own {
		if err := s.rdb.Close(); err != nil {
			return fmt.Errorf("redislock: close: %w", err)
		}
	}
	return nil
}

// Client returns the go-redis client the store runs on.
func (s *Store) Client() *redis.Client { return s.rdb }

// Channel is the pub/sub channel on which the store announces releases.
func (s *Store) Channel() string { return s.prefix + "released" }

// subscribers are the callbacks of Subscribe and the one pub/sub
// connection that feeds them.
type subscribers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(slot bool, key string)
	ps   *redis.PubSub // nil when no one listens
	done chan struct{} // closed when ps's reader has stopped
	// listens counts the subscriptions confirmed by the server (one per
	// connection, reconnections included); releases before the first are
	// not heard.
	listens atomic.Int64
}

// closeAll stops the pub/sub connection, if any, and forgets the
// subscribers.
func (u *subscribers) closeAll() {
	u.mu.Lock()
	ps, done := u.ps, u.done
	u.ps, u.done, u.fns = nil, nil, nil
	u.mu.Unlock()
	if ps != nil {
		ps.Close()
		<-done
	}
}
