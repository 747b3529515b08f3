package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/blob"
	"studio/generator"
	"studio/intent"
	"studio/internal/testsignal"
	"studio/leasequeue"
	"studio/locks"
	"studio/store"
	"studio/worker"
)

func TestBatchSucceedsWithDeterministicImages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed := int64(7)
	sp := spec{frames: 2, providers: []string{"sketch", "mosaic"}, candidates: 3, seed: &seed}
	first := e.batch(sp)
	e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4}})
	b := e.waitBatch("alice", first.ID, ended)
	if b.State != intent.StateSucceeded || b.Counts.Succeeded != 12 {
		t.Fatalf("batch = %+v", b)
	}
	images := func(nb intent.NewBatch) map[string]string {
		out := map[string]string{}
		for _, tk := range e.tasks("alice", nb.ID) {
			if tk.State != intent.StateSucceeded || tk.AssetID == nil || tk.Attempts != 1 || tk.Error != nil {
				t.Fatalf("task = %+v", tk)
			}
			a, err := e.st.GetAsset(context.Background(), "alice", *tk.AssetID)
			if err != nil {
				t.Fatal(err)
			}
			f, err := e.blobs.Open(context.Background(), a.SHA256)
			if err != nil {
				t.Fatalf("asset %s has no bytes: %v", a.ID, err)
			}
			data, _ := io.ReadAll(f)
			f.Close()
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(data)) != a.Size || a.ContentType != "image/png" {
				t.Fatalf("asset %+v does not describe its %d bytes", a, len(data))
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(data))
			if err != nil || cfg.Width != 32 || cfg.Height != 32 || a.Width != 32 || a.Height != 32 {
				t.Fatalf("asset %+v: png %+v, %v", a, cfg, err)
			}
			out[fmt.Sprintf("%s/%s/%s/%d", tk.Collection, tk.Frame, tk.Generator, tk.Candidate)] = a.SHA256
		}
		return out
	}
	one := images(first)
	distinct := map[string]bool{}
	for _, sha := range one {
		distinct[sha] = true
	}
	if len(distinct) != 12 {
		t.Fatalf("12 tasks made %d distinct images", len(distinct))
	}
	second := e.batch(sp)
	e.waitBatch("alice", second.ID, ended)
	two := images(second)
	for k, sha := range one {
		if two[k] != sha {
			t.Fatalf("%s: %s in one batch, %s in the other", k, sha, two[k])
		}
	}
}

func TestTransientFailuresRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 3, params: `{"fail_attempts":2,"height":16,"width":16}`})
	var mu sync.Mutex
	outcomes := map[worker.Outcome]int{}
	pool := e.pool(worker.Config{Options: leasequeue.Options{MaxAttempts: 5}, Observe: func(o worker.Outcome) { mu.Lock(); outcomes[o]++; mu.Unlock() }})
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateSucceeded {
		t.Fatalf("batch = %+v", b)
	}
	pool.Stop(context.Background())
	if len(outcomes) != 2 || outcomes[worker.OutcomeRetried] != 6 || outcomes[worker.OutcomeSucceeded] != 3 {
		t.Fatalf("observed %v, want 6 retried and 3 succeeded", outcomes)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.Attempts != 3 || tk.Error != nil || tk.AssetID == nil {
			t.Fatalf("task = %+v, want attempts 3", tk)
		}
	}
}

func TestTooManyFailuresFailWithTheError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 2, params: `{"fail_attempts":6,"height":16,"width":16}`})
	e.pool(worker.Config{Options: leasequeue.Options{MaxAttempts: 3}})
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateFailed || b.Counts.Failed != 2 {
		t.Fatalf("batch = %+v", b)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.State != intent.StateFailed || tk.Attempts != 3 || tk.Error == nil ||
			!strings.HasPrefix(*tk.Error, "attempt 3: submit") || !strings.Contains(*tk.Error, generator.ErrSimulated.Error()) {
			t.Fatalf("task = %+v", tk)
		}
	}
}

func TestPermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newProbe(generator.NewNoop())
	p.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "submit" {
			return generator.Permanent(fmt.Errorf("the provider refuses: %w", errBoom))
		}
		return nil
	})
	nb := e.batch(spec{frames: 2, providers: []string{"noop"}})
	// A spec that cannot be read fails its tasks at once too.
	bad := e.batch(spec{frames: 1, providers: []string{"noop"}})
	if _, err := e.st.DB().Exec(`UPDATE batches SET spec = 'not json' WHERE id = ?`, bad.ID); err != nil {
		t.Fatal(err)
	}
	e.pool(worker.Config{Options: leasequeue.Options{MaxAttempts: 5}, Generators: gens{"noop": p}})
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateFailed {
		t.Fatalf("batch = %+v", b)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.Attempts != 1 || tk.Error == nil || !strings.Contains(*tk.Error, "the provider refuses: boom") {
			t.Fatalf("task = %+v", tk)
		}
	}
	e.waitBatch("alice", bad.ID, ended)
	for _, tk := range e.tasks("alice", bad.ID) {
		if tk.State != intent.StateFailed || tk.Attempts != 1 || tk.Error == nil || !strings.Contains(*tk.Error, "spec") {
			t.Fatalf("task of a bad spec = %+v", tk)
		}
	}
}

// TestStaleWorkerRecordsNothing: a pool frozen past its leases (every
// store call and its generator blocked, as a stopped process) is overtaken;
// when it wakes it records nothing.
func TestStaleWorkerRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	led := newLedger()
	spyA := newSpy(e.open(), "a", led)
	pa := newProbe(generator.NewSketch())
	inWait := make(chan string, 16)
	gate := make(chan struct{})
	pa.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			inWait <- key
			<-gate // stopped: deaf to its context too
		}
		return nil
	})
	nb := e.batch(spec{frames: 4})
	// Long enough that A's renewals (due at ttl/3) stay in time on a
	// loaded machine until A is frozen; B waits it out once.
	ttl := 3 * time.Second
	a := e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4, LeaseTTL: ttl}, Store: spyA, Generators: gens{"sketch": pa}})
	var wake sync.Once
	wakeA := func() { wake.Do(func() { spyA.unfreeze(); close(gate) }) }
	t.Cleanup(wakeA) // runs before the pool's stop, should the test fail early
	for i := 0; i < 4; i++ {
		<-inWait
	}
	spyA.freeze()
	before := led.writesOf("a")

	spyB := newSpy(e.open(), "b", led)
	// B reads the references A stored, so it wraps the generator the same way.
	// B's own leases need not lapse: the default, long TTL.
	e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4}, Store: spyB, Generators: gens{"sketch": newProbe(generator.NewSketch())}})
	done := e.waitBatch("alice", nb.ID, ended)
	if done.State != intent.StateSucceeded {
		t.Fatalf("batch = %+v", done)
	}
	assets := map[string]string{}
	for _, tk := range e.tasks("alice", nb.ID) {
		assets[tk.ID] = *tk.AssetID
		if tk.Attempts != 2 {
			t.Fatalf("task %+v: want attempts 2 (one stale, one takeover)", tk)
		}
	}
	// Wake the stale pool and let it run to its end.
	wakeA()
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := led.writesOf("a"); got != before {
		t.Fatalf("the stale pool recorded %d writes after waking", got-before)
	}
	after := e.waitBatch("alice", nb.ID, ended)
	if after.Counts != done.Counts || !after.UpdatedAt.Equal(done.UpdatedAt) {
		t.Fatalf("batch changed after the stale pool woke: %+v -> %+v", done, after)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if *tk.AssetID != assets[tk.ID] {
			t.Fatalf("task %s asset changed", tk.ID)
		}
		if _, err := e.st.AssetForTask(context.Background(), tk.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestManyPoolsRunEachTaskOnce: four pools (own connections, as four
// processes) of eight on 600 tasks: each task runs once, never in two
// places at once, and ends with one asset.
func TestManyPoolsRunEachTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 300, providers: []string{"noop", "sketch"}, params: `{"width":16,"height":16}`})
	led := newLedger()
	noop, sketch := newProbe(generator.NewNoop()), newProbe(generator.NewSketch())
	// No task starts before two pools have claimed some: a pool holds at
	// most twice its concurrency before it has timed a task, so the first
	// cannot take them all, and the work is shared whatever the scheduling.
	done := make(chan struct{})
	twoClaimed := func() bool { return len(led.claimsBy) >= 2 }
	hook := func(ctx context.Context, op, key string, attempt int) error {
		if op == "submit" {
			led.await(done, twoClaimed)
		}
		return nil
	}
	noop.setHook(hook)
	sketch.setHook(hook)
	for i := 0; i < 4; i++ {
		e.pool(worker.Config{
			Options: leasequeue.Options{
				Concurrency: 8,
				// Long: this test wants no lease to lapse, however loaded
				// the machine (TestTakeoversUnderStalls is about lapses);
				// renewals still run on a slow one.
				LeaseTTL: 2 * time.Minute,
			},
			Store:      newSpy(e.open(), fmt.Sprint(i), led),
			Generators: gens{"noop": noop, "sketch": sketch},
		})
	}
	t.Cleanup(func() { close(done) }) // before the pools stop
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateSucceeded || b.Counts.Succeeded != 600 {
		t.Fatalf("batch = %+v", b)
	}
	owners := map[string]bool{}
	for _, tk := range e.tasks("alice", nb.ID) {
		p := sketch
		if tk.Generator == "noop" {
			p = noop
		}
		if tk.Attempts != 1 || p.count(tk.ID, "submit") != 1 || p.count(tk.ID, "fetch") != 1 {
			t.Fatalf("task %+v: attempts %d, submits %d, fetches %d", tk, tk.Attempts, p.count(tk.ID, "submit"), p.count(tk.ID, "fetch"))
		}
		led.mu.Lock()
		comps, claims := len(led.completions[tk.ID]), led.claims[tk.ID]
		led.mu.Unlock()
		if comps != 1 || claims != 1 {
			t.Fatalf("task %s: %d completions, %d claims", tk.ID, comps, claims)
		}
		a, err := e.st.AssetForTask(context.Background(), tk.ID)
		if err != nil || tk.AssetID == nil || a.ID != *tk.AssetID {
			t.Fatalf("task %s asset %+v, %v", tk.ID, a, err)
		}
		if ok, _ := e.blobs.Exists(context.Background(), a.SHA256); !ok {
			t.Fatalf("asset %s has no bytes", a.ID)
		}
		owners[tk.ID] = true
	}
	if noop.overlaps+sketch.overlaps != 0 {
		t.Fatalf("%d generator calls overlapped on one task", noop.overlaps+sketch.overlaps)
	}
	// Every pool that claimed tasks ran some.
	working := 0
	for i := 0; i < 4; i++ {
		if led.writesOf(fmt.Sprint(i)) > 0 {
			working++
		}
	}
	if working < 2 {
		t.Fatalf("%d of 4 pools did any work, want at least the 2 that claimed first", working)
	}
}

