package publish_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"studio/blob"
	"studio/intent"
	"studio/leasequeue"
	"studio/publish"
	"studio/store"
)

// checkGallery proves the publication's directory holds exactly one file
// per item, each the asset's bytes, and a manifest of every item, and
// that no temporary file is left.
func checkGallery(t *testing.T, e *env, g *publish.Gallery, pubID string, assets []intent.Asset) {
	t.Helper()
	dir := filepath.Join(g.Dir(), pubID)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	want := []string{publish.ManifestName}
	for _, a := range assets {
		want = append(want, publish.FileName(a.ID, a.ContentType))
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("gallery holds %v, want exactly %v", names, want)
	}
	for _, a := range assets {
		data, err := os.ReadFile(filepath.Join(dir, publish.FileName(a.ID, a.ContentType)))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != a.SHA256 {
			t.Fatalf("the file of asset %s is not its bytes", a.ID)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, publish.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m publish.Manifest
	if err := json.Unmarshal(raw, &m, json.RejectUnknownMembers(true)); err != nil {
		t.Fatal(err)
	}
	if m.PublicationID != pubID || len(m.Items) != len(assets) {
		t.Fatalf("manifest %+v", m)
	}
	items := e.items(pubID)
	for i, a := range assets {
		en := m.Items[i]
		if en.ID != a.ID || en.SHA256 != a.SHA256 || en.ItemID != items[i].ID || en.Prompt != "a knight in the rain" ||
			en.Frame == "" || en.Generator == "" || en.File != publish.FileName(a.ID, a.ContentType) || en.Width != 8 || en.Height != 6 {
			t.Fatalf("manifest entry %d = %+v, asset %+v", i, en, a)
		}
	}
	tmp, err := os.ReadDir(filepath.Join(g.Dir(), ".tmp"))
	if err != nil || len(tmp) != 0 {
		t.Fatalf("temporary files left: %v %v", tmp, err)
	}
}

func TestGalleryPublishesEachItemOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 6)
	pub := e.publication("pub", batch, assets[:5], intent.ChannelGallery)
	g := e.gallery()
	e.runner(publish.Config{Options: leasequeue.Options{Concurrency: 3}, Channels: map[string]publish.Channel{intent.ChannelGallery: g}})
	p := e.wait(pub.Publication.ID, ended)
	if p.State != intent.StateSucceeded || p.Counts.Succeeded != 5 {
		t.Fatalf("publication %+v", p)
	}
	checkGallery(t, e, g, p.ID, assets[:5])
	for _, it := range e.items(p.ID) {
		if it.Attempts != 1 || it.State != intent.StateSucceeded {
			t.Fatalf("item %+v", it)
		}
	}

	// Publishing the items again, twice at once each (a lost lease and its
	// successor), rewrites the same files: still one copy of each.
	var wg sync.WaitGroup
	for _, it := range e.items(p.ID) {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Publish(context.Background(), store.ClaimedItem{PublicationItem: it}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	checkGallery(t, e, g, p.ID, assets[:5])

	// Another publication of the same assets is another directory.
	pub2 := e.publication("pub-2", batch, assets, intent.ChannelGallery)
	e.wait(pub2.Publication.ID, ended)
	checkGallery(t, e, g, pub2.Publication.ID, assets)
	checkGallery(t, e, g, p.ID, assets[:5])
}

// TestGalleryFinishesAfterACrash: a worker wrote an item's file and died
// before recording it; the item's lease expires, the next runner publishes
// it again, and the gallery still holds one copy.
func TestGalleryFinishesAfterACrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 3)
	pub := e.publication("pub", batch, assets, intent.ChannelGallery)
	g := e.gallery()
	ttl := 300 * time.Millisecond
	crashed, err := e.st.ClaimItems(context.Background(), store.ClaimParams{Owner: "dead", Limit: 2, TTL: ttl})
	if err != nil || len(crashed) != 2 {
		t.Fatalf("claim: %d %v", len(crashed), err)
	}
	for _, c := range crashed {
		if err := g.Publish(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	// The dead worker's leases run out; a live runner finishes everything.
	e.runner(publish.Config{Options: leasequeue.Options{LeaseTTL: 5 * time.Second}, Channels: map[string]publish.Channel{intent.ChannelGallery: g}})
	p := e.wait(pub.Publication.ID, ended)
	if p.State != intent.StateSucceeded {
		t.Fatalf("publication %+v", p)
	}
	checkGallery(t, e, g, p.ID, assets)
	for _, it := range e.items(p.ID) {
		want := 1
		if it.ID == crashed[0].Lease.ID || it.ID == crashed[1].Lease.ID {
			want = 2
		}
		if it.Attempts != want {
			t.Fatalf("item %s: %d attempts, want %d", it.ID, it.Attempts, want)
		}
	}
	// The dead worker's late completion changes nothing.
	res, err := e.st.CompleteLeases(context.Background(), []store.Completion{{Lease: crashed[0].Lease}})
	if err != nil || !errors.Is(res[0].Err, store.ErrLeaseLost) {
		t.Fatalf("a completion with the old fence: %v %v", res, err)
	}
}

// receiver is an httptest webhook receiver that records every delivery.
type receiver struct {
	mu         sync.Mutex
	deliveries []delivery
	// answer picks the status of the nth delivery (0-based) of an item.
	answer func(itemID string, nth int) int
	srv    *httptest.Server
	// retryAfter, when set, makes the Retry-After of every answer that
	// is not a 2xx (setRetryAfter). It is called as the answer is
	// written, so that an HTTP date is ahead of the answer, not of the
	// test's start.
	retryAfter func() string
}

type delivery struct {
	key     string
	attempt string
	raw     string
	body    publish.Delivery
	at      time.Time
}

func newReceiver(t *testing.T, answer func(itemID string, nth int) int) *receiver {
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var d publish.Delivery
		if err := json.Unmarshal(raw, &d, json.RejectUnknownMembers(true)); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("delivery %q: %v", raw, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		nth := 0
		for _, prev := range rc.deliveries {
			if prev.body.ItemID == d.ItemID {
				nth++
			}
		}
		rc.deliveries = append(rc.deliveries, delivery{key: r.Header.Get("Idempotency-Key"), attempt: r.Header.Get(publish.AttemptHeader),
			raw: string(raw), body: d, at: time.Now()})
		retryAfter := rc.retryAfter
		rc.mu.Unlock()
		status := http.StatusOK
		if rc.answer != nil {
			status = rc.answer(d.ItemID, nth)
		}
		if retryAfter != nil && (status < 200 || status > 299) {
			if v := retryAfter(); v != "" {
				w.Header().Set("Retry-After", v)
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) setRetryAfter(v func() string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.retryAfter = v
}

func (rc *receiver) all() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.deliveries)
}

func (e *env) webhook(url string) *publish.Webhook {
	e.t.Helper()
	w, err := publish.NewWebhook(url, nil, e.blobs)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// publishToWebhook publishes a batch of n assets to the webhook at url under
// a runner with opts and waits for the publication to end.
func (e *env) publishToWebhook(url string, n int, opts leasequeue.Options) (intent.Publication, []intent.Asset) {
	e.t.Helper()
	batch, assets := e.batch("gen", n)
	pub := e.publication("pub", batch, assets, intent.ChannelWebhook)
	e.runner(publish.Config{Options: opts, Channels: map[string]publish.Channel{intent.ChannelWebhook: e.webhook(url)}})
	return e.wait(pub.Publication.ID, ended), assets
}

// TestWebhookDeliversEveryItemWithItsKey: the receiver fails the first
// delivery of every item; the retry carries the same key, and every item
// arrives with its bytes.
func TestWebhookDeliversEveryItemWithItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(_ string, nth int) int {
		if nth == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	p, assets := e.publishToWebhook(rc.srv.URL, 4, leasequeue.Options{})
	if p.State != intent.StateSucceeded {
		t.Fatalf("publication %+v", p)
	}
	byItem := map[string][]delivery{}
	for _, d := range rc.all() {
		byItem[d.body.ItemID] = append(byItem[d.body.ItemID], d)
	}
	items := e.items(p.ID)
	if len(byItem) != len(items) {
		t.Fatalf("the receiver saw %d items, want %d", len(byItem), len(items))
	}
	for i, it := range items {
		ds := byItem[it.ID]
		if len(ds) != 2 {
			t.Fatalf("item %s delivered %d times, want 2 (one refused, one taken)", it.ID, len(ds))
		}
		for n, d := range ds {
			if d.key != `"`+it.ID+`"` {
				t.Fatalf("delivery %d of item %s carries key %q", n, it.ID, d.key)
			}
			if d.raw != ds[0].raw {
				t.Fatalf("deliveries of item %s differ in their bodies", it.ID)
			}
			if d.attempt != strconv.Itoa(n+1) || d.body.PublicationID != p.ID || d.body.Asset.ID != assets[i].ID || d.body.Prompt != "a knight in the rain" {
				t.Fatalf("delivery %+v", d.body)
			}
			raw, err := base64.StdEncoding.DecodeString(d.body.Content)
			sum := sha256.Sum256(raw)
			if err != nil || hex.EncodeToString(sum[:]) != assets[i].SHA256 {
				t.Fatalf("delivered bytes are not the asset's (%v)", err)
			}
		}
		if it.Attempts != 2 || it.Error != "" {
			t.Fatalf("item %+v: want 2 attempts and no error once done", it)
		}
	}
}

// TestWebhookRefusalFailsAtOnce: a 4xx other than the retryable ones fails
// the item without retrying; the publication fails.
func TestWebhookRefusalFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(string, int) int { return http.StatusUnprocessableEntity })
	p, _ := e.publishToWebhook(rc.srv.URL, 2, leasequeue.Options{})
	if p.State != intent.StateFailed || p.Counts.Failed != 2 {
		t.Fatalf("publication %+v", p)
	}
	if n := len(rc.all()); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
	for _, it := range e.items(p.ID) {
		if it.Attempts != 1 {
			t.Fatalf("item %+v was retried", it)
		}
	}
}

// TestWebhookOutOfAttempts: a receiver that is always down fails each item
// after MaxAttempts deliveries, all with the same key.
func TestWebhookOutOfAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, func(string, int) int { return http.StatusBadGateway })
	p, _ := e.publishToWebhook(rc.srv.URL, 1, leasequeue.Options{MaxAttempts: 3, RetryBase: 5 * time.Millisecond})
	ds := rc.all()
	if p.State != intent.StateFailed || len(ds) != 3 {
		t.Fatalf("publication %+v after %d deliveries, want failed after 3", p, len(ds))
	}
	for _, d := range ds {
		if d.key != ds[0].key {
			t.Fatalf("keys %q and %q", ds[0].key, d.key)
		}
	}
}

