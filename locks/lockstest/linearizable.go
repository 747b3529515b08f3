package lockstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"studio/locks"
)

// The linearizability check: several clients call Acquire, Renew and
// Release (or their slot variants) on one key at once, every call is
// recorded with the interval it ran in, and porcupine searches for an order
// of the calls, each at one instant inside its interval, that a sequential
// lock (or semaphore) would have answered exactly so, with fences growing.
// TTLs are long and the clock still: expiry is tested elsewhere.

type opInput struct {
	op    string // "acquire", "renew" or "release"
	owner string
}

type opOutput struct {
	ok    bool
	fence int64
}

// lockState is the sequential lock: its holder ("" when free) and the last
// fence handed out.
type lockState struct {
	holder string
	fence  int64
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(lockState), input.(opInput), output.(opOutput)
		switch in.op {
		case "acquire":
			if s.holder != "" {
				return !out.ok, s
			}
			// A free key is always granted, with a larger fence.
			return out.ok && out.fence > s.fence, lockState{holder: in.owner, fence: out.fence}
		case "renew":
			return out.ok == (s.holder == in.owner), s
		case "release":
			if s.holder == in.owner {
				return out.ok, lockState{fence: s.fence}
			}
			return !out.ok, s
		}
		return false, s
	},
	DescribeOperation: describeOp,
}

// semState is the sequential semaphore: its holders, sorted and joined by
// commas so that the state compares with ==, and the last fence.
type semState struct {
	holders string
	fence   int64
}

func semModel(limit int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return semState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(semState), input.(opInput), output.(opOutput)
			var hs []string
			if s.holders != "" {
				hs = strings.Split(s.holders, ",")
			}
			held := slices.Contains(hs, in.owner)
			switch in.op {
			case "acquire":
				if len(hs) >= limit || held {
					return !out.ok, s
				}
				hs = append(hs, in.owner)
				slices.Sort(hs)
				return out.ok && out.fence > s.fence, semState{holders: strings.Join(hs, ","), fence: out.fence}
			case "renew":
				return out.ok == held, s
			case "release":
				if !held {
					return !out.ok, s
				}
				hs = slices.DeleteFunc(hs, func(h string) bool { return h == in.owner })
				return out.ok, semState{holders: strings.Join(hs, ","), fence: s.fence}
			}
			return false, s
		},
		DescribeOperation: describeOp,
	}
}

func describeOp(input, output any) string {
	in, out := input.(opInput), output.(opOutput)
	if in.op == "acquire" {
		return fmt.Sprintf("%s(%s) -> %v, fence %d", in.op, in.owner, out.ok, out.fence)
	}
	return fmt.Sprintf("%s(%s) -> %v", in.op, in.owner, out.ok)
}

// storeOps are the three calls of a lock or of a semaphore's slots.
type storeOps struct {
	acquire func(ctx context.Context, owner string) (int64, bool, error)
	renew   func(ctx context.Context, owner string) (bool, error)
	release func(ctx context.Context, owner string) (bool, error)
}

func lockOps(s locks.Store, key string) storeOps {
	return storeOps{
		acquire: func(ctx context.Context, o string) (int64, bool, error) { return s.Acquire(ctx, key, o, long) },
		renew:   func(ctx context.Context, o string) (bool, error) { return s.Renew(ctx, key, o, long) },
		release: func(ctx context.Context, o string) (bool, error) { return s.Release(ctx, key, o) },
	}
}

func slotOps(s locks.Store, key string, limit int) storeOps {
	return storeOps{
		acquire: func(ctx context.Context, o string) (int64, bool, error) {
			return s.AcquireSlot(ctx, key, o, limit, long)
		},
		renew:   func(ctx context.Context, o string) (bool, error) { return s.RenewSlot(ctx, key, o, long) },
		release: func(ctx context.Context, o string) (bool, error) { return s.ReleaseSlot(ctx, key, o) },
	}
}

// record runs clients goroutines of n calls each and returns the history.
// Each client acquires under a fresh owner about half the time, and
// otherwise renews or releases one of its owners, mostly the latest.
func record(t *testing.T, ops storeOps, clients, n int) []porcupine.Operation {
	t.Helper()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		start   = time.Now()
		errs    = make(chan error, clients)
	)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			var mine []string
			for i := range n {
				in := opInput{op: "acquire", owner: fmt.Sprintf("c%d-%d", c, i)}
				if r := rng.IntN(4); len(mine) > 0 && r >= 2 {
					in.op = map[int]string{2: "renew", 3: "release"}[r]
					in.owner = mine[len(mine)-1]
					if rng.IntN(4) == 0 {
						in.owner = mine[rng.IntN(len(mine))]
					}
				}
				var out opOutput
				var err error
				call := time.Since(start).Nanoseconds()
				switch in.op {
				case "acquire":
					out.fence, out.ok, err = ops.acquire(context.Background(), in.owner)
					if out.ok {
						mine = append(mine, in.owner)
					}
				case "renew":
					out.ok, err = ops.renew(context.Background(), in.owner)
				case "release":
					out.ok, err = ops.release(context.Background(), in.owner)
				}
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					errs <- fmt.Errorf("client %d: %s(%s): %w", c, in.op, in.owner, err)
					return
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return history
}

// check runs porcupine on a history and fails the test unless it finds the
// history linearizable.
func check(t *testing.T, model porcupine.Model, history []porcupine.Operation) {
	t.Helper()
	res := porcupine.CheckOperationsTimeout(model, history, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("linearizability check of %d operations timed out", len(history))
	default:
		var b strings.Builder
		slices.SortFunc(history, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		for _, op := range history {
			fmt.Fprintf(&b, "\n  [%d, %d] client %d: %s", op.Call, op.Return, op.ClientId, describeOp(op.Input, op.Output))
		}
		t.Fatalf("history of %d operations is not linearizable:%s", len(history), b.String())
	}
}

func testLinearizableLock(t *testing.T, f *Fixture) {
	history := record(t, lockOps(f.Store, "lin"), 6, 40)
	check(t, lockModel, history)
}

func testLinearizableSemaphore(t *testing.T, f *Fixture) {
	history := record(t, slotOps(f.Store, "lin", 2), 6, 40)
	check(t, semModel(2), history)
}
