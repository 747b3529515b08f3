package intent_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
)

// TestFingerprintGenerationFastPath holds the fast path of Fingerprint for
// generation inputs to the generic one (marshal, then canonicalize) byte
// for byte: every escape class of strings, seeds absent and at the ends of
// their range, params default, canonical and not, and random inputs. An
// input the fast path declines (nil slices, invalid UTF-8) must still
// fingerprint the generic way.
func TestFingerprintGenerationFastPath(t *testing.T) {
	t.Parallel()
	seed := func(v int64) *int64 { return &v }
	tricky := []string{"", "plain", `quote " and \ backslash`, "\x00\x01\x07\b\t\n\v\f\r\x1b\x1f", "del \x7f", "é ü 漢字 🎨",
		"\u2028\u2029", "</script>&<>", "\ufeffbom", `\u0041`, strings.Repeat("x", 300)}
	base := intent.GenerationInput{Prompt: "a knight", Sets: []intent.FrameSet{{Collection: "walk", Frames: []string{"f01", "f02"}}},
		Providers: []string{"auto"}, Candidates: 3, Subjects: []string{}, Params: jsontext.Value("{}")}
	var cases []intent.GenerationInput
	for _, s := range tricky {
		in := base
		in.Prompt = s
		in.Sets = []intent.FrameSet{{Collection: s, Frames: []string{s, "f"}}, {Collection: "b", Frames: []string{}}}
		in.Providers = []string{s}
		in.Subjects = []string{s, "cat"}
		cases = append(cases, in)
	}
	for _, sd := range []*int64{nil, seed(0), seed(7), seed(1<<53 - 1), seed(1 << 53)} {
		in := base
		in.Seed = sd
		cases = append(cases, in)
	}
	for _, p := range []string{`{}`, `{"width":64,"height":64}`, `{"height":64,"width":64}`, `{"w":64.0,"a":[1,2.50,"\u0041"],"é":{"z":null,"a":true}}`,
		`{"big":1e300,"small":1e-7,"neg":-0}`} {
		in := base
		in.Params = jsontext.Value(p)
		cases = append(cases, in)
	}
	r := rand.New(rand.NewPCG(1, 2))
	runes := []rune("abc \"\\\x00\x1f\x7fé漢🎨\u2028")
	word := func() string {
		var b strings.Builder
		for n := r.IntN(8); n > 0; n-- {
			b.WriteRune(runes[r.IntN(len(runes))])
		}
		return b.String()
	}
	words := func() []string {
		out := []string{}
		for n := r.IntN(4); n > 0; n-- {
			out = append(out, word())
		}
		return out
	}
	for i := 0; i < 300; i++ {
		in := intent.GenerationInput{Prompt: word(), Providers: words(), Candidates: r.IntN(11), Subjects: words(), Params: jsontext.Value("{}")}
		for n := r.IntN(3); n >= 0; n-- {
			in.Sets = append(in.Sets, intent.FrameSet{Collection: word(), Frames: words()})
		}
		if r.IntN(2) == 0 {
			in.Seed = seed(r.Int64N(1 << 53))
		}
		cases = append(cases, in)
	}
	fastCount := 0
	for i, in := range cases {
		for _, actor := range []string{"alice", "bob \"the\" \\ builder\n"} {
			fast, ok, generic, err := intent.FingerprintDocs(actor, intent.OpGeneration, in)
			if err != nil {
				t.Fatalf("case %d: generic path: %v", i, err)
			}
			if !ok {
				t.Errorf("case %d: the fast path declined a well-formed input: %+v", i, in)
				continue
			}
			fastCount++
			if string(fast) != string(generic) {
				t.Errorf("case %d: documents differ\nfast    %s\ngeneric %s", i, fast, generic)
			}
		}
	}
	if fastCount == 0 {
		t.Fatal("no case took the fast path")
	}

	// Declined inputs: nil slices and invalid UTF-8 go the generic way,
	// with the same fingerprint as before this path existed.
	declined := []intent.GenerationInput{
		{Prompt: "p", Sets: []intent.FrameSet{{Collection: "c", Frames: []string{"f"}}}, Candidates: 1, Params: jsontext.Value("{}")},
		func() intent.GenerationInput { in := base; in.Prompt = "bad \xff utf-8"; return in }(),
		func() intent.GenerationInput { in := base; in.Params = nil; return in }(),
	}
	for i, in := range declined {
		if _, ok, _, _ := intent.FingerprintDocs("alice", intent.OpGeneration, in); ok {
			t.Errorf("declined case %d: the fast path took it", i)
		}
	}
}