// TestWebhookHonoursRetryAfter: after a 429 or a 503 with Retry-After,
// the next delivery comes no sooner than the receiver asked, though the
// runner's own backoff is milliseconds; after a 502 it does not wait for
// a Retry-After (there is none to honour).
func TestWebhookHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		status     int
		retryAfter func() string
		least      time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, func() string { return "1" }, time.Second},
		{"503 seconds", http.StatusServiceUnavailable, func() string { return "1" }, time.Second},
		// An HTTP date has whole seconds: 2 s ahead of the answer, cut to
		// the second, is still at least 1 s ahead of it.
		{"429 date", http.StatusTooManyRequests, func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, time.Second},
	} {
		status := c.status
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rc := newReceiver(t, func(_ string, nth int) int {
				if nth == 0 {
					return status
				}
				return http.StatusOK
			})
			rc.setRetryAfter(c.retryAfter)
			p, _ := e.publishToWebhook(rc.srv.URL, 1, leasequeue.Options{MaxAttempts: 3, RetryBase: 5 * time.Millisecond, RetryMax: 10 * time.Millisecond})
			ds := rc.all()
			if p.State != intent.StateSucceeded || len(ds) != 2 {
				t.Fatalf("publication %+v after %d deliveries, want succeeded after 2", p, len(ds))
			}
			// The wait is stored in milliseconds: allow the rounding.
			if gap := ds[1].at.Sub(ds[0].at); gap < c.least-5*time.Millisecond {
				t.Errorf("the second delivery came %v after the first; the receiver asked for at least %v", gap, c.least)
			}
		})
	}
}

