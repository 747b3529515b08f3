package worker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"studio/blob"
	"studio/generator"
	"studio/intent"
	"studio/internal/testsignal"
	"studio/store"
	"studio/store/sqlite"
	"studio/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one database and one blob directory, shared by the pools of a
// test as processes would share them.
type env struct {
	t     testing.TB
	path  string
	st    *sqlite.Store
	blobs *blob.FS
	// sync is the synchronous mode of stores opened after it is set.
	sync string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, path: filepath.Join(dir, "studio.db"), sync: sqlite.SyncNormal}
	e.st = e.open()
	b, err := blob.NewFS(filepath.Join(dir, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	e.blobs = b
	return e
}

// open opens another store on the database, with its own connections.
func (e *env) open() *sqlite.Store {
	e.t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: e.path, Synchronous: e.sync})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// gens is a Generators of a map.
type gens map[string]generator.Generator

func (g gens) Get(id string) (generator.Generator, error) {
	if x, ok := g[id]; ok {
		return x, nil
	}
	return nil, generator.Permanent(fmt.Errorf("generator %q is not in the catalog", id))
}

func embedded() gens {
	return gens{"sketch": generator.NewSketch(), "mosaic": generator.NewMosaic(), "noop": generator.NewNoop()}
}

// pool starts a pool with quick test settings; cfg's non-zero fields win.
// It is stopped when the test ends.
func (e *env) pool(cfg worker.Config) *worker.Pool {
	e.t.Helper()
	if cfg.Store == nil {
		cfg.Store = e.st
	}
	if cfg.Generators == nil {
		cfg.Generators = embedded()
	}
	if cfg.Blobs == nil {
		cfg.Blobs = e.blobs
	}
	if cfg.LeaseTTL == 0 {
		// Long: a test that counts attempts must not see a lease lapse
		// because a loaded machine delayed a renewal. Tests of expiry
		// set their own.
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 5 * time.Millisecond
	}
	if cfg.PollMin == 0 {
		cfg.PollMin = 2 * time.Millisecond
	}
	if cfg.PollMax == 0 {
		cfg.PollMax = 20 * time.Millisecond
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = -1
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	p, err := worker.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Stop(context.Background()) })
	return p
}

// spec is a generation input for tests.
type spec struct {
	actor      string
	prompt     string
	frames     int
	providers  []string
	candidates int
	seed       *int64
	params     string
}

// batch commits a batch the way the intent service does: the canonical
// spec and one task per frame x provider x candidate.
func (e *env) batch(sp spec) intent.NewBatch {
	e.t.Helper()
	if sp.actor == "" {
		sp.actor = "alice"
	}
	if sp.prompt == "" {
		sp.prompt = "a knight in the rain"
	}
	if sp.candidates == 0 {
		sp.candidates = 1
	}
	if len(sp.providers) == 0 {
		sp.providers = []string{"sketch"}
	}
	if sp.params == "" {
		sp.params = `{"width":32,"height":32}`
	}
	in := intent.GenerationInput{
		Prompt: sp.prompt, Providers: sp.providers, Candidates: sp.candidates, Subjects: []string{},
		Seed: sp.seed, Params: jsontext.Value(sp.params),
	}
	set := intent.FrameSet{Collection: "walk"}
	for f := 0; f < sp.frames; f++ {
		set.Frames = append(set.Frames, fmt.Sprintf("f%03d", f))
	}
	in.Sets = []intent.FrameSet{set}
	specJSON, err := intent.CanonicalJSON(in)
	if err != nil {
		e.t.Fatal(err)
	}
	id := mustID(e.t)
	now := time.Now().UTC()
	nb := intent.NewBatch{ID: id, Prompt: sp.prompt, Spec: specJSON, CreatedAt: now}
	for _, f := range set.Frames {
		for _, p := range sp.providers {
			for c := 1; c <= sp.candidates; c++ {
				nb.Tasks = append(nb.Tasks, intent.NewTask{ID: mustID(e.t), Collection: set.Collection, Frame: f, Generator: p, Candidate: c})
			}
		}
	}
	_, created, err := e.st.CreateIntent(context.Background(), intent.NewIntent{
		Binding: intent.Binding{Actor: sp.actor, RequestID: id, Operation: intent.OpGeneration, Fingerprint: id, ResourceID: id, CreatedAt: now},
		Batch:   &nb,
	})
	if err != nil || !created {
		e.t.Fatalf("create batch: %v (created %v)", err, created)
	}
	return nb
}

