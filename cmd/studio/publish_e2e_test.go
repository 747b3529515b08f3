package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/blob"
	"studio/intent"
	"studio/store"
	"studio/store/sqlite"
)

// The end-to-end tests of uploads and publications. Assets of a batch are
// made here by claiming the batch's tasks and completing them with PNGs in
// the blob store, as a worker does (whichever claims a task first, this
// helper or a worker of the process, makes its asset).

type assetAnswer struct {
	ID          string  `json:"id"`
	TaskID      *string `json:"task_id"`
	SHA256      string  `json:"sha256"`
	ContentType string  `json:"content_type"`
	Size        int64   `json:"size"`
	Width       int     `json:"width"`
	Height      int     `json:"height"`
}

type publicationAnswer struct {
	ID        string        `json:"id"`
	RequestID string        `json:"request_id"`
	State     intent.State  `json:"state"`
	BatchID   string        `json:"batch_id"`
	Channel   string        `json:"channel"`
	ItemCount int           `json:"item_count"`
	Counts    intent.Counts `json:"counts"`
}

type problemAnswer struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func pngImage(t *testing.T, w, h int, shade uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{R: shade, G: uint8(x), B: uint8(y), A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// upload posts raw bytes to /v1/uploads.
func (c *client) upload(ctx context.Context, contentType string, body io.Reader, out any, header ...string) (*http.Response, error) {
	return c.send(ctx, "POST", "/v1/uploads", body, out, append([]string{"Content-Type", contentType}, header...)...)
}

// makeAssets completes every task of the batch with a PNG and returns the
// batch's asset ids in plan order.
func makeAssets(t *testing.T, st store.Store, blobs blob.Store, actor, batchID string) []string {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	n := 0
	for {
		b, err := st.GetBatch(ctx, actor, batchID)
		if err != nil {
			t.Fatal(err)
		}
		if b.Counts.Succeeded == b.TaskCount {
			break
		}
		if b.Counts.Ended() == b.TaskCount || time.Now().After(deadline) {
			t.Fatalf("batch %s did not succeed: %+v", batchID, b)
		}
		cs, err := st.ClaimTasks(ctx, store.ClaimParams{Owner: "e2e-maker", Limit: 50, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		comps := make([]store.Completion, len(cs))
		for i, c := range cs {
			n++
			info, err := blobs.Put(ctx, bytes.NewReader(pngImage(t, 16, 12, uint8(n))))
			if err != nil {
				t.Fatal(err)
			}
			id, _ := intent.NewID()
			comps[i] = store.Completion{Lease: c.Lease, Asset: intent.Asset{ID: id, SHA256: info.SHA256, ContentType: "image/png",
				Size: info.Size, Width: 16, Height: 12}}
		}
		if _, err := st.CompleteLeases(ctx, comps); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := st.ListTasks(ctx, batchID, store.ListParams{Actor: actor, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = *tk.AssetID
	}
	return ids
}

func (c *client) waitPublication(ctx context.Context, id string) publicationAnswer {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var p publicationAnswer
		resp, err := c.do(ctx, "GET", "/v1/publications/"+id, nil, &p)
		if err != nil || resp.StatusCode != http.StatusOK {
			c.t.Fatalf("GET publication: %v %v", resp, err)
		}
		if p.Counts.Ended() == p.ItemCount {
			return p
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("publication %s did not end: %+v", id, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// webhookReceiver records deliveries; hold, when set, decides whether to
// hold a delivery until released (the nth delivery overall, 0-based).
type webhookReceiver struct {
	mu      sync.Mutex
	keys    map[string][]string // item id -> Idempotency-Key of each delivery
	order   []string
	hold    func(nth int) bool
	held    chan string
	release chan struct{}
	srv     *httptest.Server
}

func newWebhookReceiver(t *testing.T, hold func(nth int) bool) *webhookReceiver {
	rc := &webhookReceiver{keys: map[string][]string{}, hold: hold, held: make(chan string, 16), release: make(chan struct{})}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d struct {
			ItemID        string `json:"item_id"`
			PublicationID string `json:"publication_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		nth := len(rc.order)
		rc.order = append(rc.order, d.ItemID)
		rc.keys[d.ItemID] = append(rc.keys[d.ItemID], r.Header.Get("Idempotency-Key"))
		rc.mu.Unlock()
		if rc.hold != nil && rc.hold(nth) {
			rc.held <- d.ItemID
			select {
			case <-rc.release:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() {
		rc.srv.CloseClientConnections()
		rc.srv.Close()
	})
	return rc
}

func (rc *webhookReceiver) seen() map[string][]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string][]string{}
	for k, v := range rc.keys {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestUploadsAndPublicationsInProcess runs the whole program in this
// process: uploads with keys, a gallery publication and a webhook
// publication carried out by the in-process publisher, replays and
// conflicts, and a restart.
func TestUploadsAndPublicationsInProcess(t *testing.T) {
	t.Parallel()
	rc := newWebhookReceiver(t, nil)
	cfg := testConfig(t)
	cfg.Workers = 2
	cfg.WebhookURL = rc.srv.URL
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	ctx := context.Background()
	c := newClient(t, m.Addr(), token)

	// Uploads.
	img := pngImage(t, 30, 20, 9)
	var up assetAnswer
	resp, err := c.upload(ctx, "image/png", bytes.NewReader(img), &up, "Idempotency-Key", "logo-1")
	if err != nil || resp.StatusCode != http.StatusCreated || up.Width != 30 || up.Height != 20 || up.TaskID != nil {
		t.Fatalf("upload: %v %v %+v", resp.Status, err, up)
	}
	var again assetAnswer
	resp, err = c.upload(ctx, "image/png", bytes.NewReader(img), &again, "Idempotency-Key", "logo-1")
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || again.ID != up.ID {
		t.Fatalf("upload replay: %v %v %+v", resp.Status, err, again)
	}
	var prob problemAnswer
	resp, err = c.upload(ctx, "image/png", bytes.NewReader(pngImage(t, 30, 20, 10)), &prob, "Idempotency-Key", "logo-1")
	if err != nil || resp.StatusCode != http.StatusConflict || prob.Detail != intent.ConflictMessage {
		t.Fatalf("upload conflict: %v %v %+v", resp.Status, err, prob)
	}
	resp, err = c.upload(ctx, "image/jpeg", bytes.NewReader(img), &prob)
	if err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("a png said to be jpeg: %v %v", resp.Status, err)
	}
	big := io.MultiReader(bytes.NewReader(img), io.LimitReader(zeroReader{}, 21<<20))
	resp, err = c.upload(ctx, "image/png", big, nil)
	if err == nil && resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("21 MiB: %v", resp.Status)
	}

	// A batch, its assets, and a gallery publication of them.
	var batch batchAnswer
	if resp, err := c.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01", "f02"), &batch); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("generation: %v %v", resp, err)
	}
	assets := makeAssets(t, m.store, m.blobs, "local", batch.ID)
	pubReq := map[string]any{"request_id": "pub-1", "batch_id": batch.ID, "asset_ids": assets}
	var pub publicationAnswer
	resp, err = c.do(ctx, "POST", "/v1/publications", pubReq, &pub)
	if err != nil || resp.StatusCode != http.StatusCreated || pub.ItemCount != len(assets) || pub.Channel != "gallery" ||
		resp.Header.Get("Location") != "/v1/publications/"+pub.ID {
		t.Fatalf("publication: %v %v %+v", resp.Status, err, pub)
	}
	// Its answer was lost: the retry names it and adds nothing.
	var retry publicationAnswer
	resp, err = c.do(ctx, "POST", "/v1/publications", pubReq, &retry)
	if err != nil || resp.StatusCode != http.StatusOK || retry.ID != pub.ID || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %v %v %+v", resp.Status, err, retry)
	}
	done := c.waitPublication(ctx, pub.ID)
	if done.State != "succeeded" || done.Counts.Succeeded != len(assets) {
		t.Fatalf("publication ended %+v", done)
	}
	checkGalleryDir(t, filepath.Join(cfg.Data, "gallery", pub.ID), m.store, assets)
	checkGalleryServed(t, m.Addr(), filepath.Join(cfg.Data, "gallery", pub.ID))

	// Refusals: another batch's (an upload) asset, an id of a generation.
	resp, err = c.do(ctx, "POST", "/v1/publications", map[string]any{"request_id": "pub-2", "batch_id": batch.ID, "asset_ids": []string{up.ID}}, &prob)
	if err != nil || resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(prob.Detail, up.ID) {
		t.Fatalf("an upload published as the batch's: %v %v %+v", resp.Status, err, prob)
	}
	resp, err = c.do(ctx, "POST", "/v1/publications", map[string]any{"request_id": "walk-1", "batch_id": batch.ID, "asset_ids": assets}, &prob)
	if err != nil || resp.StatusCode != http.StatusConflict || prob.Detail != intent.ConflictMessage {
		t.Fatalf("a generation's id: %v %v %+v", resp.Status, err, prob)
	}

	// The webhook: every item once, with its id as the key.
	var hook publicationAnswer
	resp, err = c.do(ctx, "POST", "/v1/publications", map[string]any{"batch_id": batch.ID, "asset_ids": assets[:4], "channel": "webhook"},
		&hook, "Idempotency-Key", `"hook-1"`)
	if err != nil || resp.StatusCode != http.StatusCreated || hook.RequestID != "hook-1" {
		t.Fatalf("webhook publication: %v %v %+v", resp.Status, err, hook)
	}
	if p := c.waitPublication(ctx, hook.ID); p.State != "succeeded" {
		t.Fatalf("webhook publication ended %+v", p)
	}
	seen := rc.seen()
	items, err := m.store.PublicationItems(ctx, hook.ID)
	if err != nil || len(seen) != 4 || len(items) != 4 {
		t.Fatalf("the receiver saw %d items of %d (%v)", len(seen), len(items), err)
	}
	for _, it := range items {
		if keys := seen[it.ID]; len(keys) != 1 || keys[0] != `"`+it.ID+`"` {
			t.Fatalf("item %s: keys %v", it.ID, keys)
		}
	}

	// After a restart the ids are still bound.
	m.Close()
	m2, _ := startMain(t, cfg)
	c2 := newClient(t, m2.Addr(), token)
	resp, err = c2.do(ctx, "POST", "/v1/publications", pubReq, &retry)
	if err != nil || resp.StatusCode != http.StatusOK || retry.ID != pub.ID || retry.State != "succeeded" {
		t.Fatalf("retry after restart: %v %v %+v", resp.Status, err, retry)
	}
	resp, err = c2.upload(ctx, "image/png", bytes.NewReader(img), &again, "Idempotency-Key", "logo-1")
	if err != nil || resp.StatusCode != http.StatusOK || again.ID != up.ID {
		t.Fatalf("upload replay after restart: %v %v", resp.Status, err)
	}
	checkGalleryDir(t, filepath.Join(cfg.Data, "gallery", pub.ID), m2.store, assets)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// checkGalleryDir proves dir holds exactly one file per asset (its bytes)
// and the manifest.
func checkGalleryDir(t *testing.T, dir string, st store.Store, assetIDs []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"manifest.json"}
	for _, id := range assetIDs {
		want = append(want, id+".png")
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("gallery %s holds %v, want %v", dir, names, want)
	}
	var m struct {
		Items []struct {
			ID     string `json:"id"`
			SHA256 string `json:"sha256"`
			Frame  string `json:"frame"`
		} `json:"items"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || json.Unmarshal(raw, &m) != nil || len(m.Items) != len(assetIDs) {
		t.Fatalf("manifest %s: %v", raw, err)
	}
	for i, e := range m.Items {
		data, err := os.ReadFile(filepath.Join(dir, e.ID+".png"))
		sum := sha256.Sum256(data)
		if err != nil || e.ID != assetIDs[i] || hex.EncodeToString(sum[:]) != e.SHA256 || e.Frame == "" {
			t.Fatalf("manifest entry %d %+v does not match its file (%v)", i, e, err)
		}
	}
}

// checkGalleryServed proves /gallery/ serves, with no token, every file
// the gallery folder dir holds, byte for byte.
func checkGalleryServed(t *testing.T, addr, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		resp, body := galleryGet(t, addr, "/gallery/"+filepath.Base(dir)+"/"+e.Name())
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
			t.Fatalf("/gallery/ serves %s: %d, %d bytes; the folder has %d", e.Name(), resp.StatusCode, len(body), len(want))
		}
	}
}

// TestWorkerKilledMidPublication: a worker process is killed (SIGKILL)
// while a webhook delivery is in flight; the next worker process takes the
// item once its lease expires and finishes the publication. The receiver
// sees every item, the interrupted one twice with the same key.
func TestWorkerKilledMidPublication(t *testing.T) {
	t.Parallel()
	// The third delivery (0-based 2) is held until the worker dies.
	rc := newWebhookReceiver(t, func(nth int) bool { return nth == 2 })
	data := t.TempDir()
	env := []string{"STUDIO_DATA=" + data, "STUDIO_WEBHOOK_URL=" + rc.srv.URL, "STUDIO_LEASE_TTL=1s", "STUDIO_RETRY_BASE=50ms"}
	api := startProcess(t, append(env, "STUDIO_WORKERS=0"), "serve", "--addr", "127.0.0.1:0")
	c := newClient(t, api.Addr, readToken(t, data))
	ctx := context.Background()

	var batch batchAnswer
	if resp, err := c.do(ctx, "POST", "/v1/generations", generation("walk-1", "f01", "f02"), &batch); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("generation: %v %v", resp, err)
	}
	// This test process makes the assets on the shared database and files.
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(data, "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fs, err := blob.NewFS(filepath.Join(data, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	assets := makeAssets(t, st, fs, "local", batch.ID)
	var pub publicationAnswer
	resp, err := c.do(ctx, "POST", "/v1/publications", map[string]any{"request_id": "hook", "batch_id": batch.ID, "asset_ids": assets[:6], "channel": "webhook"}, &pub)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("publication: %v %v", resp, err)
	}

	w1 := startProcess(t, env, "worker", "--concurrency", "1")
	var interrupted string
	select {
	case interrupted = <-rc.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("no delivery was held\n%s", w1.logs.String())
	}
	w1.signal(syscall.SIGKILL)
	w1.wait(30 * time.Second)
	close(rc.release)
	if p := getPublication(t, c, pub.ID); p.State != "running" || p.Counts.Succeeded != 2 {
		t.Fatalf("after the kill: %+v", p)
	}

	// The second worker gets the default 30 s lease (the last
	// STUDIO_LEASE_TTL wins over env's 1 s): the first's 1 s lease decides
	// when the item is taken over, and a short one here could be lost on a
	// loaded machine and deliver an item a second time.
	w2 := startProcess(t, append(env, "STUDIO_LEASE_TTL=30s"), "worker", "--concurrency", "2")
	p := c.waitPublication(ctx, pub.ID)
	if p.State != "succeeded" || p.Counts.Succeeded != 6 {
		t.Fatalf("publication %+v\n%s", p, w2.logs.String())
	}
	seen := rc.seen()
	items, err := st.PublicationItems(ctx, pub.ID)
	if err != nil || len(items) != 6 || len(seen) != 6 {
		t.Fatalf("the receiver saw %d items of %d (%v)", len(seen), len(items), err)
	}
	for _, it := range items {
		keys := seen[it.ID]
		want := 1
		if it.ID == interrupted {
			want = 2
		}
		if len(keys) != want {
			t.Fatalf("item %s delivered %d times, want %d", it.ID, len(keys), want)
		}
		for _, k := range keys {
			if k != `"`+it.ID+`"` {
				t.Fatalf("item %s delivered with key %q", it.ID, k)
			}
		}
		if it.ID == interrupted && it.Attempts != 2 {
			t.Fatalf("the interrupted item: %d attempts, want 2", it.Attempts)
		}
	}
	w2.signal(syscall.SIGTERM)
	if code := w2.wait(30 * time.Second); code != 0 {
		t.Fatalf("worker exit code %d", code)
	}
	api.signal(syscall.SIGTERM)
	api.wait(30 * time.Second)
}

func getPublication(t *testing.T, c *client, id string) publicationAnswer {
	t.Helper()
	var p publicationAnswer
	if resp, err := c.do(context.Background(), "GET", "/v1/publications/"+id, nil, &p); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET publication: %v %v", resp, err)
	}
	return p
}