// TestWebhookRetryAfterError: the channel's error carries the receiver's
// Retry-After (seconds or a date) on a 429 or a 503, and none on other
// answers.
func TestWebhookRetryAfterError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 1)
	pub := e.publication("pub", batch, assets, intent.ChannelWebhook)
	items := e.items(pub.Publication.ID)
	if len(items) != 1 {
		t.Fatalf("%d items", len(items))
	}
	cases := []struct {
		status     int
		retryAfter string
		want       time.Duration // 0: none
	}{
		{http.StatusTooManyRequests, "7", 7 * time.Second},
		{http.StatusServiceUnavailable, "120", 2 * time.Minute},
		{http.StatusTooManyRequests, "99999999", publish.MaxRetryAfter},
		{http.StatusTooManyRequests, time.Now().Add(time.Hour + time.Minute).UTC().Format(http.TimeFormat), publish.MaxRetryAfter},
		{http.StatusTooManyRequests, "", 0},
		{http.StatusTooManyRequests, "soon", 0},
		{http.StatusBadGateway, "7", 0},
	}
	for _, c := range cases {
		rc := newReceiver(t, func(string, int) int { return c.status })
		rc.setRetryAfter(func() string { return c.retryAfter })
		err := e.webhook(rc.srv.URL).Publish(context.Background(), store.ClaimedItem{PublicationItem: items[0], Attempt: 1})
		if err == nil || publish.IsPermanent(err) {
			t.Fatalf("%d, Retry-After %q: %v, want a transient error", c.status, c.retryAfter, err)
		}
		d, ok := publish.RetryAfter(err)
		if ok != (c.want > 0) || d != c.want {
			t.Errorf("%d, Retry-After %q: RetryAfter %v, %v; want %v (%v)", c.status, c.retryAfter, d, ok, c.want, err)
		}
	}
}

