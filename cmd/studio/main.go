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
  studio bench    [flags]               measure this machine: each operation beside its floor
  studio assets copy --to s3://...      copy every asset's bytes to object storage (resumable, verified)
  studio help                           this text
  studio --version                      the version, from the build
` + clientUsage + `

Every flag of serve, worker, migrate, token and bench has an environment
variable, and so do the caller's commands' --server, --token, --data,
--retries and --journal (all shown in "studio COMMAND -h"); a flag on the
command line wins over the variable.

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
	case "submit", "status", "tasks", "wait", "cancel", "delete", "download", "ls":
		return runClient(ctx, args[0], args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version())
		return 0
	default:
		fmt.Fprintf(stderr, "studio: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "studio %s: %v\n", args[0], err)
		return 1
	}
}

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
	return applyEnv()
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
		return err
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
	if err := parse(fs, args, applyEnv); err != nil {
		return err
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	applied := e.applied
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

// version says which build this is: the module version and, when the
// build recorded them, the commit and whether the tree had changes.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "studio (no build information)"
	}
	v := "studio " + bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		v += " (" + rev + modified + ")"
	}
	return v + " " + bi.GoVersion
}
