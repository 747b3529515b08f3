package locks_test

import (
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

func TestMemoryStoreConformance(t *testing.T) {
	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		clock := lockstest.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		s := locks.NewMemoryStoreClock(clock.Now)
		return &lockstest.Fixture{
			Store: s,
			Clock: clock,
			// A restart forgets every lease; fences go on from the clock,
			// which moves on while the process restarts.
			Reopen: func(t *testing.T) locks.Store {
				clock.Advance(time.Second)
				s = locks.NewMemoryStoreClock(clock.Now)
				return s
			},
			SetFence: func(t *testing.T, v int64) { locks.SetMemoryFence(s, v) },
		}
	})
}
