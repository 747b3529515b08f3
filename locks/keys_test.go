package locks

import (
	"context"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzKeysApart: two different valid keys never share a lock, and a key
// is refused exactly when it is empty, not UTF-8, or over MaxKeyLen
// characters.
func FuzzKeysApart(f *testing.F) {
	for _, seed := range [][2]string{
		{"é", "e\u0301"}, {"key", "Key"}, {"a\x00b", "a"}, {"ß", "ss"}, {"", "x"}, {"a\xffb", "a"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		valid := func(k string) bool {
			return k != "" && utf8.ValidString(k) && utf8.RuneCountInString(k) <= MaxKeyLen
		}
		for _, k := range []string{a, b} {
			if err := CheckKey(k); (err == nil) != valid(k) {
				t.Fatalf("CheckKey(%q) = %v, valid %v", k, err, valid(k))
			}
		}
		if !valid(a) || !valid(b) {
			return
		}
		ctx := context.Background()
		s := NewMemoryStore()
		if _, ok, err := s.Acquire(ctx, a, "A", time.Hour); !ok || err != nil {
			t.Fatalf("Acquire(%q) = %v, %v", a, ok, err)
		}
		_, ok, err := s.Acquire(ctx, b, "B", time.Hour)
		if err != nil || ok != (a != b) {
			t.Fatalf("Acquire(%q) after %q = %v, %v; want acquired iff the keys differ", b, a, ok, err)
		}
	})
}
