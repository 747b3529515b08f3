package httpapi

import (
	"errors"
	"strings"
	"testing"

	"studio/intent"
)

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
		ok             bool
	}{
		{"bare", "abc", "abc", true},
		{"bare uuid", "3f9c2b1e-8a4d-4c6e-9b1f-2a3c4d5e6f70", "3f9c2b1e-8a4d-4c6e-9b1f-2a3c4d5e6f70", true},
		{"quoted", `"abc"`, "abc", true},
		{"quoted with spaces around", ` "abc" `, "abc", true},
		{"bare with spaces around", "\t abc \t", "abc", true},
		{"quoted with inner space", `"a b"`, "a b", true},
		{"escaped quote", `"a\"b"`, `a"b`, true},
		{"escaped backslash", `"a\\b"`, `a\b`, true},
		{"quoted 100", `"` + strings.Repeat("x", 100) + `"`, strings.Repeat("x", 100), true},
		{"quoted 101", `"` + strings.Repeat("x", 101) + `"`, "", false},
		{"bare 101", strings.Repeat("x", 101), "", false},
		{"empty", "", "", false},
		{"only spaces", "   ", "", false},
		{"empty quoted", `""`, "", false},
		{"other escape", `"a\nb"`, "", false},
		{"backslash at the end", `"ab\"`, "", false},
		{"unterminated", `"abc`, "", false},
		{"data after the quote", `"abc"d`, "", false},
		{"two strings", `"a", "b"`, "", false},
		{"lone quote", `"`, "", false},
		{"non-ASCII bare", "caf\xc3\xa9", "", false},
		{"non-ASCII quoted", "\"caf\xc3\xa9\"", "", false},
		{"control character", "a\x01b", "", false},
		{"DEL", "a\x7fb", "", false},
	}
	for _, c := range cases {
		got, err := parseIdempotencyKey(c.in)
		if c.ok {
			if err != nil || got != c.want {
				t.Errorf("%s: parseIdempotencyKey(%q) = %q, %v; want %q", c.name, c.in, got, err, c.want)
			}
			continue
		}
		var e *intent.Error
		if !errors.As(err, &e) || e.Code != intent.EInvalid || len(e.Fields) != 1 || e.Fields[0].Field != "Idempotency-Key" {
			t.Errorf("%s: error %#v, want one invalid field Idempotency-Key", c.name, err)
		}
		if got != "" {
			t.Errorf("%s: got %q with an error", c.name, got)
		}
	}
}
