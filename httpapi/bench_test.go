package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"studio/httpapi"
	"studio/intent"
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
	svc := &intent.Service{Store: h.store, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &keyedMutex{}}
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
