package pglock

import (
	"context"
	"encoding/hex"
	"strings"
	"time"

	"studio/locks/pglock/pglisten"
)

// ttlRoundUp rounds a lease length up to whole microseconds, what
// timestamptz keeps: a lease never ends before its holder expects.
func ttlRoundUp(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// encodePayload is a release's NOTIFY payload: "l" (lock) or "s" (slot),
// a space, the key in hex (a payload is text without NUL, a key may hold
// one), a space, the schema. At most 4 bytes a character of 500: well
// within NOTIFY's 8000 bytes.
func encodePayload(slot bool, key, schema string) string {
	kind := "l "
	if slot {
		kind = "s "
	}
	return kind + hex.EncodeToString([]byte(key)) + " " + schema
}

// decodePayload reverses encodePayload.
func decodePayload(p string) (slot bool, key, schema string, ok bool) {
	kind, rest, ok1 := strings.Cut(p, " ")
	hexKey, schema, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || (kind != "l" && kind != "s") {
		return false, "", "", false
	}
	k, err := hex.DecodeString(hexKey)
	if err != nil {
		return false, "", "", false
	}
	return kind == "s", string(k), schema, true
}

// Subscribe implements locks.Notifier: released is called for every
// release in this store's schema, by any process, while this store's
// listening connection is up. The connection opens at the first Subscribe,
// reconnects after a failure (releases in between are missed, which the
// engine's polling covers) and closes when the last subscriber stops; stop
// returns once it is closed. With WithoutNotify nothing is called.
func (s *Store) Subscribe(released func(slot bool, key string)) (stop func()) {
	if !s.notify {
		return func() {}
	}
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	if s.subs.fns == nil {
		s.subs.fns = make(map[int]func(bool, string))
	}
	id := s.subs.next
	s.subs.next++
	s.subs.fns[id] = released
	if s.subs.cancel == nil {
		ctx, cancel := context.WithCancel(s.listenCtx)
		done := make(chan struct{})
		s.subs.cancel, s.subs.done = cancel, done
		s.listening.Add(1)
		go func() {
			defer close(done)
			s.listen(ctx)
		}()
	}
	return func() {
		s.subs.mu.Lock()
		delete(s.subs.fns, id)
		var done chan struct{}
		if len(s.subs.fns) == 0 && s.subs.cancel != nil {
			s.subs.cancel()
			done = s.subs.done
			s.subs.cancel, s.subs.done = nil, nil
		}
		s.subs.mu.Unlock()
		if done != nil {
			<-done
		}
	}
}

// listen keeps one connection LISTENing on Channel until Close, passing
// every release of this schema to the subscribers.
func (s *Store) listen(ctx context.Context) {
	defer s.listening.Done()
	pglisten.Run(ctx, s.pool.Config().ConnConfig, Channel, func(uint32) { s.subs.listens.Add(1) }, func(payload string) {
		slot, key, schema, ok := decodePayload(payload)
		if !ok || schema != s.schema {
			return
		}
		s.subs.mu.Lock()
		for _, fn := range s.subs.fns {
			fn(slot, key)
		}
		s.subs.mu.Unlock()
	})
}
