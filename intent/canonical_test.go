package intent_test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"studio/intent"
)

// TestCanonicalizeRFC8785Vectors checks every vector of the RFC's test set
// byte for byte.
func TestCanonicalizeRFC8785Vectors(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("..", "testdata", "jcs", "input", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 6 {
		t.Fatalf("found %d vectors, want at least 6", len(inputs))
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", "testdata", "jcs", "output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := intent.Canonicalize(src)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Canonicalize(%s)\n got %q\nwant %q", name, got, want)
			}
			again, err := intent.Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("not idempotent: %q, %v", again, err)
			}
		})
	}
}

// TestCanonicalizeNumbers checks the number serialization against the IEEE
// 754 samples of RFC 8785 appendix B.
func TestCanonicalizeNumbers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, c := range cases {
		f := math.Float64frombits(c.bits)
		// Go's shortest form ("1e+23", "5e-324") is valid JSON once the
		// "+" of the exponent is allowed, which JSON does.
		lit := strconv.FormatFloat(f, 'g', -1, 64)
		got, err := intent.Canonicalize([]byte(lit))
		if err != nil {
			t.Errorf("%016x (%s): %v", c.bits, lit, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%016x (%s): got %s, want %s", c.bits, lit, got, c.want)
		}
	}
}

// TestCanonicalizeForms checks the smaller rules one by one.
func TestCanonicalizeForms(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"whitespace removed", " { \"a\" : [ 1 , 2 ] } \n", `{"a":[1,2]}`},
		{"keys sorted", `{"b":1,"a":2,"aa":3}`, `{"a":2,"aa":3,"b":1}`},
		{"nested keys sorted", `{"z":{"y":1,"x":2},"a":[{"d":1,"c":2}]}`, `{"a":[{"c":2,"d":1}],"z":{"x":2,"y":1}}`},
		{"keys sorted by UTF-16 code units", `{"\ufb33":1,"\ud83d\ude00":2}`, "{\"\U0001F600\":2,\"\ufb33\":1}"},
		{"arrays keep order", `[3,1,2]`, `[3,1,2]`},
		{"escape of A undone", `"\u0041"`, `"A"`},
		{"solidus unescaped", `"a\/b"`, `"a/b"`},
		{"short escapes", `"\u0008\u000c\n\r\t\"\\"`, `"\b\f\n\r\t\"\\"`},
		{"other controls as lowercase hex", `"\u001F\u0000"`, `"\u001f\u0000"`},
		{"no HTML escaping", `"<>&"`, `"<>&"`},
		{"line separators kept", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"DEL kept raw", `"\u007f"`, "\"\x7f\""},
		{"64.0 is 64", `64.0`, `64`},
		{"6.4e1 is 64", `6.4e1`, `64`},
		{"minus zero is zero", `-0.0`, `0`},
		{"big integer as a double", `12345678901234567890`, `12345678901234567000`},
		{"1e21 in exponent form", `1000000000000000000000`, `1e+21`},
		{"null kept", `{"a":null}`, `{"a":null}`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
	}
	for _, c := range cases {
		got, err := intent.Canonicalize([]byte(c.in))
		if err != nil {
			t.Errorf("%s: Canonicalize(%q): %v", c.name, c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s: Canonicalize(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// TestCanonicalizeRefuses checks that input which is not I-JSON is an error.
func TestCanonicalizeRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in string }{
		{"empty", ``},
		{"duplicate names", `{"a":1,"a":2}`},
		{"duplicate names once unescaped", `{"a":1,"\u0061":2}`},
		{"invalid UTF-8 in a string", "\"\xff\""},
		{"invalid UTF-8 in a name", "{\"\xc3\":1}"},
		{"lone high surrogate", `"\ud800"`},
		{"lone low surrogate", `"\udc00x"`},
		{"trailing value", `{} {}`},
		{"trailing garbage", `1 x`},
		{"number too large", `1e400`},
		{"negative number too large", `[-1e309]`},
		{"number too large in an object", `{"a":{"b":[1,2,1e999]}}`},
		{"NaN", `NaN`},
		{"single quotes", `{'a':1}`},
		{"trailing comma", `[1,]`},
		{"leading zero", `01`},
		{"raw control character", "\"a\x01\""},
		{"byte order mark", "\xef\xbb\xbf{}"},
	}
	for _, c := range cases {
		if got, err := intent.Canonicalize([]byte(c.in)); err == nil {
			t.Errorf("%s: Canonicalize(%q) = %q, want an error", c.name, c.in, got)
		}
	}
}

// TestCanonicalizeKeepsMaxDouble makes sure the check for numbers beyond a
// double does not refuse the largest double itself.
func TestCanonicalizeKeepsMaxDouble(t *testing.T) {
	t.Parallel()
	in := `{"s":"1.7976931348623157e+308","n":1.7976931348623157e308}`
	got, err := intent.Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":1.7976931348623157e+308,"s":"1.7976931348623157e+308"}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestCanonicalizeDoesNotModifyInput checks that the caller's bytes stay.
func TestCanonicalizeDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	in := []byte(`{"b":1, "a":2}`)
	keep := bytes.Clone(in)
	if _, err := intent.Canonicalize(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, keep) {
		t.Fatalf("input changed to %q", in)
	}
}

// TestCanonicalJSON checks that Go values marshal to canonical form, unlike
// encoding/json's output, which escapes <>& and keeps struct field order.
func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	type inner struct {
		Z string  `json:"z"`
		A float64 `json:"a"`
	}
	v := struct {
		B    []string       `json:"b"`
		A    inner          `json:"a"`
		M    map[string]int `json:"m"`
		Nil  []int          `json:"nil"`
		Skip *int64         `json:"skip,omitempty"`
	}{B: []string{"<x>", "&"}, A: inner{Z: "é", A: 1e21}, M: map[string]int{"b": 1, "a": 2}}
	got, err := intent.CanonicalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":{"a":1e+21,"z":"é"},"b":["<x>","&"],"m":{"a":2,"b":1},"nil":[]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if _, err := intent.CanonicalJSON(math.Inf(1)); err == nil {
		t.Fatal("CanonicalJSON(+Inf) succeeded")
	}
	if _, err := intent.CanonicalJSON("\xff"); err == nil {
		t.Fatal("CanonicalJSON of invalid UTF-8 succeeded")
	}
}
