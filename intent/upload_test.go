package intent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"studio/blob"
	"studio/intent"
	"studio/locks"
	"studio/store/sqlite"
)

// tinyWebP is a 1x1 lossless WebP image.
var tinyWebP = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func testImage(w, h int, shade uint8) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{R: shade, G: uint8(x), B: uint8(y), A: 255})
		}
	}
	return img
}

func pngBytes(t testing.TB, w, h int, shade uint8) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, testImage(w, h, shade)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jpegBytes(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, testImage(w, h, 9), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestInspectImage(t *testing.T) {
	t.Parallel()
	png := pngBytes(t, 7, 5, 1)
	jpg := jpegBytes(t, 9, 4)
	for _, tc := range []struct {
		name, declared string
		body           []byte
		want           intent.ImageInfo
		code           string
	}{
		{"png", "image/png", png, intent.ImageInfo{ContentType: "image/png", Width: 7, Height: 5}, ""},
		{"png with a parameter", "image/png; name=a.png", png, intent.ImageInfo{ContentType: "image/png", Width: 7, Height: 5}, ""},
		{"jpeg", "image/jpeg", jpg, intent.ImageInfo{ContentType: "image/jpeg", Width: 9, Height: 4}, ""},
		{"webp", "image/webp", tinyWebP, intent.ImageInfo{ContentType: "image/webp", Width: 1, Height: 1}, ""},
		{"jpeg said to be png", "image/png", jpg, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"png said to be webp", "image/webp", png, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"webp said to be jpeg", "image/jpeg", tinyWebP, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"text said to be png", "image/png", []byte("hello, this is not an image at all"), intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"gif", "image/gif", []byte("GIF89a\x01\x00\x01\x00"), intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"no content type", "", png, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"json", "application/json", png, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"bad media type", "image/", png, intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"png signature, broken header", "image/png", png[:20], intent.ImageInfo{}, intent.EUnsupportedMedia},
		{"empty", "image/png", nil, intent.ImageInfo{}, intent.EUnsupportedMedia},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := intent.InspectImage(tc.declared, bytes.NewReader(tc.body))
			if code := intent.ErrorCode(err); code != tc.code {
				t.Fatalf("error %v (code %q), want code %q", err, code, tc.code)
			}
			if got != tc.want {
				t.Fatalf("InspectImage = %+v, want %+v", got, tc.want)
			}
		})
	}
	// A lie names both types.
	_, err := intent.InspectImage("image/png", bytes.NewReader(jpg))
	if msg := intent.ErrorMessage(err); !strings.Contains(msg, "image/jpeg") || !strings.Contains(msg, "image/png") {
		t.Fatalf("the lie's message %q names not both types", msg)
	}
}

// blobWriter adapts the blob store to the Uploads port, and counts puts.
type blobWriter struct {
	fs   *blob.FS
	puts atomic.Int64
	fail error
}

func (b *blobWriter) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	b.puts.Add(1)
	if b.fail != nil {
		return "", 0, b.fail
	}
	info, err := b.fs.Put(ctx, r)
	return info.SHA256, info.Size, err
}

type uploadRig struct {
	store *sqlite.Store
	blobs *blobWriter
	up    *intent.Uploads
}