// TestTakeoversUnderStalls: pools whose renewals stall past the lease lose
// their tasks to others while the tasks are between steps; the stale
// holders then go on and find every write refused. Every task still ends
// with exactly one completion, made under the last fence claimed, and one
// asset with bytes.
//
// Pools 0 and 1 stall: each of their renewals hangs until every lease in
// it has ended or been claimed again, and a first attempt they run waits
// in its generator's wait step (after "submitted" is recorded) until its
// task has been claimed again. Pool 2, started once both have claimed
// tasks, does not stall: it takes the lapsed tasks over. The waits are for
// those events; the only time that must pass is the lease's, on the
// database's clock.
func TestTakeoversUnderStalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 24, params: `{"width":16,"height":16}`})
	led := newLedger()
	// Long enough that pool 2 keeps its own leases on a loaded machine
	// (a lapse there is allowed, not needed); each stall costs one.
	ttl := time.Second
	done := make(chan struct{})
	var overtakenMu sync.Mutex
	overtaken := map[string]bool{} // tasks whose stalled first attempt was overtaken
	pool := func(i int, stall bool) {
		s := newSpy(e.open(), fmt.Sprint(i), led)
		p := newProbe(generator.NewSketch())
		if stall {
			s.stallUntil = done
			p.setHook(func(ctx context.Context, op, key string, attempt int) error {
				if op != "wait" || attempt != 1 {
					return nil
				}
				if led.await(done, func() bool { return led.claims[key] > 1 }) {
					overtakenMu.Lock()
					overtaken[key] = true
					overtakenMu.Unlock()
				}
				return nil
			})
		}
		e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4, LeaseTTL: ttl, MaxAttempts: 100}, Store: s, Generators: gens{"sketch": p}})
	}
	pool(0, true)
	pool(1, true)
	t.Cleanup(func() { close(done) }) // before the pools stop
	led.changed.Until(t, "both stalling pools to claim", func() bool {
		led.mu.Lock()
		defer led.mu.Unlock()
		return led.claimsBy["0"] > 0 && led.claimsBy["1"] > 0
	})
	pool(2, false)
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateSucceeded {
		for _, tk := range e.tasks("alice", nb.ID) {
			if tk.Error != nil {
				t.Errorf("task %s: attempts %d: %s", tk.ID, tk.Attempts, *tk.Error)
			}
		}
		t.Fatalf("batch = %+v", b)
	}
	retaken := 0
	for _, tk := range e.tasks("alice", nb.ID) {
		led.mu.Lock()
		comps, maxFence, claims := led.completions[tk.ID], led.maxClaimed[tk.ID], led.claims[tk.ID]
		led.mu.Unlock()
		if len(comps) != 1 || comps[0] != maxFence {
			t.Fatalf("task %s: completions under fences %v, last fence claimed %d", tk.ID, comps, maxFence)
		}
		if claims != tk.Attempts {
			t.Fatalf("task %s: %d claims, attempts %d", tk.ID, claims, tk.Attempts)
		}
		if claims > 1 {
			retaken++
		}
		a, err := e.st.AssetForTask(context.Background(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := e.blobs.Exists(context.Background(), a.SHA256); !ok {
			t.Fatalf("asset %s has no bytes", a.ID)
		}
	}
	overtakenMu.Lock()
	defer overtakenMu.Unlock()
	t.Logf("%d stalled first attempts overtaken, %d tasks retaken", len(overtaken), retaken)
	if len(overtaken) == 0 {
		t.Fatal("no stalled attempt was overtaken: the test proved nothing")
	}
}

// TestCancelStopsRunningTasks: a batch canceled while its tasks wait on a
// slow provider ends canceled without waiting for the provider.
func TestCancelStopsRunningTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 6, params: `{"width":16,"height":16,"delay_ms":60000}`})
	e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 8, LeaseTTL: 600 * time.Millisecond}})
	e.waitBatch("alice", nb.ID, func(b intent.Batch) bool { return b.Counts.Running == 6 })
	if _, err := e.st.CancelBatch(context.Background(), "alice", nb.ID); err != nil {
		t.Fatal(err)
	}
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateCanceled || b.Counts.Canceled != 6 {
		t.Fatalf("batch = %+v", b)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.AssetID != nil {
			t.Fatalf("canceled task has an asset: %+v", tk)
		}
	}
}