// blockingChannel runs until its context ends, or until release is closed.
type blockingChannel struct {
	started chan string
	release chan struct{}
	ran     atomic.Int64
}

func newBlocking() *blockingChannel {
	return &blockingChannel{started: make(chan string, 100), release: make(chan struct{})}
}

func (b *blockingChannel) Publish(ctx context.Context, it store.ClaimedItem) error {
	b.ran.Add(1)
	b.started <- it.Lease.ID
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.release:
		return nil
	}
}

// TestRunnerStopHandsItemsBack: items still running when the grace ends
// are canceled and released: queued again at once, not failed.
func TestRunnerStopHandsItemsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 2)
	pub := e.publication("pub", batch, assets, intent.ChannelGallery)
	ch := newBlocking()
	obs := newObserved()
	r, err := publish.New(publish.Config{
		Options: leasequeue.Options{
			Grace: 50 * time.Millisecond,
		},
		Store:    e.st,
		Channels: map[string]publish.Channel{intent.ChannelGallery: ch},
		Observe:  obs.fn,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(context.Background())
	<-ch.started
	<-ch.started
	r.Stop(context.Background())
	for range 2 {
		if got := obs.next(t); got != "gallery:released" {
			t.Fatalf("outcome %q", got)
		}
	}
	p := e.wait(pub.Publication.ID, func(p intent.Publication) bool { return p.Counts.Queued == 2 })
	if p.Counts.Running != 0 {
		t.Fatalf("publication %+v", p)
	}
	// Started again, it finishes them (the release did not use up an
	// attempt's budget: a runner with MaxAttempts 1 still takes them).
	close(ch.release)
	r2 := e.runner(publish.Config{Options: leasequeue.Options{MaxAttempts: 1}, Channels: map[string]publish.Channel{intent.ChannelGallery: ch}})
	_ = r2
	if p := e.wait(pub.Publication.ID, ended); p.State != intent.StateSucceeded {
		t.Fatalf("after restart: %+v", p)
	}
	r.Stop(context.Background()) // stopping a stopped runner does nothing
}

// TestRunnerGraceLetsItemsEnd: an item that ends within the grace is
// recorded as done, not handed back.
func TestRunnerGraceLetsItemsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 1)
	pub := e.publication("pub", batch, assets, intent.ChannelGallery)
	ch := newBlocking()
	r, err := publish.New(publish.Config{Options: leasequeue.Options{Grace: 30 * time.Second}, Store: e.st, Channels: map[string]publish.Channel{intent.ChannelGallery: ch}})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(context.Background())
	<-ch.started
	go func() {
		time.Sleep(100 * time.Millisecond)
		close(ch.release)
	}()
	r.Stop(context.Background())
	if p := e.wait(pub.Publication.ID, ended); p.State != intent.StateSucceeded {
		t.Fatalf("publication %+v", p)
	}
}

