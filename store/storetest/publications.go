package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// The publication cases: a publication and its items through CreateIntent,
// and the items' leases, which work as the tasks' do.

// publicationStore makes a store, and names its publication side.
func publicationStore(t *testing.T, h Harness) (store.Store, store.PublicationStore) {
	t.Helper()
	s := h.New(t)
	return s, s
}

// newPublication makes a store with alice's publication "pub" of a batch
// of n assets on the channel.
func newPublication(t *testing.T, h Harness, n int, channel string) (store.Store, intent.NewIntent) {
	t.Helper()
	s := h.New(t)
	batch, assets := BatchWithAssets(t, s, "alice", "gen", n)
	in := PublicationIntent(t, "alice", "pub", "fp", batch, assets, channel)
	mustCreate(t, s, in)
	return s, in
}

// BatchWithAssets creates a generation intent of n tasks for the actor and
// completes every task with an asset (through the task leases); it returns
// the batch id and the asset ids in plan order.
func BatchWithAssets(t testing.TB, s store.Store, actor, requestID string, n int) (string, []string) {
	t.Helper()
	in := Intent(t, actor, requestID, "fp-"+requestID, n)
	mustCreate(t, s, in)
	made := map[string]string{} // task -> asset
	for len(made) < n {
		cs := claim(t, s, "maker", 100, longTTL)
		if len(cs) == 0 {
			t.Fatalf("batch %s: %d of %d tasks made, none left to claim", in.Batch.ID, len(made), n)
		}
		comps := make([]store.Completion, len(cs))
		for i, c := range cs {
			comps[i] = store.Completion{Lease: c.Lease, Asset: asset(t, sha(fmt.Sprintf("%x", i%16)))}
		}
		res, err := s.CompleteLeases(ctx(t), comps)
		if err != nil {
			t.Fatalf("CompleteTasks: %v", err)
		}
		for i, c := range cs {
			if res[i].Err != nil {
				t.Fatalf("complete task %s: %v", c.ID, res[i].Err)
			}
			if c.BatchID == in.Batch.ID {
				made[c.ID] = res[i].AssetID
			}
		}
	}
	ids := make([]string, n)
	for i, tk := range in.Batch.Tasks {
		ids[i] = made[tk.ID]
	}
	return in.Batch.ID, ids
}

// PublicationIntent builds a publication intent of the assets with fresh
// ids.
func PublicationIntent(t testing.TB, actor, requestID, fingerprint, batchID string, assetIDs []string, channel string) intent.NewIntent {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	np := &intent.NewPublication{ID: mustID(t), BatchID: batchID, Channel: channel, CreatedAt: now}
	for _, a := range assetIDs {
		np.Items = append(np.Items, intent.NewPublicationItem{ID: mustID(t), AssetID: a})
	}
	return intent.NewIntent{
		Binding:     intent.Binding{Actor: actor, RequestID: requestID, Operation: intent.OpPublication, Fingerprint: fingerprint, ResourceID: np.ID, CreatedAt: now},
		Publication: np,
	}
}

func getPublication(t *testing.T, ps store.PublicationStore, actor, id string) intent.Publication {
	t.Helper()
	p, err := ps.GetPublication(ctx(t), actor, id)
	if err != nil {
		t.Fatalf("GetPublication: %v", err)
	}
	return p
}

