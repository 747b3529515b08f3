package jsonfile_test

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"studio/internal/jsonfile"
)

func TestPosition(t *testing.T) {
	data := []byte("{\n  \"é\": x,\n\n}")
	for _, c := range []struct {
		offset      int64
		line, col   int
		whatIsThere string
	}{
		{0, 1, 1, "{"},
		{1, 1, 2, "the first newline"},
		{2, 2, 1, "the indent"},
		{10, 2, 8, "x (after a two-byte é)"},
		{14, 4, 1, "}"},
		{99, 4, 2, "past the end"},
		{-1, 1, 1, "before the start"},
	} {
		if l, col := jsonfile.Position(data, c.offset); l != c.line || col != c.col {
			t.Errorf("offset %d (%s): line %d, column %d; want %d, %d", c.offset, c.whatIsThere, l, col, c.line, c.col)
		}
	}
}

// TestCheckObject: each malformed document is named with the line and
// column of its fault, in words of studio's own, never the decoder's.
func TestCheckObject(t *testing.T) {
	for _, c := range []struct {
		name, data, want string
	}{
		{"a null literal cut short", "{\"prompt\": nul}", "req.json is not valid JSON (line 1, column 15)"},
		{"a bare word on line 3", "{\n  \"prompt\": \"p\",\n  \"sets\": none\n}", "req.json is not valid JSON (line 3, column 12)"}, // the o: n could start null,
		{"a trailing comma", "{\"a\": 1,\n}", "req.json is not valid JSON (line 2, column 1)"},
		{"single quotes", "{'a': 1}", "req.json is not valid JSON (line 1, column 2)"},
		{"cut off", "{\"a\": [1,\n 2", "req.json is not valid JSON (line 2, column 3): it ends too early"},
		{"a name twice", "{\"a\": 1,\n \"a\": 2}", `req.json is not valid JSON (line 2, column 2): the name "a" appears twice in its object`},
		{"not UTF-8", "{\"a\": \"\xff\"}", "req.json is not valid JSON (line 1, column 8): this is not UTF-8 text"},
		{"more after the object", "{\"a\": 1}\n{}", "req.json is not valid JSON (line 2, column 1): there is more after the JSON value"},
		{"an array", "[1, 2]", "req.json must hold a JSON object, not an array"},
		{"empty", " \n", "req.json is empty: it must hold a JSON object"},
		{"an object", " {\"a\": [1, {\"b\": null}]}\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := jsonfile.CheckObject("req.json", []byte(c.data))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
			for _, word := range []string{"invalid character", "literal", "jsontext", "offset", "EOF"} {
				if strings.Contains(got, word) {
					t.Fatalf("%q speaks the decoder's words (%q)", got, word)
				}
			}
		})
	}
}

// TestExplainSemantic: a document that is JSON but not of the shape it
// is read into names the field, its line and its column.
func TestExplainSemantic(t *testing.T) {
	var doc struct {
		Generators []struct {
			ID string `json:"id"`
		} `json:"generators"`
	}
	for _, c := range []struct{ data, want string }{
		{"{\"generators\": [\n {\"id\": \"a\", \"colour\": 1}]}", `cat.json has an unknown member "colour" in generators[0] (line 2, column 14)`},
		{"{\"generators\": [{\"id\": 7}]}", "cat.json: generators[0].id cannot be 7: it takes a string (line 1, column 24)"},
		{"{\"generators\": {}}", "cat.json: generators cannot be an object: it takes an array (line 1, column 16)"},
		{"{\"extra\": 1}", `cat.json has an unknown member "extra" (line 1, column 2)`},
	} {
		data := []byte(c.data)
		err := json.Unmarshal(data, &doc, json.RejectUnknownMembers(true))
		if got := jsonfile.Explain("cat.json", data, err); got == nil || got.Error() != c.want {
			t.Errorf("%q:\n got  %v\n want %s", c.data, got, c.want)
		}
	}
}