// TestRunnerRenewsLongItems: an item that runs for several lease lengths
// keeps its lease (renewed every third) and is done in one attempt.
func TestRunnerRenewsLongItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 1)
	pub := e.publication("pub", batch, assets, intent.ChannelGallery)
	ch := newBlocking()
	// Long enough that a renewal (due at ttl/3) late by a loaded machine's
	// scheduling (and by the thief's writes) still lands in time; the
	// claims below run for 3 ttl.
	ttl := 3 * time.Second
	e.runner(publish.Config{Options: leasequeue.Options{LeaseTTL: ttl}, Channels: map[string]publish.Channel{intent.ChannelGallery: ch}})
	<-ch.started
	// Another claimer finds nothing to take the whole time.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		cs, err := e.st.ClaimItems(context.Background(), store.ClaimParams{Owner: "thief", Limit: 1, TTL: time.Minute})
		if err != nil || len(cs) != 0 {
			t.Fatalf("a renewed lease was taken: %+v %v", cs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(ch.release)
	p := e.wait(pub.Publication.ID, ended)
	if p.State != intent.StateSucceeded || e.items(p.ID)[0].Attempts != 1 || ch.ran.Load() != 1 {
		t.Fatalf("publication %+v, %d runs", p, ch.ran.Load())
	}
}

// losingStore answers every renewal as lost.
type losingStore struct {
	publish.Store
	completes atomic.Int64
}

func (s *losingStore) RenewLeases(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	var res store.RenewResult
	for _, l := range p.Leases {
		res.Lost = append(res.Lost, l.ID)
	}
	return res, nil
}

func (s *losingStore) CompleteLeases(ctx context.Context, cs []store.Completion) ([]store.CompletionResult, error) {
	s.completes.Add(1)
	return s.Store.CompleteLeases(ctx, cs)
}

// TestRunnerLostLeaseRecordsNothing: when a renewal says the lease is
// gone, the item is canceled and nothing is written for it.
func TestRunnerLostLeaseRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 1)
	pub := e.publication("pub", batch, assets, intent.ChannelGallery)
	ch := newBlocking()
	obs := newObserved()
	ls := &losingStore{Store: e.st}
	e.runner(publish.Config{
		Options: leasequeue.Options{
			LeaseTTL:    150 * time.Millisecond,
			MaxAttempts: 100,
		},
		Store:    ls,
		Channels: map[string]publish.Channel{intent.ChannelGallery: ch},
		Observe:  obs.fn,
	})
	<-ch.started
	if got := obs.next(t); got != "gallery:lost" {
		t.Fatalf("outcome %q", got)
	}
	if ls.completes.Load() != 0 {
		t.Fatal("a runner that lost its lease recorded the item")
	}
	if it := e.items(pub.Publication.ID)[0]; it.Error != "" || it.State == intent.StateFailed || it.State == intent.StateSucceeded {
		t.Fatalf("item %+v", it)
	}
}

// TestRunnerWithoutTheChannel: a runner that lacks an item's channel fails
// the attempt with a clear error, and the item waits for its backoff.
func TestRunnerWithoutTheChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 1)
	pub := e.publication("pub", batch, assets, intent.ChannelWebhook)
	obs := newObserved()
	e.runner(publish.Config{Options: leasequeue.Options{RetryBase: time.Hour}, Channels: map[string]publish.Channel{intent.ChannelGallery: e.gallery()}, Observe: obs.fn})
	if got := obs.next(t); got != "webhook:retry" {
		t.Fatalf("outcome %q", got)
	}
	it := e.items(pub.Publication.ID)[0]
	if it.State != intent.StateQueued || it.Error != "no webhook channel is configured on this worker" {
		t.Fatalf("item %+v", it)
	}
}

