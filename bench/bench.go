// Package bench is the harness behind `studio bench`: it measures studio
// where it runs (the real store, intent service, HTTP server, worker pool
// and lock engine), each operation beside its floor in the same run,
// alternating, so that the ratio holds on a noisy machine.
//
// The floors are the least the same work can cost: the engine's bare
// statements (each engine keeps its own next to its code, behind Floors),
// sync.Mutex, GET /healthz. The command wires a Config from its flags and
// calls Run; docs/bench.md says how to read the results.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"studio/intent"
	"studio/locks"
	"studio/planner"
	"studio/store"
	"studio/wake"
)

// Floors are the bare statements an engine's store is measured against:
// the least the same work can cost on that engine.
type Floors interface {
	// Commit inserts a tree's rows (binding, batch, tasks) in one
	// transaction, with no check and nothing else.
	Commit(ctx context.Context, in intent.NewIntent) error
	// Replay reads the binding and the batch by primary key, the columns
	// an answer needs scanned into bare variables.
	Replay(ctx context.Context, actor, requestID string) error
}

// Config is what a run measures and how.
type Config struct {
	// Store is the store under test; it must hold no data of the actor
	// "bench" that the run should keep.
	Store store.Store
	// Floors are the store engine's bare statements.
	Floors Floors
	// Dir is a directory the drain may write asset files under.
	Dir string
	// MaxBatchTasks is the planner's task limit, as the program sets it.
	MaxBatchTasks int
	// LockStore returns the lock store the program is configured with
	// (memory or database), for the intent service's keyed lock.
	LockStore func() (locks.Store, error)
	// DBLockStore returns the engine's database lock store.
	DBLockStore func() (locks.Store, error)
	// RedisLockStore returns a lock store on Redis, for the *_redis
	// operations (nil: they fail, saying so).
	RedisLockStore func() (locks.Store, error)
	// NewToken makes and stores a new API token for actor, as
	// `studio token create` does, and returns it.
	NewToken func(ctx context.Context, actor string) (string, error)
	// Serve starts the whole program on the same database, serving HTTP on
	// loopback with no workers, and returns its address (host:port) and a
	// function that stops it.
	Serve func(ctx context.Context) (addr string, stop func() error, err error)
	// ServeShared is Serve on Store itself (the same value, so the same
	// hub), as one `studio serve` process runs its HTTP API and its
	// workers; nil leaves out the live operations.
	ServeShared func(ctx context.Context) (addr string, stop func() error, err error)
	// Wake is Store's hub (store.Waker), for the bench's worker pools.
	Wake *wake.Hub
	// Workers starts n `studio worker` processes (4 tasks at once each) on
	// the same database, their asset bytes in assets ("" = the engine's
	// own store, an s3:// URL = that object store), and answers a function
	// that stops them and answers the CPU time (user and system) they
	// used; nil makes the assets_drain operations fail, saying so.
	Workers func(ctx context.Context, n int, assets string) (stop func() (cpu time.Duration, err error), err error)
	// Assets is the object store the assets_drain operations measure
	// against the engine's own store ("" makes them fail, saying so).
	Assets string
	// WALPosition answers PostgreSQL's WAL position in bytes
	// (pg_current_wal_lsn()); nil on SQLite.
	WALPosition func(ctx context.Context) (int64, error)
	// N is the samples of every operation; 0 = each operation's default.
	N int
	// Tasks is the tasks per drain run (6000 when 0).
	Tasks int
	// Progress receives a line per operation (and a percentage on a
	// terminal); io.Discard when nil.
	Progress io.Writer
}

