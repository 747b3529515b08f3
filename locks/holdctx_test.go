package locks

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

// TestHoldCtxAsWithCancelCause: in every order of its events (the hold
// cancels it, the parent ends, someone asks for Done) a holdCtx answers
// Err, Cause, Value, Deadline and Done as context.WithCancelCause of the
// same parent does, whether asked before, between or after the events,
// and so do contexts derived from it.
func TestHoldCtxAsWithCancelCause(t *testing.T) {
	own, parentCause := errors.New("own cause"), errors.New("parent cause")
	events := []string{"cancel", "parent", "done"}
	var orders [][]string
	var permute func(rest, order []string)
	permute = func(rest, order []string) {
		if len(rest) == 0 {
			orders = append(orders, order)
			return
		}
		for i := range rest {
			next := append(append([]string(nil), rest[:i]...), rest[i+1:]...)
			permute(next, append(append([]string(nil), order...), rest[i]))
		}
	}
	permute(events, nil)
	// Each order also without each event, and with a parent that ended by
	// its deadline before anything happened.
	for _, order := range orders {
		for skip := -1; skip < len(order); skip++ {
			for _, deadline := range []bool{false, true} {
				var seq []string
				for i, ev := range order {
					if i != skip {
						seq = append(seq, ev)
					}
				}
				t.Run(fmt.Sprintf("%v/deadline=%v", seq, deadline), func(t *testing.T) {
					base := context.WithValue(context.Background(), ctxKey{}, "v")
					var parent context.Context
					var endParent func()
					if deadline {
						// Ended by its deadline before anything else.
						p, cancel := context.WithDeadlineCause(base, time.Now().Add(-time.Second), parentCause)
						t.Cleanup(cancel)
						parent, endParent = p, func() {}
					} else {
						p, cancel := context.WithCancelCause(base)
						t.Cleanup(func() { cancel(nil) })
						parent, endParent = p, func() { cancel(parentCause) }
					}
					hc := &holdCtx{parent: parent}
					ref, refCancel := context.WithCancelCause(parent)
					t.Cleanup(func() { refCancel(nil) })
					var derived, refDerived context.Context
					check := func(when string) {
						t.Helper()
						if g, w := hc.Err(), ref.Err(); g != w {
							t.Fatalf("%s: Err %v, want %v", when, g, w)
						}
						if g, w := context.Cause(hc), context.Cause(ref); g != w {
							t.Fatalf("%s: Cause %v, want %v", when, g, w)
						}
						if g := hc.Value(ctxKey{}); g != "v" {
							t.Fatalf("%s: Value %v", when, g)
						}
						gd, gok := hc.Deadline()
						wd, wok := ref.Deadline()
						if !gd.Equal(wd) || gok != wok {
							t.Fatalf("%s: Deadline %v %v, want %v %v", when, gd, gok, wd, wok)
						}
						if derived != nil {
							if g, w := context.Cause(derived), context.Cause(refDerived); g != w {
								t.Fatalf("%s: derived Cause %v, want %v", when, g, w)
							}
						}
					}
					check("first")
					for _, ev := range seq {
						switch ev {
						case "cancel":
							hc.cancel(own)
							refCancel(own)
						case "parent":
							endParent()
						case "done":
							done := hc.Done()
							if hc.Done() != done {
								t.Fatal("Done changed")
							}
							var c1, c2 context.CancelFunc
							derived, c1 = context.WithCancel(hc)
							refDerived, c2 = context.WithCancel(ref)
							t.Cleanup(c1)
							t.Cleanup(c2)
						}
						check("after " + ev)
					}
					if hc.Err() != nil {
						select {
						case <-hc.Done():
						default:
							t.Fatal("Err is set, Done is not closed")
						}
						if derived != nil && derived.Err() == nil {
							t.Fatal("a derived context did not end")
						}
					}
				})
			}
		}
	}
}

// TestHoldCtxConcurrent: readers racing the cancel and the parent's end
// all see one end: Done closes, and Err and Cause agree with the first
// cancel that took effect.
func TestHoldCtxConcurrent(t *testing.T) {
	own, parentCause := errors.New("own cause"), errors.New("parent cause")
	for range 200 {
		parent, cancelParent := context.WithCancelCause(context.Background())
		hc := &holdCtx{parent: parent}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				if i%2 == 0 {
					<-hc.Done()
				} else {
					for hc.Err() == nil {
						runtime.Gosched()
					}
				}
				cause := context.Cause(hc)
				if cause != own && cause != parentCause {
					t.Errorf("Cause %v", cause)
				}
			})
		}
		wg.Go(func() { hc.cancel(own) })
		wg.Go(func() { cancelParent(parentCause) })
		wg.Wait()
		first := context.Cause(hc)
		if hc.Err() != context.Canceled || context.Cause(hc) != first {
			t.Fatalf("Err %v, Cause %v then %v", hc.Err(), first, context.Cause(hc))
		}
	}
}
