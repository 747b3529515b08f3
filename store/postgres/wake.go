package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"studio/locks/pglock/pglisten"
	"studio/wake"
)

// WakeChannel is the one NOTIFY channel of the stores' wake-ups. Every
// schema on a database shares it: a payload names its schema, and a
// listener passes on only its own schema's (as the lock store does).
const WakeChannel = "studio_wake"

// wakes is a store's side of the wake-ups between processes: what it
// sends with its commits and what its listener hears.
type wakes struct {
	hub *wake.Hub
	// origin names this store value in its payloads: its listener skips
	// its own, which it published in this process already.
	origin string
	// listens counts the LISTENs done (one per connection made); pid is
	// the listening connection's backend.
	listens atomic.Int64
	pid     atomic.Uint32
	// onListen, when set, is called after each LISTEN (tests).
	onListen func()
}

func newWakes() (*wakes, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &wakes{hub: wake.New(), origin: hex.EncodeToString(b[:])}, nil
}

// Wake returns the store's hub: every commit through this store publishes
// its wake-ups there once it is done, and those of every other process on
// the same schema arrive through LISTEN/NOTIFY (see listen).
func (s *Store) Wake() *wake.Hub { return s.wakes.hub }

// payload is the NOTIFY payload of events: the origin, the events
// (wake.Encode), the schema, separated by spaces (the schema last: it may
// hold spaces). "" when there are no events.
func (s *Store) payload(evs []wake.Event) string {
	if len(evs) == 0 {
		return ""
	}
	return s.wakes.origin + " " + wake.Encode(evs) + " " + s.schema
}

// notifySQL sends a payload when the transaction commits (an empty one sends
// nothing): PostgreSQL delivers a transaction's notifications only once
// it has committed, so a listener never reads before the rows are there.
const notifySQL = `SELECT pg_notify('` + WakeChannel + `', $1) WHERE $1 <> ''`

// notify sends the events' payload from the transaction tx.
func (s *Store) notify(ctx context.Context, tx pgx.Tx, evs []wake.Event) error {
	if len(evs) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, notifySQL, s.payload(evs))
	return err
}

// decodePayload reads a payload: its origin, schema and events.
func decodePayload(p string) (origin, schema string, evs []wake.Event, ok bool) {
	origin, rest, ok1 := strings.Cut(p, " ")
	list, schema, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return "", "", nil, false
	}
	evs, ok = wake.Decode(list)
	return origin, schema, evs, ok
}

// resync is what a listener publishes when its LISTEN is up again: what
// was sent while it was down is lost, so every subscriber looks once.
var resync = wake.Event{Kind: wake.All}

// listen is the hub's feed: one connection of its own LISTENing on
// WakeChannel, passing on the events of this schema from other store
// values (other processes), while anyone in this process listens on the
// hub. A lost connection is made again (with a backoff); the subscribers'
// polls cover the gap, and each new LISTEN wakes them once.
func (s *Store) listen(ctx context.Context) {
	w := s.wakes
	pglisten.Run(ctx, s.pool.Config().ConnConfig, WakeChannel, func(pid uint32) {
		w.pid.Store(pid)
		if w.listens.Add(1) > 1 {
			w.hub.Publish(resync)
		}
		if w.onListen != nil {
			w.onListen()
		}
	}, func(payload string) {
		origin, schema, evs, ok := decodePayload(payload)
		if ok && schema == s.schema && origin != w.origin {
			w.hub.Publish(evs...)
		}
	})
}
