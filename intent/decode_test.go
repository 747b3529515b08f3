package intent_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"studio/intent"
)

// body builds a generation request body from raw JSON members, written in
// the order given.
type body [][2]string

// validBody is the smallest valid generation body.
func validBody() body {
	return body{
		{"request_id", `"req-1"`},
		{"prompt", `"a knight"`},
		{"sets", `[{"collection":"walk","frames":["f01"]}]`},
	}
}

// with returns b with member name set to raw (replaced in place, or added
// last).
func (b body) with(name, raw string) body {
	out := slices.Clone(b)
	for i := range out {
		if out[i][0] == name {
			out[i][1] = raw
			return out
		}
	}
	return append(out, [2]string{name, raw})
}

// without returns b without member name.
func (b body) without(name string) body {
	return slices.DeleteFunc(slices.Clone(b), func(m [2]string) bool { return m[0] == name })
}

// String writes the body.
func (b body) String() string {
	var s strings.Builder
	s.WriteByte('{')
	for i, m := range b {
		if i > 0 {
			s.WriteByte(',')
		}
		fmt.Fprintf(&s, "%q:%s", m[0], m[1])
	}
	s.WriteByte('}')
	return s.String()
}

// jstr quotes s as a JSON string (s is ASCII or plain UTF-8 here).
func jstr(s string) string { return fmt.Sprintf("%q", s) }

