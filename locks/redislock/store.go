package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"studio/locks"
)

var (
	_ locks.Store    = (*Store)(nil)
	_ locks.Notifier = (*Store)(nil)
)

// The keys of one store, under its prefix:
//
//	<prefix>fence      the fence counter (a string holding an integer)
//	<prefix>l:<key>    a lock's lease: a hash of o (owner), f (fence),
//	                   e (expiry, microseconds of the store's clock)
//	<prefix>s:<key>    a semaphore's slots: a sorted set of owners scored
//	                   by expiry (microseconds)
//	<prefix>h:<key>    the same slots' fences: a hash of "o:"+owner to the
//	                   fence, and "limit" to the limit they were taken under
//
// Keys are binary-safe in Redis: a lock key goes in as it is.
func (s *Store) fenceKey() string           { return s.prefix + "fence" }
func (s *Store) lockKey(key string) string  { return s.prefix + "l:" + key }
func (s *Store) slotsKey(key string) string { return s.prefix + "s:" + key }
func (s *Store) slotHash(key string) string { return s.prefix + "h:" + key }

// prelude is the start of every script. ARGV[1] is the store's time in
// microseconds, or "" for the server's clock (TIME), which also turns on
// PEXPIRE. Numbers go back to Redis through fmt ("%d"): Lua's own
// conversion of a number to a string rounds past 14 digits.
const prelude = `
local MAX = 9007199254740991
local function s(n) return string.format('%d', n) end
local now, real
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now, real = tonumber(t[1]) * 1000000 + tonumber(t[2]), true
else
  now, real = tonumber(ARGV[1]), false
end
-- expire drops key once every lease in it has ended (by the server's
-- clock: only then do the two agree): ms rounded up.
local function expire(key, untilUs)
  if real then redis.call('PEXPIRE', key, math.ceil((untilUs - now) / 1000)) end
end
-- draw takes the next fence: one above the counter, the clock and floor
-- (the highest fence the calling store has seen). It answers nil past
-- MAX, and whether floor lifted it (the counter was behind).
local function draw(counter, floor)
  local cur = tonumber(redis.call('GET', counter) or '0')
  if cur >= MAX then return nil, 0 end
  local f = redis.call('INCR', counter)
  local lifted = 0
  if f < now then f = now end
  if f <= floor then f, lifted = floor + 1, 1 end
  if f > MAX then return nil, 0 end
  if f ~= cur + 1 then redis.call('SET', counter, s(f)) end
  return f, lifted
end
`

