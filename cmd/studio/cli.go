package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "studio/client"
	"studio/intent"
	"studio/internal/jsonfile"
)

// The caller's commands: submit, status, wait, cancel, delete, download, ls. They
// talk to a server through the client package and answer with exit codes:
const (
	exitOK          = 0 // done; for a batch: every task succeeded
	exitTasksFailed = 1 // the batch ended with failed or canceled tasks, or a local failure
	exitUsage       = 2 // a bad command line or input, or a 4xx answer (its detail printed)
	exitUnreachable = 3 // no usable answer from the server after the retries
)

const clientUsage = `
The caller's commands (they talk to a running server):
  studio submit FILE|-  [flags]   POST the generation request in FILE (- = stdin); prints the batch id
  studio status ID      [flags]   the batch, its counts and why tasks failed
  studio tasks ID       [flags]   the batch's tasks: set, frame, generator, state, attempts, error
  studio wait ID        [flags]   follow the batch to its end (live events)
  studio cancel ID      [flags]   cancel the batch (idempotent)
  studio delete ID      [flags]   delete an ended batch, its images and publications
  studio download ID DIR [flags]  save the batch's images in DIR
  studio ls             [flags]   your batches, newest first

  They read --server (STUDIO_SERVER, default http://127.0.0.1:7070; a bare
  HOST:PORT means http://) and --token (STUDIO_TOKEN, default the token file
  of --data). A batch's progress reads the same everywhere: the tasks ended
  (whichever way) out of all, with how they ended beside:
  "7/12 ended (5 succeeded, 1 failed, 1 canceled)".`

// clientFlags are the flags every caller's command takes.
type clientFlags struct {
	server, token, data, journal string
	// tokenFrom says where the token came from, for a 401's message.
	tokenFrom string
	retries   int
	json      bool
}

// newClientFlagSet declares the common flags; env variables give their
// defaults.
func newClientFlagSet(cmd string, stderr io.Writer, f *clientFlags, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("studio "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.server, "server", envOr("STUDIO_SERVER", "http://127.0.0.1:7070"), "the server's address (env STUDIO_SERVER)")
	fs.StringVar(&f.token, "token", os.Getenv("STUDIO_TOKEN"), "the API token (env STUDIO_TOKEN); default: the token file of --data")
	fs.StringVar(&f.data, "data", envOr("STUDIO_DATA", "./studio-data"), "the data directory whose token file is read when no token is given (env STUDIO_DATA)")
	fs.IntVar(&f.retries, "retries", envInt("STUDIO_RETRIES", apiclient.DefaultRetry.Attempts), "tries of each call before giving up: connection errors, timeouts, 5xx and 429 are retried with backoff (env STUDIO_RETRIES)")
	fs.BoolVar(&f.json, "json", false, "print the result as JSON on stdout (one object per line)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\nFlags:\n", summary)
		fs.PrintDefaults()
		fmt.Fprint(stderr, exitCodesHelp)
	}
	return fs
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

// cliError carries an exit code with a message.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &cliError{exitUsage, fmt.Errorf(format, args...)}
}

// exitCode maps an error to the exit code.
func exitCode(err error) int {
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, apiclient.ErrUnreachable):
		return exitUnreachable
	}
	switch s := apiclient.StatusOf(err); {
	case s >= 500 || s == 429:
		return exitUnreachable
	case s >= 400:
		return exitUsage
	}
	return exitTasksFailed
}