func mustID(t testing.TB) string {
	id, err := intent.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitBatch waits until ok says so of the batch, reading it again at
// each change the store's hub tells of (this process's commits at once,
// other stores' on the file within the store's watch interval).
func (e *env) waitBatch(actor, id string, ok func(intent.Batch) bool) intent.Batch {
	e.t.Helper()
	var b intent.Batch
	defer func() {
		if e.t.Failed() {
			e.t.Logf("batch %s last seen: %+v", id, b)
		}
	}()
	e.until(id, "batch "+id+" to get there", func() bool {
		var err error
		b, err = e.st.GetBatch(context.Background(), actor, id)
		if err != nil {
			e.t.Fatal(err)
		}
		return ok(b)
	})
	return b
}

// until waits until cond holds, checking it again at each change of the
// batch the store's hub tells of.
func (e *env) until(batchID, what string, cond func() bool) {
	e.t.Helper()
	testsignal.Until(e.t, what, func() (<-chan struct{}, func()) { return e.st.Wake().Watch(batchID) }, cond)
}

func ended(b intent.Batch) bool { return b.Counts.Ended() == b.TaskCount }

func (e *env) tasks(actor, batchID string) []intent.Task {
	e.t.Helper()
	ts, err := e.st.ListTasks(context.Background(), batchID, store.ListParams{Actor: actor, Limit: 10000})
	if err != nil {
		e.t.Fatal(err)
	}
	return ts
}

// probe wraps a generator: it names its references after the task (so
// calls can be told apart), counts calls per task, checks that no task has
// two calls in flight at once, and lets a test hook into each call.
type probe struct {
	generator.Generator
	id string

	mu          sync.Mutex
	calls       map[string]map[string]int // task -> op -> count
	inflight    map[string]int            // task -> calls running
	overlaps    int                       // calls that found another in flight
	running     int                       // calls in flight, all tasks
	maxRunning  int
	hook        func(ctx context.Context, op, key string, attempt int) error
	attemptsFor map[string]int
}

func newProbe(inner generator.Generator) *probe {
	return &probe{Generator: inner, id: inner.ID(), calls: map[string]map[string]int{}, inflight: map[string]int{}, attemptsFor: map[string]int{}}
}

func (p *probe) ID() string { return p.id }

func (p *probe) enter(op, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls[key] == nil {
		p.calls[key] = map[string]int{}
	}
	p.calls[key][op]++
	if p.inflight[key] > 0 {
		p.overlaps++
	}
	p.inflight[key]++
	p.running++
	p.maxRunning = max(p.maxRunning, p.running)
}

func (p *probe) leave(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight[key]--
	p.running--
}

func (p *probe) call(ctx context.Context, op, key string) error {
	p.mu.Lock()
	h := p.hook
	attempt := p.attemptsFor[key]
	p.mu.Unlock()
	if h != nil {
		return h(ctx, op, key, attempt)
	}
	return nil
}

func (p *probe) setHook(h func(ctx context.Context, op, key string, attempt int) error) {
	p.mu.Lock()
	p.hook = h
	p.mu.Unlock()
}

func (p *probe) Submit(ctx context.Context, job generator.Job) (string, error) {
	p.enter("submit", job.Key)
	defer p.leave(job.Key)
	p.mu.Lock()
	p.attemptsFor[job.Key] = job.Attempt
	p.mu.Unlock()
	if err := p.call(ctx, "submit", job.Key); err != nil {
		return "", err
	}
	ref, err := p.Generator.Submit(ctx, job)
	if err != nil {
		return "", err
	}
	return job.Key + "|" + ref, nil
}

func splitRef(ref string) (key, inner string) {
	key, inner, _ = strings.Cut(ref, "|")
	return key, inner
}

func (p *probe) Wait(ctx context.Context, ref string) error {
	key, inner := splitRef(ref)
	p.enter("wait", key)
	defer p.leave(key)
	if err := p.call(ctx, "wait", key); err != nil {
		return err
	}
	return p.Generator.Wait(ctx, inner)
}

func (p *probe) Fetch(ctx context.Context, ref string) (generator.Image, error) {
	key, inner := splitRef(ref)
	p.enter("fetch", key)
	defer p.leave(key)
	if err := p.call(ctx, "fetch", key); err != nil {
		return generator.Image{}, err
	}
	return p.Generator.Fetch(ctx, inner)
}

func (p *probe) count(key, op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key][op]
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errBoom = errors.New("boom")