var (
	// KEYS: lease, counter. ARGV: now, owner, ttl (µs), floor.
	acquireScript = redis.NewScript(prelude + `
local e = redis.call('HGET', KEYS[1], 'e')
if e and tonumber(e) > now then return {0} end
local f, lifted = draw(KEYS[2], tonumber(ARGV[4]))
if not f then return {-1} end
local exp = now + tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'o', ARGV[2], 'f', s(f), 'e', s(exp))
expire(KEYS[1], exp)
return {1, f, lifted}
`)
	// KEYS: lease. ARGV: now, owner, ttl (µs).
	renewScript = redis.NewScript(prelude + `
local v = redis.call('HMGET', KEYS[1], 'o', 'e')
if v[1] ~= ARGV[2] or not v[2] or tonumber(v[2]) <= now then return 0 end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'e', s(exp))
expire(KEYS[1], exp)
return 1
`)
	// KEYS: lease. ARGV: now, owner, channel ("" for none), payload.
	releaseScript = redis.NewScript(prelude + `
local v = redis.call('HMGET', KEYS[1], 'o', 'e')
if v[1] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
if not v[2] or tonumber(v[2]) <= now then return 0 end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return 1
`)

	// slotsPrelude drops a semaphore's expired slots. KEYS[1] is the
	// sorted set, KEYS[2] the hash of fences.
	slotsPrelude = prelude + `
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now))
for _, o in ipairs(dead) do
  redis.call('ZREM', KEYS[1], o)
  redis.call('HDEL', KEYS[2], 'o:' .. o)
end
local function expireSlots()
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] then
    expire(KEYS[1], tonumber(top[2]))
    expire(KEYS[2], tonumber(top[2]))
  end
end
`
	// KEYS: slots, fences, counter. ARGV: now, owner, ttl (µs), floor,
	// limit. Answers {1, fence, lifted}, {0} when full, {-1} past
	// MaxFence, {-2, limit} when held under another limit.
	acquireSlotScript = redis.NewScript(slotsPrelude + `
local limit = tonumber(ARGV[5])
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then
  redis.call('DEL', KEYS[2])
else
  local held = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0')
  if held ~= 0 and held ~= limit then return {-2, held} end
end
if n >= limit then return {0} end
local f, lifted = draw(KEYS[3], tonumber(ARGV[4]))
if not f then return {-1} end
redis.call('ZADD', KEYS[1], s(now + tonumber(ARGV[3])), ARGV[2])
redis.call('HSET', KEYS[2], 'o:' .. ARGV[2], s(f), 'limit', s(limit))
expireSlots()
return {1, f, lifted}
`)
	// KEYS: slots, fences. ARGV: now, owner, ttl (µs).
	renewSlotScript = redis.NewScript(slotsPrelude + `
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', s(now + tonumber(ARGV[3])), ARGV[2])
expireSlots()
return 1
`)
	// KEYS: slots, fences. ARGV: now, owner, channel ("" for none),
	// payload. The prelude drops the owner's slot if it had expired: then
	// it is not found.
	releaseSlotScript = redis.NewScript(slotsPrelude + `
if redis.call('ZREM', KEYS[1], ARGV[2]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], 'o:' .. ARGV[2])
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return 1
`)

	// KEYS: lease. ARGV: now. Answers {now} or {now, fence, expiry}.
	inspectScript = redis.NewScript(prelude + `
local v = redis.call('HMGET', KEYS[1], 'f', 'e')
if not v[2] or tonumber(v[2]) <= now then return {now} end
return {now, tonumber(v[1]), tonumber(v[2])}
`)
	// KEYS: slots, fences. ARGV: now. Answers {now, limit, fence,
	// expiry, fence, expiry, ...} of the live slots.
	inspectSlotsScript = redis.NewScript(prelude + `
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. s(now), '+inf', 'WITHSCORES')
local out = {now, 0}
if #live > 0 then out[2] = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0') end
for i = 1, #live, 2 do
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[2], 'o:' .. live[i]) or '0')
  out[#out + 1] = tonumber(live[i + 1])
end
return out
`)
)

// now is the time argument of a script: "" for the server's clock.
func (s *Store) now() string {
	if s.clock != nil {
		return strconv.FormatInt(s.clock().UnixMicro(), 10)
	}
	return ""
}

// micros rounds a lease length up to whole microseconds, the store's
// unit: a lease never ends before its holder expects.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// sawFence raises the highest fence seen to f.
func (s *Store) sawFence(f int64) {
	for {
		cur := s.seen.Load()
		if f <= cur || s.seen.CompareAndSwap(cur, f) {
			return
		}
	}
}

// Acquire implements locks.Store.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	r, err := acquireScript.Run(ctx, s.rdb, []string{s.lockKey(key), s.fenceKey()},
		s.now(), owner, micros(ttl), s.seen.Load()).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("acquire lock: %w", err)
	}
	return s.granted("acquire lock", r)
}

// granted reads an acquisition's answer: {1, fence, lifted}, {0} (held),
// {-1} (past MaxFence).
func (s *Store) granted(op string, r []int64) (int64, bool, error) {
	switch {
	case len(r) == 3 && r[0] == 1:
		if r[2] == 1 {
			s.log.Warn("redislock: the fence counter was behind a fence this process has seen (Redis lost data, or its clock went back): fences lifted above it; other processes may hand out fences below it",
				"prefix", s.prefix, "fence", r[1])
		}
		s.sawFence(r[1])
		return r[1], true, nil
	case len(r) == 1 && r[0] == 0:
		return 0, false, nil
	case len(r) == 1 && r[0] == -1:
		return 0, false, fmt.Errorf("%s: %w", op, locks.ErrFenceExhausted)
	}
	return 0, false, fmt.Errorf("%s: unexpected answer %v", op, r)
}