// runClient runs one of the caller's commands and answers its exit code.
func runClient(ctx context.Context, cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := clientCommand(ctx, cmd, args, stdin, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	code := exitCode(err)
	if err != nil {
		var ce *cliError
		if !errors.As(err, &ce) || ce.err != nil {
			fmt.Fprintf(stderr, "studio %s: %s\n", cmd, errorText(err))
		}
	}
	return code
}

// errorText is an error as the caller's commands print it. A server's
// problem with fields at fault is its headline (status and detail, one
// sentence) and then the fields, one "field: message" per line:
//
//	400 Bad Request: The request body is invalid.
//	  prompt: must not be empty
//	  sets: must have 1 to 20 items
//
// A server that did not answer is said as a person would, with where to
// look (the words of Go's network stack stay out):
//
//	cannot reach the server at http://127.0.0.1:7070 (connection refused; 6 tries); is studio serve running there? (--server / STUDIO_SERVER)
func errorText(err error) string {
	var ce *callError
	if errors.As(err, &ce) {
		return err.Error() // ce says it all; a 401 adds where the token came from
	}
	var ue *apiclient.UnreachableError
	if errors.As(err, &ue) {
		return unreachableText(ue)
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted" // by the user (Ctrl-C): the call's words would say nothing more
	}
	var ae *apiclient.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	fields := ae.FieldLines()
	if len(fields) == 0 {
		return err.Error()
	}
	// The problem may be wrapped ("... The token came from --token."):
	// put the list in its place, after what wraps it.
	s := strings.Replace(err.Error(), ae.Error(), ae.Headline(), 1)
	return s + "\n  " + strings.Join(fields, "\n  ")
}

// unreachableText is why no answer came and what to check.
func unreachableText(ue *apiclient.UnreachableError) string {
	hint := map[string]string{
		"refused": "is studio serve running there?",
		"dns":     "is the address right?",
		"timeout": "is it overloaded, or is the network between slow?",
	}[ue.Kind]
	if hint == "" {
		hint = "is the address right, and studio serve running there?"
	}
	return ue.Error() + "; " + hint + " (--server / STUDIO_SERVER)"
}

// callError is the failure of a call about one thing, a request id that
// submit sent or a batch: the server's problem or no answer, said without
// the client's call name ("create generation ...: ", "get batch ...: "),
// then what it was about.
type callError struct {
	about  string // "request id X", "batch X"
	resend bool   // submit: running it again sends the same request id
	err    error
}

func (e *callError) Error() string { return e.text() }
func (e *callError) Unwrap() error { return e.err }

// aboutBatch says which batch a failed call was about (nil stays nil).
func aboutBatch(id string, err error) error {
	if err == nil {
		return nil
	}
	return &callError{about: "batch " + id, err: err}
}

// text says the failure: a refusal with what it was about and its fields
// on the lines after; no answer with what to check (and, for submit, that
// running it again is safe, which sends the same id); anything else as it
// is.
func (e *callError) text() string {
	var ue *apiclient.UnreachableError
	if errors.As(e.err, &ue) {
		if !e.resend {
			return unreachableText(ue)
		}
		return fmt.Sprintf("%s. Run the same command again when it answers: it sends the same %s, so at most one batch is made.", unreachableText(ue), e.about)
	}
	if errors.Is(e.err, context.Canceled) {
		return "interrupted"
	}
	var ae *apiclient.Error
	if !errors.As(e.err, &ae) {
		if e.resend {
			return fmt.Sprintf("%v (%s)", e.err, e.about)
		}
		return e.err.Error()
	}
	s := ae.Headline()
	if ae.Status != http.StatusUnauthorized { // a refused token is about no batch
		s += " (" + e.about + ")"
	}
	if fields := ae.FieldLines(); len(fields) > 0 {
		s += "\n  " + strings.Join(fields, "\n  ")
	}
	return s
}

func clientCommand(ctx context.Context, cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	var f clientFlags
	defer func() {
		if apiclient.StatusOf(err) == http.StatusUnauthorized && f.tokenFrom != "" {
			err = fmt.Errorf("%w %s", err, "The token came from "+f.tokenFrom+".")
		}
	}()
	switch cmd {
	case "submit":
		var wait, fresh bool
		var dir string
		fs := newClientFlagSet(cmd, stderr, &f, `usage: studio submit FILE|- [flags]

POSTs the generation request in FILE (a JSON object, as POST /v1/generations
takes it; - reads stdin) and prints the batch id. Safe to run again: when
FILE has no request_id, the id made for it is kept in a journal (--journal)
under the file's canonical content before anything is sent, and the same
content submitted again reuses it, so a run whose answer was lost (a crash,
a kill, a network failure) answers the same batch when run again. --new
submits the content as a new batch (a fresh id, which the journal keeps).`)
		fs.BoolVar(&wait, "wait", false, "follow the batch to its end: a progress bar on a terminal, one line per change elsewhere")
		fs.StringVar(&dir, "download", "", "after the batch ends, save its images in `DIR` (implies --wait)")
		fs.BoolVar(&fresh, "new", false, "submit as a new batch even if this content was submitted before")
		fs.StringVar(&f.journal, "journal", envOr("STUDIO_JOURNAL", defaultJournal()), "the directory of the submit journal (env STUDIO_JOURNAL)")
		file, err := parseClientArgs(fs, args, "FILE")
		if err != nil {
			return err
		}
		return submit(ctx, f, file[0], fresh, wait || dir != "", dir, stdin, stdout, stderr)
	case "status", "wait", "cancel":
		var dir string
		summary := map[string]string{
			"status": "usage: studio status ID [flags]\n\nPrints the batch: its state and counts (--json: as GET /v1/batches/{id} answers).\nExit 1 when it ended with failed or canceled tasks.",
			"wait":   "usage: studio wait ID [flags]\n\nFollows the batch to its end from its live events (a progress bar on a terminal,\none line per change elsewhere). Exit 0 when every task succeeded, 1 otherwise.",
			"cancel": "usage: studio cancel ID [flags]\n\nCancels the batch: queued tasks at once, running ones at their next step.\nIdempotent; on an ended batch it changes nothing.",
		}[cmd]
		fs := newClientFlagSet(cmd, stderr, &f, summary)
		if cmd == "wait" {
			fs.StringVar(&dir, "download", "", "after the batch ends, save its images in `DIR`")
		}
		ids, err := parseClientArgs(fs, args, "ID")
		if err != nil {
			return err
		}
		c, err := newCLIClient(&f)
		if err != nil {
			return err
		}
		var b *apiclient.Batch
		var failed []apiclient.Task
		switch cmd {
		case "status":
			b, err = c.GetBatch(ctx, ids[0])
			if err == nil && b.Counts.Failed > 0 {
				failed, err = c.AllTasks(ctx, ids[0], apiclient.StateFailed)
			}
		case "cancel":
			b, err = c.CancelBatch(ctx, ids[0])
		case "wait":
			b, err = follow(ctx, c, ids[0], stderr)
			if err == nil && dir != "" {
				_, err = download(ctx, c, ids[0], dir, stderr)
			}
		}
		if err != nil {
			return aboutBatch(ids[0], err)
		}
		printBatch(stdout, b, f.json)
		if !f.json {
			printFailureReasons(stdout, failed)
		}
		if cmd != "cancel" && apiclient.Ended(b.State) && b.State != apiclient.StateSucceeded {
			return &cliError{exitTasksFailed, nil}
		}
		return nil
	case "delete":
		fs := newClientFlagSet(cmd, stderr, &f, "usage: studio delete ID [flags]\n\nDeletes an ended batch with its tasks, its images and its publications; its request id\nis free again after. A batch still running is refused (cancel it first); one that is\ngone answers 404.")
		ids, err := parseClientArgs(fs, args, "ID")
		if err != nil {
			return err
		}
		c, err := newCLIClient(&f)
		if err != nil {
			return err
		}
		if err := c.DeleteBatch(ctx, ids[0]); err != nil {
			return aboutBatch(ids[0], err)
		}
		if f.json {
			return printJSON(stdout, map[string]any{"id": ids[0], "deleted": true})
		}
		fmt.Fprintf(stdout, "deleted %s\n", ids[0])
		return nil
	case "download":
		fs := newClientFlagSet(cmd, stderr, &f, "usage: studio download ID DIR [flags]\n\nSaves the images of the batch's succeeded tasks in DIR (made if missing), one\nfile per task named collection-frame-generator-candidate.png, each checked\nagainst its SHA-256 and written whole (temporary file, then rename); files\nalready there with the right bytes are kept, so it can be run again.\n--json prints each file saved or kept, one per line: path, task_id, asset_id,\nbytes, sha256, kept, collection, frame, generator, candidate.")
		a, err := parseClientArgs(fs, args, "ID", "DIR")
		if err != nil {
			return err
		}
		c, err := newCLIClient(&f)
		if err != nil {
			return err
		}
		files, err := download(ctx, c, a[0], a[1], stderr)
		if err != nil {
			return aboutBatch(a[0], err)
		}
		if f.json {
			if err := printSaved(stdout, files); err != nil {
				return err
			}
		}
		b, err := c.GetBatch(ctx, a[0])
		if err != nil {
			return aboutBatch(a[0], err)
		}
		if apiclient.Ended(b.State) && b.State != apiclient.StateSucceeded {
			return &cliError{exitTasksFailed, fmt.Errorf("the batch %s: %d of its %d tasks failed or were canceled; studio tasks %s --state failed says why",
				b.State, b.Counts.Failed+b.Counts.Canceled, b.TaskCount, b.ID)}
		}
		return nil
	case "tasks":
		var state string
		fs := newClientFlagSet(cmd, stderr, &f, "usage: studio tasks ID [flags]\n\nLists the batch's tasks in plan order: set, frame, generator, candidate, state,\nattempts and the last error (--json: one task per line, as GET\n/v1/batches/{id}/tasks answers them).")
		fs.StringVar(&state, "state", "", "only the tasks in this state: queued, running, succeeded, failed or canceled")
		ids, err := parseClientArgs(fs, args, "ID")
		if err != nil {
			return err
		}
		switch state {
		case "", "queued", "running", "succeeded", "failed", "canceled":
		default:
			return usageErr("--state must be queued, running, succeeded, failed or canceled, not %q", state)
		}
		c, err := newCLIClient(&f)
		if err != nil {
			return err
		}
		tasks, err := c.AllTasks(ctx, ids[0], state)
		if err != nil {
			return aboutBatch(ids[0], err)
		}
		printTasks(stdout, tasks, f.json)
		return nil
	case "ls":
		var limit int
		var all bool
		fs := newClientFlagSet(cmd, stderr, &f, "usage: studio ls [flags]\n\nLists your batches, newest first: id, state, tasks ended out of all (and how:\nsucceeded, failed, canceled), created, prompt.")
		fs.IntVar(&limit, "limit", 20, "how many batches (1..500)")
		fs.BoolVar(&all, "all", false, "every batch, page after page")
		if _, err := parseClientArgs(fs, args); err != nil {
			return err
		}
		if limit < 1 || limit > 500 {
			return usageErr("--limit must be from 1 to 500")
		}
		c, err := newCLIClient(&f)
		if err != nil {
			return err
		}
		return list(ctx, c, limit, all, f.json, stdout)
	}
	return usageErr("unknown command %q", cmd)
}

// parseClientArgs parses flags given before or after the positional
// arguments, which must be exactly the names given.
func parseClientArgs(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != len(names) {
		if len(names) == 0 {
			fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", pos)
		} else {
			fmt.Fprintf(fs.Output(), "want %s, got %d argument(s); see %s -h\n", strings.Join(names, " "), len(pos), fs.Name())
		}
		return nil, errUsage
	}
	return pos, nil
}

// newCLIClient makes the client of the flags: the token from --token (or
// STUDIO_TOKEN) or the data directory's token file, which it notes in
// f.tokenFrom; a --server without a scheme is taken as http://.
func newCLIClient(f *clientFlags) (*apiclient.Client, error) {
	token := strings.TrimSpace(f.token)
	switch {
	case token != "" && tokenFlagGiven(f):
		f.tokenFrom = "--token"
	case token != "":
		f.tokenFrom = "STUDIO_TOKEN"
	default:
		path := filepath.Join(f.data, "token")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, usageErr("no token: give --token or STUDIO_TOKEN, or --data (STUDIO_DATA) with a token file (%s does not exist; studio serve writes it on its first start)", path)
		}
		if err != nil {
			return nil, usageErr("no token: give --token or STUDIO_TOKEN, or --data with a token file (%v)", err)
		}
		token = strings.TrimSpace(string(b))
		f.tokenFrom = path
	}
	if f.retries < 1 {
		return nil, usageErr("--retries must be at least 1")
	}
	server := f.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	c, err := apiclient.New(server, apiclient.WithToken(token), apiclient.WithRetry(apiclient.Retry{Attempts: f.retries}),
		apiclient.WithUserAgent("studio-cli"))
	if err != nil {
		return nil, usageErr("--server %q: %v; write it as http://HOST:PORT or HOST:PORT", f.server, err)
	}
	return c, nil
}

