package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"studio/bench"
	"studio/locks"
	"studio/locks/redislock"
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
		redis   = fs.String("redis", "", "Redis URL of lock_hold_redis and lock_handoff_redis; empty = --lock-store if it is one, else "+defaultBenchRedis)
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: studio bench [flags]

Measures studio on this machine: each operation beside its floor, in one
run, alternating. Runs on a temporary data directory unless --data or
--database is given. Progress goes to stderr, results to stdout.

`)
		fs.PrintDefaults()
	}
	if err := parseConfig(fs, args, applyEnv, &cfg); err != nil {
		return err
	}
	if *listOps {
		for _, op := range bench.Ops() {
			if *asJSON {
				printJSON(stdout, map[string]string{"name": op.Name, "what": op.What})
				continue
			}
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
	bc, closeStores := benchConfig(cfg, e, *redis)
	defer closeStores()
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

// defaultBenchRedis is the Redis the bench's Redis lock operations use
// when neither --redis nor --lock-store names one.
const defaultBenchRedis = "redis://127.0.0.1:6379/0"

// benchRedisPrefix keeps the bench's Redis keys apart from a studio's.
const benchRedisPrefix = "studio:bench:locks:"

// benchConfig wires the bench to the program: the store and its engine's
// floors, the lock stores, tokens, and the whole program serving HTTP on
// the same database. redisURL is the Redis of the Redis lock operations
// ("" for the default). The function it answers closes the lock stores
// the run opened.
func benchConfig(cfg Config, e *engine, redisURL string) (bench.Config, func()) {
	if redisURL == "" {
		redisURL = defaultBenchRedis
		if isRedisURL(cfg.LockStore) {
			redisURL = cfg.LockStore
		}
	}
	var closers []func() error
	opened := func(ls locks.Store, closeFn func() error, err error) (locks.Store, error) {
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeFn)
		return ls, nil
	}
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	return bench.Config{
		Store:         e.store,
		Floors:        e.floors,
		Dir:           cfg.Data,
		MaxBatchTasks: cfg.MaxBatchTasks,
		LockStore:     func() (locks.Store, error) { return opened(openLockStore(cfg.lockStore(), e)) },
		DBLockStore:   func() (locks.Store, error) { return opened(openLockStore("db", e)) },
		RedisLockStore: func() (locks.Store, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rs, err := redislock.Open(ctx, redisURL, redislock.WithPrefix(benchRedisPrefix))
			if err != nil {
				return nil, fmt.Errorf("the Redis lock operations need a Redis (--redis URL, or leave them out with --ops): %w", err)
			}
			return opened(rs, rs.Close, nil)
		},
		NewToken: func(ctx context.Context, actor string) (string, error) {
			return createToken(ctx, e.store, actor)
		},
		Serve:       func(ctx context.Context) (string, func() error, error) { return benchServe(ctx, cfg, nil) },
		ServeShared: func(ctx context.Context) (string, func() error, error) { return benchServe(ctx, cfg, e) },
		Wake:        e.wake,
		Assets:      cfg.Assets,
		Workers: func(ctx context.Context, n int, assets string) (func() (time.Duration, error), error) {
			return startBenchWorkers(ctx, cfg, n, assets)
		},
		WALPosition: e.walPosition,
	}, closeAll
}

// benchWorkerBinary is the studio binary the bench starts worker
// processes from: this one (tests set the binary they built).
var benchWorkerBinary = os.Executable

// startBenchWorkers starts n `studio worker` processes on cfg's database,
// 4 tasks at once each, with STUDIO_ASSETS=assets, and waits until each
// has started its workers. Each process gets a --data directory of its own
// under cfg.Data. The function it answers stops them (SIGTERM), waits for
// their exit, removes their directories and the catalog it wrote, and
// answers the CPU time (user and system) the processes used; a failure to
// start one stops and removes the others too.
func startBenchWorkers(ctx context.Context, cfg Config, n int, assets string) (func() (time.Duration, error), error) {
	bin, err := benchWorkerBinary()
	if err != nil {
		return nil, err
	}
	// The workers run the noop generator, which the embedded catalog
	// leaves out.
	catalog := filepath.Join(cfg.Data, "bench-catalog.json")
	if err := os.WriteFile(catalog, []byte(`{"generators":[{"id":"noop","kind":"embedded"}],"routes":{"auto":["noop"]}}`), 0o600); err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	dirs := []string{catalog}
	stop := func() (time.Duration, error) {
		var errs []error
		var cpu time.Duration
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				errs = append(errs, err)
			}
			if ps := c.ProcessState; ps != nil {
				cpu += ps.UserTime() + ps.SystemTime()
			}
		}
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
		return cpu, errors.Join(errs...)
	}
	for range n {
		dir, err := os.MkdirTemp(cfg.Data, "worker-")
		if err != nil {
			stop()
			return nil, err
		}
		dirs = append(dirs, dir)
		c := exec.CommandContext(ctx, bin, "worker", "--database", cfg.Database, "--data", dir, "--concurrency", "4", "--catalog", catalog)
		c.Env = append(os.Environ(), "STUDIO_ASSETS="+assets, "STUDIO_LOG_LEVEL=info")
		logs, err := c.StderrPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start %s worker: %w", bin, err)
		}
		cmds = append(cmds, c)
		started := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(logs)
			once := sync.Once{}
			for sc.Scan() {
				if bytes.Contains(sc.Bytes(), []byte(`"msg":"workers started"`)) {
					once.Do(func() { close(started) })
				}
			}
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			stop()
			return nil, errors.New("a worker process did not start within a minute")
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		}
	}
	return stop, nil
}

// benchServe starts the whole program serving HTTP on loopback with no
// workers: on the engine shared (the bench's own store value) or, when it
// is nil, on a store of its own, as another process has it.
func benchServe(ctx context.Context, cfg Config, shared *engine) (string, func() error, error) {
	c := cfg
	c.Addr = "127.0.0.1:0"
	c.Workers = 0
	c.DebugAddr = ""
	m := NewMain(c, modeServe, io.Discard, io.Discard)
	m.engine = shared
	if err := m.Run(ctx); err != nil {
		m.Close()
		return "", nil, err
	}
	return m.Addr(), m.Close, nil
}
