package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/planner"
	"studio/store/storetest"
)

// countingService is the real intent service, counting the inputs that
// went the whole way (Create*) and the retries answered by fingerprint
// alone (Replay* answering ok).
type countingService struct {
	*intent.Service
	creates, replays atomic.Int64
}

func (c *countingService) CreateGeneration(ctx context.Context, actor, requestID string, in intent.GenerationInput) (intent.GenerationResult, error) {
	c.creates.Add(1)
	return c.Service.CreateGeneration(ctx, actor, requestID, in)
}

func (c *countingService) ReplayGeneration(ctx context.Context, actor, requestID, fp string) (intent.GenerationResult, bool, error) {
	res, ok, err := c.Service.ReplayGeneration(ctx, actor, requestID, fp)
	if ok {
		c.replays.Add(1)
	}
	return res, ok, err
}

func (c *countingService) CreatePublication(ctx context.Context, actor, requestID string, in intent.PublicationInput) (intent.PublicationResult, error) {
	c.creates.Add(1)
	return c.Service.CreatePublication(ctx, actor, requestID, in)
}

func (c *countingService) ReplayPublication(ctx context.Context, actor, requestID, fp string) (intent.PublicationResult, bool, error) {
	res, ok, err := c.Service.ReplayPublication(ctx, actor, requestID, fp)
	if ok {
		c.replays.Add(1)
	}
	return res, ok, err
}

func (c *countingService) counts() [2]int64 { return [2]int64{c.creates.Load(), c.replays.Load()} }