// checkItemCounts proves the publication's counts equal its items' states.
func checkItemCounts(t *testing.T, ps store.PublicationStore, actor, id string) intent.Publication {
	t.Helper()
	p := getPublication(t, ps, actor, id)
	items, err := ps.PublicationItems(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var c intent.Counts
	for _, it := range items {
		count(t, &c, it.ID, it.State)
	}
	if p.Counts != c || p.ItemCount != len(items) {
		t.Fatalf("publication counts %+v (item_count %d), items say %+v (%d)", p.Counts, p.ItemCount, c, len(items))
	}
	return p
}

func claimItems(t *testing.T, ps store.PublicationStore, owner string, limit int, ttl time.Duration) []store.ClaimedItem {
	t.Helper()
	return claimOf(t, ps.ClaimItems, store.ClaimParams{Owner: owner, Limit: limit, TTL: ttl})
}

func testPublicationCreateThenReplay(t *testing.T, h Harness) {
	s, ps := publicationStore(t, h)
	batch, assets := BatchWithAssets(t, s, "alice", "gen", 4)
	in := PublicationIntent(t, "alice", "pub-1", "fp-p", batch, assets[:3], intent.ChannelGallery)
	b := mustCreate(t, s, in)
	if b.ResourceID != in.Publication.ID || b.Operation != intent.OpPublication {
		t.Fatalf("binding %+v", b)
	}
	p := checkItemCounts(t, ps, "alice", in.Publication.ID)
	if p.State != intent.StateQueued || p.ItemCount != 3 || p.Counts.Queued != 3 || p.BatchID != batch ||
		p.Channel != intent.ChannelGallery || p.RequestID != "pub-1" || p.CreatedAt.IsZero() {
		t.Fatalf("publication %+v", p)
	}
	items, err := ps.PublicationItems(ctx(t), p.ID)
	if err != nil || len(items) != 3 {
		t.Fatalf("PublicationItems: %d, %v", len(items), err)
	}
	for i, it := range items {
		if it.ID != in.Publication.Items[i].ID || it.Asset.ID != assets[i] || it.PublicationID != p.ID || it.Actor != "alice" ||
			it.Channel != intent.ChannelGallery || it.State != intent.StateQueued || it.Prompt != "a knight in the rain" ||
			it.Frame == "" || it.Generator == "" || it.Collection != "walk" || it.Candidate != 1 || it.Asset.SHA256 == "" {
			t.Fatalf("item %d = %+v", i, it)
		}
		if one, err := ps.PublicationItem(ctx(t), p.ID, it.Asset.ID); err != nil || one.ID != it.ID || one.Asset.ID != it.Asset.ID || one.Asset.SHA256 != it.Asset.SHA256 || one.State != it.State || one.Frame != it.Frame {
			t.Fatalf("PublicationItem(%s) = %+v, %v; want %+v", it.Asset.ID, one, err, it)
		}
	}
	if _, err := ps.PublicationItem(ctx(t), p.ID, assets[3]); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("PublicationItem of an asset not published: %v, want ENotFound", err)
	}
	if _, err := ps.PublicationItem(ctx(t), "no-such-publication", assets[0]); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("PublicationItem of a missing publication: %v, want ENotFound", err)
	}

	// A retry carries new ids; the store keeps the first tree.
	retry := PublicationIntent(t, "alice", "pub-1", "fp-p", batch, assets[:3], intent.ChannelGallery)
	b2, created, err := s.CreateIntent(ctx(t), retry)
	if err != nil || created || b2.ResourceID != in.Publication.ID {
		t.Fatalf("replay: %+v created=%v %v", b2, created, err)
	}
	if _, err := ps.GetPublication(ctx(t), "alice", retry.Publication.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the replay's publication exists: %v", err)
	}
	if its, err := ps.PublicationItems(ctx(t), retry.Publication.ID); err != nil || len(its) != 0 {
		t.Fatalf("the replay's items exist: %d %v", len(its), err)
	}
	// Another publication of the same assets is another record.
	other := PublicationIntent(t, "alice", "pub-2", "fp-p2", batch, assets[:3], intent.ChannelWebhook)
	mustCreate(t, s, other)
	if p2 := getPublication(t, ps, "alice", other.Publication.ID); p2.Channel != intent.ChannelWebhook || p2.ItemCount != 3 {
		t.Fatalf("second publication %+v", p2)
	}
}

func testPublicationConflicts(t *testing.T, h Harness) {
	s, ps := publicationStore(t, h)
	batch, assets := BatchWithAssets(t, s, "alice", "gen", 2)
	first := PublicationIntent(t, "alice", "pub", "fp-1", batch, assets, intent.ChannelGallery)
	mustCreate(t, s, first)
	other := PublicationIntent(t, "alice", "pub", "fp-2", batch, assets[:1], intent.ChannelGallery)
	_, created, err := s.CreateIntent(ctx(t), other)
	wantCode(t, err, intent.EConflict)
	if created || intent.ErrorMessage(err) != intent.ConflictMessage {
		t.Fatalf("conflict: created=%v %q", created, intent.ErrorMessage(err))
	}
	if _, err := ps.GetPublication(ctx(t), "alice", other.Publication.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the conflicting publication exists: %v", err)
	}
	// The generation's request id, with the publication's fingerprint.
	gen := PublicationIntent(t, "alice", "gen", "fp-gen", batch, assets, intent.ChannelGallery)
	gen.Binding.Fingerprint = "fp-gen"
	_, _, err = s.CreateIntent(ctx(t), gen)
	wantCode(t, err, intent.EConflict)
	// And the other way: a publication's id used for a generation.
	g := Intent(t, "alice", "pub", "fp-1", 1)
	_, _, err = s.CreateIntent(ctx(t), g)
	wantCode(t, err, intent.EConflict)
	if n := countBatches(t, s, "alice"); n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
	checkItemCounts(t, ps, "alice", first.Publication.ID)
}