// TestGracefulStopHandsLeasesBack: a stop whose grace runs out hands the
// leases back; a new pool resumes from the stored step, without
// submitting again. A stop with enough grace lets the step end first.
func TestGracefulStopHandsLeasesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nb := e.batch(spec{frames: 4, params: `{"width":16,"height":16,"delay_ms":60000}`})
	p1 := newProbe(generator.NewSketch())
	waiting := make(chan string, 8)
	p1.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			waiting <- key
		}
		return nil
	})
	pool := e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4, Grace: 50 * time.Millisecond}, Generators: gens{"sketch": p1}})
	for i := 0; i < 4; i++ {
		<-waiting
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ { // concurrent stops all return
		wg.Add(1)
		go func() { defer wg.Done(); pool.Stop(context.Background()) }()
	}
	wg.Wait()
	if err := pool.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := e.st.GetBatch(context.Background(), "alice", nb.ID)
	if b.Counts.Queued != 4 || b.State != intent.StateRunning {
		t.Fatalf("after stop: %+v", b)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.Attempts != 1 || tk.State != intent.StateQueued {
			t.Fatalf("task after stop: %+v", tk)
		}
	}
	// The next pool resumes at "submitted": no new submit; its waits are
	// short (the params say 60 s; the probe skips the inner wait).
	p2 := newProbe(generator.NewSketch())
	p2.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			return sleepCtx(ctx, 10*time.Millisecond)
		}
		return nil
	})
	shortWait := gens{"sketch": skipWait{p2}}
	pool2 := e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 4}, Generators: shortWait})
	b = e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateSucceeded {
		t.Fatalf("batch = %+v", b)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if p2.count(tk.ID, "submit") != 0 || p2.count(tk.ID, "wait") != 1 || tk.Attempts != 2 {
			t.Fatalf("task %s resumed with %d submits, %d waits, attempts %d", tk.ID, p2.count(tk.ID, "submit"), p2.count(tk.ID, "wait"), tk.Attempts)
		}
	}

	pool2.Stop(context.Background())

	// With grace to spare, the running step ends and is recorded first.
	nb2 := e.batch(spec{frames: 2, prompt: "another", params: `{"width":16,"height":16,"delay_ms":300}`})
	p3 := newProbe(generator.NewSketch())
	waiting3 := make(chan string, 4)
	p3.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			waiting3 <- key
		}
		return nil
	})
	pool3 := e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 2, Grace: 30 * time.Second}, Generators: gens{"sketch": p3}})
	<-waiting3
	<-waiting3
	pool3.Stop(context.Background())
	p4 := newProbe(generator.NewSketch())
	e.pool(worker.Config{Generators: gens{"sketch": p4}})
	e.waitBatch("alice", nb2.ID, ended)
	for _, tk := range e.tasks("alice", nb2.ID) {
		if tk.State != intent.StateSucceeded || p4.count(tk.ID, "submit")+p4.count(tk.ID, "wait") != 0 || p4.count(tk.ID, "fetch") != 1 {
			t.Fatalf("task %s after a graceful stop: %+v; resumed with %d submits, %d waits", tk.ID, tk,
				p4.count(tk.ID, "submit"), p4.count(tk.ID, "wait"))
		}
	}
}

