package intent_test

import (
	"strings"
	"testing"

	"studio/intent"
)

func TestValidateRequestID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		id   string
		ok   bool
	}{
		{"one character", "a", true},
		{"uuid", "3f9c2b1e-8a4d-4c6e-9b1f-2a3c4d5e6f70", true},
		{"100 ASCII", strings.Repeat("a", 100), true},
		{"100 code points of 4 bytes", strings.Repeat("\U0001F600", 100), true},
		{"spaces and punctuation", ` a "b" \c `, true},
		{"line separator is not a control", "a\u2028b", true},
		{"empty", "", false},
		{"101 ASCII", strings.Repeat("a", 101), false},
		{"101 code points", strings.Repeat("é", 101), false},
		{"NUL", "a\x00b", false},
		{"newline", "a\nb", false},
		{"tab", "a\tb", false},
		{"unit separator", "a\x1fb", false},
		{"DEL", "a\x7fb", false},
		{"C1 NEL", "a\u0085b", false},
		{"C1 last", "a\u009fb", false},
		{"invalid UTF-8", "a\xffb", false},
		{"encoded surrogate", "a\xed\xa0\x80b", false},
	}
	for _, c := range cases {
		err := intent.ValidateRequestID(c.id)
		if c.ok {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if fs := fieldsOf(t, err); len(fs) != 1 || fs[0] != "request_id" {
			t.Errorf("%s: fields %q", c.name, fs)
		}
	}
}

func TestResolveRequestID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		body               string
		bodySet            bool
		header             string
		headerSet          bool
		want, wantFieldErr string
	}{
		{"body only", "a", true, "", false, "a", ""},
		{"header only", "", false, "h", true, "h", ""},
		{"both the same", "a", true, "a", true, "a", ""},
		{"both different", "a", true, "b", true, "", "request_id"},
		{"differ only in case", "a", true, "A", true, "", "request_id"},
		{"neither", "", false, "", false, "", "request_id"},
		{"body set but empty", "", true, "", false, "", "request_id"},
		{"body invalid", "a\x00", true, "", false, "", "request_id"},
	}
	for _, c := range cases {
		got, err := intent.ResolveRequestID(c.body, c.bodySet, c.header, c.headerSet)
		if c.wantFieldErr == "" {
			if err != nil || got != c.want {
				t.Errorf("%s: got %q, %v; want %q", c.name, got, err, c.want)
			}
			continue
		}
		if fs := fieldsOf(t, err); len(fs) != 1 || fs[0] != c.wantFieldErr {
			t.Errorf("%s: fields %q", c.name, fs)
		}
	}
	_, err := intent.ResolveRequestID("", false, "", false)
	if msg := intent.ErrorMessage(err); msg != "request_id is required." {
		t.Errorf("message %q", msg)
	}
}
