package intent_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
)

var updateFingerprints = flag.Bool("update-fingerprints", false, "rewrite testdata/requests/*.fingerprint")

// requestExamples returns the example bodies of testdata/requests by name.
func requestExamples(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "requests", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no request examples: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = b
	}
	return out
}

// TestRequestExamples decodes every example and checks its fingerprint
// against the golden file next to it.
func TestRequestExamples(t *testing.T) {
	for name, body := range requestExamples(t) {
		var fp string
		var err error
		if strings.HasPrefix(name, "publication") {
			var in intent.PublicationInput
			if _, _, in, err = intent.DecodePublication(body); err == nil {
				fp, err = intent.Fingerprint("alice", intent.OpPublication, in)
			}
		} else {
			var in intent.GenerationInput
			if _, _, in, err = intent.DecodeGeneration(body); err == nil {
				fp, err = intent.Fingerprint("alice", intent.OpGeneration, in)
			}
		}
		if err != nil {
			t.Errorf("%s: %v %v", name, err, intent.ErrorFields(err))
			continue
		}
		golden := filepath.Join("..", "testdata", "requests", name+".fingerprint")
		if *updateFingerprints {
			if err := os.WriteFile(golden, []byte(fp+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%s: %v (run with -update-fingerprints to create it)", name, err)
		}
		if got := fp + "\n"; got != string(want) {
			t.Errorf("%s: fingerprint %s, golden %s", name, fp, want)
		}
	}
	full, err := os.ReadFile(filepath.Join("..", "testdata", "requests", "generation-full.fingerprint"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile(filepath.Join("..", "testdata", "requests", "generation-spelled-differently.fingerprint"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(full, other) {
		t.Error("generation-full and generation-spelled-differently have different fingerprints")
	}
}

// respell writes the JSON value v again with the same meaning and another
// spelling chosen by r: object members shuffled, whitespace between tokens,
// characters of strings and names escaped as \uXXXX (either case of hex),
// and integer literals given a ".0". v must be valid.
func respell(v jsontext.Value, r *rand.Rand) []byte {
	dst := respellValue(nil, bytes.TrimSpace(v), r)
	return appendSpace(dst, r)
}

func appendSpace(dst []byte, r *rand.Rand) []byte {
	for range r.IntN(3) {
		dst = append(dst, " \t\r\n"[r.IntN(4)])
	}
	return dst
}

func respellValue(dst []byte, v jsontext.Value, r *rand.Rand) []byte {
	dst = appendSpace(dst, r)
	switch v.Kind() {
	case '{':
		type member struct {
			name string
			val  jsontext.Value
		}
		var ms []member
		d := jsontext.NewDecoder(bytes.NewReader(v))
		mustRead(d.ReadToken())
		for d.PeekKind() != '}' {
			tok := mustRead(d.ReadToken())
			name := tok.String()
			ms = append(ms, member{name, mustRead(d.ReadValue()).Clone()})
		}
		r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		dst = append(dst, '{')
		for i, m := range ms {
			if i > 0 {
				dst = append(appendSpace(dst, r), ',')
			}
			dst = appendSpace(dst, r)
			dst = respellString(dst, m.name, r)
			dst = append(appendSpace(dst, r), ':')
			dst = respellValue(dst, m.val, r)
		}
		return append(appendSpace(dst, r), '}')
	case '[':
		d := jsontext.NewDecoder(bytes.NewReader(v))
		mustRead(d.ReadToken())
		dst = append(dst, '[')
		for i := 0; d.PeekKind() != ']'; i++ {
			if i > 0 {
				dst = append(appendSpace(dst, r), ',')
			}
			dst = respellValue(dst, mustRead(d.ReadValue()).Clone(), r)
		}
		return append(appendSpace(dst, r), ']')
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			panic(err)
		}
		return respellString(dst, s, r)
	case '0':
		dst = append(dst, v...)
		if !bytes.ContainsAny(v, ".eE") && r.IntN(2) == 0 {
			dst = append(dst, ".0"...)
		}
		return dst
	default:
		return append(dst, v...)
	}
}

func mustRead[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// respellString writes s as a JSON string, escaping about a third of its
// characters as \uXXXX.
func respellString(dst []byte, s string, r *rand.Rand) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		hexf := "\\u%04x"
		if r.IntN(2) == 0 {
			hexf = "\\u%04X"
		}
		switch {
		case r.IntN(3) == 0 || c < 0x20 || c == '"' || c == '\\':
			if c > 0xffff {
				c -= 0x10000
				dst = fmt.Appendf(dst, hexf+hexf, 0xd800+(c>>10), 0xdc00+(c&0x3ff))
			} else {
				dst = fmt.Appendf(dst, hexf, c)
			}
		default:
			dst = utf8.AppendRune(dst, c)
		}
	}
	return append(dst, '"')
}

// randFor returns a random source fixed by data, so a failing input fails
// again.
func randFor(data []byte) *rand.Rand {
	sum := sha256.Sum256(data)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// FuzzDecodeGeneration: the decoder never panics, refuses only with a 400,
// and accepts only what it can fingerprint; the same body spelled otherwise
// decodes to the same input and fingerprint; and the normalized input,
// written out and read back, is itself (normalization is idempotent).
func FuzzDecodeGeneration(f *testing.F) {
	for _, b := range requestExamples(f) {
		f.Add(b)
	}
	for _, s := range []string{
		fullBody,
		`{"prompt":"p","sets":[{"collection":"c","frames":["f"]}]}`,
		`{"prompt":"p","sets":[{"collection":"c","frames":["f","f"]}],"candidates":3.5,"Seed":1}`,
		`{"prompt":"p","sets":[{"collection":"c","frames":["f"]}],"params":{"a":null,"b":[1e400]}}`,
		`{"prompt":"\ud83d\ude00","sets":[{"collection":"c","frames":["\u0000"]}],"seed":9007199254740991}`,
		`{"prompt":"p","prompt":"q"}`, `[]`, `{}x`, "{\"\xff\":1}", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, idSet, in, err := intent.DecodeGeneration(body)
		if err != nil {
			if code := intent.ErrorCode(err); code != intent.EInvalid {
				t.Fatalf("error code %q: %v", code, err)
			}
			if len(intent.ErrorFields(err)) > intent.MaxFieldErrors {
				t.Fatalf("%d field errors", len(intent.ErrorFields(err)))
			}
			return
		}
		if !jsontext.Value(body).IsValid() {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if c, err := intent.Canonicalize(in.Params); err != nil || !bytes.Equal(c, in.Params) || len(c) > intent.MaxParamsBytes {
			t.Fatalf("params %q not canonical: %q, %v", in.Params, c, err)
		}
		fp, err := intent.Fingerprint("alice", intent.OpGeneration, in)
		if err != nil {
			t.Fatalf("Fingerprint of an accepted input: %v", err)
		}

		other := respell(body, randFor(body))
		id2, idSet2, in2, err := intent.DecodeGeneration(other)
		if err != nil {
			t.Fatalf("respelled body refused: %v %v\n%s\n%s", err, intent.ErrorFields(err), body, other)
		}
		if id2 != id || idSet2 != idSet || !reflect.DeepEqual(in2, in) {
			t.Fatalf("respelled body decodes otherwise:\n%q %v %+v\n%q %v %+v", id, idSet, in, id2, idSet2, in2)
		}
		if fp2, err := intent.Fingerprint("alice", intent.OpGeneration, in2); err != nil || fp2 != fp {
			t.Fatalf("respelled body fingerprints otherwise: %v\n%s\n%s", err, body, other)
		}

		written, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		_, _, in3, err := intent.DecodeGeneration(written)
		if err != nil || !reflect.DeepEqual(in3, in) {
			t.Fatalf("normalized input %s reads back as %+v, %v", written, in3, err)
		}
	})
}

// FuzzCanonicalize: no panic; what is not valid JSON is refused; the
// canonical form is valid, canonical itself (idempotent), and the same for
// every spelling of the value.
func FuzzCanonicalize(f *testing.F) {
	inputs, err := filepath.Glob(filepath.Join("..", "testdata", "jcs", "input", "*.json"))
	if err != nil || len(inputs) == 0 {
		f.Fatalf("no JCS vectors: %v", err)
	}
	for _, p := range inputs {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range requestExamples(f) {
		f.Add(b)
	}
	for _, s := range []string{`1e400`, `-0`, `[1.7976931348623157e308]`, `{"a":1,"a":2}`, `"\ud800"`, `{} {}`, `"\u2028<>&"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := intent.Canonicalize(b)
		if err != nil {
			return
		}
		if !jsontext.Value(b).IsValid() {
			t.Fatalf("canonicalized invalid JSON %q", b)
		}
		if !jsontext.Value(c).IsValid() {
			t.Fatalf("canonical form %q is not valid JSON", c)
		}
		again, err := intent.Canonicalize(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %q -> %q, %v", c, again, err)
		}
		other := respell(b, randFor(b))
		c2, err := intent.Canonicalize(other)
		if err != nil || !bytes.Equal(c2, c) {
			t.Fatalf("respelled value canonicalizes otherwise: %v\n%s\n%s\n%s\n%s", err, b, other, c, c2)
		}
	})
}
