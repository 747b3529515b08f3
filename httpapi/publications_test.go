package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"studio/httpapi"
	"studio/intent"
	"studio/store/storetest"
)

func pubBody(requestID, batchID string, assets []string, channel string) string {
	in := map[string]any{"batch_id": batchID, "asset_ids": assets}
	if requestID != "" {
		in["request_id"] = requestID
	}
	if channel != "" {
		in["channel"] = channel
	}
	b, err := json.Marshal(in, json.Deterministic(true))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (h *harness) publish(actor, body string, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	header := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(hdr); i += 2 {
		header.Add(hdr[i], hdr[i+1])
	}
	return h.do(req{method: http.MethodPost, path: "/v1/publications", actor: actor, body: body, header: header})
}

func TestPublicationCreatedReplayedConflict(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	batch, assets := storetest.BatchWithAssets(t, h.store, "alice", "gen-1", 3)
	w := h.publish("alice", pubBody("pub-1", batch, assets, ""))
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	p := decode[intent.Publication](t, w)
	if p.RequestID != "pub-1" || p.BatchID != batch || p.Channel != "gallery" || p.State != "queued" || p.ItemCount != 3 ||
		p.Counts != (intent.Counts{Queued: 3}) || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero() {
		t.Fatalf("publication %+v", p)
	}
	if loc := w.Header().Get("Location"); loc != "/v1/publications/"+p.ID {
		t.Fatalf("Location %q", loc)
	}
	got := h.do(req{method: "GET", path: "/v1/publications/" + p.ID, actor: "alice"})
	if got.Code != http.StatusOK || decode[intent.Publication](t, got) != p {
		t.Fatalf("GET: %d %s", got.Code, got.Body)
	}
	// The lost answer's retry: the same publication, by body or by header.
	for _, w := range []*httptest.ResponseRecorder{
		h.publish("alice", pubBody("pub-1", batch, assets, "gallery")),
		h.publish("alice", pubBody("", batch, assets, ""), "Idempotency-Key", `"pub-1"`),
	} {
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || decode[intent.Publication](t, w).ID != p.ID {
			t.Fatalf("replay: %d %s", w.Code, w.Body)
		}
	}
	// Other input: 409 with the exact detail.
	for _, body := range []string{
		pubBody("pub-1", batch, assets[:2], ""),
		pubBody("pub-1", batch, []string{assets[2], assets[1], assets[0]}, ""),
		pubBody("pub-1", batch, assets, "webhook"),
	} {
		if pr := wantProblem(t, h.publish("alice", body), http.StatusConflict); pr.Detail != intent.ConflictMessage {
			t.Fatalf("detail %q", pr.Detail)
		}
	}
	// A generation's request id used for a publication, and the other way.
	if w := h.post("alice", genBody("shared", 1, 1)); w.Code != http.StatusCreated {
		t.Fatalf("generation: %d %s", w.Code, w.Body)
	}
	if pr := wantProblem(t, h.publish("alice", pubBody("shared", batch, assets, "")), http.StatusConflict); pr.Detail != intent.ConflictMessage {
		t.Fatalf("detail %q", pr.Detail)
	}
	if pr := wantProblem(t, h.post("alice", genBody("pub-1", 1, 1)), http.StatusConflict); pr.Detail != intent.ConflictMessage {
		t.Fatalf("detail %q", pr.Detail)
	}
	// Another actor sees none of it.
	wantProblem(t, h.do(req{method: "GET", path: "/v1/publications/" + p.ID, actor: "bob"}), http.StatusNotFound)
	wantProblem(t, h.do(req{method: "GET", path: "/v1/publications/no-such-id", actor: "alice"}), http.StatusNotFound)
	var n int
	if err := h.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM publication_items`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d items stored (%v), want 3", n, err)
	}
}

func TestPublicationRefusals(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	batch, assets := storetest.BatchWithAssets(t, h.store, "alice", "gen-1", 2)
	_, others := storetest.BatchWithAssets(t, h.store, "alice", "gen-2", 1)
	bobBatch, bobAssets := storetest.BatchWithAssets(t, h.store, "bob", "gen-1", 1)
	up := h.upload("alice", "image/png", pngOf(t, 4, 4, 1))
	uploaded := decode[intent.Asset](t, up).ID

	// Assets that are not the batch's: 422 naming each.
	p := wantProblem(t, h.publish("alice", pubBody("p1", batch, []string{assets[0], others[0], uploaded, bobAssets[0], assets[1]}, "")), http.StatusUnprocessableEntity)
	for _, id := range []string{others[0], uploaded, bobAssets[0]} {
		if !strings.Contains(p.Detail, id) {
			t.Errorf("detail %q does not name %s", p.Detail, id)
		}
	}
	if !p.hasField("asset_ids[1]") || !p.hasField("asset_ids[2]") || !p.hasField("asset_ids[3]") || p.hasField("asset_ids[0]") {
		t.Errorf("fields %+v", p.Errors)
	}
	// Another actor's batch.
	if p := wantProblem(t, h.publish("alice", pubBody("p2", bobBatch, bobAssets, "")), http.StatusUnprocessableEntity); !p.hasField("batch_id") {
		t.Errorf("fields %+v", p.Errors)
	}
	// Input rules: 400.
	for name, body := range map[string]string{
		"duplicates":      pubBody("p3", batch, []string{assets[0], assets[0]}, ""),
		"no assets":       pubBody("p3", batch, []string{}, ""),
		"unknown channel": pubBody("p3", batch, assets, "fax"),
		"unknown field":   `{"request_id":"p3","batch_id":"` + batch + `","asset_ids":["` + assets[0] + `"],"extra":1}`,
		"no request id":   pubBody("", batch, assets, ""),
		"bad json":        `{"request_id":`,
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, h.publish("alice", body), http.StatusBadRequest)
		})
	}
	// Media type and size.
	wantProblem(t, h.do(req{method: "POST", path: "/v1/publications", actor: "alice", body: pubBody("p4", batch, assets, ""),
		header: http.Header{"Content-Type": {"text/plain"}}}), http.StatusUnsupportedMediaType)
	wantProblem(t, h.publish("alice", `{"request_id":"p5","pad":"`+strings.Repeat("x", 1<<20)+`"}`), http.StatusRequestEntityTooLarge)
	var n int
	if err := h.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM publications`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d publications stored by refused requests (%v)", n, err)
	}
}

func TestListPublicationsPages(t *testing.T) {
	h := newHarness(t, options{})
	batch, assets := storetest.BatchWithAssets(t, h.store, "alice", "lp-batch", 2)
	var ids []string
	for i := 0; i < 3; i++ {
		rid := fmt.Sprintf("lp-%d", i)
		in := storetest.PublicationIntent(t, "alice", rid, "fp-"+rid, batch, assets, "gallery")
		if _, _, err := h.store.CreateIntent(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.Publication.ID)
	}
	type page struct {
		Items      []intent.Publication `json:"items"`
		NextCursor *string              `json:"next_cursor"`
	}
	w := h.do(req{method: http.MethodGet, path: "/v1/publications?limit=2", actor: "alice"})
	if w.Code != http.StatusOK {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	p := decode[page](t, w)
	if len(p.Items) != 2 || p.Items[0].ID != ids[2] || p.Items[1].ID != ids[1] || p.NextCursor == nil {
		t.Fatalf("first page %+v", p)
	}
	w = h.do(req{method: http.MethodGet, path: "/v1/publications?limit=2&cursor=" + url.QueryEscape(*p.NextCursor), actor: "alice"})
	p = decode[page](t, w)
	if len(p.Items) != 1 || p.Items[0].ID != ids[0] || p.NextCursor != nil {
		t.Fatalf("second page %+v", p)
	}
	w = h.do(req{method: http.MethodGet, path: "/v1/publications", actor: "bob"})
	if p := decode[page](t, w); w.Code != http.StatusOK || len(p.Items) != 0 {
		t.Fatalf("bob's list: %d %s", w.Code, w.Body)
	}
	// A cursor of another list is refused, as is a bad limit.
	h.create("alice", "lp-other", 1, 1)
	var bpage struct {
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal(h.do(req{method: http.MethodGet, path: "/v1/batches?limit=1", actor: "alice"}).Body.Bytes(), &bpage); err != nil || bpage.NextCursor == nil {
		t.Fatalf("batches page: %v %v", bpage, err)
	}
	pr := wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/publications?cursor=" + url.QueryEscape(*bpage.NextCursor), actor: "alice"}), http.StatusBadRequest)
	if !pr.hasField("cursor") {
		t.Fatalf("problem %+v", pr)
	}
	pr = wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/publications?limit=0&cursor=abc", actor: "alice"}), http.StatusBadRequest)
	if !pr.hasField("limit") || !pr.hasField("cursor") {
		t.Fatalf("problem %+v", pr)
	}
	wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/publications"}), http.StatusUnauthorized)
}