// newCountingHarness is the harness with generations and publications
// served by one countingService.
func newCountingHarness(t *testing.T) (*harness, *countingService) {
	t.Helper()
	h := newHarness(t, options{})
	svc := &countingService{Service: &intent.Service{Store: h.store, Planner: planner.New(planner.EmbeddedCatalog()),
		Locker: &intenttest.KeyedMutex{}, Publications: h.store}}
	var err error
	h.server, err = httpapi.New(httpapi.Config{Generations: svc, Publications: svc, Store: h.store, Blobs: h.blobs,
		Logger: slog.New(slog.NewJSONHandler(h.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.h = h.server.Handler()
	return h, svc
}

// TestRetriedBodyAnsweredByFingerprint: the same bytes sent again are
// answered from the binding without decoding them (ReplayGeneration),
// with the answer the whole way gives; whatever the binding does not
// settle (another actor, a header naming another id, an id bound to
// other input) goes the whole way and is answered as without the memory.
func TestRetriedBodyAnsweredByFingerprint(t *testing.T) {
	t.Parallel()
	h, svc := newCountingHarness(t)
	body := genBody("retry-1", 2, 3)
	first := h.post("alice", body)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	batch := decode[intent.Batch](t, first)
	if got := svc.counts(); got != [2]int64{1, 0} {
		t.Fatalf("after the first: creates, replays = %v, want [1 0]", got)
	}
	for i := range 3 {
		w := h.post("alice", body)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || decode[intent.Batch](t, w) != batch {
			t.Fatalf("retry %d: %d %s", i, w.Code, w.Body)
		}
	}
	if got := svc.counts(); got != [2]int64{1, 3} {
		t.Fatalf("after three retries: creates, replays = %v, want [1 3]", got)
	}

	// Another actor's same bytes: its own batch.
	w := h.post("bob", body)
	if w.Code != http.StatusCreated || decode[intent.Batch](t, w).ID == batch.ID {
		t.Fatalf("bob: %d %s", w.Code, w.Body)
	}
	// The same bytes with a header naming another id: 400, as the whole
	// way answers it.
	wantProblem(t, h.post("alice", body, "Idempotency-Key", `"retry-2"`), http.StatusBadRequest)
	// The same header as the body: the replay.
	if w := h.post("alice", body, "Idempotency-Key", `"retry-1"`); w.Code != http.StatusOK || decode[intent.Batch](t, w) != batch {
		t.Fatalf("agreeing header: %d %s", w.Code, w.Body)
	}

	// A body without an id, under two keys: the memory knows the bytes,
	// the binding of the second key does not exist, so it is created.
	bare := genBody("", 1, 1)
	a := h.post("alice", bare, "Idempotency-Key", `"key-a"`)
	b := h.post("alice", bare, "Idempotency-Key", `"key-b"`)
	if a.Code != http.StatusCreated || b.Code != http.StatusCreated || decode[intent.Batch](t, a).ID == decode[intent.Batch](t, b).ID {
		t.Fatalf("two keys: %d %s / %d %s", a.Code, a.Body, b.Code, b.Body)
	}
	if w := h.post("alice", bare, "Idempotency-Key", `"key-a"`); w.Code != http.StatusOK || decode[intent.Batch](t, w).ID != decode[intent.Batch](t, a).ID {
		t.Fatalf("key-a again: %d %s", w.Code, w.Body)
	}

	// Known bytes under a key bound to other input: the memory says the
	// fingerprint, the binding disagrees, and the whole way answers 409.
	if w := h.post("alice", genBody("key-d", 1, 2)); w.Code != http.StatusCreated {
		t.Fatalf("key-d: %d %s", w.Code, w.Body)
	}
	before := svc.counts()
	for range 2 {
		if pr := wantProblem(t, h.post("alice", bare, "Idempotency-Key", `"key-d"`), http.StatusConflict); pr.Detail != intent.ConflictMessage {
			t.Fatalf("detail %q", pr.Detail)
		}
	}
	if got := svc.counts(); got[0] != before[0]+2 || got[1] != before[1] {
		t.Errorf("two conflicts: creates, replays %v -> %v, want two creates more", before, got)
	}
	var batches int
	if err := h.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM batches`).Scan(&batches); err != nil || batches != 5 {
		t.Errorf("%d batches (%v), want 5", batches, err)
	}
}

// TestRetriedPublicationBody: a publication's same bytes again are
// answered by fingerprint too, with the same answer.
func TestRetriedPublicationBody(t *testing.T) {
	t.Parallel()
	h, svc := newCountingHarness(t)
	batch, assets := storetest.BatchWithAssets(t, h.store, "alice", "gen-1", 2)
	body := pubBody("pub-1", batch, assets, "")
	first := h.publish("alice", body)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	p := decode[intent.Publication](t, first)
	w := h.publish("alice", body)
	if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || decode[intent.Publication](t, w) != p {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if got := svc.counts(); got != [2]int64{1, 1} {
		t.Fatalf("creates, replays = %v, want [1 1]", got)
	}
	// The same bytes sent as a generation are answered as the whole way
	// answers them: not a generation's body.
	wantProblem(t, h.post("alice", body), http.StatusBadRequest)
}

// TestRetriedBodyStorm: many goroutines send the same bytes at once,
// first time and after: one batch, every answer the same batch, and
// every answer after the first wave by fingerprint.
func TestRetriedBodyStorm(t *testing.T) {
	t.Parallel()
	h, svc := newCountingHarness(t)
	body := genBody("storm-1", 2, 2)
	wave := func(want ...int) []*httptest.ResponseRecorder {
		answers := make([]*httptest.ResponseRecorder, 32)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = h.post("alice", body) })
		}
		wg.Wait()
		for _, w := range answers {
			if !slices.Contains(want, w.Code) {
				t.Fatalf("status %d, want one of %v: %s", w.Code, want, w.Body)
			}
		}
		return answers
	}
	first := wave(http.StatusCreated, http.StatusOK)
	between := svc.counts()
	second := wave(http.StatusOK)
	seen := map[string]int{}
	for _, w := range append(first, second...) {
		seen[decode[intent.Batch](t, w).ID]++
	}
	if len(seen) != 1 {
		t.Fatalf("answers name %d batches, want 1: %v", len(seen), seen)
	}
	if got := svc.counts(); got[0] != between[0] || got[1] != between[1]+32 {
		t.Errorf("second wave: creates, replays %v -> %v, want 32 replays by fingerprint", between, got)
	}
}
