package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"studio/intent"
	"studio/publish"
	"studio/store"
	"studio/store/storetest"
)

// TestGalleryServesPublishedFiles: GET /gallery/{publication}/{file}
// answers, with no token, the manifest once an item is published and each
// published item's bytes, and 404 for everything else: an item not
// published yet, a wrong extension, an asset the publication does not
// have, another channel's publication, a publication that does not exist.
func TestGalleryServesPublishedFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	ctx := context.Background()
	batch, assetIDs := storetest.BatchWithAssets(t, h.store, "alice", "gen", 4)
	images := map[string][]byte{}
	assets := make([]intent.Asset, len(assetIDs))
	for i, id := range assetIDs {
		a, err := h.store.GetAsset(ctx, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		assets[i] = a
		// The store suite's assets name made-up SHA-256s: the blobs answer
		// bytes of their own under them.
		images[id] = []byte(fmt.Sprintf("image %d", i))
		h.blobs.mu.Lock()
		h.blobs.data[a.SHA256] = images[id]
		h.blobs.mu.Unlock()
	}
	pub := storetest.PublicationIntent(t, "alice", "pub", "fp-pub", batch, assetIDs[:3], intent.ChannelGallery)
	hook := storetest.PublicationIntent(t, "alice", "hook", "fp-hook", batch, assetIDs[:1], intent.ChannelWebhook)
	for _, in := range []intent.NewIntent{pub, hook} {
		if _, _, err := h.store.CreateIntent(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		header := http.Header{}
		for i := 0; i+1 < len(hdr); i += 2 {
			header.Set(hdr[i], hdr[i+1])
		}
		return h.do(req{method: "GET", path: path, header: header}).Result()
	}
	pubPath := "/gallery/" + pub.Publication.ID + "/"
	if r := get(pubPath + publish.ManifestName); r.StatusCode != http.StatusNotFound {
		t.Fatalf("manifest before any item is published: %d", r.StatusCode)
	}

	// Two items of the gallery publication and the webhook's one succeed.
	claimed, err := h.store.ClaimItems(ctx, store.ClaimParams{Owner: "w", Limit: 10, TTL: time.Minute})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claimed %d items: %v", len(claimed), err)
	}
	var done []store.Completion
	for _, c := range claimed {
		if c.PublicationID == hook.Publication.ID || c.Asset.ID != assetIDs[2] {
			done = append(done, store.Completion{Lease: c.Lease})
		}
	}
	if res, err := h.store.CompleteLeases(ctx, done); err != nil || len(res) != 3 {
		t.Fatalf("complete: %v", err)
	}

	for _, id := range assetIDs[:2] {
		r := get(pubPath + id + ".png")
		body := readAll(t, r)
		a, _ := h.store.GetAsset(ctx, "alice", id)
		if r.StatusCode != http.StatusOK || !bytes.Equal(body, images[id]) || r.Header.Get("ETag") != `"`+a.SHA256+`"` ||
			r.Header.Get("Content-Type") != "image/png" || r.Header.Get("Cache-Control") != "public, max-age=3600" {
			t.Fatalf("%s.png: %d %v %q", id, r.StatusCode, r.Header, body)
		}
		if r := get(pubPath+id+".png", "If-None-Match", `"`+a.SHA256+`"`); r.StatusCode != http.StatusNotModified {
			t.Fatalf("%s.png with its ETag: %d", id, r.StatusCode)
		}
		if r := get(pubPath+id+".png", "Range", "bytes=0-2"); r.StatusCode != http.StatusPartialContent || readAll(t, r) == nil {
			t.Fatalf("%s.png ranged: %d", id, r.StatusCode)
		}
	}
	r := get(pubPath + publish.ManifestName)
	body := readAll(t, r)
	items, err := h.store.PublicationItems(ctx, pub.Publication.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := publish.NewManifest(pub.Publication.ID, items).Encode()
	if err != nil || r.StatusCode != http.StatusOK || !bytes.Equal(body, want) || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("manifest: %d %v\n%s\nwant\n%s", r.StatusCode, err, body, want)
	}
	if r := get(pubPath+publish.ManifestName, "If-None-Match", r.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Fatalf("manifest with its ETag: %d", r.StatusCode)
	}

	for name, path := range map[string]string{
		"an item not published yet":       pubPath + assetIDs[2] + ".png",
		"a wrong extension":               pubPath + assetIDs[0] + ".jpg",
		"no extension":                    pubPath + assetIDs[0],
		"an asset not in the publication": pubPath + assetIDs[3] + ".png",
		"another channel's file":          "/gallery/" + hook.Publication.ID + "/" + assetIDs[0] + ".png",
		"another channel's manifest":      "/gallery/" + hook.Publication.ID + "/" + publish.ManifestName,
		"a publication that is not":       "/gallery/" + assetIDs[0] + "/" + publish.ManifestName,
		"a nested path":                   pubPath + "x/" + assetIDs[0] + ".png",
	} {
		if r := get(path); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s (%s): %d, want 404", name, path, r.StatusCode)
		}
	}
}

// readAll reads and closes an answer's body.
func readAll(t *testing.T, r *http.Response) []byte {
	t.Helper()
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