// skipWait runs the probe's wait hook instead of the generator's wait.
type skipWait struct{ *probe }

func (s skipWait) Wait(ctx context.Context, ref string) error {
	key, _ := splitRef(ref)
	s.enter("wait", key)
	defer s.leave(key)
	return s.call(ctx, "wait", key)
}

func TestStartStopInAnyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p, err := worker.New(worker.Config{Options: leasequeue.Options{PollMin: time.Millisecond, PollMax: 5 * time.Millisecond}, Store: e.st, Generators: embedded(), Blobs: e.blobs, SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Stop(ctx); err != nil { // before any start
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil { // twice
			t.Fatal(err)
		}
		nb := e.batch(spec{frames: 2, prompt: fmt.Sprint("round ", i)})
		e.waitBatch("alice", nb.ID, ended)
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Start and Stop racing.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); p.Start(ctx) }()
		go func() { defer wg.Done(); p.Stop(ctx) }()
	}
	wg.Wait()
	p.Stop(ctx)
	if _, err := worker.New(worker.Config{}); err == nil {
		t.Fatal("a pool without a store was made")
	}
}

// TestGeneratorLimit: two pools sharing a lock engine run at most
// max_concurrency tasks of a generator at once.
func TestGeneratorLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	engine := locks.New(locks.NewMemoryStore())
	t.Cleanup(func() { engine.Close() }) // after the pools stop
	limiter := worker.Semaphores(engine, map[string]int{"sketch": 2})
	p := newProbe(generator.NewSketch())
	p.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			return sleepCtx(ctx, 15*time.Millisecond)
		}
		return nil
	})
	nb := e.batch(spec{frames: 16})
	other := e.batch(spec{frames: 16, providers: []string{"mosaic"}})
	m := newProbe(generator.NewMosaic())
	m.setHook(p.hook)
	g := gens{"sketch": p, "mosaic": m}
	for i := 0; i < 2; i++ {
		e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 8}, Store: e.open(), Generators: g, Limiter: limiter})
	}
	e.waitBatch("alice", nb.ID, ended)
	e.waitBatch("alice", other.ID, ended)
	if p.maxRunning != 2 {
		t.Fatalf("sketch ran %d at once, want at most (and, with 16 tasks, exactly) 2", p.maxRunning)
	}
	if m.maxRunning <= 2 {
		t.Fatalf("mosaic, unlimited, ran at most %d at once", m.maxRunning)
	}
}