// jlist writes n strings made by f as a JSON array.
func jlist(n int, f func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = jstr(f(i))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// setsOf writes n sets of one frame each.
func setsOf(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"collection":"c%d","frames":["f"]}`, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// setWith writes one set with the given collection and frames (raw JSON).
func setWith(collection, frames string) string {
	return fmt.Sprintf(`[{"collection":%s,"frames":%s}]`, collection, frames)
}

// fieldsOf returns the field names of an *intent.Error, failing the test if
// err is not one with code EInvalid.
func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var e *intent.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *intent.Error", err, err)
	}
	if e.Code != intent.EInvalid {
		t.Fatalf("code %q, want %q (%v)", e.Code, intent.EInvalid, err)
	}
	if e.Message == "" {
		t.Fatal("empty message")
	}
	var fs []string
	for _, f := range e.Fields {
		if f.Message == "" {
			t.Fatalf("field %q has no message", f.Field)
		}
		fs = append(fs, f.Field)
	}
	return fs
}

// decodeCase is one body for a Decode function and what it must give.
type decodeCase[T any] struct {
	name  string
	body  string
	field string // "" for a valid body; "-" for an error without fields; else the error's fields, space-separated
	check func(t *testing.T, id string, idSet bool, in T)
}

// runDecodeCases runs each case through decode in parallel. A valid body
// passes its check; an invalid one gives an error naming exactly the case's
// fields and no result.
func runDecodeCases[T any](t *testing.T, decode func([]byte) (string, bool, T, error), cases []decodeCase[T]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id, idSet, in, err := decode([]byte(c.body))
			switch c.field {
			case "":
				if err != nil {
					t.Fatalf("decode: %v (%v)", err, intent.ErrorFields(err))
				}
				if c.check != nil {
					c.check(t, id, idSet, in)
				}
			case "-":
				if fs := fieldsOf(t, err); len(fs) != 0 {
					t.Fatalf("fields %q, want none", fs)
				}
			default:
				if got := strings.Join(fieldsOf(t, err), " "); got != c.field {
					t.Fatalf("fields %q, want %q (%v)", got, c.field, intent.ErrorFields(err))
				}
				var zero T
				if !reflect.DeepEqual(in, zero) || id != "" || idSet {
					t.Fatalf("an error came with a result: %q %v %#v", id, idSet, in)
				}
			}
		})
	}
}

// TestDecodeGenerationRules has one row per rule of the input table (and the
// strictness rules): the valid edge and the invalid edge of every limit.
func TestDecodeGenerationRules(t *testing.T) {
	t.Parallel()
	e100 := strings.Repeat("é", 100) // 100 code points, 200 bytes
	e101 := e100 + "é"
	b := validBody()
	cases := []decodeCase[intent.GenerationInput]{
		// The whole body.
		{"minimal body", b.String(), "", func(t *testing.T, id string, idSet bool, in intent.GenerationInput) {
			want := intent.GenerationInput{
				Prompt: "a knight", Sets: []intent.FrameSet{{Collection: "walk", Frames: []string{"f01"}}},
				Providers: []string{"auto"}, Candidates: 1, Subjects: []string{}, Params: []byte("{}"),
			}
			if id != "req-1" || !idSet || !reflect.DeepEqual(in, want) {
				t.Fatalf("got %q %v %#v", id, idSet, in)
			}
		}},
		{"body is an array", `[]`, "-", nil},
		{"body is null", `null`, "-", nil},
		{"body is a string", `"x"`, "-", nil},
		{"body is empty", ``, "-", nil},
		{"body is whitespace", " \n", "-", nil},
		{"body is truncated", `{"prompt":"a"`, "-", nil},
		{"trailing object", b.String() + `{}`, "-", nil},
		{"trailing garbage", b.String() + `x`, "-", nil},
		{"trailing whitespace is fine", b.String() + " \r\n\t", "", nil},
		{"byte order mark", "\xef\xbb\xbf" + b.String(), "-", nil},
		{"unknown field", b.with("colour", `"red"`).String(), "colour", nil},
		{"key in the wrong case", b.with("Prompt", `"x"`).String(), "Prompt", nil},
		{"only a wrong-case key", b.without("prompt").with("PROMPT", `"x"`).String(), "PROMPT prompt", nil},
		{"duplicate key", b.String()[:len(b.String())-1] + `,"prompt":"b"}`, "prompt", nil},
		{"duplicate key by escape", b.String()[:len(b.String())-1] + `,"\u0070rompt":"b"}`, "prompt", nil},
		{"duplicate key in a set", b.with("sets", `[{"collection":"a","frames":["f"],"collection":"b"}]`).String(), "sets[0].collection", nil},
		{"invalid UTF-8 in a value", b.with("prompt", "\"a\xffb\"").String(), "-", nil},
		{"invalid UTF-8 in a key", b.with("x\xc3", `1`).String(), "-", nil},
		{"lone surrogate escape", b.with("prompt", `"\ud800"`).String(), "-", nil},
		{"escaped key matches", strings.Replace(b.String(), `"prompt"`, `"\u0070rompt"`, 1), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Prompt != "a knight" {
				t.Fatalf("prompt %q", in.Prompt)
			}
		}},

		// request_id.
		{"request_id absent", b.without("request_id").String(), "", func(t *testing.T, id string, idSet bool, _ intent.GenerationInput) {
			if id != "" || idSet {
				t.Fatalf("got %q %v, want none", id, idSet)
			}
		}},
		{"request_id null is absent", b.with("request_id", `null`).String(), "", func(t *testing.T, id string, idSet bool, _ intent.GenerationInput) {
			if id != "" || idSet {
				t.Fatalf("got %q %v, want none", id, idSet)
			}
		}},
		{"request_id 1 code point", b.with("request_id", `"x"`).String(), "", nil},
		{"request_id 100 code points", b.with("request_id", jstr(e100)).String(), "", func(t *testing.T, id string, _ bool, _ intent.GenerationInput) {
			if id != e100 {
				t.Fatalf("id %q", id)
			}
		}},
		{"request_id 101 code points", b.with("request_id", jstr(e101)).String(), "request_id", nil},
		{"request_id empty", b.with("request_id", `""`).String(), "request_id", nil},
		{"request_id with C0 control", b.with("request_id", `"a\u0007b"`).String(), "request_id", nil},
		{"request_id with DEL", b.with("request_id", `"a\u007fb"`).String(), "request_id", nil},
		{"request_id with C1 control", b.with("request_id", `"a\u0085b"`).String(), "request_id", nil},
		{"request_id with emoji and spaces", b.with("request_id", `"order 42 \ud83d\ude00"`).String(), "", nil},
		{"request_id number", b.with("request_id", `42`).String(), "request_id", nil},

		// prompt.
		{"prompt 1 code point", b.with("prompt", `"x"`).String(), "", nil},
		{"prompt 2000 code points", b.with("prompt", jstr(strings.Repeat("é", 2000))).String(), "", nil},
		{"prompt 2001 code points", b.with("prompt", jstr(strings.Repeat("é", 2001))).String(), "prompt", nil},
		{"prompt empty", b.with("prompt", `""`).String(), "prompt", nil},
		{"prompt absent", b.without("prompt").String(), "prompt", nil},
		{"prompt null", b.with("prompt", `null`).String(), "prompt", nil},
		{"prompt number", b.with("prompt", `1`).String(), "prompt", nil},

		// sets.
		{"sets 1", b.with("sets", setsOf(1)).String(), "", nil},
		{"sets 20", b.with("sets", setsOf(20)).String(), "", nil},
		{"sets 21", b.with("sets", setsOf(21)).String(), "sets", nil},
		{"sets empty", b.with("sets", `[]`).String(), "sets", nil},
		{"sets absent", b.without("sets").String(), "sets", nil},
		{"sets null", b.with("sets", `null`).String(), "sets", nil},
		{"sets object", b.with("sets", `{}`).String(), "sets", nil},
		{"set not an object", b.with("sets", `["walk"]`).String(), "sets[0]", nil},
		{"set unknown field", b.with("sets", `[{"collection":"a","frames":["f"],"frame":"g"}]`).String(), "sets[0].frame", nil},
		{"set key in the wrong case", b.with("sets", `[{"Collection":"a","frames":["f"]}]`).String(), "sets[0].Collection sets[0].collection", nil},
		{"collection 100 code points", b.with("sets", setWith(jstr(e100), `["f"]`)).String(), "", nil},
		{"collection 101 code points", b.with("sets", setWith(jstr(e101), `["f"]`)).String(), "sets[0].collection", nil},
		{"collection empty", b.with("sets", setWith(`""`, `["f"]`)).String(), "sets[0].collection", nil},
		{"collection null", b.with("sets", setWith(`null`, `["f"]`)).String(), "sets[0].collection", nil},
		{"collection number", b.with("sets", setWith(`7`, `["f"]`)).String(), "sets[0].collection", nil},
		{"two sets may share a collection", b.with("sets", `[{"collection":"a","frames":["f"]},{"collection":"a","frames":["f"]}]`).String(), "", nil},
		{"frames 1", b.with("sets", setWith(`"a"`, `["f"]`)).String(), "", nil},
		{"frames 60", b.with("sets", setWith(`"a"`, jlist(60, func(i int) string { return fmt.Sprint("f", i) }))).String(), "", nil},
		{"frames 61", b.with("sets", setWith(`"a"`, jlist(61, func(i int) string { return fmt.Sprint("f", i) }))).String(), "sets[0].frames", nil},
		{"frames empty", b.with("sets", setWith(`"a"`, `[]`)).String(), "sets[0].frames", nil},
		{"frames absent", b.with("sets", `[{"collection":"a"}]`).String(), "sets[0].frames", nil},
		{"frames null", b.with("sets", setWith(`"a"`, `null`)).String(), "sets[0].frames", nil},
		{"frames duplicate", b.with("sets", setWith(`"a"`, `["f","g","f"]`)).String(), "sets[0].frames[2]", nil},
		{"frames differ only in case", b.with("sets", setWith(`"a"`, `["f","F"]`)).String(), "", nil},
		{"frame label 100 code points", b.with("sets", setWith(`"a"`, "["+jstr(e100)+"]")).String(), "", nil},
		{"frame label 101 code points", b.with("sets", setWith(`"a"`, "["+jstr(e101)+"]")).String(), "sets[0].frames[0]", nil},
		{"frame label empty", b.with("sets", setWith(`"a"`, `["f",""]`)).String(), "sets[0].frames[1]", nil},
		{"frame label number", b.with("sets", setWith(`"a"`, `["f",2]`)).String(), "sets[0].frames[1]", nil},
		{"frame label null", b.with("sets", setWith(`"a"`, `[null]`)).String(), "sets[0].frames[0]", nil},

		// providers.
		{"providers default", b.String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if !slices.Equal(in.Providers, []string{"auto"}) {
				t.Fatalf("providers %q", in.Providers)
			}
		}},
		{"providers null is the default", b.with("providers", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if !slices.Equal(in.Providers, []string{"auto"}) {
				t.Fatalf("providers %q", in.Providers)
			}
		}},
		{"providers 1", b.with("providers", `["sketch"]`).String(), "", nil},
		{"providers 8", b.with("providers", jlist(8, func(i int) string { return fmt.Sprint("g", i) })).String(), "", nil},
		{"providers 9", b.with("providers", jlist(9, func(i int) string { return fmt.Sprint("g", i) })).String(), "providers", nil},
		{"providers empty", b.with("providers", `[]`).String(), "providers", nil},
		{"providers duplicate", b.with("providers", `["sketch","mosaic","sketch"]`).String(), "providers[2]", nil},
		{"provider empty", b.with("providers", `["sketch",""]`).String(), "providers[1]", nil},
		{"provider number", b.with("providers", `[1]`).String(), "providers[0]", nil},
		{"providers a string", b.with("providers", `"auto"`).String(), "providers", nil},
		{"unknown provider is for the planner", b.with("providers", `["nope"]`).String(), "", nil},

		// candidates.
		{"candidates default", b.String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Candidates != 1 {
				t.Fatalf("candidates %d", in.Candidates)
			}
		}},
		{"candidates null is the default", b.with("candidates", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Candidates != 1 {
				t.Fatalf("candidates %d", in.Candidates)
			}
		}},
		{"candidates 1", b.with("candidates", `1`).String(), "", nil},
		{"candidates 10", b.with("candidates", `10`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Candidates != 10 {
				t.Fatalf("candidates %d", in.Candidates)
			}
		}},
		{"candidates 0", b.with("candidates", `0`).String(), "candidates", nil},
		{"candidates 11", b.with("candidates", `11`).String(), "candidates", nil},
		{"candidates -1", b.with("candidates", `-1`).String(), "candidates", nil},
		{"candidates 3.0 is 3", b.with("candidates", `3.0`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Candidates != 3 {
				t.Fatalf("candidates %d", in.Candidates)
			}
		}},
		{"candidates 1e1 is 10", b.with("candidates", `1e1`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Candidates != 10 {
				t.Fatalf("candidates %d", in.Candidates)
			}
		}},
		{"candidates 3.5", b.with("candidates", `3.5`).String(), "candidates", nil},
		{"candidates 1e400", b.with("candidates", `1e400`).String(), "candidates", nil},
		{"candidates string", b.with("candidates", `"3"`).String(), "candidates", nil},
		{"candidates boolean", b.with("candidates", `true`).String(), "candidates", nil},

		// subjects.
		{"subjects default", b.String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Subjects == nil || len(in.Subjects) != 0 {
				t.Fatalf("subjects %#v", in.Subjects)
			}
		}},
		{"subjects null is the default", b.with("subjects", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Subjects == nil || len(in.Subjects) != 0 {
				t.Fatalf("subjects %#v", in.Subjects)
			}
		}},
		{"subjects 0", b.with("subjects", `[]`).String(), "", nil},
		{"subjects 20", b.with("subjects", jlist(20, func(i int) string { return fmt.Sprint("s", i) })).String(), "", nil},
		{"subjects 21", b.with("subjects", jlist(21, func(i int) string { return fmt.Sprint("s", i) })).String(), "subjects", nil},
		{"subjects duplicate", b.with("subjects", `["knight","knight"]`).String(), "subjects[1]", nil},
		{"subject empty", b.with("subjects", `[""]`).String(), "subjects[0]", nil},
		{"subjects object", b.with("subjects", `{}`).String(), "subjects", nil},

		// seed.
		{"seed absent", b.String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed != nil {
				t.Fatalf("seed %d", *in.Seed)
			}
		}},
		{"seed null is absent", b.with("seed", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed != nil {
				t.Fatalf("seed %d", *in.Seed)
			}
		}},
		{"seed 0", b.with("seed", `0`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed == nil || *in.Seed != 0 {
				t.Fatalf("seed %v", in.Seed)
			}
		}},
		{"seed 2^53-1", b.with("seed", `9007199254740991`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed == nil || *in.Seed != 1<<53-1 {
				t.Fatalf("seed %v", in.Seed)
			}
		}},
		{"seed 2^53", b.with("seed", `9007199254740992`).String(), "seed", nil},
		{"seed -1", b.with("seed", `-1`).String(), "seed", nil},
		{"seed -0 is 0", b.with("seed", `-0`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed == nil || *in.Seed != 0 {
				t.Fatalf("seed %v", in.Seed)
			}
		}},
		{"seed 7.0 is 7", b.with("seed", `7.0`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if in.Seed == nil || *in.Seed != 7 {
				t.Fatalf("seed %v", in.Seed)
			}
		}},
		{"seed 7.5", b.with("seed", `7.5`).String(), "seed", nil},
		{"seed string", b.with("seed", `"7"`).String(), "seed", nil},

		// params.
		{"params default", b.String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if string(in.Params) != `{}` {
				t.Fatalf("params %s", in.Params)
			}
		}},
		{"params null is the default", b.with("params", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if string(in.Params) != `{}` {
				t.Fatalf("params %s", in.Params)
			}
		}},
		{"params canonicalized", b.with("params", `{ "width": 256.0, "a": {"z": null, "b": "\u0041"} }`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if want := `{"a":{"b":"A","z":null},"width":256}`; string(in.Params) != want {
				t.Fatalf("params %s, want %s", in.Params, want)
			}
		}},
		{"params null member kept", b.with("params", `{"a":null}`).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if string(in.Params) != `{"a":null}` {
				t.Fatalf("params %s", in.Params)
			}
		}},
		{"params 16384 canonical bytes", b.with("params", paramsOfSize(16384, false)).String(), "", func(t *testing.T, _ string, _ bool, in intent.GenerationInput) {
			if len(in.Params) != 16384 {
				t.Fatalf("params of %d bytes", len(in.Params))
			}
		}},
		{"params 16385 canonical bytes", b.with("params", paramsOfSize(16385, false)).String(), "params", nil},
		{"params over 16 KiB only with whitespace", b.with("params", paramsOfSize(16384, true)).String(), "", nil},
		{"params an array", b.with("params", `[]`).String(), "params", nil},
		{"params a string", b.with("params", `"{}"`).String(), "params", nil},
		{"params number beyond a double", b.with("params", `{"a":[1e400]}`).String(), "params", nil},
		{"params duplicate key", b.with("params", `{"a":1,"a":2}`).String(), "params.a", nil},
	}
	runDecodeCases(t, intent.DecodeGeneration, cases)
}

// paramsOfSize returns a params object whose canonical form has exactly n
// bytes (n >= 8); spaced writes it with extra whitespace so that its raw
// form is larger than n.
func paramsOfSize(n int, spaced bool) string {
	// {"k":"…"} is 8 bytes plus the value's characters.
	v := strings.Repeat("x", n-8)
	if spaced {
		return "{ \"k\" :\n\t" + jstr(v) + strings.Repeat(" ", 100) + "}"
	}
	return `{"k":` + jstr(v) + `}`
}

// TestDecodeGenerationAllErrors checks that every problem of a body is
// listed, in the contract's field order whatever the order of the keys.
func TestDecodeGenerationAllErrors(t *testing.T) {
	t.Parallel()
	members := body{
		{"seed", `-1`},
		{"params", `[]`},
		{"zeta", `1`},
		{"sets", `[{"collection":"","frames":["a","a",3]},{"Frames":[],"collection":"b"}]`},
		{"candidates", `0`},
		{"prompt", `""`},
		{"alpha", `1`},
		{"providers", `[]`},
		{"subjects", `["x","x"]`},
		{"request_id", `""`},
	}
	want := []string{
		"alpha", "zeta",
		"request_id", "prompt",
		"sets[0].collection", "sets[0].frames[2]", "sets[0].frames[1]",
		"sets[1].Frames", "sets[1].frames",
		"providers", "candidates", "subjects[1]", "seed", "params",
	}
	var first []intent.FieldError
	for round := range 3 {
		if round > 0 {
			// Another key order must give the very same list.
			slices.Reverse(members)
			if round == 2 {
				members[0], members[4] = members[4], members[0]
			}
		}
		_, _, _, err := intent.DecodeGeneration([]byte(members.String()))
		if got := fieldsOf(t, err); !slices.Equal(got, want) {
			t.Fatalf("round %d: fields\n got %q\nwant %q", round, got, want)
		}
		if round == 0 {
			first = intent.ErrorFields(err)
			if intent.ErrorMessage(err) != "The request body is invalid." {
				t.Fatalf("message %q", intent.ErrorMessage(err))
			}
		} else if !reflect.DeepEqual(intent.ErrorFields(err), first) {
			t.Fatalf("round %d: %v, want %v", round, intent.ErrorFields(err), first)
		}
	}
}

// TestDecodeGenerationCapsErrors checks that a flood of bad values gives at
// most MaxFieldErrors entries and says that more were left out.
func TestDecodeGenerationCapsErrors(t *testing.T) {
	t.Parallel()
	frames := "[" + strings.Repeat(`1,`, 59) + "1]"
	sets := "[" + strings.Repeat(setWith(`"a"`, frames)[1:len(setWith(`"a"`, frames))-1]+",", 19) + setWith(`"a"`, frames)[1:]
	_, _, _, err := intent.DecodeGeneration([]byte(validBody().with("sets", sets).String()))
	if fs := fieldsOf(t, err); len(fs) != intent.MaxFieldErrors {
		t.Fatalf("%d fields, want %d", len(fs), intent.MaxFieldErrors)
	}
	if msg := intent.ErrorMessage(err); !strings.Contains(msg, "1150 more") {
		t.Fatalf("message %q", msg)
	}
}

// TestDecodeGenerationHintsCase checks the message of a key in the wrong
// case.
func TestDecodeGenerationHintsCase(t *testing.T) {
	t.Parallel()
	_, _, _, err := intent.DecodeGeneration([]byte(validBody().with("Seed", "1").String()))
	fs := intent.ErrorFields(err)
	if len(fs) != 1 || fs[0].Field != "Seed" || !strings.Contains(fs[0].Message, `"seed"`) {
		t.Fatalf("fields %v", fs)
	}
}

// TestDecodePublicationRules has one row per rule of the publication input.
func TestDecodePublicationRules(t *testing.T) {
	t.Parallel()
	const a1 = "0192f0c1-7a3b-7c4d-8e5f-0123456789ab"
	const a2 = "0192f0c1-7a3b-7c4d-8e5f-0123456789ac"
	b := body{{"request_id", `"pub-1"`}, {"batch_id", jstr(a1)}, {"asset_ids", `["` + a2 + `"]`}}
	ids := func(n int) string {
		return jlist(n, func(i int) string { return fmt.Sprintf("0192f0c1-7a3b-7c4d-8e5f-%012x", i) })
	}
	cases := []decodeCase[intent.PublicationInput]{
		{"minimal", b.String(), "", func(t *testing.T, id string, idSet bool, in intent.PublicationInput) {
			want := intent.PublicationInput{BatchID: a1, AssetIDs: []string{a2}, Channel: "gallery"}
			if id != "pub-1" || !idSet || !reflect.DeepEqual(in, want) {
				t.Fatalf("got %q %v %#v", id, idSet, in)
			}
		}},
		{"body an array", `[]`, "-", nil},
		{"trailing data", b.String() + `1`, "-", nil},
		{"unknown field", b.with("asset_id", `"x"`).String(), "asset_id", nil},
		{"wrong case", b.with("Channel", `"gallery"`).String(), "Channel", nil},
		{"duplicate key", b.String()[:len(b.String())-1] + `,"batch_id":"x"}`, "batch_id", nil},
		{"request_id absent", b.without("request_id").String(), "", func(t *testing.T, id string, idSet bool, _ intent.PublicationInput) {
			if idSet {
				t.Fatal("idSet")
			}
		}},
		{"request_id 101", b.with("request_id", jstr(strings.Repeat("x", 101))).String(), "request_id", nil},
		{"batch_id absent", b.without("batch_id").String(), "batch_id", nil},
		{"batch_id null", b.with("batch_id", `null`).String(), "batch_id", nil},
		{"batch_id not a UUID", b.with("batch_id", `"batch-1"`).String(), "batch_id", nil},
		{"batch_id without hyphens", b.with("batch_id", jstr(strings.ReplaceAll(a1, "-", ""))).String(), "batch_id", nil},
		{"batch_id in braces", b.with("batch_id", jstr("{"+a1+"}")).String(), "batch_id", nil},
		{"batch_id in uppercase is lowered", b.with("batch_id", jstr(strings.ToUpper(a1))).String(), "", func(t *testing.T, _ string, _ bool, in intent.PublicationInput) {
			if in.BatchID != a1 {
				t.Fatalf("batch_id %q", in.BatchID)
			}
		}},
		{"asset_ids 600", b.with("asset_ids", ids(600)).String(), "", nil},
		{"asset_ids 601", b.with("asset_ids", ids(601)).String(), "asset_ids", nil},
		{"asset_ids empty", b.with("asset_ids", `[]`).String(), "asset_ids", nil},
		{"asset_ids absent", b.without("asset_ids").String(), "asset_ids", nil},
		{"asset_ids duplicate", b.with("asset_ids", `["`+a1+`","`+a2+`","`+a1+`"]`).String(), "asset_ids[2]", nil},
		{"asset_ids duplicate in another case", b.with("asset_ids", `["`+a1+`","`+strings.ToUpper(a1)+`"]`).String(), "asset_ids[1]", nil},
		{"asset id not a UUID", b.with("asset_ids", `["`+a1+`","x"]`).String(), "asset_ids[1]", nil},
		{"asset id a number", b.with("asset_ids", `[1]`).String(), "asset_ids[0]", nil},
		{"channel default", b.with("channel", `null`).String(), "", func(t *testing.T, _ string, _ bool, in intent.PublicationInput) {
			if in.Channel != "gallery" {
				t.Fatalf("channel %q", in.Channel)
			}
		}},
		{"channel webhook", b.with("channel", `"webhook"`).String(), "", func(t *testing.T, _ string, _ bool, in intent.PublicationInput) {
			if in.Channel != "webhook" {
				t.Fatalf("channel %q", in.Channel)
			}
		}},
		{"channel other", b.with("channel", `"email"`).String(), "channel", nil},
		{"channel in another case", b.with("channel", `"Gallery"`).String(), "channel", nil},
		{"channel number", b.with("channel", `1`).String(), "channel", nil},
	}
	runDecodeCases(t, intent.DecodePublication, cases)
}
