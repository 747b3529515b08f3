package storetest

import (
	"bytes"
	"sync"
	"testing"

	"studio/store"
)

// testCursorKeyOnce: the cursor key is made on first ask, at least 32
// bytes, the same on every later ask, and the same from racing askers on
// one store and from a twin store on the same database (another process),
// so that every instance accepts the others' cursors. A fresh database has
// another key.
func testCursorKeyOnce(t *testing.T, h Harness) {
	s := h.New(t)
	stores := []store.Store{s}
	if h.Twin != nil {
		stores = append(stores, h.Twin(t, s))
	}
	const n = 8
	keys := make([][]byte, n*len(stores))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], errs[i] = stores[i%len(stores)].CursorKey(ctx(t))
		}()
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil {
			t.Fatalf("CursorKey: %v", errs[i])
		}
		if len(keys[i]) < 32 {
			t.Fatalf("CursorKey is %d bytes, want at least 32", len(keys[i]))
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("CursorKey answered two keys on one database")
		}
	}
	again, err := s.CursorKey(ctx(t))
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatalf("CursorKey later = %x, %v; want the first key", again, err)
	}
	other, err := h.New(t).CursorKey(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, keys[0]) {
		t.Fatal("two databases share a cursor key")
	}
}
