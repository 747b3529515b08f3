package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiclient "studio/client"
	"studio/intent"
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
			if code != exitUsage || !regexp.MustCompile(`^studio submit: `+regexp.QuoteMeta(c.head)+` \(request id [0-9a-f-]{36}\)$`).MatchString(lines[0]) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and a first line %q and the request id", code, errb.String(), "studio submit: "+c.head)
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

// TestCLIOneMeaningOfEnded: status, ls, and the progress of wait (bar and
// lines) say a batch's progress the same way: the tasks ended, whichever
// way, out of all, with how they ended beside.
func TestCLIOneMeaningOfEnded(t *testing.T) {
	t.Parallel()
	b := apiclient.Batch{ID: "0192-b", State: apiclient.StateRunning, Prompt: "p", TaskCount: 9,
		Counts: apiclient.Counts{Queued: 1, Running: 1, Succeeded: 5, Failed: 1, Canceled: 1}}
	const want = "7/9 ended (5 succeeded, 1 failed, 1 canceled)"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"items": []apiclient.Batch{b}, "next_cursor": nil})
	}))
	defer srv.Close()
	c, err := apiclient.New(srv.URL, apiclient.WithToken("x"))
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{}
	var status, ls, bar, lines bytes.Buffer
	printBatch(&status, &b, false)
	outputs["status"] = status.String()
	if err := list(context.Background(), c, 20, false, false, &ls); err != nil {
		t.Fatal(err)
	}
	outputs["ls"] = ls.String()
	for _, p := range map[string]*waitProgress{"wait (bar)": newWaitProgress(&bar, true), "wait (lines)": newWaitProgress(&lines, false)} {
		p.update(apiclient.Progress{Batch: b})
		p.finish()
	}
	outputs["wait (bar)"], outputs["wait (lines)"] = bar.String(), lines.String()
	for name, out := range outputs {
		if !strings.Contains(out, want) {
			t.Errorf("%s says %q, without %q", name, out, want)
		}
		if strings.Contains(out, " done") {
			t.Errorf("%s says %q: \"done\" is not the word", name, out)
		}
	}
}

