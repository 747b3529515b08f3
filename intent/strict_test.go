package intent_test

import (
	v1json "encoding/json"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// v2Target is a typed body for the library checks below.
type v2Target struct {
	Prompt     string `json:"prompt"`
	Candidates int    `json:"candidates"`
}

// TestJSONv2Defaults records what github.com/go-json-experiment/json refuses
// with its default options, and so what the decoder may lean on and what it
// must check itself. DecodeGeneration refuses every one of these cases (see
// TestDecodeGenerationRules); this test shows which of them the library
// catches alone.
func TestJSONv2Defaults(t *testing.T) {
	t.Parallel()
	refused := []struct{ name, in string }{
		{"duplicate names", `{"prompt":"a","prompt":"b"}`},
		{"duplicate names once unescaped", `{"prompt":"a","\u0070rompt":"b"}`},
		{"invalid UTF-8", "{\"prompt\":\"a\xffb\"}"},
		{"lone surrogate escape", `{"prompt":"\ud800"}`},
		{"trailing data", `{"prompt":"a"} {}`},
		{"trailing garbage", `{"prompt":"a"}x`},
		{"wrong type", `{"prompt":1}`},
		{"fraction for an int", `{"candidates":3.5}`},
		{"not an object", `["prompt"]`},
	}
	for _, c := range refused {
		var v v2Target
		if err := json.Unmarshal([]byte(c.in), &v); err == nil {
			t.Errorf("%s: json.Unmarshal(%q) accepted it: %+v", c.name, c.in, v)
		}
	}

	// Unknown members are ignored by default; only RejectUnknownMembers
	// refuses them. A key in the wrong case is matched case-sensitively, so it
	// is an unknown member too, silently dropped by default.
	ignored := []struct{ name, in string }{
		{"unknown member", `{"prompt":"a","colour":"red"}`},
		{"key in the wrong case", `{"prompt":"a","Candidates":3}`},
	}
	for _, c := range ignored {
		var v v2Target
		if err := json.Unmarshal([]byte(c.in), &v); err != nil || v.Candidates != 0 {
			t.Errorf("%s: default json.Unmarshal(%q) = %+v, %v; the library changed, check the decoder", c.name, c.in, v, err)
		}
		if err := json.Unmarshal([]byte(c.in), &v, json.RejectUnknownMembers(true)); err == nil {
			t.Errorf("%s: RejectUnknownMembers accepted %q", c.name, c.in)
		}
	}

	// An integral float for an int field is refused too: the decoder reads
	// numbers itself so that 3.0 and 3 mean the same (RFC 8785 writes both
	// as 3).
	var v v2Target
	if err := json.Unmarshal([]byte(`{"candidates":3.0}`), &v); err == nil {
		t.Errorf("json.Unmarshal accepted 3.0 for an int: %+v", v)
	}

	// jsontext canonicalizes a number beyond a double as the largest double
	// where RFC 8785 wants an error; Canonicalize adds that check.
	raw := jsontext.Value(`1e400`)
	if err := raw.Canonicalize(); err != nil || string(raw) != "1.7976931348623157e+308" {
		t.Errorf("jsontext canonicalized 1e400 as %s, %v; the library changed, check Canonicalize", raw, err)
	}
}

// TestEncodingJSONIsLax shows why the standard encoding/json is not used for
// bodies: it takes the last of duplicate names, matches names without regard
// to case and replaces invalid UTF-8.
func TestEncodingJSONIsLax(t *testing.T) {
	t.Parallel()
	var v v2Target
	if err := v1json.Unmarshal([]byte(`{"prompt":"a","prompt":"b"}`), &v); err != nil || v.Prompt != "b" {
		t.Errorf("duplicates: %+v, %v", v, err)
	}
	v = v2Target{}
	if err := v1json.Unmarshal([]byte(`{"PROMPT":"a"}`), &v); err != nil || v.Prompt != "a" {
		t.Errorf("case: %+v, %v", v, err)
	}
	v = v2Target{}
	if err := v1json.Unmarshal([]byte("{\"prompt\":\"a\xffb\"}"), &v); err != nil || v.Prompt != "a\ufffdb" {
		t.Errorf("UTF-8: %+v, %v", v, err)
	}
	if b, err := v1json.Marshal("<&>"); err != nil || string(b) != `"\u003c\u0026\u003e"` {
		t.Errorf("HTML escaping: %s, %v", b, err)
	}
}
