package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"studio/blob"
	"studio/client"
	"studio/generator"
	"studio/leasequeue"
	"studio/store"
	"studio/worker"
)

// The live operations: how long a person waits for work to start, for the
// first result, for a change to show on an events stream, and for a
// cancel to reach the generator. Each runs the program serving HTTP with
// no workers, and a worker pool in the bench (with the bench's probes):
//
//   - in-process (dispatch, first_result, event_lag, cancel_lag): the
//     server on the bench's own store value, as `studio serve` runs its
//     workers: one hub hears every commit;
//   - apart (the same names with _apart): the server on a store of its own,
//     as a separate `studio worker` process and `studio serve` have them:
//     own connections, own hub, and only what the engine carries between
//     processes (NOTIFY on PostgreSQL, data_version on SQLite).
//
// The floor is the same with the pool polling only (no wake-ups), as it
// did before them. Samples are taken in phases (wake-ups, then polling,
// alternating), each sample after an idle gap drawn at random from
// liveGapMin..liveGapMax, the same gaps for both: a polling pool backs
// off while idle, as a pool waiting for a person does.

// Idle gaps between two samples of a live operation.
const (
	liveGapMin = 100 * time.Millisecond
	liveGapMax = 600 * time.Millisecond
	// livePhases is how many phases of each side an operation takes.
	livePhases = 4
)

// liveKind is which sample a live operation takes.
type liveKind int

const (
	liveDispatch liveKind = iota
	liveFirstResult
	liveEventLag
	liveCancelLag
)

