package intent_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
)

// fingerprintOf decodes a generation body and fingerprints it.
func fingerprintOf(t testing.TB, actor, operation, body string) string {
	t.Helper()
	_, _, in, err := intent.DecodeGeneration([]byte(body))
	if err != nil {
		t.Fatalf("DecodeGeneration(%s): %v %v", body, err, intent.ErrorFields(err))
	}
	fp, err := intent.Fingerprint(actor, operation, in)
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	return fp
}

// fullBody is a generation body with every field given.
const fullBody = `{"request_id":"req-7","prompt":"a knight in the rain","sets":[{"collection":"walk","frames":["f01","f02"]},{"collection":"run","frames":["r1"]}],"providers":["sketch","mosaic"],"candidates":3,"subjects":["knight","cat"],"seed":7,"params":{"width":64,"height":64,"style":{"ink":"black","weights":[1,2]}}}`

// TestFingerprintDefinition pins the exact bytes hashed: every stored
// fingerprint depends on them.
func TestFingerprintDefinition(t *testing.T) {
	t.Parallel()
	_, _, in, err := intent.DecodeGeneration([]byte(`{"seed":7,"sets":[{"frames":["f01"],"collection":"walk"}],"prompt":"a knight"}`))
	if err != nil {
		t.Fatal(err)
	}
	const doc = `{"actor":"alice","input":{"candidates":1,"params":{},"prompt":"a knight","providers":["auto"],"seed":7,"sets":[{"collection":"walk","frames":["f01"]}],"subjects":[]},"operation":"generation"}`
	c, err := intent.CanonicalJSON(map[string]any{"actor": "alice", "operation": intent.OpGeneration, "input": in})
	if err != nil {
		t.Fatal(err)
	}
	if string(c) != doc {
		t.Fatalf("canonical document\n got %s\nwant %s", c, doc)
	}
	sum := sha256.Sum256([]byte(doc))
	fp, err := intent.Fingerprint("alice", intent.OpGeneration, in)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]); fp != want {
		t.Fatalf("fingerprint %s, want %s", fp, want)
	}
	if len(fp) != 64 || strings.ToLower(fp) != fp {
		t.Fatalf("fingerprint %q is not 64 lowercase hex digits", fp)
	}
}

// TestFingerprintSame lists spellings of one request that must share a
// fingerprint.
func TestFingerprintSame(t *testing.T) {
	t.Parallel()
	base := fingerprintOf(t, "alice", intent.OpGeneration, fullBody)
	minimal := `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}]}`
	minimalFP := fingerprintOf(t, "alice", intent.OpGeneration, minimal)
	cases := []struct {
		name, body string
		want       string
	}{
		{"reordered keys", `{"params":{"style":{"weights":[1,2],"ink":"black"},"height":64,"width":64},"seed":7,"subjects":["knight","cat"],"candidates":3,"providers":["sketch","mosaic"],"sets":[{"frames":["f01","f02"],"collection":"walk"},{"frames":["r1"],"collection":"run"}],"prompt":"a knight in the rain","request_id":"req-7"}`, base},
		{"whitespace", strings.NewReplacer(",", " ,\n\t", ":", " : ", "{", "{ ", "}", "\r\n}").Replace(fullBody), base},
		{`\u0041 for A and other escapes`, strings.Replace(strings.Replace(fullBody, `"a knight`, `"\u0061 kn\u0069ght`, 1), `"walk"`, `"w\u0061lk"`, 1), base},
		{"escaped key name", strings.Replace(fullBody, `"prompt"`, `"\u0070rompt"`, 1), base},
		{"64.0 for 64 in params", strings.Replace(fullBody, `"width":64`, `"width":64.0`, 1), base},
		{"6.4e1 for 64 in params", strings.Replace(fullBody, `"width":64`, `"width":6.4e1`, 1), base},
		{"3.0 for 3 candidates", strings.Replace(fullBody, `"candidates":3`, `"candidates":3.0`, 1), base},
		{"another request id", strings.Replace(fullBody, `"req-7"`, `"other"`, 1), base},
		{"no request id (header instead)", strings.Replace(fullBody, `"request_id":"req-7",`, ``, 1), base},
		{"omitted default providers", minimal, minimalFP},
		{"explicit default providers", `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"providers":["auto"]}`, minimalFP},
		{"explicit default candidates", `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"candidates":1}`, minimalFP},
		{"explicit default subjects", `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"subjects":[]}`, minimalFP},
		{"explicit default params", `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"params":{}}`, minimalFP},
		{"null optional fields", `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"providers":null,"candidates":null,"subjects":null,"seed":null,"params":null}`, minimalFP},
	}
	for _, c := range cases {
		if got := fingerprintOf(t, "alice", intent.OpGeneration, c.body); got != c.want {
			t.Errorf("%s: fingerprint differs\nbody %s", c.name, c.body)
		}
	}
}