// testPublicationRollback: an item that cannot be inserted (its asset is
// named twice) fails the whole intent, which leaves nothing; a clean retry
// with the same ids succeeds.
func testPublicationRollback(t *testing.T, h Harness) {
	s, ps := publicationStore(t, h)
	batch, assets := BatchWithAssets(t, s, "alice", "gen", 3)
	bad := PublicationIntent(t, "alice", "pub", "fp", batch, []string{assets[0], assets[1], assets[2], assets[0]}, intent.ChannelGallery)
	if _, _, err := s.CreateIntent(ctx(t), bad); err == nil {
		t.Fatal("a publication naming an asset twice was created")
	}
	if _, err := s.LookupIntent(ctx(t), "alice", "pub"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("binding left behind: %v", err)
	}
	if _, err := ps.GetPublication(ctx(t), "alice", bad.Publication.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("publication left behind: %v", err)
	}
	if its, err := ps.PublicationItems(ctx(t), bad.Publication.ID); err != nil || len(its) != 0 {
		t.Fatalf("%d items left behind (%v)", len(its), err)
	}
	good := PublicationIntent(t, "alice", "pub", "fp", batch, assets, intent.ChannelGallery)
	good.Publication.ID, good.Binding.ResourceID = bad.Publication.ID, bad.Publication.ID
	good.Publication.Items[0].ID = bad.Publication.Items[0].ID
	mustCreate(t, s, good)
	if p := checkItemCounts(t, ps, "alice", good.Publication.ID); p.ItemCount != 3 {
		t.Fatalf("after the clean retry: %+v", p)
	}
}

// testPublicationAssetRules: only assets made by the actor's batch may be
// published; the check says which are not, and the commit refuses them too.
func testPublicationAssetRules(t *testing.T, h Harness) {
	s, ps := publicationStore(t, h)
	batch, assets := BatchWithAssets(t, s, "alice", "gen-1", 2)
	_, otherAssets := BatchWithAssets(t, s, "alice", "gen-2", 1)
	bobBatch, bobAssets := BatchWithAssets(t, s, "bob", "gen-1", 1)
	up, _, err := s.CreateUpload(ctx(t), intent.NewUpload{Asset: upload(t, "alice", sha("u"))})
	if err != nil {
		t.Fatal(err)
	}
	missing := mustID(t)
	ids := []string{assets[0], otherAssets[0], bobAssets[0], missing, up.ID, assets[1]}
	want := []string{otherAssets[0], bobAssets[0], missing, up.ID}
	check, err := ps.CheckPublicationAssets(ctx(t), "alice", batch, ids)
	if err != nil || !check.BatchFound || !slices.Equal(check.Foreign, want) {
		t.Fatalf("CheckPublicationAssets = %+v, %v; want foreign %v", check, err, want)
	}
	check, err = ps.CheckPublicationAssets(ctx(t), "alice", batch, assets)
	if err != nil || !check.BatchFound || len(check.Foreign) != 0 {
		t.Fatalf("CheckPublicationAssets of the batch's own = %+v, %v", check, err)
	}
	check, err = ps.CheckPublicationAssets(ctx(t), "alice", bobBatch, bobAssets)
	if err != nil || check.BatchFound || !slices.Equal(check.Foreign, bobAssets) {
		t.Fatalf("CheckPublicationAssets of bob's batch as alice = %+v, %v", check, err)
	}

	// The commit holds the same rule: nothing is written.
	for name, in := range map[string]intent.NewIntent{
		"another batch's asset": PublicationIntent(t, "alice", "p1", "fp", batch, []string{assets[0], otherAssets[0]}, intent.ChannelGallery),
		"another actor's batch": PublicationIntent(t, "alice", "p2", "fp", bobBatch, bobAssets, intent.ChannelGallery),
		"a missing asset":       PublicationIntent(t, "alice", "p3", "fp", batch, []string{missing}, intent.ChannelGallery),
	} {
		_, _, err := s.CreateIntent(ctx(t), in)
		if intent.ErrorCode(err) != intent.EUnprocessable {
			t.Errorf("%s: %v, want unprocessable", name, err)
		}
		if _, err := s.LookupIntent(ctx(t), "alice", in.Binding.RequestID); intent.ErrorCode(err) != intent.ENotFound {
			t.Errorf("%s: binding left behind: %v", name, err)
		}
	}
}

