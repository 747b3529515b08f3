package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
)

// The upload cases: client keys bound to the SHA-256 of the first upload's
// bytes, checked again inside the transaction.

// uploadStore makes a store, and names its upload side.
func uploadStore(t *testing.T, h Harness) (store.Store, store.UploadStore) {
	t.Helper()
	s := h.New(t)
	return s, s
}

// sha returns a distinct fake SHA-256 for a label.
func sha(label string) string {
	return (label + strings.Repeat("0", 64))[:64]
}

// upload builds an uploaded asset of the actor with the given bytes' sha.
func upload(t testing.TB, actor, sha string) intent.Asset {
	return intent.Asset{ID: mustID(t), Actor: actor, SHA256: sha, ContentType: "image/png", Size: 1234, Width: 32, Height: 16,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

func createUpload(t *testing.T, us store.UploadStore, actor, key, sha string) (intent.Asset, bool, error) {
	t.Helper()
	return us.CreateUpload(ctx(t), intent.NewUpload{Asset: upload(t, actor, sha), ClientKey: key})
}

func testUploadKeyReplayAndConflict(t *testing.T, h Harness) {
	s, us := uploadStore(t, h)
	if _, err := us.LookupUpload(ctx(t), "alice", "k1"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("LookupUpload of an unused key: %v", err)
	}
	first := upload(t, "alice", sha("1"))
	got, created, err := us.CreateUpload(ctx(t), intent.NewUpload{Asset: first, ClientKey: "k1"})
	if err != nil || !created || got.ID != first.ID || got.TaskID != nil || got.Width != 32 || got.Height != 16 || got.Size != 1234 {
		t.Fatalf("CreateUpload = %+v, %v, %v", got, created, err)
	}
	b, err := us.LookupUpload(ctx(t), "alice", "k1")
	if err != nil || b.AssetID != first.ID || b.SHA256 != sha("1") {
		t.Fatalf("LookupUpload = %+v, %v", b, err)
	}
	read, err := s.GetAsset(ctx(t), "alice", first.ID)
	if err != nil || read.SHA256 != sha("1") || read.TaskID != nil || read.ContentType != "image/png" {
		t.Fatalf("GetAsset = %+v, %v", read, err)
	}

	// The same key and bytes again: the first asset, nothing written.
	retry := upload(t, "alice", sha("1"))
	got, created, err = us.CreateUpload(ctx(t), intent.NewUpload{Asset: retry, ClientKey: "k1"})
	if err != nil || created || got.ID != first.ID {
		t.Fatalf("replay: %+v, created=%v, %v", got, created, err)
	}
	if _, err := s.GetAsset(ctx(t), "alice", retry.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the replay's asset was stored: %v", err)
	}

	// The same key, other bytes: a conflict, nothing written.
	other := upload(t, "alice", sha("2"))
	_, created, err = us.CreateUpload(ctx(t), intent.NewUpload{Asset: other, ClientKey: "k1"})
	wantCode(t, err, intent.EConflict)
	if intent.ErrorMessage(err) != intent.ConflictMessage || created {
		t.Fatalf("conflict: %q, created=%v", intent.ErrorMessage(err), created)
	}
	if _, err := s.GetAsset(ctx(t), "alice", other.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the conflicting asset was stored: %v", err)
	}
	if b2, err := us.LookupUpload(ctx(t), "alice", "k1"); err != nil || b2 != b {
		t.Fatalf("binding changed: %+v -> %+v (%v)", b, b2, err)
	}
	if in, err := s.BlobInUse(ctx(t), sha("1")); err != nil || !in {
		t.Fatalf("BlobInUse of an uploaded asset's bytes = %v, %v", in, err)
	}
}

func testUploadWithoutKey(t *testing.T, h Harness) {
	s, us := uploadStore(t, h)
	a, created, err := createUpload(t, us, "alice", "", sha("1"))
	if err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	b, created, err := createUpload(t, us, "alice", "", sha("1"))
	if err != nil || !created || b.ID == a.ID {
		t.Fatalf("second upload of the same bytes without a key: %+v, %v, %v", b, created, err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if _, err := s.GetAsset(ctx(t), "alice", id); err != nil {
			t.Fatalf("asset %s: %v", id, err)
		}
	}
	if _, err := us.LookupUpload(ctx(t), "alice", ""); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("an empty key was bound: %v", err)
	}
}

func testUploadKeysPerActor(t *testing.T, h Harness) {
	s, us := uploadStore(t, h)
	a, _, err := createUpload(t, us, "alice", "k", sha("1"))
	if err != nil {
		t.Fatal(err)
	}
	// bob's "k" is his own: other bytes are no conflict.
	b, created, err := createUpload(t, us, "bob", "k", sha("2"))
	if err != nil || !created || b.ID == a.ID {
		t.Fatalf("bob's key: %+v %v %v", b, created, err)
	}
	if _, err := s.GetAsset(ctx(t), "bob", a.ID); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("bob reads alice's upload: %v", err)
	}
	if _, err := us.LookupUpload(ctx(t), "carol", "k"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("carol sees a key: %v", err)
	}
	if got, err := us.LookupUpload(ctx(t), "alice", "k"); err != nil || got.AssetID != a.ID {
		t.Fatalf("alice's binding: %+v %v", got, err)
	}
}

// testUploadConcurrentSameKey: racing uploads of one key, on one store and
// a twin, without any lock around them: the check inside the transaction
// alone makes one asset.
func testUploadConcurrentSameKey(t *testing.T, h Harness) {
	s, _ := uploadStore(t, h)
	stores := []store.Store{s}
	if h.Twin != nil {
		stores = append(stores, h.Twin(t, s))
	}
	const n = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	ids := map[string]bool{}
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			us := stores[i%len(stores)]
			in := intent.NewUpload{Asset: upload(t, "alice", sha("1")), ClientKey: "same"}
			<-start
			a, c, err := us.CreateUpload(context.Background(), in)
			if err != nil {
				t.Errorf("try %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c {
				created++
			}
			ids[a.ID] = true
		}(i)
	}
	close(start)
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d racing uploads created %d assets naming %d ids, want 1 and 1", n, created, len(ids))
	}
	for id := range ids {
		if _, err := s.GetAsset(ctx(t), "alice", id); err != nil {
			t.Fatal(err)
		}
	}
}

// testUploadRejectsTaskAssets: an upload's asset has no task; the store
// refuses one that names a task instead of storing it.
func testUploadRejectsTaskAssets(t *testing.T, h Harness) {
	_, us := uploadStore(t, h)
	a := upload(t, "alice", sha("1"))
	task := mustID(t)
	a.TaskID = &task
	if _, _, err := us.CreateUpload(ctx(t), intent.NewUpload{Asset: a, ClientKey: "k"}); err == nil {
		t.Fatal("an upload naming a task was stored")
	}
	if _, err := us.LookupUpload(ctx(t), "alice", "k"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("the key was bound: %v", err)
	}
}