// tokenFlagGiven says whether the token came from --token rather than
// STUDIO_TOKEN.
func tokenFlagGiven(f *clientFlags) bool {
	return f.token != "" && f.token != os.Getenv("STUDIO_TOKEN")
}

// submit sends FILE's request under its request id: the file's own, or
// the journal's for its content.
func submit(ctx context.Context, f clientFlags, file string, fresh, wait bool, dir string, stdin io.Reader, stdout, stderr io.Writer) error {
	var body []byte
	var err error
	if file == "-" {
		body, err = io.ReadAll(stdin)
	} else {
		body, err = os.ReadFile(file)
	}
	if err != nil {
		return usageErr("read %s: %v", file, err)
	}
	name := file
	if file == "-" {
		name = "the standard input"
	}
	// The server reads requests with these strict rules too; here a
	// mistake is named with its line and column, before anything is sent.
	if err := jsonfile.CheckObject(name, body); err != nil {
		return &cliError{exitUsage, err}
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		return usageErr("%s: %v", name, err) // CheckObject has seen to it that this is an object
	}
	c, err := newCLIClient(&f)
	if err != nil {
		return err
	}
	requestID := ""
	// A request_id of null is none (as the server reads it): the journal
	// must name the request then, or a rerun would make another batch.
	if raw, ok := probe["request_id"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if fresh {
			return usageErr("%s names its request_id: --new cannot make another one; change or remove it", name)
		}
		if err := json.Unmarshal(raw, &requestID); err != nil {
			return usageErr("%s: request_id must be a string", name)
		}
	} else {
		canon, err := intent.Canonicalize(body)
		if err != nil {
			return usageErr("%s: %s", name, strings.TrimPrefix(err.Error(), "canonicalize: "))
		}
		j := journal{dir: f.journal}
		if requestID, err = j.requestID(canon, file, fresh); err != nil {
			return &cliError{exitTasksFailed, fmt.Errorf("journal: %w", err)}
		}
	}
	res, err := c.CreateGenerationJSON(ctx, body, requestID)
	if err != nil {
		if ctx.Err() != nil {
			return &cliError{exitTasksFailed, fmt.Errorf("interrupted before the answer; run the same command again: it answers the batch if one was made (request id %s)", requestID)}
		}
		return &callError{about: "request id " + requestID, resend: true, err: err}
	}
	b := res.Record
	if res.Replayed {
		fmt.Fprintf(stderr, "already submitted: batch %s (request id %s, %s); --new submits it again\n", b.ID, res.RequestID, b.State)
	} else {
		fmt.Fprintf(stderr, "created batch %s: %d tasks (request id %s)\n", b.ID, b.TaskCount, res.RequestID)
	}
	if !f.json {
		fmt.Fprintln(stdout, b.ID)
	}
	final := &b
	if wait {
		if final, err = follow(ctx, c, b.ID, stderr); err != nil {
			return err
		}
		if dir != "" {
			if _, err := download(ctx, c, b.ID, dir, stderr); err != nil {
				return err
			}
		}
	}
	if f.json {
		printBatch(stdout, final, true)
	}
	if wait && final.State != apiclient.StateSucceeded {
		return &cliError{exitTasksFailed, nil}
	}
	return nil
}