// TestRunnersShareWithoutDoubles: several runners on one store (two of
// them on their own connections, as other processes) deliver every item
// exactly once when no lease is lost.
func TestRunnersShareWithoutDoubles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, nil)
	batch, assets := e.batch("gen", 60)
	pub := e.publication("pub", batch, assets, intent.ChannelWebhook)
	for range 3 {
		e.runner(publish.Config{Options: leasequeue.Options{Concurrency: 4}, Channels: map[string]publish.Channel{intent.ChannelWebhook: e.webhook(rc.srv.URL)}})
	}
	if p := e.wait(pub.Publication.ID, ended); p.State != intent.StateSucceeded {
		t.Fatalf("publication %+v", p)
	}
	seen := map[string]int{}
	for _, d := range rc.all() {
		seen[d.body.ItemID]++
	}
	if len(seen) != 60 {
		t.Fatalf("%d items delivered, want 60", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("item %s delivered %d times", id, n)
		}
	}
}

func TestNewChannelsRefuseBadConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, u := range []string{"", "ftp://x/y", "not a url", "http://"} {
		if _, err := publish.NewWebhook(u, nil, e.blobs); err == nil {
			t.Errorf("NewWebhook(%q) accepted", u)
		}
	}
	if _, err := publish.New(publish.Config{Store: e.st}); err == nil {
		t.Error("a runner without channels was made")
	}
}

// TestStoreGalleryWritesNothing: the gallery of a shared asset store
// publishes every item (its bytes checked in the store) and writes no file;
// an item whose bytes are missing or corrupt is not published; its
// manifest is the one the files gallery writes, byte for byte.
func TestStoreGalleryWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batch, assets := e.batch("gen", 4)
	before := listTree(t, e.dir)
	g, err := publish.NewStoreGallery(e.blobs)
	if err != nil {
		t.Fatal(err)
	}
	pub := e.publication("pub", batch, assets[:3], intent.ChannelGallery)
	e.runner(publish.Config{Options: leasequeue.Options{Concurrency: 2}, Channels: map[string]publish.Channel{intent.ChannelGallery: g}})
	p := e.wait(pub.Publication.ID, ended)
	if p.State != intent.StateSucceeded || p.Counts.Succeeded != 3 {
		t.Fatalf("publication %+v", p)
	}
	// Publishing again changes nothing.
	for _, it := range e.items(p.ID) {
		if err := g.Publish(context.Background(), store.ClaimedItem{PublicationItem: it}); err != nil {
			t.Fatal(err)
		}
	}
	if after := listTree(t, e.dir); !slices.Equal(before, after) {
		t.Fatalf("the store gallery wrote files: %v, before %v", after, before)
	}

	// The same manifest as the files gallery's.
	fg := e.gallery()
	for _, it := range e.items(p.ID) {
		if err := fg.Publish(context.Background(), store.ClaimedItem{PublicationItem: it}); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(fg.Dir(), p.ID, publish.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	served, err := publish.NewManifest(p.ID, e.items(p.ID)).Encode()
	if err != nil || !bytes.Equal(onDisk, served) {
		t.Fatalf("manifests differ (%v):\n%s\n%s", err, onDisk, served)
	}

	// Bytes missing from the store: not published.
	it := e.items(p.ID)[0]
	missing := it
	missing.Asset.SHA256 = strings.Repeat("ab", 32)
	if err := g.Publish(context.Background(), store.ClaimedItem{PublicationItem: missing}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("publish of missing bytes: %v, want blob.ErrNotFound", err)
	}
	// Bytes that fail their SHA-256: not published either.
	path := e.blobs.Path(it.Asset.SHA256)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not the image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(context.Background(), store.ClaimedItem{PublicationItem: it}); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("publish of corrupt bytes: %v, want blob.ErrCorrupt", err)
	}
}

// listTree lists every path under dir but the database's own files.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !strings.HasPrefix(d.Name(), "studio.db") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
