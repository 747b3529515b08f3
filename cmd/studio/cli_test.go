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

// TestCLIProblemDetails: a server's problem reaches the terminal by one
// rule, through a real `studio serve`: the headline is the status and the
// detail as one sentence (one final period, never ".;"), and each field at
// fault the detail does not state already follows on its own line as
// "  field: message".
func TestCLIProblemDetails(t *testing.T) {
	t.Parallel()
	api, data, _ := serveForClients(t, "0")
	journal := t.TempDir()
	const set = `"sets": [{"collection": "c", "frames": ["a"]}]`
	for _, c := range []struct {
		name, body string
		head       string
		fields     []string
	}{
		{"several fields of the body", `{"prompt": "", "sets": [], "candidates": 11}`,
			"400 Bad Request: The request body is invalid.",
			[]string{"prompt: must not be empty", "sets: must have 1 to 20 sets (has 0)", "candidates: must be an integer from 1 to 10"}},
		{"one unknown provider", `{"prompt": "p", ` + set + `, "providers": ["oil"]}`,
			`422 Unprocessable Entity: providers[0]: no generator or route "oil" in the catalog.`, nil},
		{"one param out of range", `{"prompt": "p", ` + set + `, "params": {"width": 5}}`,
			"422 Unprocessable Entity: params.width: must be an integer from 16 to 2048.", nil},
		{"two problems of the plan", `{"prompt": "p", ` + set + `, "providers": ["oil"], "subjects": ["ghost"]}`,
			"422 Unprocessable Entity: The request cannot be planned: 2 problems (see errors).",
			[]string{`providers[0]: no generator or route "oil" in the catalog`, `subjects[0]: subject "ghost" does not exist or is not visible to this actor`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runClient(context.Background(), "submit", []string{"-", "--server", api.Addr, "--data", data, "--journal", journal},
				strings.NewReader(c.body), &out, &errb)
			lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
			if code != exitUsage || !strings.HasPrefix(lines[0], "studio submit: create generation ") || !strings.HasSuffix(lines[0], ": "+c.head) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and a first line ending %q", code, errb.String(), c.head)
			}
			var fields []string
			for _, l := range lines[1:] {
				f, ok := strings.CutPrefix(l, "  ")
				if !ok {
					t.Fatalf("line %q is not a field line", l)
				}
				fields = append(fields, f)
			}
			if strings.Join(fields, "\n") != strings.Join(c.fields, "\n") {
				t.Fatalf("field lines %q, want %q", fields, c.fields)
			}
			for _, odd := range []string{".;", "..", ". .", ";;"} {
				if strings.Contains(errb.String(), odd) {
					t.Fatalf("%q in %s", odd, errb.String())
				}
			}
		})
	}
}
