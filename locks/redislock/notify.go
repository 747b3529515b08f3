package redislock

import (
	"context"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// encodePayload is a release's message: "l" (lock) or "s" (slot), a
// space, the key in hex (a key may hold any byte).
func encodePayload(slot bool, key string) string {
	kind := "l "
	if slot {
		kind = "s "
	}
	return kind + hex.EncodeToString([]byte(key))
}

// decodePayload reverses encodePayload.
func decodePayload(p string) (slot bool, key string, ok bool) {
	kind, hexKey, found := strings.Cut(p, " ")
	if !found || (kind != "l" && kind != "s") {
		return false, "", false
	}
	k, err := hex.DecodeString(hexKey)
	if err != nil {
		return false, "", false
	}
	return kind == "s", string(k), true
}

// Subscribe implements locks.Notifier: released is called for every
// release under this store's prefix, by any process, while its pub/sub
// connection is up. The connection opens at the first Subscribe; go-redis
// reconnects and subscribes again after a failure (releases in between
// are missed, which the engine's polling covers); it closes when the last
// subscriber stops, and stop returns once it has. With WithoutNotify
// nothing is called.
func (s *Store) Subscribe(released func(slot bool, key string)) (stop func()) {
	if !s.notify {
		return func() {}
	}
	u := &s.subs
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fns == nil {
		u.fns = make(map[int]func(bool, string))
	}
	id := u.next
	u.next++
	u.fns[id] = released
	if u.ps == nil {
		ps := s.rdb.Subscribe(context.Background(), s.Channel())
		done := make(chan struct{})
		u.ps, u.done = ps, done
		go func() {
			defer close(done)
			s.listen(ps)
		}()
	}
	return func() {
		u.mu.Lock()
		delete(u.fns, id)
		var (
			ps   *redis.PubSub
			done chan struct{}
		)
		if len(u.fns) == 0 && u.ps != nil {
			ps, done = u.ps, u.done
			u.ps, u.done = nil, nil
		}
		u.mu.Unlock()
		if ps != nil {
			ps.Close()
			<-done
		}
	}
}

// listen passes each release announced on the channel to the
// subscribers until ps is closed.
func (s *Store) listen(ps *redis.PubSub) {
	u := &s.subs
	for msg := range ps.ChannelWithSubscriptions() {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				u.listens.Add(1)
			}
		case *redis.Message:
			slot, key, ok := decodePayload(m.Payload)
			if !ok {
				continue
			}
			u.mu.Lock()
			for _, fn := range u.fns {
				fn(slot, key)
			}
			u.mu.Unlock()
		}
	}
}
