package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"studio/intent"
	"studio/store/postgres/pgtest"
)

// galleryGet answers a GET of a gallery path with no token, without
// following redirects.
func galleryGet(t *testing.T, addr, path string) (*http.Response, []byte) {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// galleryManifest is what the gallery's manifest.json says of its files.
type galleryManifest struct {
	PublicationID string `json:"publication_id"`
	Items         []struct {
		ID     string `json:"id"`
		File   string `json:"file"`
		SHA256 string `json:"sha256"`
	} `json:"items"`
}

// A gallery publication with the assets in an object store: its files are
// the objects already in the bucket (one per image, no copy), no instance
// writes a gallery file to its disk, and every instance serves the
// publication at /gallery/ with no token, through itself or by a
// presigned redirect. On PostgreSQL two API instances share nothing but the
// database and the bucket (each its own --data): one runs the workers and
// carries the publication out, the other, with no workers, serves it. The
// same holds with the bytes in PostgreSQL's blobs table instead.
func TestGalleryInObjectStore(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres", "postgres-blobs"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			bk := newBucket(t)
			dataA, dataB := t.TempDir(), t.TempDir()
			envA := append(bk.srv.Env(), "STUDIO_DATA="+dataA)
			var pgURL string
			assets := []string{"--assets", bk.url("")}
			redirect := []string{"--assets-redirect", "1m"}
			if engine != "sqlite" {
				pgURL, _ = pgtest.Schema(t)
				envA = append(envA, "STUDIO_DATABASE_URL="+pgURL)
			}
			if engine == "postgres-blobs" {
				assets, redirect = nil, nil
			}
			a := startProcess(t, envA, append([]string{"serve", "--addr", "127.0.0.1:0", "--workers", "2"}, assets...)...)
			b := a // on SQLite the one instance serves what it published
			var token string
			if engine != "sqlite" {
				envB := append(bk.srv.Env(), "STUDIO_DATA="+dataB, "STUDIO_DATABASE_URL="+pgURL)
				b = startProcess(t, envB, append(append([]string{"serve", "--addr", "127.0.0.1:0", "--workers", "0"}, assets...), redirect...)...)
				token = pgToken(t, pgURL, "alice")
			} else {
				token = readToken(t, dataA)
			}
			ctx := context.Background()
			c := newClient(t, a.Addr, token)
			f := &farm{t: t, data: dataA, api: a, c: c}
			batch := f.generate(c, workGeneration("gallery-s3", 1, 3, []string{"sketch"}, map[string]any{"width": 64, "height": 48}))
			batch = f.waitBatch(c, batch.ID, 2*time.Minute, "the batch to drain", batchEnded)
			if batch.State != intent.StateSucceeded {
				t.Fatalf("batch %+v", batch)
			}
			var published []string
			images := map[string][]byte{}
			for _, tk := range tasksOf(t, c, batch.ID) {
				published = append(published, *tk.AssetID)
				resp, body := get(t, c, token, "/v1/assets/"+*tk.AssetID+"/content?redirect=false")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("asset content: %d", resp.StatusCode)
				}
				images[*tk.AssetID] = body
			}
			objectsBefore := bk.keys("sha256")

			// Publish two of the three, twice (the answer lost): one
			// publication.
			pubReq := map[string]any{"request_id": "pub-s3", "batch_id": batch.ID, "asset_ids": published[:2]}
			var pub, again publicationAnswer
			if resp, err := c.do(ctx, "POST", "/v1/publications", pubReq, &pub); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("publish: %v %v", resp, err)
			}
			if resp, err := c.do(ctx, "POST", "/v1/publications", pubReq, &again); err != nil || resp.StatusCode != http.StatusOK || again.ID != pub.ID {
				t.Fatalf("publish again: %v %v %+v", resp, err, again)
			}
			if done := c.waitPublication(ctx, pub.ID); done.State != "succeeded" || done.Counts.Succeeded != 2 {
				t.Fatalf("publication %+v", done)
			}

			// The gallery's files are the images already in the bucket.
			if got := bk.keys("sha256"); !slices.Equal(got, objectsBefore) {
				t.Fatalf("the bucket holds %v after publishing, %v before", got, objectsBefore)
			}
			// No gallery on any disk.
			for _, data := range []string{dataA, dataB} {
				if _, err := os.Stat(filepath.Join(data, "gallery")); !os.IsNotExist(err) {
					t.Fatalf("%s/gallery exists (%v)", data, err)
				}
			}

			// Served by the other instance, with no token.
			resp, body := galleryGet(t, b.Addr, "/gallery/"+pub.ID+"/manifest.json")
			var m galleryManifest
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil || m.PublicationID != pub.ID || len(m.Items) != 2 {
				t.Fatalf("manifest: %d %s", resp.StatusCode, body)
			}
			for i, e := range m.Items {
				img := images[e.ID]
				inStore := slices.Contains(objectsBefore, e.SHA256)
				if engine == "postgres-blobs" {
					inStore = blobRows(t, pgURL, e.SHA256) == 1
				}
				if e.ID != published[i] || e.File != e.ID+".png" || e.SHA256 != blobSHA(img) || !inStore {
					t.Fatalf("manifest item %d: %+v", i, e)
				}
				resp, body := galleryGet(t, b.Addr, "/gallery/"+pub.ID+"/"+e.File+"?redirect=false")
				if resp.StatusCode != http.StatusOK || !bytes.Equal(body, img) || resp.Header.Get("ETag") != `"`+e.SHA256+`"` ||
					resp.Header.Get("Content-Type") != "image/png" {
					t.Fatalf("%s through studio: %d, %d bytes", e.File, resp.StatusCode, len(body))
				}
				resp, body = galleryGet(t, b.Addr, "/gallery/"+pub.ID+"/"+e.File)
				if redirect == nil || b == a {
					// No --assets-redirect: streamed.
					if resp.StatusCode != http.StatusOK || !bytes.Equal(body, img) {
						t.Fatalf("%s: %d", e.File, resp.StatusCode)
					}
					continue
				}
				loc := resp.Header.Get("Location")
				if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, bk.srv.Endpoint()) {
					t.Fatalf("%s: %d to %q, want a presigned redirect", e.File, resp.StatusCode, loc)
				}
				direct, err := http.Get(loc)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(direct.Body)
				direct.Body.Close()
				if direct.StatusCode != http.StatusOK || !bytes.Equal(got, img) {
					t.Fatalf("%s by its presigned URL: %d, %d bytes", e.File, direct.StatusCode, len(got))
				}
			}
			// The image not published is not in the gallery.
			if resp, _ := galleryGet(t, b.Addr, "/gallery/"+pub.ID+"/"+published[2]+".png"); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("an image not published: %d", resp.StatusCode)
			}
		})
	}
}

// blobRows counts the blobs table's rows of a SHA-256.
func blobRows(t *testing.T, url, sha string) int {
	t.Helper()
	var n int
	if err := pgStore(t, url).Pool().QueryRow(context.Background(), `SELECT count(*) FROM blobs WHERE sha256 = $1`, sha).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