// TestFingerprintDifferent lists changes that must change the fingerprint;
// every variant must also differ from every other.
func TestFingerprintDifferent(t *testing.T) {
	t.Parallel()
	type variant struct{ name, actor, op, body string }
	r := func(old, new string) string {
		if !strings.Contains(fullBody, old) {
			t.Fatalf("fullBody has no %q", old)
		}
		return strings.Replace(fullBody, old, new, 1)
	}
	variants := []variant{
		{"base", "alice", intent.OpGeneration, fullBody},
		{"swapped frames", "alice", intent.OpGeneration, r(`["f01","f02"]`, `["f02","f01"]`)},
		{"swapped sets", "alice", intent.OpGeneration, r(`{"collection":"walk","frames":["f01","f02"]},{"collection":"run","frames":["r1"]}`, `{"collection":"run","frames":["r1"]},{"collection":"walk","frames":["f01","f02"]}`)},
		{"swapped providers", "alice", intent.OpGeneration, r(`["sketch","mosaic"]`, `["mosaic","sketch"]`)},
		{"auto for sketch and mosaic", "alice", intent.OpGeneration, r(`["sketch","mosaic"]`, `["auto"]`)},
		{"swapped subjects", "alice", intent.OpGeneration, r(`["knight","cat"]`, `["cat","knight"]`)},
		{"changed nested param", "alice", intent.OpGeneration, r(`"ink":"black"`, `"ink":"blue"`)},
		{"changed nested array param", "alice", intent.OpGeneration, r(`[1,2]`, `[2,1]`)},
		{"64.5 for 64", "alice", intent.OpGeneration, r(`"width":64`, `"width":64.5`)},
		{"string 64 for 64", "alice", intent.OpGeneration, r(`"width":64`, `"width":"64"`)},
		{"null member in params", "alice", intent.OpGeneration, r(`"width":64,`, `"width":64,"x":null,`)},
		{"candidates 2", "alice", intent.OpGeneration, r(`"candidates":3`, `"candidates":2`)},
		{"seed absent", "alice", intent.OpGeneration, r(`"seed":7,`, ``)},
		{"seed 0", "alice", intent.OpGeneration, r(`"seed":7`, `"seed":0`)},
		{"prompt case", "alice", intent.OpGeneration, r(`a knight`, `A knight`)},
		{"collection renamed", "alice", intent.OpGeneration, r(`"walk"`, `"walk2"`)},
		{"another actor", "bob", intent.OpGeneration, fullBody},
		{"another operation", "alice", intent.OpPublication, fullBody},
	}
	seen := map[string]string{}
	for _, v := range variants {
		fp := fingerprintOf(t, v.actor, v.op, v.body)
		if other, ok := seen[fp]; ok {
			t.Errorf("%q and %q share a fingerprint", v.name, other)
		}
		seen[fp] = v.name
	}
	// {"a":null} and {} in params are different inputs.
	empty := fingerprintOf(t, "alice", intent.OpGeneration, `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"params":{}}`)
	null := fingerprintOf(t, "alice", intent.OpGeneration, `{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"params":{"a":null}}`)
	if empty == null {
		t.Error(`params {"a":null} and {} share a fingerprint`)
	}
}