// liveOp measures one live operation, in-process or apart.
func (b *bench) liveOp(kind liveKind, apart bool) (*Result, error) {
	if b.cfg.Wake == nil || b.cfg.ServeShared == nil {
		return nil, errors.New("the live operations need the store's hub and a shared server")
	}
	serve := b.cfg.ServeShared
	if apart {
		serve = b.cfg.Serve
	}
	addr, stop, err := serve(b.ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	token, err := b.cfg.NewToken(b.ctx, "bench")
	if err != nil {
		return nil, err
	}
	cl, err := client.New("http://"+addr, client.WithToken(token), client.WithRetry(client.Retry{Attempts: 1}))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.cfg.Dir, "live-assets-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	blobs, err := blob.NewFS(dir)
	if err != nil {
		return nil, err
	}
	n := b.samples(40)
	per := max(1, n/livePhases)
	var ops, floors []time.Duration
	for ph := 0; len(ops) < n || (kind != liveEventLag && len(floors) < n); ph++ {
		wake := ph%2 == 0
		if kind == liveEventLag && !wake {
			continue // no floor: the stream is the server's, woken either way
		}
		into := &ops
		if !wake {
			into = &floors
		}
		k := min(per, n-len(*into))
		got, err := b.livePhase(kind, wake, cl, blobs, k, len(ops)+len(floors), 2*n)
		if err != nil {
			return nil, err
		}
		*into = append(*into, got...)
	}
	if kind == liveEventLag {
		floors = nil
	}
	return latencyResult(ops, floors), nil
}

// livePhase starts a pool (with wake-ups or polling only), waits until it
// is idle, and takes k samples.
func (b *bench) livePhase(kind liveKind, wake bool, cl *client.Client, blobs blob.Store, k, done, total int) ([]time.Duration, error) {
	pr := newProbe()
	cfg := worker.Config{
		Options:    leasequeue.Options{Concurrency: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Store:      probeStore{b.cfg.Store, pr},
		Generators: pr,
		Blobs:      blobs,
		SweepEvery: -1,
	}
	if wake {
		cfg.Options.Wake = b.cfg.Wake
	}
	if kind == liveCancelLag {
		// Without a wake-up a cancel reaches a running task at its next
		// renewal: every second with a 3 s lease (10 s with the default).
		cfg.Options.LeaseTTL = 3 * time.Second
	}
	p, err := worker.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Start(b.ctx); err != nil {
		return nil, err
	}
	defer p.Stop(context.WithoutCancel(b.ctx))
	var out []time.Duration
	for i := 0; i < k; i++ {
		gap := liveGapMin + time.Duration(rand.Int64N(int64(liveGapMax-liveGapMin)))
		select {
		case <-time.After(gap):
		case <-b.ctx.Done():
			return nil, b.ctx.Err()
		}
		d, err := b.liveSample(kind, cl, pr)
		if err != nil {
			return nil, err
		}
		out = append(out, max(d, 0))
		b.progress.tick(done+i+1, total)
	}
	return out, nil
}

// liveSample takes one sample: a one-task batch through HTTP, and the
// time of what the operation measures.
func (b *bench) liveSample(kind liveKind, cl *client.Client, pr *probe) (time.Duration, error) {
	params := map[liveKind]string{liveEventLag: "gate", liveCancelLag: "block"}[kind]
	req := client.GenerationRequest{Prompt: "bench", Sets: []client.FrameSet{{Collection: "live", Frames: []string{"f1"}}},
		Providers: []string{"sketch"}, Params: json.RawMessage(fmt.Sprintf(`{"width":16,"height":16,"bench":%q}`, params))}
	created, err := cl.CreateGeneration(b.ctx, req)
	if err != nil {
		return 0, err
	}
	answered := time.Now()
	id := created.Record.ID
	var d time.Duration
	switch kind {
	case liveDispatch:
		at, err := pr.wait(b.ctx, pr.claimedBatch(id))
		if err != nil {
			return 0, err
		}
		d = at.Sub(answered)
	case liveFirstResult:
		st, err := cl.Events(b.ctx, id, "")
		if err != nil {
			return 0, err
		}
		defer st.Close()
		for {
			ev, err := st.Next()
			if err != nil {
				return 0, fmt.Errorf("events of %s before done: %w", id, err)
			}
			if ev.Name == "done" {
				d = time.Since(answered)
				break
			}
		}
	case liveEventLag:
		st, err := cl.Events(b.ctx, id, "")
		if err != nil {
			return 0, err
		}
		defer st.Close()
		if _, err := st.Next(); err != nil { // the batch as it stands: connected
			return 0, err
		}
		if _, err := pr.wait(b.ctx, pr.gated(id)); err != nil {
			return 0, err
		}
		pr.open(id)
		at, err := pr.wait(b.ctx, pr.completed(id))
		if err != nil {
			return 0, err
		}
		for {
			ev, err := st.Next()
			if err != nil {
				return 0, fmt.Errorf("events of %s: %w", id, err)
			}
			if ev.Name == "task" && ev.Task != nil && ev.Task.State == "succeeded" {
				d = time.Since(at)
				break
			}
		}
	case liveCancelLag:
		if _, err := pr.wait(b.ctx, pr.gated(id)); err != nil {
			return 0, err
		}
		// A call well under way, past the step a worker records after
		// worker.DefaultStepRecordAfter (a cancel found then stops it
		// too): from here on only a wake-up or a renewal tells of it.
		select {
		case <-time.After(2 * worker.DefaultStepRecordAfter):
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		}
		if _, err := cl.CancelBatch(b.ctx, id); err != nil {
			return 0, err
		}
		canceledAt := time.Now()
		at, err := pr.wait(b.ctx, pr.ended(id))
		if err != nil {
			return 0, err
		}
		d = at.Sub(canceledAt)
	}
	// The next sample starts from an idle pool: this batch has ended.
	return d, b.waitEnded(id)
}

// probe records, per batch, when a task of it was claimed, completed,
// held at its generator's gate and ended by its context; its generator
// ("sketch" for the planner) is the no-op, held at a gate until the bench
// opens it ("gate"), or waiting until its context ends ("block").
type probe struct {
	mu     sync.Mutex
	times  map[string]time.Time // event key -> when
	wakeup chan struct{}        // closed and replaced at every record
	gates  map[string]chan struct{}
	// batches are the batches of the tasks claimed, by task id.
	batches map[string]string
}

func newProbe() *probe {
	return &probe{times: map[string]time.Time{}, wakeup: make(chan struct{}), gates: map[string]chan struct{}{}, batches: map[string]string{}}
}

func (p *probe) claimedBatch(id string) string { return "claimed " + id }
func (p *probe) completed(id string) string    { return "completed " + id }
func (p *probe) gated(id string) string        { return "gated " + id }
func (p *probe) ended(id string) string        { return "ended " + id }

func (p *probe) record(key string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.times[key]; !ok {
		p.times[key] = at
	}
	close(p.wakeup)
	p.wakeup = make(chan struct{})
}

// wait answers when key was recorded, waiting for it.
func (p *probe) wait(ctx context.Context, key string) (time.Time, error) {
	for {
		p.mu.Lock()
		at, ok := p.times[key]
		w := p.wakeup
		p.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s: %w", key, ctx.Err())
		}
	}
}

// gate returns the gate of a batch's task, made on first use.
func (p *probe) gate(batch string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gates[batch]
	if g == nil {
		g = make(chan struct{})
		p.gates[batch] = g
	}
	return g
}

func (p *probe) open(batch string) { close(p.gate(batch)) }

// Get implements worker.Generators: every generator is the probe.
func (p *probe) Get(string) (generator.Generator, error) { return probeGen{p}, nil }

// probeGen is the probe's generator; the job's key is the task id, whose
// batch the probe store noted at the claim.
type probeGen struct{ p *probe }

func (g probeGen) ID() string { return "sketch" }

func (g probeGen) Submit(ctx context.Context, job generator.Job) (string, error) {
	mode := ""
	var params map[string]any
	if json.Unmarshal(job.Params, &params) == nil {
		mode, _ = params["bench"].(string)
	}
	return mode + " " + g.p.batchOf(job.Key), nil
}

func (g probeGen) Wait(ctx context.Context, ref string) error {
	mode, batch, _ := strings.Cut(ref, " ")
	switch mode {
	case "gate":
		g.p.record(g.p.gated(batch), time.Now())
		select {
		case <-g.p.gate(batch):
		case <-ctx.Done():
			return ctx.Err()
		}
	case "block":
		g.p.record(g.p.gated(batch), time.Now())
		<-ctx.Done()
		g.p.record(g.p.ended(batch), time.Now())
		return ctx.Err()
	}
	return nil
}

func (g probeGen) Fetch(ctx context.Context, ref string) (generator.Image, error) {
	return generator.NewNoop().Fetch(ctx, ref)
}

// batchOf is the batch of a task the probe store saw claimed.
func (p *probe) batchOf(task string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.batches[task]
}

// probeStore is the pool's store, telling the probe of claims and
// completions once they have committed.
type probeStore struct {
	store.TaskStore
	p *probe
}

func (s probeStore) ClaimTasks(ctx context.Context, cp store.ClaimParams) ([]store.ClaimedTask, error) {
	cs, err := s.TaskStore.ClaimTasks(ctx, cp)
	now := time.Now()
	for _, c := range cs {
		s.p.mu.Lock()
		s.p.batches[c.ID] = c.BatchID
		s.p.mu.Unlock()
		s.p.record(s.p.claimedBatch(c.BatchID), now)
	}
	return cs, err
}

func (s probeStore) CompleteLeases(ctx context.Context, cs []store.Completion) ([]store.CompletionResult, error) {
	res, err := s.TaskStore.CompleteLeases(ctx, cs)
	now := time.Now()
	for i, c := range cs {
		if err == nil && res[i].Err == nil {
			s.p.record(s.p.completed(s.p.batchOf(c.ID)), now)
		}
	}
	return res, err
}

// herd: a pool of 4 workers, idle, then 5 creates of 600 tasks at once;
// the claims that found nothing per task created until they are done,
// with wake-ups and polling only, alternating. A sample is a round's time
// per task.
func (b *bench) herd() (*Result, error) {
	if b.cfg.Wake == nil {
		return nil, errors.New("herd_600 needs the store's hub")
	}
	if err := b.cancelQueued(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.cfg.Dir, "herd-assets-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	blobs, err := blob.NewFS(dir)
	if err != nil {
		return nil, err
	}
	const creates, size = 5, 600
	const rounds = 3
	var ops, floors []time.Duration
	var empty, floorEmpty int64
	for r := 0; r < 2*rounds; r++ {
		wake := r%2 == 0
		cfg := worker.Config{Options: leasequeue.Options{Concurrency: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
			Store: b.cfg.Store, Generators: noopGenerators{}, Blobs: blobs, SweepEvery: -1}
		if wake {
			cfg.Options.Wake = b.cfg.Wake
		}
		p, err := worker.New(cfg)
		if err != nil {
			return nil, err
		}
		if err := p.Start(b.ctx); err != nil {
			return nil, err
		}
		for p.Stats().Empty == 0 { // idle: its first claim found nothing
			time.Sleep(time.Millisecond)
		}
		before := p.Stats()
		start := time.Now()
		ids := make([]string, creates)
		var wg sync.WaitGroup
		errs := make([]error, creates)
		for i := range creates {
			wg.Go(func() {
				var got []string
				got, errs[i] = b.queueNoop(size)
				if len(got) == 1 {
					ids[i] = got[0]
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			p.Stop(context.WithoutCancel(b.ctx))
			return nil, err
		}
		for _, id := range ids {
			if err := b.waitEnded(id); err != nil {
				p.Stop(context.WithoutCancel(b.ctx))
				return nil, err
			}
		}
		took := time.Since(start) / (creates * size)
		n := p.Stats().Empty - before.Empty
		p.Stop(context.WithoutCancel(b.ctx))
		if wake {
			ops, empty = append(ops, took), empty+n
		} else {
			floors, floorEmpty = append(floors, took), floorEmpty+n
		}
		b.progress.tick(r+1, 2*rounds)
	}
	res := latencyResult(ops, floors)
	res.EmptyPerTask = ptr(float64(empty) / float64(rounds*creates*size))
	res.FloorEmptyPerTask = ptr(float64(floorEmpty) / float64(rounds*creates*size))
	return res, nil
}

// waitEnded waits until every task of the bench's batch id has ended.
func (b *bench) waitEnded(id string) error {
	for {
		bt, err := b.cfg.Store.GetBatch(b.ctx, "bench", id)
		if err != nil {
			return err
		}
		if bt.Counts.Ended() == bt.TaskCount {
			return nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-b.ctx.Done():
			return b.ctx.Err()
		}
	}
}