// Renew implements locks.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.lockKey(key)}, s.now(), owner, micros(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("renew lock: %w", err)
	}
	return n == 1, nil
}

// Release implements locks.Store.
func (s *Store) Release(ctx context.Context, key, owner string) (bool, error) {
	channel, payload := s.announce(false, key)
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.lockKey(key)}, s.now(), owner, channel, payload).Int()
	if err != nil {
		return false, fmt.Errorf("release lock: %w", err)
	}
	return n == 1, nil
}

// AcquireSlot implements locks.Store.
func (s *Store) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	if err := locks.CheckLimit(limit); err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	r, err := acquireSlotScript.Run(ctx, s.rdb, []string{s.slotsKey(key), s.slotHash(key), s.fenceKey()},
		s.now(), owner, micros(ttl), s.seen.Load(), limit).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	if len(r) == 2 && r[0] == -2 {
		return 0, false, locks.LimitConflict(key, int(r[1]), limit)
	}
	return s.granted("acquire slot", r)
}

// RenewSlot implements locks.Store.
func (s *Store) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	n, err := renewSlotScript.Run(ctx, s.rdb, []string{s.slotsKey(key), s.slotHash(key)}, s.now(), owner, micros(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("renew slot: %w", err)
	}
	return n == 1, nil
}

// ReleaseSlot implements locks.Store.
func (s *Store) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	channel, payload := s.announce(true, key)
	n, err := releaseSlotScript.Run(ctx, s.rdb, []string{s.slotsKey(key), s.slotHash(key)}, s.now(), owner, channel, payload).Int()
	if err != nil {
		return false, fmt.Errorf("release slot: %w", err)
	}
	return n == 1, nil
}

// announce is the channel and payload a release publishes: none without
// notifications.
func (s *Store) announce(slot bool, key string) (channel, payload string) {
	if !s.notify {
		return "", ""
	}
	return s.Channel(), encodePayload(slot, key)
}

// Inspect implements locks.Store.
func (s *Store) Inspect(ctx context.Context, key string) (locks.KeyState, error) {
	r, err := inspectScript.Run(ctx, s.rdb, []string{s.lockKey(key)}, s.now()).Int64Slice()
	if err != nil {
		return locks.KeyState{}, fmt.Errorf("inspect lock: %w", err)
	}
	if len(r) != 1 && len(r) != 3 {
		return locks.KeyState{}, fmt.Errorf("inspect lock: unexpected answer %v", r)
	}
	st := locks.KeyState{Now: time.UnixMicro(r[0]).UTC()}
	if len(r) == 3 {
		st.Holders = []locks.Holder{s.holder(st.Now, r[1], r[2])}
	}
	return st, nil
}

// InspectSlots implements locks.Store.
func (s *Store) InspectSlots(ctx context.Context, key string) (locks.KeyState, error) {
	r, err := inspectSlotsScript.Run(ctx, s.rdb, []string{s.slotsKey(key), s.slotHash(key)}, s.now()).Int64Slice()
	if err != nil {
		return locks.KeyState{}, fmt.Errorf("inspect slots: %w", err)
	}
	if len(r) < 2 || len(r)%2 != 0 {
		return locks.KeyState{}, fmt.Errorf("inspect slots: unexpected answer %v", r)
	}
	st := locks.KeyState{Now: time.UnixMicro(r[0]).UTC(), Limit: int(r[1])}
	for i := 2; i < len(r); i += 2 {
		st.Holders = append(st.Holders, s.holder(st.Now, r[i], r[i+1]))
	}
	slices.SortFunc(st.Holders, func(a, b locks.Holder) int { return int(a.Fence - b.Fence) })
	return st, nil
}

func (s *Store) holder(now time.Time, fence, expires int64) locks.Holder {
	s.sawFence(fence)
	exp := time.UnixMicro(expires).UTC()
	return locks.Holder{Fence: fence, Expires: exp, Left: exp.Sub(now)}
}
