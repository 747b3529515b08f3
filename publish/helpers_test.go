package publish_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"studio/blob"
	"studio/intent"
	"studio/publish"
	"studio/store"
	"studio/store/sqlite"
	"studio/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one database and one blob directory.
type env struct {
	t     *testing.T
	dir   string
	st    *sqlite.Store
	blobs *blob.FS
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "studio.db"), Synchronous: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := blob.NewFS(filepath.Join(dir, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dir: dir, st: st, blobs: b}
}

// pngOf is a small PNG that differs with i.
func pngOf(t *testing.T, i int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 8, 6))
	for y := 0; y < 6; y++ {
		for x := 0; x < 8; x++ {
			img.Set(x, y, color.RGBA{R: uint8(i), G: uint8(i >> 8), B: uint8(x + y), A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// batch makes a batch of n tasks for alice, each completed with a real
// PNG stored in the blob store, and returns the batch id and the assets in
// plan order.
func (e *env) batch(requestID string, n int) (string, []intent.Asset) {
	e.t.Helper()
	ctx := context.Background()
	in := storetest.Intent(e.t, "alice", requestID, "fp-"+requestID, n)
	if _, _, err := e.st.CreateIntent(ctx, in); err != nil {
		e.t.Fatal(err)
	}
	made := map[string]intent.Asset{}
	for len(made) < n {
		cs, err := e.st.ClaimTasks(ctx, store.ClaimParams{Owner: "maker", Limit: 100, TTL: time.Minute})
		if err != nil || len(cs) == 0 {
			e.t.Fatalf("claim tasks: %d %v", len(cs), err)
		}
		comps := make([]store.Completion, len(cs))
		for i, c := range cs {
			data := pngOf(e.t, len(made)+i+n*7)
			info, err := e.blobs.Put(ctx, bytes.NewReader(data))
			if err != nil {
				e.t.Fatal(err)
			}
			id, _ := intent.NewID()
			comps[i] = store.Completion{Lease: c.Lease, Asset: intent.Asset{ID: id, SHA256: info.SHA256, ContentType: "image/png",
				Size: info.Size, Width: 8, Height: 6}}
		}
		res, err := e.st.CompleteLeases(ctx, comps)
		if err != nil {
			e.t.Fatal(err)
		}
		for i, c := range cs {
			if res[i].Err != nil {
				e.t.Fatal(res[i].Err)
			}
			a, err := e.st.GetAsset(ctx, "alice", res[i].AssetID)
			if err != nil {
				e.t.Fatal(err)
			}
			if c.BatchID == in.Batch.ID {
				made[c.ID] = a
			}
		}
	}
	out := make([]intent.Asset, n)
	for i, tk := range in.Batch.Tasks {
		out[i] = made[tk.ID]
	}
	return in.Batch.ID, out
}

// publication creates a publication of the assets and returns it.
func (e *env) publication(requestID, batchID string, assets []intent.Asset, channel string) intent.NewIntent {
	e.t.Helper()
	ids := make([]string, len(assets))
	for i, a := range assets {
		ids[i] = a.ID
	}
	in := storetest.PublicationIntent(e.t, "alice", requestID, "fp-"+requestID, batchID, ids, channel)
	if _, _, err := e.st.CreateIntent(context.Background(), in); err != nil {
		e.t.Fatal(err)
	}
	return in
}

// runner starts a runner on the env's store; it is stopped when the test
// ends.
func (e *env) runner(cfg publish.Config) *publish.Runner {
	e.t.Helper()
	if cfg.Store == nil {
		cfg.Store = e.st
	}
	if cfg.PollMax == 0 {
		cfg.PollMax = 50 * time.Millisecond
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 20 * time.Millisecond
	}
	r, err := publish.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	r.Start(context.Background())
	e.t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

// wait waits until the publication satisfies ok.
func (e *env) wait(id string, ok func(intent.Publication) bool) intent.Publication {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := e.st.GetPublication(context.Background(), "alice", id)
		if err != nil {
			e.t.Fatal(err)
		}
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("publication %s never got there: %+v", id, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ended(p intent.Publication) bool { return p.Counts.Ended() == p.ItemCount }

func (e *env) gallery() *publish.Gallery {
	e.t.Helper()
	g, err := publish.NewGallery(filepath.Join(e.dir, "gallery"), e.blobs, e.st)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

func (e *env) items(pubID string) []store.PublicationItem {
	e.t.Helper()
	items, err := e.st.PublicationItems(context.Background(), pubID)
	if err != nil {
		e.t.Fatal(err)
	}
	return items
}

// observed counts Observe calls by outcome.
type observed struct {
	ch chan string
}

func newObserved() *observed { return &observed{ch: make(chan string, 1000)} }

func (o *observed) fn(channel string, outcome publish.Outcome) {
	o.ch <- channel + ":" + string(outcome)
}

func (o *observed) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-o.ch:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no outcome observed")
		return ""
	}
}
