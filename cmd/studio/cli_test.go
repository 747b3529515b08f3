package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISubmitMalformedFile: a request file that is not a JSON object
// is named with the line and column of the fault, in studio's words (not
// the decoder's), exits 2 and sends nothing (no server is running).
func TestCLISubmitMalformedFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name, body, want string
	}{
		{"null cut short", "{\n  \"prompt\": nul,\n  \"sets\": []\n}", "req.json is not valid JSON (line 2, column 16)"}, // the comma after nul
		{"trailing comma", "{\"prompt\": \"p\",}", "req.json is not valid JSON (line 1, column 16)"},
		{"cut off", "{\"prompt\": \"p\"", "req.json is not valid JSON (line 1, column 15): it ends too early"},
		{"a name twice", "{\"prompt\": \"p\",\n\"prompt\": \"q\"}", `req.json is not valid JSON (line 2, column 1): the name "prompt" appears twice in its object`},
		{"an array", "[]", "req.json must hold a JSON object, not an array"},
		{"empty", "", "req.json is empty: it must hold a JSON object"},
		{"request_id a number", `{"request_id": 7, "prompt": "p"}`, "req.json: request_id must be a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.WriteFile(file, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := runClient(context.Background(), "submit", []string{file, "--server", "127.0.0.1:1", "--token", "x", "--journal", dir},
				strings.NewReader(""), &out, &errb)
			want := "studio submit: " + strings.Replace(c.want, "req.json", file, 1) + "\n"
			if code != exitUsage || errb.String() != want {
				t.Fatalf("exit %d, stderr %q; want exit 2, %q", code, errb.String(), want)
			}
			if strings.Contains(errb.String(), "invalid character") || strings.Contains(errb.String(), "literal") {
				t.Fatalf("the decoder's words: %s", errb.String())
			}
		})
	}
	var out, errb bytes.Buffer
	code := runClient(context.Background(), "submit", []string{"-", "--token", "x", "--journal", dir}, strings.NewReader("{\"a\": tru}"), &out, &errb)
	if want := "studio submit: the standard input is not valid JSON (line 1, column 10)\n"; code != exitUsage || errb.String() != want {
		t.Fatalf("stdin: exit %d, %q; want %q", code, errb.String(), want)
	}
}
