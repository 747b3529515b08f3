package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"studio/bench"
	"studio/locks"
)

// runBench is `studio bench`: flags to a bench.Config, the results to
// stdout (a table, or JSON lines), progress to stderr.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Data = ""
	fs, applyEnv := newFlagSet(cmdBench, &cfg, stderr)
	var (
		ops     = fs.String("ops", "", "comma-separated operations (or prefixes: commit, lock_hold, drain...); empty = all")
		asJSON  = fs.Bool("json", false, "print one JSON line per operation instead of the table")
		n       = fs.Int("n", 0, "samples per operation (requests per side for http_replay, rounds for storm_64); 0 = each one's default")
		tasks   = fs.Int("tasks", 6000, "tasks per drain run")
		listOps = fs.Bool("list", false, "list the operations and exit")
		cpuProf = fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof reads it)")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: studio bench [flags]

Measures studio on this machine: each operation beside its floor, in one
run, alternating. Runs on a temporary data directory unless --data or
--database is given. Progress goes to stderr, results to stdout.

`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, applyEnv); err != nil {
		return err
	}
	if *listOps {
		for _, op := range bench.Ops() {
			fmt.Fprintf(stdout, "%-20s %s\n", op.Name, op.What)
		}
		return nil
	}
	selected, err := bench.Select(*ops)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	if *n < 0 || *tasks < 1 {
		fmt.Fprintln(stderr, "--n must be 0 or more and --tasks at least 1")
		return errUsage
	}
	if cfg.Data == "" {
		dir, err := os.MkdirTemp("", "studio-bench-")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Data = dir
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	bc := benchConfig(cfg, e)
	bc.N, bc.Tasks, bc.Progress = *n, *tasks, stderr
	var each func(bench.Op, *bench.Result) error
	if *asJSON {
		each = func(_ bench.Op, r *bench.Result) error {
			line, err := json.Marshal(r)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "%s\n", line)
			return err
		}
	}
	results, err := bench.Run(ctx, bc, selected, each)
	if err != nil {
		return err
	}
	if !*asJSON {
		bench.PrintTable(stdout, selected, results)
	}
	return nil
}

// benchConfig wires the bench to the program: the store and its engine's
// floors, the lock stores, tokens, and the whole program serving HTTP on
// the same database.
func benchConfig(cfg Config, e *engine) bench.Config {
	return bench.Config{
		Store:         e.store,
		Floors:        e.floors,
		Dir:           cfg.Data,
		MaxBatchTasks: cfg.MaxBatchTasks,
		LockStore:     func() (locks.Store, error) { return openLockStore(cfg.lockStore(), e) },
		DBLockStore:   func() (locks.Store, error) { return openLockStore("db", e) },
		NewToken: func(ctx context.Context, actor string) (string, error) {
			return createToken(ctx, e.store, actor)
		},
		Serve: func(ctx context.Context) (string, func() error, error) {
			c := cfg
			c.Addr = "127.0.0.1:0"
			c.Workers = 0
			c.DebugAddr = ""
			m := NewMain(c, modeServe, io.Discard, io.Discard)
			if err := m.Run(ctx); err != nil {
				m.Close()
				return "", nil, err
			}
			return m.Addr(), m.Close, nil
		},
	}
}
