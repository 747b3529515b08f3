package intent_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"studio/intent"
	"studio/intent/intenttest"
	"studio/store/sqlite"
	"studio/store/storetest"
)

type pubRig struct {
	store   *sqlite.Store
	svc     *intent.Service
	batch   string
	assets  []string
	planner *countingPlanner
}

// newPubRig is a store with one batch of alice's whose n tasks all made an
// asset, and a service that publishes to the gallery and the webhook.
func newPubRig(t *testing.T, n int) *pubRig {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	batch, assets := storetest.BatchWithAssets(t, st, "alice", "gen-0", n)
	p := &countingPlanner{}
	svc := &intent.Service{Store: st, Planner: p, Locker: &intenttest.KeyedMutex{}, Publications: st,
		Channels: []string{intent.ChannelGallery, intent.ChannelWebhook}}
	return &pubRig{store: st, svc: svc, batch: batch, assets: assets, planner: p}
}

func (r *pubRig) input(assets ...string) intent.PublicationInput {
	return intent.PublicationInput{BatchID: r.batch, AssetIDs: slices.Clone(assets), Channel: intent.ChannelGallery}
}

func TestPublicationCreateReplayConflict(t *testing.T) {
	t.Parallel()
	r := newPubRig(t, 3)
	ctx := context.Background()
	first, err := r.svc.CreatePublication(ctx, "alice", "pub-1", r.input(r.assets...))
	if err != nil || first.Replayed {
		t.Fatalf("create: %+v %v", first, err)
	}
	p := first.Publication
	if p.State != intent.StateQueued || p.ItemCount != 3 || p.Counts.Queued != 3 || p.BatchID != r.batch || p.RequestID != "pub-1" || p.Channel != "gallery" {
		t.Fatalf("publication %+v", p)
	}
	// The answer was lost; the retry names the same record and adds nothing.
	again, err := r.svc.CreatePublication(ctx, "alice", "pub-1", r.input(r.assets...))
	if err != nil || !again.Replayed || again.Publication.ID != p.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	// The same retry by the fingerprint the first answer carried; not by a
	// generation's id, nor by another fingerprint.
	byFP, ok, err := r.svc.ReplayPublication(ctx, "alice", "pub-1", first.Fingerprint)
	if err != nil || !ok || byFP != again {
		t.Fatalf("replay by fingerprint: %+v %v %v, want %+v", byFP, ok, err, again)
	}
	if _, ok, err := r.svc.ReplayPublication(ctx, "alice", "pub-1", strings.Repeat("0", 64)); ok || err != nil {
		t.Fatalf("another fingerprint: %v %v", ok, err)
	}
	// An id of the other operation, with its own binding's fingerprint:
	// neither replay is the other's.
	if res, ok, err := r.svc.ReplayGeneration(ctx, "alice", "pub-1", first.Fingerprint); ok || err != nil {
		t.Fatalf("a publication's id and fingerprint as a generation: %+v %v %v", res, ok, err)
	}
	gen, err := r.store.LookupIntent(ctx, "alice", "gen-0")
	if err != nil {
		t.Fatal(err)
	}
	if res, ok, err := r.svc.ReplayPublication(ctx, "alice", "gen-0", gen.Fingerprint); ok || err != nil {
		t.Fatalf("a generation's id and fingerprint as a publication: %+v %v %v", res, ok, err)
	}
	// The same input spelled differently (upper-case ids, the channel
	// omitted) is the same fingerprint: a replay.
	upper := r.input(r.assets...)
	upper.Channel = ""
	for i := range upper.AssetIDs {
		upper.AssetIDs[i] = strings.ToUpper(upper.AssetIDs[i])
	}
	upper.BatchID = strings.ToUpper(upper.BatchID)
	if res, err := r.svc.CreatePublication(ctx, "alice", "pub-1", upper); err != nil || !res.Replayed || res.Publication.ID != p.ID {
		t.Fatalf("respelled replay: %+v %v", res, err)
	}
	items, err := r.store.PublicationItems(ctx, p.ID)
	if err != nil || len(items) != 3 {
		t.Fatalf("%d items after the replays (%v)", len(items), err)
	}
	// The binding's fingerprint is the one of the normalized input.
	b, err := r.store.LookupIntent(ctx, "alice", "pub-1")
	want, _ := intent.Fingerprint("alice", intent.OpPublication, r.input(r.assets...))
	if err != nil || b.Fingerprint != want || b.Operation != intent.OpPublication {
		t.Fatalf("binding %+v %v, want fingerprint %s", b, err, want)
	}
	// Other input under the id: 409; order counts.
	for name, in := range map[string]intent.PublicationInput{
		"fewer assets":  r.input(r.assets[:2]...),
		"another order": r.input(r.assets[2], r.assets[1], r.assets[0]),
		"webhook":       {BatchID: r.batch, AssetIDs: r.assets, Channel: intent.ChannelWebhook},
	} {
		_, err := r.svc.CreatePublication(ctx, "alice", "pub-1", in)
		if intent.ErrorCode(err) != intent.EConflict || intent.ErrorMessage(err) != intent.ConflictMessage {
			t.Errorf("%s: %v, want the conflict", name, err)
		}
	}
}