func newUploadRig(t *testing.T) *uploadRig {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, filepath.Join(dir, "s.db"))
	fs, err := blob.NewFS(filepath.Join(dir, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	e := locks.New(locks.NewMemoryStore())
	t.Cleanup(func() { e.Close() })
	bw := &blobWriter{fs: fs}
	return &uploadRig{store: st, blobs: bw,
		up: &intent.Uploads{Store: st, Blobs: bw, Locker: locks.Keyed{E: e}}}
}

func (r *uploadRig) upload(t *testing.T, actor, key, contentType string, data []byte) (intent.UploadResult, error) {
	t.Helper()
	return r.up.Upload(context.Background(), intent.UploadRequest{Actor: actor, ClientKey: key, ContentType: contentType, Body: bodyOf(data)})
}

func (r *uploadRig) countAssets(t *testing.T) int {
	t.Helper()
	var n int
	if err := r.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM assets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUploadReplayAndConflict(t *testing.T) {
	t.Parallel()
	r := newUploadRig(t)
	data := pngBytes(t, 12, 10, 1)
	first, err := r.upload(t, "alice", "k1", "image/png", data)
	if err != nil || first.Replayed {
		t.Fatalf("first upload: %+v %v", first, err)
	}
	a := first.Asset
	if a.Width != 12 || a.Height != 10 || a.Size != int64(len(data)) || a.ContentType != "image/png" || a.TaskID != nil || a.Actor != "alice" {
		t.Fatalf("asset %+v", a)
	}
	if ok, err := r.blobs.fs.Exists(context.Background(), a.SHA256); err != nil || !ok {
		t.Fatalf("the bytes are not stored: %v %v", ok, err)
	}
	again, err := r.upload(t, "alice", "k1", "image/png", data)
	if err != nil || !again.Replayed || again.Asset.ID != a.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	if r.blobs.puts.Load() != 1 {
		t.Fatalf("%d blob writes, want 1 (a replay writes nothing)", r.blobs.puts.Load())
	}
	_, err = r.upload(t, "alice", "k1", "image/png", pngBytes(t, 12, 10, 2))
	if intent.ErrorCode(err) != intent.EConflict || intent.ErrorMessage(err) != intent.ConflictMessage {
		t.Fatalf("other bytes under the key: %v", err)
	}
	// Bob's k1 is his own.
	bob, err := r.upload(t, "bob", "k1", "image/png", pngBytes(t, 12, 10, 2))
	if err != nil || bob.Replayed || bob.Asset.ID == a.ID {
		t.Fatalf("bob's upload: %+v %v", bob, err)
	}
	// Without a key, every upload is a new asset, even of the same bytes.
	n1, err1 := r.upload(t, "alice", "", "image/png", data)
	n2, err2 := r.upload(t, "alice", "", "image/png", data)
	if err1 != nil || err2 != nil || n1.Asset.ID == n2.Asset.ID || n1.Replayed || n2.Replayed {
		t.Fatalf("uploads without a key: %+v %v / %+v %v", n1, err1, n2, err2)
	}
	if n := r.countAssets(t); n != 4 {
		t.Fatalf("%d assets, want 4", n)
	}
	// A lie about the type is refused before the key is looked at.
	if _, err := r.upload(t, "alice", "k1", "image/webp", data); intent.ErrorCode(err) != intent.EUnsupportedMedia {
		t.Fatalf("a lie: %v", err)
	}
	if _, err := r.upload(t, "alice", "bad\x01key", "image/png", data); intent.ErrorCode(err) != intent.EInvalid {
		t.Fatalf("a key with a control character: %v", err)
	}
}

// TestUploadConcurrentOneKey races uploads of one key: one asset, one blob
// write (the lock), and every answer names that asset.
func TestUploadConcurrentOneKey(t *testing.T) {
	t.Parallel()
	r := newUploadRig(t)
	data := pngBytes(t, 16, 16, 5)
	const n = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	created := 0
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := r.up.Upload(context.Background(), intent.UploadRequest{Actor: "alice", ClientKey: "one", ContentType: "image/png", Body: bodyOf(data)})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[res.Asset.ID] = true
			if !res.Replayed {
				created++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d uploads named %d assets, %d created; want 1 and 1", n, len(ids), created)
	}
	if c := r.countAssets(t); c != 1 {
		t.Fatalf("%d assets stored", c)
	}
	if p := r.blobs.puts.Load(); p != 1 {
		t.Fatalf("%d blob writes under the lock, want 1", p)
	}
}

// crashingStore fails CreateUpload (as a crash between the file and the
// row would) and records whether the bytes were stored when it was called.
type crashingStore struct {
	intent.UploadStore
	fs           *blob.FS
	crashes      int
	bytesStored  []bool
	createCalled int
}

func (c *crashingStore) CreateUpload(ctx context.Context, in intent.NewUpload) (intent.Asset, bool, error) {
	c.createCalled++
	ok, err := c.fs.Exists(ctx, in.Asset.SHA256)
	if err != nil {
		return intent.Asset{}, false, err
	}
	c.bytesStored = append(c.bytesStored, ok)
	if c.crashes > 0 {
		c.crashes--
		return intent.Asset{}, false, errors.New("the process died here")
	}
	return c.UploadStore.CreateUpload(ctx, in)
}

// TestUploadCrashBetweenFileAndRow: the row is written only after the
// bytes; a crash between them leaves an unnamed file (which the sweep may
// remove) and no row, and the retry reuses the file.
func TestUploadCrashBetweenFileAndRow(t *testing.T) {
	t.Parallel()
	r := newUploadRig(t)
	cs := &crashingStore{UploadStore: r.store, fs: r.blobs.fs, crashes: 1}
	r.up.Store = cs
	data := pngBytes(t, 20, 20, 7)
	if _, err := r.upload(t, "alice", "k", "image/png", data); err == nil {
		t.Fatal("the crashed upload succeeded")
	}
	if n := r.countAssets(t); n != 0 {
		t.Fatalf("%d asset rows after the crash", n)
	}
	if _, err := r.store.LookupUpload(context.Background(), "alice", "k"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the key was bound: %v", err)
	}
	res, err := r.upload(t, "alice", "k", "image/png", data)
	if err != nil || res.Replayed {
		t.Fatalf("the retry: %+v %v", res, err)
	}
	if len(cs.bytesStored) != 2 || !cs.bytesStored[0] || !cs.bytesStored[1] {
		t.Fatalf("bytes stored when the row was written: %v, want always", cs.bytesStored)
	}
	// Every row names stored bytes.
	rows, err := r.store.ReadDB().Query(`SELECT sha256 FROM assets`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var sha string
		if err := rows.Scan(&sha); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.blobs.fs.Exists(context.Background(), sha); err != nil || !ok {
			t.Fatalf("a row names %s, which is not stored", sha)
		}
	}

	// A failed write of the bytes writes no row at all.
	r2 := newUploadRig(t)
	r2.blobs.fail = errors.New("disk full")
	cs2 := &crashingStore{UploadStore: r2.store, fs: r2.blobs.fs}
	r2.up.Store = cs2
	if _, err := r2.upload(t, "alice", "k", "image/png", data); err == nil {
		t.Fatal("an upload whose bytes could not be stored succeeded")
	}
	if cs2.createCalled != 0 || r2.countAssets(t) != 0 {
		t.Fatalf("a row was written without its bytes (%d calls)", cs2.createCalled)
	}
}

// bodyOf is data as an upload takes it.
func bodyOf(data []byte) intent.UploadBody {
	sum := sha256.Sum256(data)
	return intent.UploadBody{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)),
		Open: func() io.ReadSeeker { return bytes.NewReader(data) }}
}
