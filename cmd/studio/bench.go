package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"studio/intent"
	"studio/locks"
	"studio/planner"
	"studio/store"
	"studio/store/postgres"
	"studio/store/sqlite"
)

// benchOps are the operations of `studio bench`, in the order they run.
// Each runs beside its floor, alternating one sample of each, so that the
// ratio holds on a noisy machine.
var benchOps = []benchOp{
	{name: "commit_12", what: "CreateIntent of a 12-task tree vs one transaction inserting the same rows",
		run: func(b *bench) (*benchResult, error) { return b.commit(12, 200) }},
	{name: "commit_300", what: "CreateIntent of a 300-task tree vs the same rows inserted bare",
		run: func(b *bench) (*benchResult, error) { return b.commit(300, 40) }},
	{name: "commit_600", what: "CreateIntent of a 600-task tree vs the same rows inserted bare",
		run: func(b *bench) (*benchResult, error) { return b.commit(600, 30) }, target: "<= 1.5x", goal: ratioAtMost(1.5)},
	{name: "replay", what: "intent.Service replay (look-up, fingerprint, batch read) vs primary-key reads of binding and batch",
		run: (*bench).replay, target: "<= 2x", goal: ratioAtMost(2)},
	{name: "storm_64", what: "64 goroutines, one new id per round, all at once: plans per round",
		run: (*bench).storm, target: "1 plan/round", goal: func(r *benchResult) bool { return r.PlansPerRound != nil && *r.PlansPerRound == 1 }},
	{name: "http_replay", what: "replays over HTTP on loopback, 16 connections, vs GET /healthz on the same server",
		run: (*bench).httpReplay, target: ">= 0.5 of its rate", goal: ratioAtMost(2)},
	{name: "drain_1", what: "tasks/s of 1 worker, noop generator, vs claim + complete alone batched the same way",
		run: func(b *bench) (*benchResult, error) { return b.drain(1) }},
	{name: "drain_4", what: "tasks/s of 4 workers, noop generator, vs claim + complete alone batched the same way",
		run: func(b *bench) (*benchResult, error) { return b.drain(4) }, target: ">= 5500/s", goal: func(r *benchResult) bool { return r.PerS >= 5500 }},
	{name: "lock_hold_memory", what: "uncontended Hold of a no-op, memory store, vs sync.Mutex Lock/Unlock",
		run: func(b *bench) (*benchResult, error) { return b.lockHold("memory") }, target: "< 1 µs", goal: func(r *benchResult) bool { return r.MedianUS < 1 }},
	{name: "lock_hold_db", what: "uncontended Hold of a no-op, database store, vs the store's acquire + release statements alone",
		run: func(b *bench) (*benchResult, error) { return b.lockHold("db") }, target: "<= 1.5x", goal: ratioAtMost(1.5)},
	{name: "lock_handoff_memory", what: "release to next holder, 8 waiters, memory store",
		run: func(b *bench) (*benchResult, error) { return b.lockHandoff("memory") }},
	{name: "lock_handoff_db", what: "release to next holder, 8 waiters, database store",
		run: func(b *bench) (*benchResult, error) { return b.lockHandoff("db") }},
}

// benchOp is one operation of the bench.
type benchOp struct {
	name string
	what string
	run  func(*bench) (*benchResult, error)
	// target is the goal the result is read against, for people ("" for
	// none); goal says whether a result meets it.
	target string
	goal   func(*benchResult) bool
}

func ratioAtMost(x float64) func(*benchResult) bool {
	return func(r *benchResult) bool { return r.Ratio != nil && *r.Ratio <= x }
}

// benchResult is one line of `studio bench --json`. Times are per
// operation. ratio is how many times its floor the operation costs: the
// ratio of the medians, or for throughput operations (http_replay, drain)
// the floor's rate over the operation's. Fields with no floor are null.
type benchResult struct {
	Op            string   `json:"op"`
	N             int      `json:"n"`
	MedianUS      float64  `json:"median_us"`
	P99US         float64  `json:"p99_us"`
	PerS          float64  `json:"per_s"`
	FloorMedianUS *float64 `json:"floor_median_us"`
	Ratio         *float64 `json:"ratio"`
	// FloorPerS is the floor's rate, for throughput operations.
	FloorPerS *float64 `json:"floor_per_s,omitempty"`
	// PlansPerRound is storm_64's count of plans per round (must be 1).
	PlansPerRound *float64 `json:"plans_per_round,omitempty"`
}