// TestFingerprintPublication checks the publication input the same way.
func TestFingerprintPublication(t *testing.T) {
	t.Parallel()
	const a = "0192f0c1-7a3b-7c4d-8e5f-0123456789ab"
	const b = "0192f0c1-7a3b-7c4d-8e5f-0123456789ac"
	fp := func(body string) string {
		t.Helper()
		_, _, in, err := intent.DecodePublication([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		s, err := intent.Fingerprint("alice", intent.OpPublication, in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp(`{"batch_id":"` + a + `","asset_ids":["` + a + `","` + b + `"]}`)
	same := []string{
		`{"asset_ids":["` + a + `","` + b + `"],"batch_id":"` + a + `","channel":"gallery","request_id":"x"}`,
		`{"asset_ids":["` + strings.ToUpper(a) + `","` + b + `"],"batch_id":"` + a + `","channel":null}`,
	}
	for _, s := range same {
		if fp(s) != base {
			t.Errorf("fingerprint differs: %s", s)
		}
	}
	different := []string{
		`{"batch_id":"` + a + `","asset_ids":["` + b + `","` + a + `"]}`,
		`{"batch_id":"` + b + `","asset_ids":["` + a + `","` + b + `"]}`,
		`{"batch_id":"` + a + `","asset_ids":["` + a + `","` + b + `"],"channel":"webhook"}`,
	}
	for _, s := range different {
		if fp(s) == base {
			t.Errorf("fingerprint is the same: %s", s)
		}
	}
}

// bigInput is a generation input of 20 sets of 30 frames: 600 tasks with
// one provider and one candidate, the default task limit.
func bigInput(b testing.TB) (string, intent.GenerationInput) {
	var sets []string
	for s := range 20 {
		var frames []string
		for f := range 30 {
			frames = append(frames, fmt.Sprintf(`"frame-%02d-%02d"`, s, f))
		}
		sets = append(sets, fmt.Sprintf(`{"collection":"collection-%02d","frames":[%s]}`, s, strings.Join(frames, ",")))
	}
	body := fmt.Sprintf(`{"request_id":"bench","prompt":"a knight in the rain, side view","sets":[%s],"providers":["sketch"],"candidates":1,"subjects":["knight"],"seed":7,"params":{"width":256,"height":256}}`, strings.Join(sets, ","))
	_, _, in, err := intent.DecodeGeneration([]byte(body))
	if err != nil {
		b.Fatal(err)
	}
	return body, in
}

// BenchmarkFingerprint600 fingerprints a 600-task input.
func BenchmarkFingerprint600(b *testing.B) {
	_, in := bigInput(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := intent.Fingerprint("alice", intent.OpGeneration, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprint600Floor is the floor of BenchmarkFingerprint600: the
// SHA-256 and hex of the same canonical bytes, with no marshalling.
func BenchmarkFingerprint600Floor(b *testing.B) {
	_, in := bigInput(b)
	doc, err := intent.CanonicalJSON(map[string]any{"actor": "alice", "operation": intent.OpGeneration, "input": in})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		sum := sha256.Sum256(doc)
		_ = hex.EncodeToString(sum[:])
	}
}

// BenchmarkDecodeGeneration600 strictly decodes and validates the body of a
// 600-task input.
func BenchmarkDecodeGeneration600(b *testing.B) {
	body, _ := bigInput(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := intent.DecodeGeneration([]byte(body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeGeneration600Floor is the floor of
// BenchmarkDecodeGeneration600: one syntactic pass over the same body with
// the same strictness (UTF-8, duplicate names), building nothing.
func BenchmarkDecodeGeneration600Floor(b *testing.B) {
	body, _ := bigInput(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if !jsontext.Value(body).IsValid() {
			b.Fatal("invalid")
		}
	}
}

// The example of docs/input.md.
func ExampleFingerprint() {
	body := `{"request_id": "r1", "seed": 7.0,
	 "sets": [{"frames": ["f01"], "collection": "w\u0061lk"}],
	 "prompt": "a knight"}`
	id, _, in, err := intent.DecodeGeneration([]byte(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	fp, err := intent.Fingerprint("alice", intent.OpGeneration, in)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(id)
	fmt.Println(fp)
	// Output:
	// r1
	// 71d58d42cee9ccd4ba701b4c4848311fb6833bd9e5dbd914e2ec26c0c11fc58b
}