// TestOneIDForTwoOperations: a request id used for a generation is a
// conflict for a publication, and the other way round.
func TestOneIDForTwoOperations(t *testing.T) {
	t.Parallel()
	r := newPubRig(t, 2)
	ctx := context.Background()
	if _, err := r.svc.CreateGeneration(ctx, "alice", "shared", input("f01")); err != nil {
		t.Fatal(err)
	}
	_, err := r.svc.CreatePublication(ctx, "alice", "shared", r.input(r.assets...))
	if intent.ErrorCode(err) != intent.EConflict || intent.ErrorMessage(err) != intent.ConflictMessage {
		t.Fatalf("a generation's id for a publication: %v", err)
	}
	if _, err := r.svc.CreatePublication(ctx, "alice", "pub", r.input(r.assets...)); err != nil {
		t.Fatal(err)
	}
	_, err = r.svc.CreateGeneration(ctx, "alice", "pub", input("f01"))
	if intent.ErrorCode(err) != intent.EConflict {
		t.Fatalf("a publication's id for a generation: %v", err)
	}
	if got := r.planner.calls.Load(); got != 1 {
		t.Fatalf("planned %d times, want 1", got)
	}
}

func TestPublicationRefusals(t *testing.T) {
	t.Parallel()
	r := newPubRig(t, 2)
	ctx := context.Background()
	_, otherAssets := storetest.BatchWithAssets(t, r.store, "alice", "gen-other", 1)
	bobBatch, bobAssets := storetest.BatchWithAssets(t, r.store, "bob", "gen-bob", 1)
	missing, _ := intent.NewID()

	// Assets that are not the batch's: 422 naming each one.
	in := r.input(r.assets[0], otherAssets[0], bobAssets[0], missing, r.assets[1])
	_, err := r.svc.CreatePublication(ctx, "alice", "p1", in)
	if intent.ErrorCode(err) != intent.EUnprocessable {
		t.Fatalf("foreign assets: %v", err)
	}
	msg := intent.ErrorMessage(err)
	for _, id := range []string{otherAssets[0], bobAssets[0], missing} {
		if !strings.Contains(msg, id) {
			t.Errorf("the detail %q does not name %s", msg, id)
		}
	}
	if strings.Contains(msg, r.assets[0]) || !strings.HasPrefix(msg, "3 assets are not made by batch "+r.batch) {
		t.Errorf("detail %q", msg)
	}
	fields := intent.ErrorFields(err)
	if len(fields) != 3 || fields[0].Field != "asset_ids[1]" || fields[1].Field != "asset_ids[2]" || fields[2].Field != "asset_ids[3]" {
		t.Errorf("fields %+v", fields)
	}
	// Another actor's batch: 422 on batch_id.
	_, err = r.svc.CreatePublication(ctx, "alice", "p2", intent.PublicationInput{BatchID: bobBatch, AssetIDs: bobAssets})
	if intent.ErrorCode(err) != intent.EUnprocessable || len(intent.ErrorFields(err)) != 1 || intent.ErrorFields(err)[0].Field != "batch_id" {
		t.Fatalf("bob's batch: %v %+v", err, intent.ErrorFields(err))
	}
	// A channel not carried out here: 422.
	gallery := &intent.Service{Store: r.store, Planner: r.planner, Locker: &intenttest.KeyedMutex{}, Publications: r.store}
	_, err = gallery.CreatePublication(ctx, "alice", "p3", intent.PublicationInput{BatchID: r.batch, AssetIDs: r.assets, Channel: intent.ChannelWebhook})
	if intent.ErrorCode(err) != intent.EUnprocessable || !strings.Contains(intent.ErrorMessage(err), "webhook") {
		t.Fatalf("unconfigured channel: %v", err)
	}
	// Bad input from Go: 400 with the decoder's fields.
	for name, in := range map[string]intent.PublicationInput{
		"no assets":     {BatchID: r.batch},
		"duplicate ids": r.input(r.assets[0], r.assets[0]),
		"not a uuid":    r.input("asset-1"),
		"bad channel":   {BatchID: r.batch, AssetIDs: r.assets, Channel: "fax"},
	} {
		if _, err := r.svc.CreatePublication(ctx, "alice", "p4", in); intent.ErrorCode(err) != intent.EInvalid {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if _, err := r.svc.CreatePublication(ctx, "alice", "", r.input(r.assets...)); intent.ErrorCode(err) != intent.EInvalid {
		t.Errorf("empty request id: %v", err)
	}
	// Nothing refused left a binding.
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		if _, err := r.store.LookupIntent(ctx, "alice", id); intent.ErrorCode(err) != intent.ENotFound {
			t.Errorf("%s: a refused publication bound its id: %v", id, err)
		}
	}
	// A detail names at most 20 ids and says how many more.
	many := make([]string, 30)
	for i := range many {
		many[i], _ = intent.NewID()
	}
	_, err = r.svc.CreatePublication(ctx, "alice", "p5", r.input(many...))
	_, named, _ := strings.Cut(intent.ErrorMessage(err), ": ")
	if !strings.HasSuffix(named, " and 10 more.") || strings.Count(named, "-") != 20*4 {
		t.Errorf("detail of 30 foreign assets: %q", intent.ErrorMessage(err))
	}
}

// TestConcurrentPublicationsOneID races tries of one publication id: one
// record, every answer naming it.
func TestConcurrentPublicationsOneID(t *testing.T) {
	t.Parallel()
	r := newPubRig(t, 5)
	const n = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	created := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.svc.CreatePublication(context.Background(), "alice", "same", r.input(r.assets...))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[res.Publication.ID] = true
			if !res.Replayed {
				created++
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d tries named %d publications, %d created", n, len(ids), created)
	}
	var count int
	if err := r.store.ReadDB().QueryRow(`SELECT COUNT(*) FROM publication_items`).Scan(&count); err != nil || count != 5 {
		t.Fatalf("%d items stored (%v), want 5", count, err)
	}
}

func TestPublicationWithoutStore(t *testing.T) {
	t.Parallel()
	svc := &intent.Service{Locker: &intenttest.KeyedMutex{}}
	if _, err := svc.CreatePublication(context.Background(), "alice", "p", intent.PublicationInput{}); err == nil || intent.ErrorCode(err) != intent.EInternal {
		t.Fatalf("a service without a publication store: %v", err)
	}
}