// bench runs operations against one store.
type bench struct {
	ctx      context.Context
	cfg      Config
	n        int // samples per operation; 0 = each operation's default
	tasks    int // tasks per drain run
	store    store.Store
	floors   benchFloors // the engine's bare statements
	progress *progress
	seq      atomic.Int64 // makes request ids unique within the run
}

// samples is the number of samples an operation takes: --n, or its default.
func (b *bench) samples(def int) int {
	if b.n > 0 {
		return b.n
	}
	return def
}

// id returns a request id unique within this run.
func (b *bench) id(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), b.seq.Add(1))
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Data = ""
	fs, applyEnv := newFlagSet("bench", &cfg, stderr, "data", "database", "sqlite-synchronous")
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
		for _, op := range benchOps {
			fmt.Fprintf(stdout, "%-20s %s\n", op.name, op.what)
		}
		return nil
	}
	selected, err := selectOps(*ops)
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
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
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
	b := &bench{ctx: ctx, cfg: cfg, n: *n, tasks: *tasks, store: s, progress: newProgress(stderr)}
	switch s := s.(type) {
	case *sqlite.Store:
		b.floors = sqliteFloors{s}
	case *postgres.Store:
		b.floors = postgresFloors{s}
	default:
		return fmt.Errorf("bench: no floors for %T", s)
	}

	var results []*benchResult
	for i, op := range selected {
		b.progress.begin(i+1, len(selected), op.name)
		start := time.Now()
		res, err := op.run(b)
		if err != nil {
			b.progress.fail()
			return fmt.Errorf("bench %s: %w", op.name, err)
		}
		res.Op = op.name
		b.progress.end(res, time.Since(start))
		results = append(results, res)
		if *asJSON {
			line, err := json.Marshal(res)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\n", line)
		}
	}
	if !*asJSON {
		printTable(stdout, selected, results)
	}
	return nil
}

// selectOps picks operations by name or by prefix ("commit" is every
// commit_N).
func selectOps(list string) ([]benchOp, error) {
	if strings.TrimSpace(list) == "" {
		return benchOps, nil
	}
	var out []benchOp
	for _, tok := range strings.Split(list, ",") {
		tok = strings.TrimSpace(tok)
		found := false
		for _, op := range benchOps {
			if op.name == tok || strings.HasPrefix(op.name, tok+"_") {
				found = true
				if !slices.ContainsFunc(out, func(o benchOp) bool { return o.name == op.name }) {
					out = append(out, op)
				}
			}
		}
		if !found {
			names := make([]string, len(benchOps))
			for i, op := range benchOps {
				names[i] = op.name
			}
			return nil, fmt.Errorf("--ops: no operation %q (have %s)", tok, strings.Join(names, ", "))
		}
	}
	// Keep the documented order whatever the order asked.
	slices.SortStableFunc(out, func(a, c benchOp) int { return opIndex(a.name) - opIndex(c.name) })
	return out, nil
}

func opIndex(name string) int {
	return slices.IndexFunc(benchOps, func(o benchOp) bool { return o.name == name })
}