func testPublicationActorScoping(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 1, intent.ChannelGallery)
	if _, err := ps.GetPublication(ctx(t), "bob", in.Publication.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob reads alice's publication: %v", err)
	}
	if _, err := ps.GetPublication(ctx(t), "alice", mustID(t)); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("a missing publication: %v", err)
	}
}

// testItemLeases: claims bump fences; completions are fenced; the counts
// and the publication's state follow.
func testItemLeases(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 3, intent.ChannelGallery)
	cs := claimItems(t, ps, "w1", 2, longTTL)
	if len(cs) != 2 {
		t.Fatalf("claimed %d, want 2", len(cs))
	}
	for i, c := range cs {
		want := in.Publication.Items[i]
		if c.Lease.ID != want.ID || c.PublicationItem.ID != want.ID || c.Asset.ID != want.AssetID || c.PublicationID != in.Publication.ID ||
			c.Fence < 1 || c.Attempt != 1 || c.Actor != "alice" || c.Channel != intent.ChannelGallery || c.State != intent.StateRunning {
			t.Fatalf("claim %d = %+v, want item %+v in order", i, c, want)
		}
		if time.Until(c.ExpiresAt) < 30*time.Second {
			t.Fatalf("lease expires at %v", c.ExpiresAt)
		}
	}
	if p := checkItemCounts(t, ps, "alice", in.Publication.ID); p.State != intent.StateRunning || p.Counts.Running != 2 {
		t.Fatalf("after claim: %+v", p)
	}
	if more := claimItems(t, ps, "w2", 10, longTTL); len(more) != 1 || more[0].Lease.ID != in.Publication.Items[2].ID {
		t.Fatalf("second claim: %+v", more)
	}
	if none := claimItems(t, ps, "w3", 10, longTTL); len(none) != 0 {
		t.Fatalf("claimed %d live-leased items", len(none))
	}
	wrong := cs[0].Lease
	wrong.Fence++
	errs, err := completeItems(ctx(t), ps, []store.Lease{cs[0].Lease, wrong, cs[1].Lease})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], store.ErrLeaseLost) || errs[2] != nil {
		t.Fatalf("CompleteItems = %v, %v", errs, err)
	}
	// A second completion of an ended item changes nothing.
	errs, err = completeItems(ctx(t), ps, []store.Lease{cs[0].Lease})
	if err != nil || !errors.Is(errs[0], store.ErrLeaseLost) {
		t.Fatalf("CompleteItems again = %v, %v", errs, err)
	}
	p := checkItemCounts(t, ps, "alice", in.Publication.ID)
	if p.Counts.Succeeded != 2 || p.Counts.Running != 1 || p.State != intent.StateRunning {
		t.Fatalf("after completions: %+v", p)
	}
	if _, err := ps.ClaimItems(ctx(t), store.ClaimParams{Owner: "w", Limit: 0, TTL: time.Second}); err == nil {
		t.Fatal("a claim with limit 0 was accepted")
	}
}

