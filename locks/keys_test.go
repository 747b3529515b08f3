package locks

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestKeysApartRandom: over many random pairs of short keys built from
// look-alike pieces, two different keys never share a lock, equal keys
// always do, and CheckKey refuses exactly the empty, non-UTF-8 and too
// long ones.
func TestKeysApartRandom(t *testing.T) {
	pieces := []string{"a", "A", "é", "e\u0301", "ß", "ss", "\u00c5", "\u212b", "\x00", " ", "\u200b", "\xff", "字", "🔒"}
	rng := rand.New(rand.NewPCG(3, 7))
	key := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if rng.IntN(50) == 0 {
			b.WriteString(strings.Repeat("x", MaxKeyLen-1+rng.IntN(3)))
		}
		return b.String()
	}
	valid := func(k string) bool {
		return k != "" && utf8.ValidString(k) && utf8.RuneCountInString(k) <= MaxKeyLen
	}
	ctx := context.Background()
	for i := range 5000 {
		a, b := key(), key()
		if i%3 == 0 {
			b = a
		}
		for _, k := range []string{a, b} {
			if err := CheckKey(k); (err == nil) != valid(k) {
				t.Fatalf("CheckKey(%q) = %v, valid %v", k, err, valid(k))
			}
		}
		if !valid(a) || !valid(b) {
			continue
		}
		s := NewMemoryStore()
		if _, ok, err := s.Acquire(ctx, a, "A", time.Hour); !ok || err != nil {
			t.Fatalf("Acquire(%q) = %v, %v", a, ok, err)
		}
		if _, ok, err := s.Acquire(ctx, b, "B", time.Hour); err != nil || ok != (a != b) {
			t.Fatalf("Acquire(%q) after %q = %v, %v; want acquired iff the keys differ", b, a, ok, err)
		}
	}
}
