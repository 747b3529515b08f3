package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"studio/blob"
	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/planner"
)

// tinyWebP is a 1x1 lossless WebP image.
var tinyWebP = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func encodeImage(t testing.TB, w, h int, shade uint8, enc func(io.Writer, image.Image) error) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{R: shade, G: uint8(x * 7), B: uint8(y * 5), A: 255})
		}
	}
	var b bytes.Buffer
	if err := enc(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func pngOf(t testing.TB, w, h int, shade uint8) []byte {
	return encodeImage(t, w, h, shade, png.Encode)
}

func jpegOf(t testing.TB, w, h int) []byte {
	return encodeImage(t, w, h, 3, func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) })
}

// fsWriter is the blob store as the Uploads port.
type fsWriter struct{ fs *blob.FS }

func (b fsWriter) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	info, err := b.fs.Put(ctx, r)
	return info.SHA256, info.Size, err
}

// newPubHarness is the harness with uploads and publications served: the
// blob store on disk, the real intent service with the gallery and webhook
// channels.
func newPubHarness(t testing.TB, limits httpapi.Limits) *harness {
	t.Helper()
	h := newHarness(t, options{})
	fs, err := blob.NewFS(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	svc := &intent.Service{Store: h.store, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{},
		Publications: h.store, Channels: []string{intent.ChannelGallery, intent.ChannelWebhook}}
	h.server, err = httpapi.New(httpapi.Config{
		Generations:  svc,
		Store:        h.store,
		Blobs:        fs,
		Uploads:      &intent.Uploads{Store: h.store, Blobs: fsWriter{fs}, Locker: &intenttest.KeyedMutex{}},
		UploadDir:    t.TempDir(),
		Publications: svc,
		Logger:       slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Limits:       limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.h = h.server.Handler()
	return h
}

// upload posts raw bytes to POST /v1/uploads; hdr are header pairs.
func (h *harness) upload(actor, contentType string, body []byte, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/uploads", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	r.Header.Set("Authorization", "Bearer "+h.tokens[actor])
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

func (h *harness) countAssets() int {
	h.t.Helper()
	var n int
	if err := h.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM assets`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

func TestUploadCreatedReplayedConflict(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	data := pngOf(t, 24, 18, 1)
	w := h.upload("alice", "image/png", data, "Idempotency-Key", "k1")
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	a := decode[intent.Asset](t, w)
	if a.Width != 24 || a.Height != 18 || a.Size != int64(len(data)) || a.ContentType != "image/png" || a.TaskID != nil || len(a.SHA256) != 64 {
		t.Fatalf("asset %+v", a)
	}
	if loc := w.Header().Get("Location"); loc != "/v1/assets/"+a.ID {
		t.Fatalf("Location %q", loc)
	}
	if _, ok := w.Header()["Idempotent-Replayed"]; ok {
		t.Fatal("a created answer says replayed")
	}
	got := h.do(req{method: "GET", path: "/v1/assets/" + a.ID + "/content", actor: "alice"})
	if got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), data) || got.Header().Get("ETag") != `"`+a.SHA256+`"` {
		t.Fatalf("content: %d, %d bytes, etag %q", got.Code, got.Body.Len(), got.Header().Get("ETag"))
	}

	// Replays: the bare key and the quoted key are the same key.
	for _, key := range []string{"k1", `"k1"`} {
		w = h.upload("alice", "image/png", data, "Idempotency-Key", key)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay with %s: %d %s", key, w.Code, w.Body)
		}
		if again := decode[intent.Asset](t, w); again != a {
			t.Fatalf("replay answered %+v, want %+v", again, a)
		}
	}
	// Other bytes under the key: 409 with the exact detail.
	p := wantProblem(t, h.upload("alice", "image/png", pngOf(t, 24, 18, 2), "Idempotency-Key", "k1"), http.StatusConflict)
	if p.Detail != intent.ConflictMessage {
		t.Fatalf("conflict detail %q", p.Detail)
	}
	// Another actor's k1 is theirs.
	if w := h.upload("bob", "image/png", pngOf(t, 24, 18, 2), "Idempotency-Key", "k1"); w.Code != http.StatusCreated {
		t.Fatalf("bob's k1: %d %s", w.Code, w.Body)
	}
	// Without a key, each upload is a new asset.
	w1 := h.upload("alice", "image/png", data)
	w2 := h.upload("alice", "image/png", data)
	if w1.Code != http.StatusCreated || w2.Code != http.StatusCreated || decode[intent.Asset](t, w1).ID == decode[intent.Asset](t, w2).ID {
		t.Fatalf("keyless uploads: %d %d", w1.Code, w2.Code)
	}
	// JPEG and WebP.
	if w := h.upload("alice", "image/jpeg", jpegOf(t, 13, 11)); w.Code != http.StatusCreated || decode[intent.Asset](t, w).Width != 13 {
		t.Fatalf("jpeg: %d %s", w.Code, w.Body)
	}
	if w := h.upload("alice", "image/webp", tinyWebP); w.Code != http.StatusCreated || decode[intent.Asset](t, w).ContentType != "image/webp" {
		t.Fatalf("webp: %d %s", w.Code, w.Body)
	}
	if n := h.countAssets(); n != 6 {
		t.Fatalf("%d assets, want 6", n)
	}
}

func TestUploadUnsupportedMedia(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	png := pngOf(t, 8, 8, 1)
	for i, tc := range []struct {
		name, contentType string
		body              []byte
	}{
		{"no content type", "", png},
		{"text", "text/plain", []byte("not an image")},
		{"json", "application/json", []byte(`{"a":1}`)},
		{"gif", "image/gif", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00")},
		{"a jpeg said to be png", "image/png", jpegOf(t, 8, 8)},
		{"a png said to be webp", "image/webp", png},
		{"text said to be png", "image/png", []byte("plain text, not a picture")},
		{"a broken png", "image/png", png[:24]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.upload("alice", tc.contentType, tc.body, "Idempotency-Key", fmt.Sprintf("k%d", i)), http.StatusUnsupportedMediaType)
		})
	}
	if n := h.countAssets(); n != 0 {
		t.Fatalf("%d assets stored by refused uploads", n)
	}
	if _, err := h.store.LookupUpload(context.Background(), "alice", "k4"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("a refused upload bound its key: %v", err)
	}
}

func TestUploadBadKey(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	png := pngOf(t, 8, 8, 1)
	p := wantProblem(t, h.upload("alice", "image/png", png, "Idempotency-Key", "a", "Idempotency-Key", "b"), http.StatusBadRequest)
	if !p.hasField("Idempotency-Key") {
		t.Fatalf("two keys: %+v", p)
	}
	wantProblem(t, h.upload("alice", "image/png", png, "Idempotency-Key", `"unterminated`), http.StatusBadRequest)
	wantProblem(t, h.upload("alice", "image/png", png, "Idempotency-Key", `""`), http.StatusBadRequest)
	if n := h.countAssets(); n != 0 {
		t.Fatalf("%d assets stored", n)
	}
}

// countingBody is a request body of unknown length that counts what was
// read of it.
type countingBody struct {
	r    io.Reader
	mu   sync.Mutex
	read int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.mu.Lock()
	c.read += int64(n)
	c.mu.Unlock()
	return n, err
}

func TestUploadTooLarge(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	header := pngOf(t, 4, 4, 1)
	// 21 MiB of a PNG, streamed with no declared length: 413 as soon as
	// the reading passes 20 MiB.
	body := &countingBody{r: io.MultiReader(bytes.NewReader(header), io.LimitReader(zeros{}, 21<<20))}
	r := httptest.NewRequest(http.MethodPost, "/v1/uploads", body)
	r.ContentLength = -1
	r.Header.Set("Content-Type", "image/png")
	r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	wantProblem(t, w, http.StatusRequestEntityTooLarge)
	if body.read > 20<<20+64<<10 {
		t.Fatalf("read %d bytes of a body refused at 20 MiB", body.read)
	}
	// A declared length over the limit is refused unread, even when the
	// type is wrong too (413 is checked first).
	body = &countingBody{r: bytes.NewReader(make([]byte, 1024))}
	r = httptest.NewRequest(http.MethodPost, "/v1/uploads", body)
	r.ContentLength = 20<<20 + 1
	r.Header.Set("Content-Type", "text/plain")
	r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
	w = httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	wantProblem(t, w, http.StatusRequestEntityTooLarge)
	if body.read != 0 {
		t.Fatalf("read %d bytes of a body declared too large", body.read)
	}
	if n := h.countAssets(); n != 0 {
		t.Fatalf("%d assets stored", n)
	}
}

// TestUploadLimitBoundary: a body of exactly the limit is taken, one byte
// more is 413 (a PNG's trailing bytes do not change its header).
func TestUploadLimitBoundary(t *testing.T) {
	t.Parallel()
	const limit = 4096
	h := newPubHarness(t, httpapi.Limits{UploadBody: limit})
	exact := append(pngOf(t, 4, 4, 1), make([]byte, limit)...)[:limit]
	if w := h.upload("alice", "image/png", exact); w.Code != http.StatusCreated || decode[intent.Asset](t, w).Size != limit {
		t.Fatalf("a body of exactly the limit: %d %s", w.Code, w.Body)
	}
	over := append(exact, 0)
	wantProblem(t, h.upload("alice", "image/png", over), http.StatusRequestEntityTooLarge)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestUploadConcurrentOneKeyOverHTTP races one key through the API: one
// 201, the rest 200, one asset.
func TestUploadConcurrentOneKeyOverHTTP(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	data := pngOf(t, 32, 32, 4)
	const n = 16
	var wg sync.WaitGroup
	codes := make([]int, n)
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w := h.upload("alice", "image/png", data, "Idempotency-Key", "same")
			codes[i] = w.Code
			if w.Code == http.StatusOK || w.Code == http.StatusCreated {
				ids[i] = decode[intent.Asset](t, w).ID
			}
		}(i)
	}
	wg.Wait()
	created := 0
	for i := range codes {
		switch codes[i] {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("try %d: status %d", i, codes[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("tries named %s and %s", ids[0], ids[i])
		}
	}
	if created != 1 || h.countAssets() != 1 {
		t.Fatalf("%d created, %d assets; want 1 and 1", created, h.countAssets())
	}
}

func TestUploadsAndPublicationsUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	wantProblem(t, h.upload("alice", "image/png", pngOf(t, 4, 4, 1)), http.StatusServiceUnavailable)
	wantProblem(t, h.do(req{method: "POST", path: "/v1/publications", actor: "alice", body: `{}`,
		header: http.Header{"Content-Type": {"application/json"}}}), http.StatusServiceUnavailable)
	wantProblem(t, h.do(req{method: "GET", path: "/v1/publications/x", actor: "alice"}), http.StatusServiceUnavailable)
	if w := h.upload("", "image/png", pngOf(t, 4, 4, 1)); w.Code != http.StatusUnauthorized {
		t.Fatalf("an upload without a token: %d", w.Code)
	}
}