// fakeAPI answers the caller's commands as a server would, from a few
// batches: "ok" succeeded, "bad" failed (one task, with its error), any
// other id 404; every list has one page.
func fakeAPI(t *testing.T) string {
	t.Helper()
	batch := func(id, state string, c apiclient.Counts) apiclient.Batch {
		return apiclient.Batch{ID: id, State: state, Prompt: "p", TaskCount: 1, Counts: c}
	}
	batches := map[string]apiclient.Batch{
		"ok":  batch("ok", apiclient.StateSucceeded, apiclient.Counts{Succeeded: 1}),
		"bad": batch("bad", apiclient.StateFailed, apiclient.Counts{Failed: 1}),
	}
	msg := "attempt 5: it broke"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, _ := strings.CutPrefix(r.URL.Path, "/v1/batches")
		id, sub, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		b, found := batches[id]
		answer := func(v any) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(v)
		}
		switch {
		case id == "":
			answer(map[string]any{"items": []apiclient.Batch{batches["ok"]}, "next_cursor": nil})
		case !found:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"detail":"No batch with this id."}`)
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case sub == "tasks":
			task := apiclient.Task{ID: "t", BatchID: id, Collection: "c", Frame: "f", Generator: "sketch", Candidate: 1,
				State: apiclient.StateFailed, Attempts: 5, Error: &msg}
			answer(map[string]any{"items": []apiclient.Task{task}, "next_cursor": nil})
		default: // the batch, its cancel
			answer(b)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCLIExitCodes: every command answers the exit codes "studio help"
// states: 0 it did what it says (-h too), 1 a failure (tasks failed, or
// something here), 2 a usage or input error (unknown flag, missing, extra
// or bad argument or value, a bad variable, a 4xx answer), 3 no usable
// answer from the server.
func TestCLIExitCodes(t *testing.T) {
	api := fakeAPI(t)
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The database is busy."}`)
	}))
	defer unavailable.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	exists := filepath.Join(dir, "exists")
	aFile := filepath.Join(dir, "file")
	request := filepath.Join(dir, "request.json")
	for _, p := range []string{exists} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, body := range map[string]string{aFile: "x", request: `{"prompt": "p", "sets": [{"collection": "c", "frames": ["a"]}]}`} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code := run(context.Background(), []string{"migrate", "--data", data}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("migrate: exit %d", code)
	}
	on := func(server string, args ...string) []string {
		args = append(args, "--server", server, "--token", "x", "--retries", "1")
		if args[0] == "submit" {
			args = append(args, "--journal", filepath.Join(dir, "journal"))
		}
		return args
	}
	db := func(args ...string) []string { return append(args, "--data", data) }

	cases := []struct {
		args []string
		env  []string // NAME=VALUE
		want int
	}{
		// 0: help, -h of every command, and the commands doing what they say
		{[]string{"help"}, nil, exitOK},
		{[]string{"--version"}, nil, exitOK},
		{[]string{"--version", "--json"}, nil, exitOK},
		{[]string{"serve", "-h"}, nil, exitOK},
		{[]string{"worker", "-h"}, nil, exitOK},
		{[]string{"migrate", "-h"}, nil, exitOK},
		{[]string{"token", "create", "-h"}, nil, exitOK},
		{[]string{"token", "list", "-h"}, nil, exitOK},
		{[]string{"prune", "-h"}, nil, exitOK},
		{[]string{"vacuum", "-h"}, nil, exitOK},
		{[]string{"backup", "DIR", "-h"}, nil, exitOK},
		{[]string{"bench", "-h"}, nil, exitOK},
		{[]string{"assets", "copy", "-h"}, nil, exitOK},
		{[]string{"submit", "-h"}, nil, exitOK},
		{[]string{"status", "-h"}, nil, exitOK},
		{[]string{"tasks", "-h"}, nil, exitOK},
		{[]string{"wait", "-h"}, nil, exitOK},
		{[]string{"cancel", "-h"}, nil, exitOK},
		{[]string{"delete", "-h"}, nil, exitOK},
		{[]string{"download", "-h"}, nil, exitOK},
		{[]string{"ls", "-h"}, nil, exitOK},
		{db("migrate", "--json"), nil, exitOK},
		{db("token", "create", "--actor", "alice", "--json"), nil, exitOK},
		{db("token", "list", "--json"), nil, exitOK},
		{db("prune", "--older-than", "30d", "--dry-run", "--json"), nil, exitOK},
		{db("vacuum", "--json"), nil, exitOK},
		{[]string{"bench", "--list", "--json"}, nil, exitOK},
		{on(api, "status", "ok"), nil, exitOK},
		{on(api, "wait", "ok", "--json"), nil, exitOK},
		{on(api, "cancel", "bad"), nil, exitOK},
		{on(api, "tasks", "bad", "--json"), nil, exitOK},
		{on(api, "delete", "bad", "--json"), nil, exitOK},
		{on(api, "ls", "--json"), nil, exitOK},

		// 1: the batch ended with failed tasks; something here failed
		{on(api, "status", "bad"), nil, exitTasksFailed},
		{on(api, "wait", "bad"), nil, exitTasksFailed},
		{on(api, "download", "bad", filepath.Join(dir, "out")), nil, exitTasksFailed},
		{on(api, "download", "ok", filepath.Join(aFile, "out")), nil, exitTasksFailed}, // DIR under a file
		{db("backup", filepath.Join(aFile, "b")), nil, exitTasksFailed},
		{[]string{"migrate", "--data", filepath.Join(aFile, "d")}, nil, exitTasksFailed},

		// 2: usage and input errors
		{nil, nil, exitUsage},
		{[]string{"nope"}, nil, exitUsage},
		{[]string{"--version", "--nope"}, nil, exitUsage},
		{[]string{"serve", "--nope"}, nil, exitUsage},
		{[]string{"serve", "extra"}, nil, exitUsage},
		{db("serve", "--workers", "-1"), nil, exitUsage},
		{db("serve", "--log-level", "loud"), nil, exitUsage},
		{db("serve"), []string{"STUDIO_WORKERS=many"}, exitUsage},
		{[]string{"worker", "--nope"}, nil, exitUsage},
		{db("worker", "--lease-ttl", "1ms"), nil, exitUsage},
		{[]string{"migrate", "extra"}, nil, exitUsage},
		{[]string{"migrate"}, []string{"STUDIO_DATA=" + data, "STUDIO_SQLITE_SYNCHRONOUS=SOMETIMES"}, exitUsage},
		{[]string{"token"}, nil, exitUsage},
		{[]string{"token", "nope"}, nil, exitUsage},
		{db("token", "create"), nil, exitUsage},
		{db("token", "create", "--actor", " alice"), nil, exitUsage},
		{db("token", "create", "--actor", "a", "--expires", "soon"), nil, exitUsage},
		{db("token", "list", "--nope"), nil, exitUsage},
		{db("token", "revoke"), nil, exitUsage},
		{db("token", "revoke", "0123456789abcdef"), nil, exitUsage},
		{db("token", "revoke", "not-an-id"), nil, exitUsage},
		{db("prune"), nil, exitUsage},
		{db("prune", "--older-than", "soon"), nil, exitUsage},
		{db("vacuum", "extra"), nil, exitUsage},
		{[]string{"vacuum", "--database", "postgres://127.0.0.1:1/none"}, nil, exitUsage},
		{[]string{"backup"}, nil, exitUsage},
		{db("backup", exists), nil, exitUsage},
		{[]string{"backup", exists, "--database", "postgres://127.0.0.1:1/none"}, nil, exitUsage},
		{[]string{"bench", "--ops", "nope"}, nil, exitUsage},
		{[]string{"bench", "--n", "-1"}, nil, exitUsage},
		{[]string{"assets"}, nil, exitUsage},
		{db("assets", "copy"), nil, exitUsage},
		{db("assets", "copy", "--to", "s3://b/p", "--jobs", "0"), nil, exitUsage},
		{db("assets", "copy", "--to", "s3://b/p", "--assets", "s3://b/p"), nil, exitUsage},
		{on(api, "submit"), nil, exitUsage},
		{on(api, "submit", request, "extra"), nil, exitUsage},
		{on(api, "submit", filepath.Join(dir, "missing.json")), nil, exitUsage},
		{on(api, "submit", aFile), nil, exitUsage}, // not JSON
		{on(api, "submit", request, "--nope"), nil, exitUsage},
		{on(api, "status"), nil, exitUsage},
		{on(api, "status", "ok", "extra"), nil, exitUsage},
		{on(api, "status", "gone"), nil, exitUsage}, // 404
		{on(api, "tasks"), nil, exitUsage},
		{on(api, "tasks", "ok", "--state", "broken"), nil, exitUsage},
		{on(api, "wait"), nil, exitUsage},
		{on(api, "wait", "gone"), nil, exitUsage},
		{on(api, "cancel"), nil, exitUsage},
		{on(api, "cancel", "gone"), nil, exitUsage},
		{on(api, "delete"), nil, exitUsage},
		{on(api, "delete", "gone"), nil, exitUsage},
		{on(api, "download", "ok"), nil, exitUsage},
		{on(api, "download", "gone", filepath.Join(dir, "out2")), nil, exitUsage},
		{on(api, "ls", "extra"), nil, exitUsage},
		{on(api, "ls", "--limit", "0"), nil, exitUsage},
		{[]string{"ls", "--server", api, "--token", "x", "--retries", "0"}, nil, exitUsage},
		{[]string{"ls", "--server", "http://[::1", "--token", "x"}, nil, exitUsage},
		{[]string{"ls", "--server", api, "--data", dir}, []string{"STUDIO_TOKEN="}, exitUsage}, // no token anywhere

		// 3: no usable answer from the server
		{on("http://"+dead, "status", "ok"), nil, exitUnreachable},
		{on("http://"+dead, "submit", request), nil, exitUnreachable},
		{on(unavailable.URL, "ls"), nil, exitUnreachable},
		{on(unavailable.URL, "download", "ok", filepath.Join(dir, "out3")), nil, exitUnreachable},
	}
	for _, c := range cases {
		name := strings.Join(c.args, " ")
		for _, kv := range c.env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		for _, kv := range c.env {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
		if code != c.want {
			t.Errorf("studio %s (%v): exit %d, want %d\nstdout: %s\nstderr: %s", name, c.env, code, c.want, out.String(), errb.String())
			continue
		}
		if code == exitOK && slices.Contains(c.args, "--json") {
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if !json.Valid([]byte(line)) || !strings.HasPrefix(line, "{") {
					t.Errorf("studio %s: --json printed %q, not one JSON object per line", name, line)
				}
			}
		}
		if code != exitOK && errb.Len()+out.Len() == 0 {
			t.Errorf("studio %s: exit %d and nothing says why", name, code)
		}
	}
	var help bytes.Buffer
	run(context.Background(), []string{"help"}, &help, io.Discard)
	if !strings.Contains(help.String(), exitCodesHelp) {
		t.Fatal("studio help does not state the exit codes this test holds the commands to")
	}
}