// ops are the operations, in the order they run. Each runs beside its
// floor, alternating one sample of each, so that the ratio holds on a
// noisy machine.
var ops = []Op{
	{Name: "commit_12", What: "CreateIntent of a 12-task tree vs one transaction inserting the same rows",
		run: func(b *bench) (*Result, error) { return b.commit(12, 200) }},
	{Name: "commit_300", What: "CreateIntent of a 300-task tree vs the same rows inserted bare",
		run: func(b *bench) (*Result, error) { return b.commit(300, 40) }},
	{Name: "commit_600", What: "CreateIntent of a 600-task tree vs the same rows inserted bare",
		run: func(b *bench) (*Result, error) { return b.commit(600, 30) }, Target: "<= 1.5x", goal: ratioAtMost(1.5)},
	{Name: "replay", What: "intent.Service replay (look-up, fingerprint, batch read) vs primary-key reads of binding and batch",
		run: (*bench).replay, Target: "<= 2x", goal: ratioAtMost(2)},
	{Name: "storm_64", What: "64 goroutines, one new id per round, all at once: plans per round",
		run: (*bench).storm, Target: "1 plan/round", goal: func(r *Result) bool { return r.PlansPerRound != nil && *r.PlansPerRound == 1 }},
	{Name: "http_replay", What: "replays over HTTP on loopback, 16 connections, vs GET /healthz on the same server",
		run: (*bench).httpReplay, Target: ">= 0.5 of its rate", goal: ratioAtMost(2)},
	{Name: "drain_1", What: "tasks/s of 1 worker, noop generator, vs claim + complete alone batched the same way",
		run: func(b *bench) (*Result, error) { return b.drain(1) }},
	{Name: "drain_4", What: "tasks/s of 4 workers, noop generator, vs claim + complete alone batched the same way",
		run: func(b *bench) (*Result, error) { return b.drain(4) }, Target: ">= 5500/s", goal: func(r *Result) bool { return r.PerS >= 5500 }},
	{Name: "dispatch", What: "201 of a 1-task batch -> its task claimed, workers in the server's process; floor: the workers polling only",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveDispatch, false) }},
	{Name: "dispatch_apart", What: "the same, the workers in another process (their own store and hub) on the same database",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveDispatch, true) }},
	{Name: "first_result", What: "201 -> the batch's done event on its events stream (no-op generator), workers in the server's process; floor: polling only",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveFirstResult, false) }},
	{Name: "first_result_apart", What: "the same, the workers in another process",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveFirstResult, true) }},
	{Name: "event_lag", What: "a task's completion committed -> its task event read from the events stream of the same process",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveEventLag, false) }},
	{Name: "event_lag_apart", What: "the same, the completion committed by another process than the stream's",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveEventLag, true) }},
	{Name: "cancel_lag", What: "cancel answered -> the running generator call's context done, same process; floor: polling only (3 s lease, renewed every second)",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveCancelLag, false) }},
	{Name: "cancel_lag_apart", What: "the same, the worker in another process than the server that answered the cancel",
		run: func(b *bench) (*Result, error) { return b.liveOp(liveCancelLag, true) }},
	{Name: "herd_600", What: "claims that found nothing per task created, 5 creates of 600 tasks at once, 4 workers; floor: polling only",
		run: (*bench).herd},
	{Name: "assets_drain_1", What: "tasks/s of 1 worker process, 512x512 images (256 KiB), PostgreSQL: assets in the object store (--assets) vs the blobs table; WAL bytes per task of each",
		run: func(b *bench) (*Result, error) { return b.drainAssets(1) }, Target: ">= 1.5x, < 4 KB WAL/task", goal: assetsGoal, optIn: true},
	{Name: "assets_drain_2", What: "the same with 2 worker processes",
		run: func(b *bench) (*Result, error) { return b.drainAssets(2) }, Target: ">= 1.5x, < 4 KB WAL/task", goal: assetsGoal, optIn: true},
	{Name: "lock_hold_memory", What: "uncontended Hold of a no-op, memory store, vs sync.Mutex Lock/Unlock",
		run: func(b *bench) (*Result, error) { return b.lockHold("memory") }, Target: "< 3 µs", goal: func(r *Result) bool { return r.MedianUS < 3 }},
	{Name: "lock_hold_db", What: "uncontended Hold of a no-op, database store, vs the store's acquire + release statements alone",
		run: func(b *bench) (*Result, error) { return b.lockHold("db") }, Target: "<= 1.5x", goal: ratioAtMost(1.5)},
	{Name: "lock_hold_redis", What: "uncontended Hold of a no-op, Redis store, vs the store's acquire + release scripts alone",
		run: func(b *bench) (*Result, error) { return b.lockHold("redis") }, Target: "<= 1.5x", goal: ratioAtMost(1.5)},
	{Name: "lock_handoff_memory", What: "release to next holder, 8 waiters, memory store",
		run: func(b *bench) (*Result, error) { return b.lockHandoff("memory") }},
	{Name: "lock_handoff_db", What: "release to next holder, 8 waiters, database store",
		run: func(b *bench) (*Result, error) { return b.lockHandoff("db") }},
	{Name: "lock_handoff_redis", What: "release to next holder, 8 waiters, Redis store",
		run: func(b *bench) (*Result, error) { return b.lockHandoff("redis") }},
}