// testItemExpiry: an expired lease is claimed again under a higher fence;
// every write under the old fence changes nothing.
func testItemExpiry(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 1, intent.ChannelGallery)
	// Claimed and renewed under a long lease (a loaded machine may take
	// longer than a short one between the calls), then renewed once more
	// under a short one that runs out.
	ttl := 300 * time.Millisecond
	old := claimItems(t, ps, "w1", 1, longTTL)[0]
	res, err := ps.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{old.Lease}, TTL: longTTL})
	if err != nil || len(res.Lost) != 0 || !res.ExpiresAt.After(old.ExpiresAt.Add(-time.Millisecond)) {
		t.Fatalf("renew of a live lease: %+v, %v", res, err)
	}
	if res, err := ps.RenewLeases(ctx(t), store.RenewParams{Owner: "w2", Leases: []store.Lease{old.Lease}, TTL: longTTL}); err != nil || len(res.Lost) != 1 {
		t.Fatalf("renew by another owner: %+v, %v", res, err)
	}
	if res, err := ps.RenewLeases(ctx(t), store.RenewParams{Owner: "w1", Leases: []store.Lease{old.Lease}, TTL: ttl}); err != nil || len(res.Lost) != 0 {
		t.Fatalf("renew under a short lease: %+v, %v", res, err)
	}
	sleepPast(ttl)
	cur := claimUntil(t, ps.ClaimItems, "w2", old.Lease.ID, store.ClaimParams{TTL: longTTL})
	if cur.Fence <= old.Fence || cur.Attempt != 2 {
		t.Fatalf("reclaim fence %d attempt %d, old fence %d", cur.Fence, cur.Attempt, old.Fence)
	}
	before := checkItemCounts(t, ps, "alice", in.Publication.ID)
	if before.Counts.Running != 1 {
		t.Fatalf("a reclaim moved the counts: %+v", before.Counts)
	}
	wantLeaseLost(t, ps, "w1", store.Completion{Lease: old.Lease})
	if after := checkItemCounts(t, ps, "alice", in.Publication.ID); after.Counts != before.Counts {
		t.Fatalf("old-fence writes changed the counts: %+v -> %+v", before.Counts, after.Counts)
	}
	if errs, err := completeItems(ctx(t), ps, []store.Lease{cur.Lease}); err != nil || errs[0] != nil {
		t.Fatalf("complete with the live fence: %v %v", errs, err)
	}
	if p := checkItemCounts(t, ps, "alice", in.Publication.ID); p.State != intent.StateSucceeded {
		t.Fatalf("after the completion: %+v", p)
	}
}

// testItemFailures: a transient failure waits out its backoff; a permanent
// one, or the last attempt, fails the item with its error; a publication
// whose items all ended with a failure among them is failed.
func testItemFailures(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 2, intent.ChannelWebhook)
	cs := claimItems(t, ps, "w1", 2, longTTL)
	state, err := ps.FailLease(ctx(t), store.Failure{Lease: cs[0].Lease, Error: "503 from the receiver", MaxAttempts: 2, Backoff: time.Hour})
	if err != nil || state != intent.StateQueued {
		t.Fatalf("transient failure: %q, %v", state, err)
	}
	if got := claimItems(t, ps, "w1", 10, longTTL); len(got) != 0 {
		t.Fatalf("claimed %d items inside their backoff", len(got))
	}
	state, err = ps.FailLease(ctx(t), store.Failure{Lease: cs[1].Lease, Error: "404 from the receiver", Permanent: true})
	if err != nil || state != intent.StateFailed {
		t.Fatalf("permanent failure: %q, %v", state, err)
	}
	p := checkItemCounts(t, ps, "alice", in.Publication.ID)
	if p.Counts.Queued != 1 || p.Counts.Failed != 1 || p.State != intent.StateRunning {
		t.Fatalf("publication %+v", p)
	}
	items, _ := ps.PublicationItems(ctx(t), in.Publication.ID)
	if items[0].Error != "503 from the receiver" || items[0].Attempts != 1 || items[1].Error != "404 from the receiver" {
		t.Fatalf("items %+v", items)
	}

	// A short backoff: the item comes back, and its second failure is its
	// last.
	ps2, in2 := newPublication(t, h, 1, intent.ChannelWebhook)
	c := claimItems(t, ps2, "w1", 1, longTTL)[0]
	if state, err := ps2.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "timeout", MaxAttempts: 2, Backoff: 50 * time.Millisecond}); err != nil || state != intent.StateQueued {
		t.Fatalf("first failure: %q %v", state, err)
	}
	c = claimUntil(t, ps2.ClaimItems, "w2", c.Lease.ID, store.ClaimParams{TTL: longTTL})
	if c.Attempt != 2 {
		t.Fatalf("attempt %d", c.Attempt)
	}
	if state, err := ps2.FailLease(ctx(t), store.Failure{Lease: c.Lease, Error: "timeout again", MaxAttempts: 2, Backoff: time.Millisecond}); err != nil || state != intent.StateFailed {
		t.Fatalf("last failure: %q %v", state, err)
	}
	p = checkItemCounts(t, ps2, "alice", in2.Publication.ID)
	if p.State != intent.StateFailed || p.Counts.Failed != 1 {
		t.Fatalf("publication %+v", p)
	}
}

