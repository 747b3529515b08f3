package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/locks"
	"studio/lockservice"
	"studio/planner"
)

// The benchmarks measure what the HTTP layer adds: each "http" case serves
// a request through the handler; its "floor" does the same domain and
// database work (the token look-up included) with direct calls and encodes
// the same answer. Compare ns/op of the two in one run.

func BenchmarkGetBatch(b *testing.B) {
	h := newHarness(b, options{})
	batch := benchCreate(b, h, "bench-get")
	ctx := context.Background()
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			actor, err := h.store.ActorForToken(ctx, httpapi.HashToken(h.tokens["alice"]))
			if err != nil {
				b.Fatal(err)
			}
			got, err := h.store.GetBatch(ctx, actor, batch.ID)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		r := httptest.NewRequest("GET", "/v1/batches/"+batch.ID, nil)
		r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
		for b.Loop() {
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatal(w.Code, w.Body)
			}
		}
	})
}

func BenchmarkReplay(b *testing.B) {
	h := newHarness(b, options{})
	benchCreate(b, h, "bench-replay")
	body := genBody("bench-replay", 2, 3)
	svc := &intent.Service{Store: h.store, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{}}
	ctx := context.Background()
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			actor, err := h.store.ActorForToken(ctx, httpapi.HashToken(h.tokens["alice"]))
			if err != nil {
				b.Fatal(err)
			}
			id, _, in, err := intent.DecodeGeneration([]byte(body))
			if err != nil {
				b.Fatal(err)
			}
			res, err := svc.CreateGeneration(ctx, actor, id, in)
			if err != nil || !res.Replayed {
				b.Fatal(err, res.Replayed)
			}
			if _, err := json.Marshal(res.Batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		for b.Loop() {
			r := httptest.NewRequest("POST", "/v1/generations", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatal(w.Code, w.Body)
			}
		}
	})
}

func benchCreate(b *testing.B, h *harness, id string) intent.Batch {
	b.Helper()
	w := h.post("alice", genBody(id, 2, 3))
	if w.Code != http.StatusCreated {
		b.Fatal(w.Code, w.Body)
	}
	var batch intent.Batch
	if err := json.Unmarshal(w.Body.Bytes(), &batch); err != nil {
		b.Fatal(err)
	}
	return batch
}

// BenchmarkLockAcquireRelease: one acquire and one release of a free key
// over HTTP ("http"), against the lock service called directly ("service")
// and the floor: the two token look-ups the two requests make, and one
// engine Hold of the same key with a no-op fn.
func BenchmarkLockAcquireRelease(b *testing.B) {
	h, svc, eng := newLockHarnessParts(b, lockservice.Config{}, httpapi.Limits{})
	ctx := context.Background()
	lock := eng.Lock(lockservice.Scope("alice", "bench"))
	noop := func(context.Context, *locks.Lease) error { return nil }
	var ids atomic.Int64 // request ids, unique across every run
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			for range 2 {
				if _, err := h.store.ActorForToken(ctx, httpapi.HashToken(h.tokens["alice"])); err != nil {
					b.Fatal(err)
				}
			}
			if err := lock.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("service", func(b *testing.B) {
		for b.Loop() {
			i := ids.Add(1)
			for range 2 {
				if _, err := h.store.ActorForToken(ctx, httpapi.HashToken(h.tokens["alice"])); err != nil {
					b.Fatal(err)
				}
			}
			l, _, err := svc.Acquire(ctx, "alice", fmt.Sprint("s", i), lockservice.Request{Name: "bench", Key: "k", TTL: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := svc.Release(ctx, "alice", l.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		for b.Loop() {
			i := ids.Add(1)
			w := h.lockCall("alice", "acquire", acquireJSON(fmt.Sprint("h", i), "bench", "k", 30000, 0, 0))
			if w.Code != http.StatusCreated {
				b.Fatal(w.Code, w.Body)
			}
			var l struct {
				LeaseID string `json:"lease_id"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil {
				b.Fatal(err)
			}
			if w := h.lockCall("alice", "release", leaseJSON(l.LeaseID)); w.Code != http.StatusOK {
				b.Fatal(w.Code, w.Body)
			}
		}
	})
}