// Op is one operation of the bench.
type Op struct {
	// Name is what --ops and the output call it.
	Name string
	// What says what it measures, against which floor.
	What string
	// Target is the goal the result is read against, for people ("" for
	// none).
	Target string
	run    func(*bench) (*Result, error)
	goal   func(*Result) bool // whether a result meets Target
	// optIn operations run only when --ops names them: they need what a
	// plain run does not have (PostgreSQL and an object store).
	optIn bool
}

// Met says whether r meets the operation's target; false when it has none.
func (o Op) Met(r *Result) bool { return o.goal != nil && o.goal(r) }

// Ops lists every operation, in the order they run.
func Ops() []Op { return slices.Clone(ops) }

func ratioAtMost(x float64) func(*Result) bool {
	return func(r *Result) bool { return r.Ratio != nil && *r.Ratio <= x }
}

// Result is one line of `studio bench --json`. Times are per operation.
// Ratio is how many times its floor the operation costs: the ratio of the
// medians, or for throughput operations (http_replay, drain) the floor's
// rate over the operation's. Fields with no floor are null.
type Result struct {
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
	// EmptyPerTask is herd_600's claims that found nothing per task
	// created, with wake-ups; FloorEmptyPerTask polling only.
	EmptyPerTask      *float64 `json:"empty_claims_per_task,omitempty"`
	FloorEmptyPerTask *float64 `json:"floor_empty_claims_per_task,omitempty"`
	// WALBytesPerTask and FloorWALBytesPerTask are the WAL each task
	// wrote, with the operation's store and the floor's (assets_drain).
	WALBytesPerTask      *float64 `json:"wal_bytes_per_task,omitempty"`
	FloorWALBytesPerTask *float64 `json:"floor_wal_bytes_per_task,omitempty"`
	// WorkerCPUPerTaskUS and FloorWorkerCPUPerTaskUS are the CPU time
	// (user and system) the worker processes spent per task, with the
	// operation's store and the floor's (assets_drain).
	WorkerCPUPerTaskUS      *float64 `json:"worker_cpu_per_task_us,omitempty"`
	FloorWorkerCPUPerTaskUS *float64 `json:"floor_worker_cpu_per_task_us,omitempty"`
}

// assetsGoal: the object store drains at least 1.5 times as fast as the
// blobs table, writing under 4 KB of WAL per task.
func assetsGoal(r *Result) bool {
	return r.Ratio != nil && *r.Ratio <= 1/1.5 && r.WALBytesPerTask != nil && *r.WALBytesPerTask < 4000
}

// bench runs operations against one store.
type bench struct {
	ctx      context.Context
	cfg      Config
	progress *progress
	seq      atomic.Int64 // makes request ids unique within the run
}

// samples is the number of samples an operation takes: Config.N, or its
// default.
func (b *bench) samples(def int) int {
	if b.cfg.N > 0 {
		return b.cfg.N
	}
	return def
}

// id returns a request id unique within this run.
func (b *bench) id(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), b.seq.Add(1))
}