// testItemExpiredOutOfAttempts: an expired lease that used every attempt
// fails at the next claim instead of running again.
func testItemExpiredOutOfAttempts(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 1, intent.ChannelGallery)
	ttl := 200 * time.Millisecond
	claimItems(t, ps, "w1", 1, ttl)
	sleepPast(ttl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, err := ps.ClaimItems(ctx(t), store.ClaimParams{Owner: "w2", Limit: 1, TTL: longTTL, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 0 {
			t.Fatalf("an item out of attempts was claimed: %+v", cs[0])
		}
		if p := checkItemCounts(t, ps, "alice", in.Publication.ID); p.State == intent.StateFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired item never failed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	items, _ := ps.PublicationItems(ctx(t), in.Publication.ID)
	if items[0].Error == "" {
		t.Fatal("the failed item has no error")
	}
}

// testItemRelease: a released item is claimable at once, and the release
// does not count against the maximum.
func testItemRelease(t *testing.T, h Harness) {
	ps, in := newPublication(t, h, 1, intent.ChannelGallery)
	c := claimItems(t, ps, "w1", 1, longTTL)[0]
	if errs, err := ps.ReleaseLeases(ctx(t), []store.Lease{c.Lease}); err != nil || errs[0] != nil {
		t.Fatalf("release: %v %v", errs, err)
	}
	if p := checkItemCounts(t, ps, "alice", in.Publication.ID); p.Counts.Queued != 1 {
		t.Fatalf("after release: %+v", p)
	}
	again, err := ps.ClaimItems(ctx(t), store.ClaimParams{Owner: "w2", Limit: 1, TTL: longTTL, MaxAttempts: 1})
	if err != nil || len(again) != 1 || again[0].Attempt != 2 || again[0].Fence <= c.Fence {
		t.Fatalf("claim after release: %+v, %v", again, err)
	}
	if state, err := ps.FailLease(ctx(t), store.Failure{Lease: again[0].Lease, Error: "x", MaxAttempts: 2}); err != nil || state != intent.StateQueued {
		t.Fatalf("the release counted against the maximum: %q %v", state, err)
	}
}

// testRacingItemClaims: many claimers at once, on one store and a twin,
// never get one item twice.
func testRacingItemClaims(t *testing.T, h Harness) {
	s, ps := publicationStore(t, h)
	stores := []store.PublicationStore{ps}
	if h.Twin != nil {
		stores = append(stores, h.Twin(t, s))
	}
	batch, assets := BatchWithAssets(t, s, "alice", "gen", 150)
	var pubs []string
	for i := 0; i < 2; i++ {
		in := PublicationIntent(t, "alice", fmt.Sprintf("pub-%d", i), "fp", batch, assets, intent.ChannelGallery)
		mustCreate(t, s, in)
		pubs = append(pubs, in.Publication.ID)
	}
	owner := raceClaims(t, stores, "item", func(st store.PublicationStore, p store.ClaimParams) ([]string, error) {
		cs, err := st.ClaimItems(context.Background(), p)
		ids := make([]string, len(cs))
		for i, c := range cs {
			ids[i] = c.Lease.ID
		}
		return ids, err
	})
	if len(owner) != 300 {
		t.Fatalf("claimed %d distinct items, want 300", len(owner))
	}
	for _, id := range pubs {
		if p := checkItemCounts(t, ps, "alice", id); p.Counts.Running != 150 {
			t.Fatalf("publication counts %+v", p.Counts)
		}
	}
}

// completeItems completes item leases (CompleteLeases without assets) and
// answers each one's error.
func completeItems(ctx context.Context, s store.LeaseStore, leases []store.Lease) ([]error, error) {
	cs := make([]store.Completion, len(leases))
	for i, l := range leases {
		cs[i] = store.Completion{Lease: l}
	}
	res, err := s.CompleteLeases(ctx, cs)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs, nil
}