// printBatch prints a batch: as JSON, or one summary line.
func printBatch(w io.Writer, b *apiclient.Batch, asJSON bool) {
	if asJSON {
		out, _ := json.Marshal(b)
		fmt.Fprintln(w, string(out))
		return
	}
	fmt.Fprintf(w, "%s  %-9s  %s, %d queued, %d running\n", b.ID, b.State, progressText(*b), b.Counts.Queued, b.Counts.Running)
}

// progressText is how every printer (status, ls, wait and its bar) says
// how far a batch has come, with one meaning, the web studio's: the tasks
// that have ended, whichever way, out of all, and how they ended beside:
//
//	7/12 ended (5 succeeded, 1 failed, 1 canceled)
func progressText(b apiclient.Batch) string {
	c := b.Counts
	return fmt.Sprintf("%d/%d ended (%d succeeded, %d failed, %d canceled)", c.Ended(), b.TaskCount, c.Succeeded, c.Failed, c.Canceled)
}

// printFailureReasons prints, after a batch's line, why its failed tasks
// failed: each distinct error once, with how many tasks it ended.
func printFailureReasons(w io.Writer, failed []apiclient.Task) {
	if len(failed) == 0 {
		return
	}
	count := map[string]int{}
	var order []string
	for _, t := range failed {
		msg := "(no error recorded)"
		if t.Error != nil {
			msg = errorKey(*t.Error)
		}
		if count[msg] == 0 {
			order = append(order, msg)
		}
		count[msg]++
	}
	sort.SliceStable(order, func(i, j int) bool { return count[order[i]] > count[order[j]] })
	fmt.Fprintf(w, "failed tasks, by reason:\n")
	for _, msg := range order {
		fmt.Fprintf(w, "  %4d  %s\n", count[msg], msg)
	}
}