// TestSweepKeepsNamedBlobs: the pool's sweep removes an orphan and keeps
// the bytes its assets name.
func TestSweepKeepsNamedBlobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orphan, err := e.blobs.Put(context.Background(), strings.NewReader("left by a crash"))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(e.blobs.Path(orphan.SHA256), old, old); err != nil {
		t.Fatal(err)
	}
	nb := e.batch(spec{frames: 2})
	blobs := &sweepSignal{Store: e.blobs}
	e.pool(worker.Config{SweepEvery: 20 * time.Millisecond, SweepAge: time.Hour, Blobs: blobs})
	e.waitBatch("alice", nb.ID, ended)
	// A sweep that began before the batch ended may keep the orphan; one
	// of the next removes it.
	blobs.swept.Until(t, "a sweep that removes the orphan", func() bool {
		ok, err := e.blobs.Exists(context.Background(), orphan.SHA256)
		return err == nil && !ok
	})
	for _, tk := range e.tasks("alice", nb.ID) {
		a, _ := e.st.AssetForTask(context.Background(), tk.ID)
		if ok, _ := e.blobs.Exists(context.Background(), a.SHA256); !ok {
			t.Fatalf("named blob %s swept", a.SHA256)
		}
	}
}

var _ store.TaskStore = (*spy)(nil)

// sweepSignal is a blob store that tells of each sweep's end.
type sweepSignal struct {
	blob.Store
	swept testsignal.Changes
}

func (s *sweepSignal) Sweep(ctx context.Context, p blob.SweepParams) (blob.SweepResult, error) {
	res, err := s.Store.Sweep(ctx, p)
	s.swept.Notify()
	return res, err
}

// TestRetryAfterPushesTheRetryBack: a transient provider error with a
// Retry-After queues the task again no sooner than the provider asked,
// however short the backoff; a permanent one fails at once.
func TestRetryAfterPushesTheRetryBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newProbe(generator.NewNoop())
	p.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "submit" {
			return &generator.ProviderError{Generator: "noop", Class: generator.ClassRateLimited, Status: 429,
				RetryAfter: time.Hour, Message: "submit: 429 Too Many Requests: slow down"}
		}
		return nil
	})
	nb := e.batch(spec{frames: 1, providers: []string{"noop"}})
	before := time.Now()
	pool := e.pool(worker.Config{Options: leasequeue.Options{MaxAttempts: 5}, Generators: gens{"noop": p}})
	var tk intent.Task
	e.until(nb.ID, "the first attempt to fail and queue the task again", func() bool {
		tk = e.tasks("alice", nb.ID)[0]
		return tk.Attempts == 1 && tk.State == intent.StateQueued && tk.Error != nil
	})
	pool.Stop(context.Background())
	var runAfter int64
	if err := e.st.DB().QueryRow(`SELECT run_after FROM tasks WHERE id = ?`, tk.ID).Scan(&runAfter); err != nil {
		t.Fatal(err)
	}
	if at := time.UnixMilli(runAfter); at.Before(before.Add(59 * time.Minute)) {
		t.Fatalf("the retry may run at %v, before the hour the provider asked for (from %v)", at, before)
	}
	if !strings.Contains(*tk.Error, "slow down") || !strings.Contains(*tk.Error, "retry after 1h0m0s") {
		t.Fatalf("task error %q", *tk.Error)
	}
}

// stepsFail is a store whose SaveSteps fails as a whole (the database
// went away for that call).
type stepsFail struct{ store.TaskStore }

func (stepsFail) SaveSteps(context.Context, []store.StepSave) ([]error, error) {
	return nil, errors.New("database unavailable")
}

// TestReleaseWhenTheStepCannotBeSaved: a pool stopping while a task waits
// records the step before handing the lease back; when that fails as a
// whole the lease is still handed back (the task is queued again), and
// nothing panics.
func TestReleaseWhenTheStepCannotBeSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newProbe(generator.NewSketch())
	inWait := make(chan struct{}, 1)
	p.setHook(func(ctx context.Context, op, key string, attempt int) error {
		if op == "wait" {
			inWait <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	nb := e.batch(spec{frames: 1, candidates: 1})
	pool := e.pool(worker.Config{Options: leasequeue.Options{Concurrency: 1, Grace: 50 * time.Millisecond}, Store: stepsFail{e.st}, Generators: gens{"sketch": p}, StepRecordAfter: time.Hour})
	<-inWait
	if err := pool.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tk := range e.tasks("alice", nb.ID) {
		if tk.State != intent.StateQueued {
			t.Fatalf("task after the pool stopped: %+v, want it queued again", tk)
		}
	}
}
