package memo_test

import (
	"fmt"
	"sync"
	"testing"

	"studio/internal/memo"
)

// TestBounded: a Map keeps at most its bound, and what it answers is
// what was put in.
func TestBounded(t *testing.T) {
	t.Parallel()
	c := memo.New[string, string](8)
	for i := range 100 {
		c.Add(fmt.Sprint(i), fmt.Sprint("v", i))
	}
	if c.Len() != 8 {
		t.Fatalf("size %d, want 8", c.Len())
	}
	if v, ok := c.Get("99"); !ok || v != "v99" {
		t.Errorf("the last value added: %q, %v", v, ok)
	}
	kept := 0
	for i := range 100 {
		if v, ok := c.Get(fmt.Sprint(i)); ok {
			kept++
			if v != fmt.Sprint("v", i) {
				t.Errorf("key %d holds %q", i, v)
			}
		}
	}
	if kept != 8 {
		t.Errorf("%d keys answer, want 8", kept)
	}
	c.Add("99", "again") // a known key makes no room
	if c.Len() != 8 {
		t.Errorf("size %d after re-adding a key, want 8", c.Len())
	}
}

// TestConcurrent: many goroutines adding and reading at once (run it
// under -race) never see a value that was not added for the key.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	c := memo.New[int, int](64)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := (g*2000 + i) % 256
				c.Add(k, k*3)
				if v, ok := c.Get((k + 7) % 256); ok && v != (k+7)%256*3 {
					t.Errorf("key %d holds %d", (k+7)%256, v)
					return
				}
			}
		})
	}
	wg.Wait()
	if c.Len() > 64 {
		t.Errorf("size %d, want at most 64", c.Len())
	}
}