// alternate takes n samples of op and of floor, one of each in turn (the
// first of each pair swapping every round), each sample timing inner calls;
// the samples are per call.
func (b *bench) alternate(n, inner int, op, floor func(i int) error) (ops, floors []time.Duration, err error) {
	ops, floors = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	timed := func(fn func(int) error, i int, into *[]time.Duration) error {
		start := time.Now()
		for j := 0; j < inner; j++ {
			if err := fn(i*inner + j); err != nil {
				return err
			}
		}
		*into = append(*into, time.Since(start)/time.Duration(inner))
		return nil
	}
	for i := 0; i < n; i++ {
		if err := b.ctx.Err(); err != nil {
			return nil, nil, err
		}
		first, second := op, floor
		into1, into2 := &ops, &floors
		if i%2 == 1 {
			first, second, into1, into2 = floor, op, &floors, &ops
		}
		if err := timed(first, i, into1); err != nil {
			return nil, nil, err
		}
		if err := timed(second, i, into2); err != nil {
			return nil, nil, err
		}
		b.progress.tick(i+1, n)
	}
	return ops, floors, nil
}

// latencyResult summarizes per-call samples of an operation and its floor
// (floor may be nil: no floor).
func latencyResult(ops, floors []time.Duration) *benchResult {
	r := &benchResult{N: len(ops), MedianUS: us(quantile(ops, 0.5)), P99US: us(quantile(ops, 0.99)), PerS: round3(rate(ops))}
	if floors != nil {
		fm := us(quantile(floors, 0.5))
		r.FloorMedianUS = &fm
		if fm > 0 {
			r.Ratio = ptr(r.MedianUS / fm)
		}
	}
	return r
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// rate is calls per second of one caller making the calls one after
// another.
func rate(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	if sum <= 0 {
		return 0
	}
	return float64(len(ds)) / sum.Seconds()
}

func us(d time.Duration) float64 { return round3(float64(d) / float64(time.Microsecond)) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func ptr(v float64) *float64 { v = round3(v); return &v }

// newTree makes a generation intent of n tasks with fresh ids, as the
// service would commit it.
func newTree(actor, requestID string, n int, generators ...string) (intent.NewIntent, error) {
	if len(generators) == 0 {
		generators = []string{"sketch", "mosaic"}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	id, err := intent.NewID()
	if err != nil {
		return intent.NewIntent{}, err
	}
	nb := &intent.NewBatch{ID: id, Prompt: "a knight in the rain, side view", Spec: []byte(`{"prompt":"a knight in the rain, side view"}`), CreatedAt: now,
		Tasks: make([]intent.NewTask, n)}
	for i := range nb.Tasks {
		tid, err := intent.NewID()
		if err != nil {
			return intent.NewIntent{}, err
		}
		nb.Tasks[i] = intent.NewTask{ID: tid, Collection: "walk-cycle", Frame: fmt.Sprintf("f%03d", i/len(generators)),
			Generator: generators[i%len(generators)], Candidate: 1}
	}
	return intent.NewIntent{
		Binding: intent.Binding{Actor: actor, RequestID: requestID, Operation: intent.OpGeneration,
			Fingerprint: fmt.Sprintf("%064x", b2i(requestID)), ResourceID: nb.ID, CreatedAt: now},
		Batch: nb,
	}, nil
}

// b2i is a stand-in fingerprint: any fixed value per request id will do.
func b2i(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// commit: CreateIntent of an n-task tree beside one transaction inserting
// the same rows (binding, batch, tasks) with one prepared statement for
// the tasks, nothing else.
func (b *bench) commit(tasks, def int) (*benchResult, error) {
	n := b.samples(def)
	trees := make([]intent.NewIntent, 2*n)
	for i := range trees {
		var err error
		if trees[i], err = newTree("bench", b.id(fmt.Sprintf("commit-%d", tasks)), tasks); err != nil {
			return nil, err
		}
	}
	ops, floors, err := b.alternate(n, 1, func(i int) error {
		_, created, err := b.store.CreateIntent(b.ctx, trees[2*i])
		if err == nil && !created {
			err = errors.New("a fresh id was not created")
		}
		return err
	}, func(i int) error {
		return b.floors.commit(b.ctx, trees[2*i+1])
	})
	if err != nil {
		return nil, err
	}
	return latencyResult(ops, floors), nil
}

// benchBody is the generation the service and HTTP operations send: 2
// frames x auto (2 generators) x 3 candidates = 12 tasks.
const benchBody = `{"prompt":"a knight in the rain, side view","sets":[{"collection":"walk-cycle","frames":["f01","f02"]}],"candidates":3,"subjects":["knight"],"seed":7}`

func benchInput() (intent.GenerationInput, error) {
	_, _, in, err := intent.DecodeGeneration([]byte(benchBody))
	return in, err
}

// newService is the intent service as the program wires it (the planner
// on the embedded catalog, the configured lock store), without metrics.
func (b *bench) newService(wrap func(intent.Planner) intent.Planner) (*intent.Service, func(), error) {
	ls, err := (&Main{Config: b.cfg, store: b.store}).lockStore()
	if err != nil {
		return nil, nil, err
	}
	e := locks.New(ls)
	p := planner.New(planner.EmbeddedCatalog())
	p.MaxTasks = b.cfg.MaxBatchTasks
	var pl intent.Planner = p
	if wrap != nil {
		pl = wrap(pl)
	}
	return &intent.Service{Store: b.store, Planner: pl, Locker: engineLocker{e}}, func() { e.Close() }, nil
}

// replay: the service's replay path beside two primary-key reads.
func (b *bench) replay() (*benchResult, error) {
	svc, done, err := b.newService(nil)
	if err != nil {
		return nil, err
	}
	defer done()
	in, err := benchInput()
	if err != nil {
		return nil, err
	}
	const actor = "bench"
	id := b.id("replay")
	first, err := svc.CreateGeneration(b.ctx, actor, id, in)
	if err != nil {
		return nil, err
	}
	ops, floors, err := b.alternate(b.samples(5000), 1, func(int) error {
		res, err := svc.CreateGeneration(b.ctx, actor, id, in)
		if err == nil && (!res.Replayed || res.Batch.ID != first.Batch.ID) {
			err = errors.New("not a replay of the first batch")
		}
		return err
	}, func(int) error {
		return b.floors.replay(b.ctx, actor, id)
	})
	if err != nil {
		return nil, err
	}
	return latencyResult(ops, floors), nil
}

// countingPlanner counts plans made.
type countingPlanner struct {
	p intent.Planner
	n *atomic.Int64
}

func (c countingPlanner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	c.n.Add(1)
	return c.p.PlanGeneration(ctx, actor, in)
}

// storm: 64 goroutines send one new id all at once, each round; one plan
// and one batch per round, or the run fails.
func (b *bench) storm() (*benchResult, error) {
	const callers = 64
	var plans atomic.Int64
	svc, done, err := b.newService(func(p intent.Planner) intent.Planner { return countingPlanner{p, &plans} })
	if err != nil {
		return nil, err
	}
	defer done()
	in, err := benchInput()
	if err != nil {
		return nil, err
	}
	rounds := b.samples(50)
	var times []time.Duration
	for r := 0; r < rounds; r++ {
		id := b.id("storm")
		start := make(chan struct{})
		ids := make([]string, callers)
		created := make([]bool, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for g := 0; g < callers; g++ {
			wg.Go(func() {
				<-start
				res, err := svc.CreateGeneration(b.ctx, "bench", id, in)
				ids[g], created[g], errs[g] = res.Batch.ID, !res.Replayed, err
			})
		}
		before := plans.Load()
		t0 := time.Now()
		close(start)
		wg.Wait()
		times = append(times, time.Since(t0))
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if n := plans.Load() - before; n != 1 {
			return nil, fmt.Errorf("round %d planned %d times, want 1", r, n)
		}
		slices.Sort(ids)
		if len(slices.Compact(ids)) != 1 {
			return nil, fmt.Errorf("round %d answered with more than one batch", r)
		}
		if n := countTrue(created); n != 1 {
			return nil, fmt.Errorf("round %d created %d batches, want 1", r, n)
		}
		b.progress.tick(r+1, rounds)
	}
	res := latencyResult(times, nil)
	res.PlansPerRound = ptr(float64(plans.Load()) / float64(rounds))
	return res, nil
}

func countTrue(bs []bool) int {
	n := 0
	for _, v := range bs {
		if v {
			n++
		}
	}
	return n
}

// httpReplay: replays over HTTP on loopback from 16 connections, beside
// GET /healthz on the same server, in alternating phases.
func (b *bench) httpReplay() (*benchResult, error) {
	const conns = 16
	token, err := createToken(b.ctx, b.store, "bench")
	if err != nil {
		return nil, err
	}
	cfg := b.cfg
	cfg.Addr = "127.0.0.1:0"
	cfg.Workers = 0
	cfg.DebugAddr = ""
	m := NewMain(cfg, modeServe, io.Discard, io.Discard)
	if err := m.Run(b.ctx); err != nil {
		m.Close()
		return nil, err
	}
	defer m.Close()
	base := "http://" + m.Addr()
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	body := []byte(strings.Replace(benchBody, "{", fmt.Sprintf(`{"request_id":%q,`, b.id("http")), 1))
	post := func(want int) error {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, base+"/v1/generations", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		return send(client, req, want)
	}
	if err := post(http.StatusCreated); err != nil {
		return nil, err
	}
	healthz := func() error {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, base+"/healthz", nil)
		if err != nil {
			return err
		}
		return send(client, req, http.StatusOK)
	}
	total := b.samples(8000)
	rounds := min(8, total)
	per := total / rounds
	var ops, floors []time.Duration
	var opWall, floorWall time.Duration
	for r := 0; r < rounds; r++ {
		phases := []struct {
			fn   func() error
			lat  *[]time.Duration
			wall *time.Duration
		}{{func() error { return post(http.StatusOK) }, &ops, &opWall}, {healthz, &floors, &floorWall}}
		if r%2 == 1 {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for _, p := range phases {
			lat, wall, err := concurrently(conns, per, p.fn)
			if err != nil {
				return nil, err
			}
			*p.lat = append(*p.lat, lat...)
			*p.wall += wall
		}
		b.progress.tick(r+1, rounds)
	}
	res := latencyResult(ops, floors)
	res.PerS = round3(float64(len(ops)) / opWall.Seconds())
	res.FloorPerS = ptr(float64(len(floors)) / floorWall.Seconds())
	res.Ratio = ptr(*res.FloorPerS / res.PerS)
	return res, nil
}

// send does req and reads the whole answer, which must have status want.
func send(c *http.Client, req *http.Request, want int) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s answered %s, want %d", req.Method, req.URL.Path, resp.Status, want)
	}
	return nil
}

// concurrently calls fn total times from workers goroutines and returns
// each call's latency and the wall time of the whole.
func concurrently(workers, total int, fn func() error) ([]time.Duration, time.Duration, error) {
	var next atomic.Int64
	lats := make([][]time.Duration, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				t0 := time.Now()
				if err := fn(); err != nil {
					errs[w] = err
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	return slices.Concat(lats...), wall, errors.Join(errs...)
}

// lockHold: one uncontended Hold of a no-op on the memory or database
// store, beside sync.Mutex (memory) or the store's own acquire and release
// statements called without the engine (db).
func (b *bench) lockHold(kind string) (*benchResult, error) {
	noop := func(context.Context, *locks.Lease) error { return nil }
	if kind == "memory" {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		var mu sync.Mutex
		held := 0
		ops, floors, err := b.alternate(b.samples(1000), 200, func(int) error {
			return e.Hold(b.ctx, "bench-hold", noop)
		}, func(int) error {
			mu.Lock()
			held++
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
		return latencyResult(ops, floors), nil
	}
	ls, err := (&Main{Config: Config{LockStore: "db"}, store: b.store}).lockStore()
	if err != nil {
		return nil, err
	}
	e := locks.New(ls)
	defer e.Close()
	owner := b.id("bench-owner")
	ops, floors, err := b.alternate(b.samples(1000), 1, func(int) error {
		return e.Hold(b.ctx, "bench-hold", noop)
	}, func(int) error {
		if _, ok, err := ls.Acquire(b.ctx, "bench-floor", owner, locks.DefaultTTL); err != nil || !ok {
			return fmt.Errorf("floor acquire: %v %v", ok, err)
		}
		if ok, err := ls.Release(b.ctx, "bench-floor", owner); err != nil || !ok {
			return fmt.Errorf("floor release: %v %v", ok, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return latencyResult(ops, floors), nil
}

// lockHandoff: 9 goroutines take turns on one key (one holds, 8 wait);
// each sample is the time from one holder's fn returning to the next
// holder's fn starting, counted only when the key passed to another
// goroutine.
func (b *bench) lockHandoff(kind string) (*benchResult, error) {
	var ls locks.Store = locks.NewMemoryStore()
	def := 5000
	if kind == "db" {
		var err error
		if ls, err = (&Main{Config: Config{LockStore: "db"}, store: b.store}).lockStore(); err != nil {
			return nil, err
		}
		def = 1000
	}
	e := locks.New(ls)
	defer e.Close()
	total := b.samples(def)
	const waiters = 8
	var (
		mu       sync.Mutex // taken inside the lock only: never contended
		lastEnd  time.Time
		lastG    = -1
		handoffs []time.Duration
	)
	errs := make([]error, waiters+1)
	var wg sync.WaitGroup
	for g := 0; g <= waiters; g++ {
		wg.Go(func() {
			for {
				done := false
				err := e.Hold(b.ctx, "bench-handoff", func(context.Context, *locks.Lease) error {
					now := time.Now()
					mu.Lock()
					defer mu.Unlock()
					if len(handoffs) >= total {
						done = true
						return nil
					}
					if lastG >= 0 && lastG != g {
						handoffs = append(handoffs, now.Sub(lastEnd))
						if len(handoffs)%max(1, total/100) == 0 {
							b.progress.tick(len(handoffs), total)
						}
					}
					lastG = g
					lastEnd = time.Now()
					return nil
				})
				if err != nil {
					errs[g] = err
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return latencyResult(handoffs, nil), nil
}

// printTable writes the results for people.
func printTable(w io.Writer, ops []benchOp, results []*benchResult) {
	rows := [][]string{{"op", "n", "median", "p99", "per s", "floor median", "ratio", "target", ""}}
	for i, r := range results {
		floor, ratio, verdict := "-", "-", ""
		if r.FloorMedianUS != nil {
			floor = fmtUS(*r.FloorMedianUS)
		}
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *r.Ratio)
		}
		if r.PlansPerRound != nil {
			ratio = fmt.Sprintf("%g plan/round", *r.PlansPerRound)
		}
		if ops[i].goal != nil {
			verdict = "missed"
			if ops[i].goal(r) {
				verdict = "met"
			}
		}
		rows = append(rows, []string{ops[i].name, fmt.Sprint(r.N), fmtUS(r.MedianUS), fmtUS(r.P99US), fmtRate(r.PerS), floor, ratio, ops[i].target, verdict})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for j, c := range row {
			widths[j] = max(widths[j], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for j, c := range row {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c))
			switch j {
			case 0, len(row) - 2, len(row) - 1: // text: left
				line.WriteString(c + pad)
			default: // figures: right
				line.WriteString(pad + c)
			}
			line.WriteString("  ")
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

func fmtUS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f ms", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f µs", v)
	default:
		return fmt.Sprintf("%.2f µs", v)
	}
}

func fmtRate(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// progress shows on stderr which operation runs: a line per operation, and
// on a terminal a percentage while it runs.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	label string
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) begin(i, n int, op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = fmt.Sprintf("[%d/%d] %s", i, n, op)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s ...", p.label)
	}
}

func (p *progress) tick(done, of int) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && done < of {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K%s %3d%%", p.label, 100*done/max(1, of))
}

func (p *progress) end(r *benchResult, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	ratio := ""
	if r.Ratio != nil {
		ratio = fmt.Sprintf(", %.2fx its floor", *r.Ratio)
	}
	fmt.Fprintf(p.w, "%s: median %s%s (%.1fs)\n", p.label, fmtUS(r.MedianUS), ratio, took.Seconds())
}

func (p *progress) fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: failed\n", p.label)
}
