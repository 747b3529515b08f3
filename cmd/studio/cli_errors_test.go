package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiclient "studio/client"
)

// TestWaitPrintsEachErrorOnce: following a batch whose tasks fail with
// one cause (texts that differ only in the attempt and the ids) and one
// other prints each cause once, then a summary with the number of tasks
// that had each; on a terminal only the summary, after the bar.
func TestWaitPrintsEachErrorOnce(t *testing.T) {
	errs := []struct{ task, msg string }{
		{"t1", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000001 failed: out of memory`},
		{"t1", `attempt 2: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000001 failed: out of memory`},
		{"t2", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000002 failed: out of memory`},
		{"t3", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000003 failed: out of memory`},
		{"t4", `attempt 1: fetch: generator "gpt": image download: the image is not PNG, JPEG or WebP (12 bytes)`},
		{"t5", `attempt 2: submit: task 01920000-0000-7000-8000-000000000005: simulated failure (attempt 2 of the first 10)`},
		{"t6", `attempt 3: submit: task 01920000-0000-7000-8000-000000000006: simulated failure (attempt 3 of the first 10)`},
	}
	for _, terminal := range []bool{false, true} {
		var out bytes.Buffer
		p := newWaitProgress(&out, terminal)
		b := apiclient.Batch{ID: "b", TaskCount: 4}
		for _, e := range errs {
			msg := e.msg
			p.update(apiclient.Progress{Batch: b, Task: &apiclient.Task{ID: e.task, State: apiclient.StateFailed, Error: &msg}})
		}
		p.finish()
		got := out.String()
		if n := strings.Count(got, "failed: out of memory"); n != map[bool]int{false: 2, true: 1}[terminal] {
			t.Errorf("terminal %v: the out-of-memory error is printed %d times:\n%s", terminal, n, got)
		}
		for _, want := range []string{
			`  3 x submit: generator "comfy": prompt <id> failed: out of memory`,
			`  1 x fetch: generator "gpt": image download: the image is not PNG, JPEG or WebP (12 bytes)`,
			`  2 x submit: task <id>: simulated failure (attempt N of the first 10)`,
		} {
			if !strings.Contains(got, want) {
				t.Errorf("terminal %v: the summary lacks %q:\n%s", terminal, want, got)
			}
		}
	}
}

// TestCLINoAnswer: a server that does not answer is said for a person
// (where it was looked for, why no answer came, what to check, and for
// submit that running it again is safe), never in the words of Go's
// network stack, and exits 3 as "studio help" states.
func TestCLINoAnswer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	// hang accepts connections and never answers.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	dir := t.TempDir()
	request := filepath.Join(dir, "request.json")
	if err := os.WriteFile(request, []byte(`{"request_id": "r-1", "prompt": "p", "sets": [{"collection": "c", "frames": ["a"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const where = " (--server / STUDIO_SERVER)"
	cases := []struct {
		name string
		args []string
		want []string // the message holds each, in order
	}{
		{"refused", []string{"status", "b1", "--server", dead, "--retries", "2"},
			[]string{"studio status: cannot reach the server at " + dead + " (connection refused; 2 tries); is studio serve running there?" + where + "\n"}},
		{"refused, a bare HOST:PORT", []string{"ls", "--server", strings.TrimPrefix(dead, "http://"), "--retries", "1"},
			[]string{"studio ls: cannot reach the server at " + dead + " (connection refused; 1 try); is studio serve running there?" + where + "\n"}},
		{"refused submit", []string{"submit", request, "--server", dead, "--retries", "1"},
			[]string{"studio submit: cannot reach the server at " + dead + " (connection refused; 1 try); is studio serve running there?" + where + ". ",
				"Run the same command again when it answers: it sends the same request id r-1, so at most one batch is made.\n"}},
		{"no such host", []string{"status", "b1", "--server", "http://studio-nohost.invalid:7070", "--retries", "1"},
			[]string{"studio status: cannot reach the server at http://studio-nohost.invalid:7070 (", "studio-nohost.invalid; 1 try); is the address right?" + where + "\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			args := append(c.args[1:], "--token", "x")
			if c.args[0] == "submit" {
				args = append(args, "--journal", dir)
			}
			code := runClient(context.Background(), c.args[0], args, strings.NewReader(""), &out, &errb)
			got := errb.String()
			if code != exitUnreachable {
				t.Errorf("exit %d, want %d: %s", code, exitUnreachable, got)
			}
			rest := got
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr %q\nlacks %q", got, w)
				}
				rest = rest[i+len(w):]
			}
			noGoWords(t, got)
		})
	}

	// No token anywhere: where it was looked for, in a sentence.
	t.Run("no token", func(t *testing.T) {
		t.Parallel()
		var out, errb bytes.Buffer
		code := runClient(context.Background(), "ls", []string{"--server", dead, "--data", dir, "--token", ""}, strings.NewReader(""), &out, &errb)
		want := "studio ls: no token: give --token or STUDIO_TOKEN, or --data (STUDIO_DATA) with a token file (" + filepath.Join(dir, "token") +
			" does not exist; studio serve writes it on its first start)\n"
		if code != exitUsage || errb.String() != want {
			t.Fatalf("exit %d, %q; want exit 2, %q", code, errb.String(), want)
		}
	})

	// Interrupted (Ctrl-C ends the context): said in one word, exit 1.
	t.Run("interrupted", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errb bytes.Buffer
		code := runClient(ctx, "status", []string{"b1", "--server", "http://" + hang.Addr().String(), "--token", "x"}, strings.NewReader(""), &out, &errb)
		if want := "studio status: interrupted\n"; code != exitTasksFailed || errb.String() != want {
			t.Fatalf("exit %d, %q; want exit 1, %q", code, errb.String(), want)
		}
	})

	// No answer within the try's time: through the client of the
	// commands, with a short time per try.
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		server := "http://" + hang.Addr().String()
		c, err := apiclient.New(server, apiclient.WithRetry(apiclient.Retry{Attempts: 2, Base: time.Millisecond, AttemptTimeout: 100 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetBatch(context.Background(), "b1")
		if exitCode(err) != exitUnreachable {
			t.Errorf("exit %d for %v", exitCode(err), err)
		}
		want := "cannot reach the server at " + server + " (no answer within 100ms; 2 tries); is it overloaded, or is the network between slow?" + where
		if got := errorText(err); got != want {
			t.Fatalf("%q\nwant %q", got, want)
		}
		_, err = c.CreateGenerationJSON(context.Background(), []byte(`{"prompt": "p"}`), "r-2")
		got := errorText(&callError{about: "request id r-2", resend: true, err: err})
		if !strings.HasPrefix(got, want+". Run the same command again") || !strings.Contains(got, "request id r-2,") {
			t.Fatalf("submit: %q", got)
		}
		noGoWords(t, got)
	})
}

// noGoWords fails when a message has the words of Go's network stack or
// the client's call names in it.
func noGoWords(t *testing.T, msg string) {
	t.Helper()
	for _, w := range []string{"dial tcp", "connect:", "lookup ", `Get "`, `Post "`, "context deadline", "create generation", "get batch", "server unreachable", "i/o timeout"} {
		if strings.Contains(msg, w) {
			t.Errorf("%q in %q", w, msg)
		}
	}
}

// TestCLIBatchProblems: a refusal of a call about a batch is the server's
// problem by the one rule, then the batch it was about, without the
// client's call names ("get batch ...: ", "list tasks of ...: ").
func TestCLIBatchProblems(t *testing.T) {
	t.Parallel()
	api := fakeAPI(t)
	const gone = "404 Not Found: No batch with this id. (batch gone)\n"
	for _, args := range [][]string{
		{"status", "gone"},
		{"wait", "gone"},
		{"cancel", "gone"},
		{"delete", "gone"},
		{"tasks", "gone"},
		{"download", "gone", filepath.Join(t.TempDir(), "out")},
	} {
		t.Run(args[0], func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runClient(context.Background(), args[0], append(args[1:], "--server", api, "--token", "x", "--retries", "1"), strings.NewReader(""), &out, &errb)
			if want := "studio " + args[0] + ": " + gone; code != exitUsage || errb.String() != want {
				t.Fatalf("exit %d, %q; want exit 2, %q", code, errb.String(), want)
			}
		})
	}
}