// helpFlags runs "studio ARGS -h" and answers its flags: name to the
// text after it (type, help, default).
func helpFlags(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append(args, "-h"), &out, &errb); code != exitOK {
		t.Fatalf("%v -h: exit %d: %s", args, code, errb.String())
	}
	flags := map[string]string{}
	name := ""
	for _, line := range strings.Split(errb.String(), "\n") {
		if m := regexp.MustCompile(`^  -([a-z0-9-]+)(.*)$`).FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = m[2]
			continue
		}
		if strings.HasPrefix(line, "    \t") && name != "" {
			flags[name] += " " + strings.TrimSpace(line)
		} else {
			name = ""
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%v -h lists no flags:\n%s", args, errb.String())
	}
	return flags
}

// TestHelpEnvironment: "studio help" says which flags have an
// environment variable and which do not; every command keeps to it. Each
// flag of each command's -h either names its variable, "(env STUDIO_...)",
// and that variable sets it, or is one of the flags help lists as having
// none.
func TestHelpEnvironment(t *testing.T) {
	var help bytes.Buffer
	run(context.Background(), []string{"help"}, &help, io.Discard)
	_, none, ok := strings.Cut(help.String(), "Only the flags that say what one run does have none:")
	if !ok {
		t.Fatalf("studio help does not say which flags have no variable:\n%s", help.String())
	}
	none, _, _ = strings.Cut(none, "\n\n")
	table := map[string]bool{}
	for _, d := range flags {
		table[d.name] = true
	}
	envRE := regexp.MustCompile(`\(env (STUDIO_[A-Z_]+)\)`)
	for _, args := range [][]string{
		{"serve"}, {"worker"}, {"migrate"}, {"token", "create"}, {"token", "list"}, {"prune"}, {"vacuum"},
		{"backup", "DIR"}, {"bench"}, {"assets", "copy"},
		{"submit"}, {"status"}, {"tasks"}, {"wait"}, {"cancel"}, {"delete"}, {"download"}, {"ls"},
	} {
		for name, text := range helpFlags(t, args...) {
			m := envRE.FindStringSubmatch(text)
			if m == nil {
				if !regexp.MustCompile(`--` + name + `\b`).MatchString(none) {
					t.Errorf("studio %s --%s has no variable, and help does not list it among the flags that have none", strings.Join(args, " "), name)
				}
				continue
			}
			if caller := strings.Contains(clientUsage, "studio "+args[0]+" "); table[name] && !caller {
				continue // the settings table: TestFlagTableParses sets each from its variable
			}
			// The caller's flags take their variable as their default.
			sample := "/tmp/sample-" + strings.ToLower(m[1])
			if strings.HasPrefix(strings.TrimSpace(text), "int") {
				sample = "7"
			}
			t.Setenv(m[1], sample)
			if got := helpFlags(t, args...)[name]; !strings.Contains(got, sample) {
				t.Errorf("studio %s --%s: %s=%s does not set it: %s", strings.Join(args, " "), name, m[1], sample, got)
			}
		}
	}
}

// TestCLIDamagedJournal: a journal entry that is not what submit wrote
// stops the submit (exit 1: nothing is sent under a guessed id) with a
// message that says what to do, not the decoder's words.
func TestCLIDamagedJournal(t *testing.T) {
	t.Parallel()
	journal := t.TempDir()
	body := []byte(`{"prompt": "p", "sets": [{"collection": "c", "frames": ["a"]}]}`)
	canon, err := intent.Canonicalize(body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	entry := filepath.Join(journal, hex.EncodeToString(sum[:])+".json")
	if err := os.WriteFile(entry, []byte("{\"request_id\": tru"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runClient(context.Background(), "submit", []string{"-", "--server", "127.0.0.1:1", "--token", "x", "--journal", journal},
		bytes.NewReader(body), &out, &errb)
	want := "studio submit: journal: entry " + entry + " is damaged: it does not hold a request id (remove it, or use --new)\n"
	if code != exitTasksFailed || errb.String() != want {
		t.Fatalf("exit %d, %q; want 1, %q", code, errb.String(), want)
	}
}