// Run measures the operations in order and calls each with every result
// as it comes (each may be nil). It stops at the first operation that
// fails.
func Run(ctx context.Context, cfg Config, selected []Op, each func(Op, *Result) error) ([]*Result, error) {
	if cfg.Store == nil || cfg.Floors == nil {
		return nil, errors.New("bench: need a store and its floors")
	}
	if cfg.N < 0 || cfg.Tasks < 0 {
		return nil, errors.New("bench: samples and tasks must not be negative")
	}
	if cfg.Tasks == 0 {
		cfg.Tasks = 6000
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	b := &bench{ctx: ctx, cfg: cfg, progress: newProgress(cfg.Progress)}
	var results []*Result
	for i, op := range selected {
		b.progress.begin(i+1, len(selected), op.Name)
		start := time.Now()
		res, err := op.run(b)
		if err != nil {
			b.progress.fail()
			return results, fmt.Errorf("bench %s: %w", op.Name, err)
		}
		res.Op = op.Name
		b.progress.end(res, time.Since(start))
		results = append(results, res)
		if each != nil {
			if err := each(op, res); err != nil {
				return results, err
			}
		}
	}
	return results, nil
}

// Select picks operations by name or by prefix ("commit" is every
// commit_N), in the documented order whatever the order asked; an empty
// list is every operation but the opt-in ones (assets_drain_N).
func Select(list string) ([]Op, error) {
	if strings.TrimSpace(list) == "" {
		return slices.DeleteFunc(Ops(), func(o Op) bool { return o.optIn }), nil
	}
	var out []Op
	for _, tok := range strings.Split(list, ",") {
		tok = strings.TrimSpace(tok)
		found := false
		for _, op := range ops {
			if op.Name == tok || strings.HasPrefix(op.Name, tok+"_") {
				found = true
				if !slices.ContainsFunc(out, func(o Op) bool { return o.Name == op.Name }) {
					out = append(out, op)
				}
			}
		}
		if !found {
			names := make([]string, len(ops))
			for i, op := range ops {
				names[i] = op.Name
			}
			return nil, fmt.Errorf("--ops: no operation %q (have %s)", tok, strings.Join(names, ", "))
		}
	}
	slices.SortStableFunc(out, func(a, c Op) int { return opIndex(a.Name) - opIndex(c.Name) })
	return out, nil
}

func opIndex(name string) int {
	return slices.IndexFunc(ops, func(o Op) bool { return o.Name == name })
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
func latencyResult(ops, floors []time.Duration) *Result {
	r := &Result{N: len(ops), MedianUS: us(quantile(ops, 0.5)), P99US: us(quantile(ops, 0.99)), PerS: round3(rate(ops))}
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
// the same rows (binding, batch, tasks) with the store's own prepared
// statements (the tasks in the same chunks), nothing else.
func (b *bench) commit(tasks, def int) (*Result, error) {
	n := b.samples(def)
	trees := make([]intent.NewIntent, 2*n)
	for i := range trees {
		var err error
		if trees[i], err = newTree("bench", b.id(fmt.Sprintf("commit-%d", tasks)), tasks); err != nil {
			return nil, err
		}
	}
	ops, floors, err := b.alternate(n, 1, func(i int) error {
		_, created, err := b.cfg.Store.CreateIntent(b.ctx, trees[2*i])
		if err == nil && !created {
			err = errors.New("a fresh id was not created")
		}
		return err
	}, func(i int) error {
		return b.cfg.Floors.Commit(b.ctx, trees[2*i+1])
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
	ls, err := b.cfg.LockStore()
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
	return &intent.Service{Store: b.cfg.Store, Planner: pl, Locker: locks.Keyed{E: e}}, func() { e.Close() }, nil
}

// replay: the service's replay path beside two primary-key reads.
func (b *bench) replay() (*Result, error) {
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
		return b.cfg.Floors.Replay(b.ctx, actor, id)
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
func (b *bench) storm() (*Result, error) {
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
func (b *bench) httpReplay() (*Result, error) {
	const conns = 16
	token, err := b.cfg.NewToken(b.ctx, "bench")
	if err != nil {
		return nil, err
	}
	addr, stop, err := b.cfg.Serve(b.ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	base := "http://" + addr
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

// lockHold: one uncontended Hold of a no-op on the memory, database or
// Redis store, beside sync.Mutex (memory) or the store's own acquire and
// release calls without the engine (db, redis).
func (b *bench) lockHold(kind string) (*Result, error) {
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
	ls, err := b.sharedLockStore(kind)
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

// sharedLockStore is the lock store of kind "db" or "redis": one that
// processes share.
func (b *bench) sharedLockStore(kind string) (locks.Store, error) {
	if kind == "redis" {
		if b.cfg.RedisLockStore == nil {
			return nil, errors.New("no Redis lock store configured")
		}
		return b.cfg.RedisLockStore()
	}
	return b.cfg.DBLockStore()
}

// lockHandoff: 9 goroutines take turns on one key (one holds, 8 wait);
// each sample is the time from one holder's fn returning to the next
// holder's fn starting, counted only when the key passed to another
// goroutine.
func (b *bench) lockHandoff(kind string) (*Result, error) {
	var ls locks.Store = locks.NewMemoryStore()
	def := 5000
	if kind != "memory" {
		var err error
		if ls, err = b.sharedLockStore(kind); err != nil {
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