// printTasks prints tasks: one JSON object per line, or a table.
func printTasks(w io.Writer, tasks []apiclient.Task, asJSON bool) {
	if asJSON {
		for _, t := range tasks {
			out, _ := json.Marshal(t)
			fmt.Fprintln(w, string(out))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SET\tFRAME\tGENERATOR\tCANDIDATE\tSTATE\tATTEMPTS\tERROR")
	for _, t := range tasks {
		msg := ""
		if t.Error != nil {
			msg = *t.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", t.Collection, t.Frame, t.Generator, t.Candidate, t.State, t.Attempts, msg)
	}
	tw.Flush()
}

// list prints the actor's batches.
func list(ctx context.Context, c *apiclient.Client, limit int, all, asJSON bool, stdout io.Writer) error {
	o := apiclient.ListOptions{Limit: limit}
	for {
		p, err := c.ListBatches(ctx, o)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, b := range p.Items {
			if asJSON {
				out, _ := json.Marshal(b)
				fmt.Fprintln(stdout, string(out))
				continue
			}
			prompt := b.Prompt
			if r := []rune(prompt); len(r) > 40 {
				prompt = string(r[:39]) + "…"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.ID, b.State, progressText(b), b.CreatedAt.Local().Format("2006-01-02 15:04"), prompt)
		}
		tw.Flush()
		if !all || p.NextCursor == "" {
			return nil
		}
		o.Cursor = p.NextCursor
	}
}

// download saves a batch's images and says how many.
func download(ctx context.Context, c *apiclient.Client, id, dir string, stderr io.Writer) ([]apiclient.DownloadedFile, error) {
	files, err := c.Download(ctx, id, dir, apiclient.DownloadOptions{})
	if err != nil {
		if apiclient.StatusOf(err) == 0 && !errors.Is(err, apiclient.ErrUnreachable) && ctx.Err() == nil {
			return nil, &cliError{exitTasksFailed, err}
		}
		return nil, err
	}
	kept := 0
	for _, f := range files {
		if f.Skipped {
			kept++
		}
	}
	fmt.Fprintf(stderr, "saved %d images in %s (%d already there)\n", len(files), dir, kept)
	return files, nil
}

// savedFile is one line of download --json: a file saved (or kept,
// already there with the same bytes), its task and its asset.
type savedFile struct {
	Path       string `json:"path"`
	TaskID     string `json:"task_id"`
	AssetID    string `json:"asset_id"`
	Bytes      int64  `json:"bytes"`
	SHA256     string `json:"sha256"`
	Kept       bool   `json:"kept"`
	Collection string `json:"collection"`
	Frame      string `json:"frame"`
	Generator  string `json:"generator"`
	Candidate  int    `json:"candidate"`
}

// printSaved prints download --json: one object per file, in plan order.
func printSaved(w io.Writer, files []apiclient.DownloadedFile) error {
	for _, f := range files {
		if err := printJSON(w, savedFile{Path: f.Path, TaskID: f.Task.ID, AssetID: f.Asset.ID, Bytes: f.Asset.Size, SHA256: f.Asset.SHA256,
			Kept: f.Skipped, Collection: f.Task.Collection, Frame: f.Task.Frame, Generator: f.Task.Generator, Candidate: f.Task.Candidate}); err != nil {
			return err
		}
	}
	return nil
}

// follow waits for a batch, drawing progress on stderr.
func follow(ctx context.Context, c *apiclient.Client, id string, stderr io.Writer) (*apiclient.Batch, error) {
	p := newWaitProgress(stderr, isTerminal(stderr))
	b, err := c.WaitBatch(ctx, id, apiclient.WaitOptions{OnProgress: p.update})
	p.finish()
	if err != nil && ctx.Err() != nil {
		return nil, &cliError{exitTasksFailed, fmt.Errorf("interrupted; batch %s goes on (follow it again: studio wait %s)", id, id)}
	}
	return b, err
}

// waitProgress draws a batch's progress: a bar redrawn in place on a
// terminal, one line per change elsewhere.
type waitProgress struct {
	w        io.Writer
	terminal bool
	start    time.Time
	started  int // tasks ended when following began
	last     string
	drawn    bool
	polling  bool
	// errs are the distinct task errors seen, in order, each with the
	// tasks that had it.
	errs     []string
	errTasks map[string]map[string]bool
}

func newWaitProgress(w io.Writer, terminal bool) *waitProgress {
	return &waitProgress{w: w, terminal: terminal, start: time.Now(), started: -1, errTasks: map[string]map[string]bool{}}
}

// errorKey is a task error with what differs from task to task and try
// to try taken out ("attempt N: ", ids, an attempt's number inside the
// text), so that one cause reads as one error.
func errorKey(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "attempt "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	return attemptRE.ReplaceAllString(uuidRE.ReplaceAllString(msg, "<id>"), "attempt N")
}

var (
	uuidRE    = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	attemptRE = regexp.MustCompile(`\battempt \d+\b`)
)

// seeError counts a task's error; it answers whether the error is new.
func (p *waitProgress) seeError(taskID, msg string) bool {
	k := errorKey(msg)
	tasks, ok := p.errTasks[k]
	if !ok {
		tasks = map[string]bool{}
		p.errTasks[k] = tasks
		p.errs = append(p.errs, k)
	}
	tasks[taskID] = true
	return !ok
}

func (p *waitProgress) update(ev apiclient.Progress) {
	b := ev.Batch
	if b.ID == "" {
		return
	}
	ended := b.Counts.Ended()
	if p.started < 0 {
		p.started = ended
	}
	if ev.Polling && !p.polling {
		p.polling = true
		p.line("(no live events from this server: polling)")
	}
	if !p.terminal {
		if ev.Task != nil {
			t := ev.Task
			msg := fmt.Sprintf("task %s/%s %s #%d: %s", t.Collection, t.Frame, t.Generator, t.Candidate, t.State)
			if t.Attempts > 1 {
				msg += fmt.Sprintf(" (attempt %d)", t.Attempts)
			}
			if t.Error != nil && t.State != apiclient.StateSucceeded {
				if p.seeError(t.ID, *t.Error) {
					msg += ": " + *t.Error
				} else {
					msg += ": (the same error as before)"
				}
			}
			p.line(msg)
			return
		}
		s := p.summary(b)
		if s != p.last {
			p.line(s)
			p.last = s
		}
		return
	}
	if t := ev.Task; t != nil && t.Error != nil && t.State != apiclient.StateSucceeded {
		p.seeError(t.ID, *t.Error)
	}
	const width = 30
	total := max(b.TaskCount, 1)
	fill := width * ended / total
	bar := strings.Repeat("#", fill) + strings.Repeat("-", width-fill)
	fmt.Fprintf(p.w, "\r[%s] %s\x1b[K", bar, p.summary(b))
	p.drawn = true
}

// summary is the counts, the rate and the time left.
func (p *waitProgress) summary(b apiclient.Batch) string {
	c := b.Counts
	s := b.State + " " + progressText(b)
	if elapsed := time.Since(p.start).Seconds(); elapsed > 0.5 && p.started >= 0 {
		rate := float64(c.Ended()-p.started) / elapsed
		s += fmt.Sprintf(", %.1f/s", rate)
		if left := b.TaskCount - c.Ended(); left > 0 && rate > 0 {
			eta := time.Duration(float64(left) / rate * float64(time.Second))
			if eta < time.Second {
				s += ", ETA <1s"
			} else {
				s += ", ETA " + eta.Round(time.Second).String()
			}
		}
	}
	return s
}

func (p *waitProgress) line(s string) {
	if p.drawn {
		fmt.Fprint(p.w, "\n")
		p.drawn = false
	}
	fmt.Fprintln(p.w, s)
}

// finish ends the bar and prints each distinct task error once, with the
// number of tasks that had it.
func (p *waitProgress) finish() {
	if p.drawn {
		fmt.Fprint(p.w, "\n")
		p.drawn = false
	}
	if len(p.errs) == 0 {
		return
	}
	fmt.Fprintln(p.w, "task errors (each once, with the number of tasks that had it):")
	for _, k := range p.errs {
		fmt.Fprintf(p.w, "  %d x %s\n", len(p.errTasks[k]), k)
	}
}

// isTerminal says whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// defaultJournal is the submit journal's directory: under the user's
// configuration directory, else under the temporary one.
func defaultJournal() string {
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "studio", "submit-journal")
	}
	return filepath.Join(os.TempDir(), "studio-submit-journal")
}

// journal keeps the request id made for each submitted content, so that
// submitting the same content again (after a lost answer, a crash, a
// kill) sends the same id. One file per content, named by the SHA-256 of
// its canonical JSON (RFC 8785: key order and spacing do not matter).
type journal struct{ dir string }

// journalEntry is one journal file.
type journalEntry struct {
	RequestID string    `json:"request_id"`
	File      string    `json:"file"`
	CreatedAt time.Time `json:"created_at"`
}

// requestID answers the id of the content: the journal's, or a new one,
// written (and synced) before it is answered. fresh replaces the entry.
// Of processes racing on one new content, the first to link its entry
// wins and the others read it.
func (j journal) requestID(canon []byte, file string, fresh bool) (string, error) {
	sum := sha256.Sum256(canon)
	path := filepath.Join(j.dir, hex.EncodeToString(sum[:])+".json")
	if !fresh {
		if id, err := readJournal(path); err == nil {
			return id, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return "", err
	}
	id, err := apiclient.NewRequestID()
	if err != nil {
		return "", err
	}
	if abs, err := filepath.Abs(file); err == nil && file != "-" {
		file = abs
	}
	entry, _ := json.Marshal(journalEntry{RequestID: id, File: file, CreatedAt: time.Now().UTC()})
	tmp, err := os.CreateTemp(j.dir, ".entry-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(entry, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if fresh {
		err = os.Rename(tmp.Name(), path)
	} else if err = os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		// Another process made it first: use its id.
		return readJournal(path)
	}
	if err != nil {
		return "", err
	}
	if d, err := os.Open(j.dir); err == nil {
		d.Sync() // the entry's name survives a crash of the machine
		d.Close()
	}
	return id, nil
}

func readJournal(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var e journalEntry
	if err := json.Unmarshal(bytes.TrimSpace(b), &e); err != nil || e.RequestID == "" {
		return "", fmt.Errorf("entry %s is damaged: it does not hold a request id (remove it, or use --new)", path)
	}
	return e.RequestID, nil
}
