// Command studio runs the studio service: an HTTP API that takes large image
// generation requests and makes them safe to retry, and the workers that
// carry them out.
//
//	studio serve                         the HTTP API plus in-process workers
//	studio worker                        workers only, on the same database
//	studio migrate                       apply migrations and exit
//	studio token create --actor NAME     print a new API token for NAME
//	studio token list | revoke ID        list tokens; revoke one
//	studio prune --older-than 30d        delete ended batches older than that
//	studio vacuum                        give SQLite's freed pages back to the filesystem
//	studio bench                         measure this machine (see docs/bench.md)
//	studio assets copy --to s3://...     copy the asset bytes to object storage
//	studio submit FILE [--wait]          submit a generation request to a server (see docs/client.md)
//	studio status|tasks|wait|cancel ID   read, list the tasks of, follow or cancel a batch
//	studio download ID DIR, studio ls    save a batch's images; list batches
//
// Run "studio help" or "studio COMMAND -h" for the flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

const usage = `studio: idempotent image generation batches.

Usage:
  studio serve    [flags]               HTTP API plus in-process workers
  studio worker   [flags]               workers only, as a separate process on the same database
  studio migrate  [flags]               apply database migrations and exit
  studio token create --actor NAME      print a new API token for NAME (--name LABEL, --expires 90d)
  studio token list | revoke ID         list tokens (never their secret); revoke one at once
  studio prune --older-than 30d         delete ended batches older than that ([--dry-run]; serve --retain does it in the background)
  studio vacuum                         SQLite: give freed pages back to the filesystem (once, for a file made before)
  studio backup DIR                     SQLite: a verified copy of a live studio (database and asset files)
  studio bench    [flags]               measure this machine: each operation beside its floor
  studio assets copy --to s3://...      copy every asset's bytes to object storage (resumable, verified)
  studio help                           this text
  studio --version [--json]             the version, from the build
` + clientUsage + `

--json: every command that prints a result prints it as JSON on stdout
instead, one object per line: submit, status, wait and cancel (the batch),
download (each file saved or kept: path, task_id, asset_id, bytes, sha256,
kept, collection, frame, generator, candidate), tasks (its tasks), ls (the
batches), delete, token create, list and
revoke, migrate, prune, vacuum, backup, assets copy, bench (and bench
--list) and --version. serve and worker print no result.

Environment: every setting has a variable, shown as "(env VAR)" in
"studio COMMAND -h" (every flag of serve and worker, the database and data
settings of the other commands, the caller's --server, --token, --data,
--retries and --journal); VAR is read when the flag is not on the command
line. Only the flags that say what one run does have none: --json;
token's --actor, --name and --expires; prune's --older-than, --dry-run and
--sweep-age; assets copy's --to and --jobs; bench's --ops, --n, --tasks,
--list, --cpuprofile and --redis; submit's --wait, --download and --new;
wait's --download; tasks' --state; ls' --limit and --all.
` + exitCodesHelp + `
With no flags, "studio serve" keeps everything in ./studio-data (SQLite,
assets, and on first start a token for the actor "local", printed once and
written to ./studio-data/token), listens on 127.0.0.1:7070 and runs 4
workers with the embedded generators.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program behind main, testable: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr, modeServe)
	case "worker":
		err = runServe(ctx, args[1:], stdout, stderr, modeWorker)
	case "migrate":
		err = runMigrate(ctx, args[1:], stdout, stderr)
	case "token":
		err = runToken(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "assets":
		err = runAssets(ctx, args[1:], stdout, stderr)
	case "prune":
		err = runPrune(ctx, args[1:], stdout, stderr)
	case "vacuum":
		err = runVacuum(ctx, args[1:], stdout, stderr)
	case "backup":
		err = runBackup(ctx, args[1:], stdout, stderr)
	case "submit", "status", "tasks", "wait", "cancel", "delete", "download", "ls":
		return runClient(ctx, args[0], args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version", "-version":
		return runVersion(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "studio: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.As(err, &ce):
		if ce.err != nil {
			fmt.Fprintf(stderr, "studio %s: %v\n", args[0], err)
		}
		return ce.code
	default:
		fmt.Fprintf(stderr, "studio %s: %v\n", args[0], err)
		return exitTasksFailed
	}
}

// jsonFlag declares --json: print the command's result as JSON on stdout
// (one object per line). Like the other flags that say what one run does,
// it has no environment variable.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the result as JSON on stdout (one object per line)")
}

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// exitCodesHelp is what every command answers, as help and the callers'
// -h say it; TestCLIExitCodes holds every command to it.
const exitCodesHelp = `
Exit codes, of every command:
  0  it did what it says (for a batch: every task succeeded); -h and help too
  1  a failure: the batch ended with failed or canceled tasks (status, wait,
     submit --wait, download), or something here failed (the database, a
     file, a directory that cannot be written)
  2  a usage or input error: an unknown command or flag, a missing, extra or
     bad argument or value (an environment variable's too), an input file
     that is not a valid request, or a 4xx answer (its problem printed)
  3  no usable answer from the server after the retries (the caller's
     commands: unreachable, or 5xx/429 every time)
`

// errUsage reports a command line that could not be parsed; the flag package
// has already printed why.
var errUsage = errors.New("usage")

func parse(fs *flag.FlagSet, args []string, applyEnv func() error) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		return errUsage
	}
	if err := applyEnv(); err != nil {
		return &cliError{exitUsage, err} // a variable's value is the command line's too
	}
	return nil
}

// parseConfig parses a command's flags and variables into cfg and
// checks each value is one its flag takes: a bad one, from the command
// line or the environment, is a usage error of every command.
func parseConfig(fs *flag.FlagSet, args []string, applyEnv func() error, cfg *Config) error {
	if err := parse(fs, args, applyEnv); err != nil {
		return err
	}
	if err := errors.Join(cfg.validateValues()...); err != nil {
		return &cliError{exitUsage, err}
	}
	return nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, mode string) error {
	cfg := DefaultConfig()
	cmd := cmdServe
	if mode == modeWorker {
		cmd = cmdWorker
	}
	fs, applyEnv := newFlagSet(cmd, &cfg, stderr)
	if err := parse(fs, args, applyEnv); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return &cliError{exitUsage, err}
	}
	m := NewMain(cfg, mode, stdout, stderr)
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	<-ctx.Done()
	m.Logger.Info("shutting down", "reason", "signal")
	return m.Close()
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdMigrate, &cfg, stderr)
	asJSON := jsonFlag(fs)
	if err := parseConfig(fs, args, applyEnv, &cfg); err != nil {
		return err
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	applied := e.applied
	if *asJSON {
		return printJSON(stdout, map[string]any{"applied": append([]string{}, applied...)})
	}
	for _, name := range applied {
		fmt.Fprintln(stdout, "applied", name)
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "no migrations to apply: the database is up to date")
	} else {
		fmt.Fprintf(stdout, "%d migrations applied: the database is up to date\n", len(applied))
	}
	return nil
}

// buildInfo is which build this is, from what the Go toolchain recorded.
type buildInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
}

func readBuildInfo() (buildInfo, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return buildInfo{}, false
	}
	v := buildInfo{Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v, true
}

// runVersion is studio --version [--json].
func runVersion(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	for _, a := range args {
		if a != "--json" && a != "-json" {
			fmt.Fprintf(stderr, "usage: studio --version [--json]\n")
			return 2
		}
		asJSON = true
	}
	if asJSON {
		bi, _ := readBuildInfo()
		printJSON(stdout, bi)
		return 0
	}
	fmt.Fprintln(stdout, version())
	return 0
}

// version says which build this is: the module version and, when the
// build recorded them, the commit and whether the tree had changes.
func version() string {
	bi, ok := readBuildInfo()
	if !ok {
		return "studio (no build information)"
	}
	v := "studio " + bi.Version
	if bi.Revision != "" {
		modified := ""
		if bi.Modified {
			modified = ", modified"
		}
		v += " (" + bi.Revision + modified + ")"
	}
	return v + " " + bi.Go
}
