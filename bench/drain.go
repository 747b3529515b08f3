package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"studio/blob"
	"studio/generator"
	"studio/intent"
	"studio/leasequeue"
	"studio/store"
	"studio/worker"
)

// drainRounds is how many times the drain alternates between the pool and
// its floor; each round drains tasks/drainRounds tasks with each.
const drainRounds = 3

// drain: a pool of workers drains tasks of the noop generator, beside the
// floor: one loop making the same claims and completions as the pool did
// (the same sizes, in the same order, recorded from the pool's last run),
// with nothing around them. Rounds alternate, the pool first (the floor
// needs its batches); each sample is a round's time per task.
func (b *bench) drain(workers int) (*Result, error) {
	rounds := min(drainRounds, b.cfg.Tasks)
	per := b.cfg.Tasks / rounds
	if err := b.cancelQueued(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.cfg.Dir, "drain-assets-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	blobs, err := blob.NewFS(dir)
	if err != nil {
		return nil, err
	}
	var ops, floors []time.Duration
	var opWall, floorWall time.Duration
	var sizes *batchSizes
	for r := 0; r < rounds; r++ {
		phases := []struct {
			fn   func([]string) error
			lat  *[]time.Duration
			wall *time.Duration
		}{
			{func(batches []string) error {
				var err error
				sizes, err = b.drainPool(workers, blobs, batches)
				return err
			}, &ops, &opWall},
			{func(batches []string) error { return b.drainFloor(sizes, batches, per) }, &floors, &floorWall},
		}
		if r%2 == 1 {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for _, p := range phases {
			batches, err := b.queueNoop(per)
			if err != nil {
				return nil, err
			}
			start := time.Now()
			if err := p.fn(batches); err != nil {
				return nil, err
			}
			took := time.Since(start)
			*p.lat = append(*p.lat, took/time.Duration(per))
			*p.wall += took
		}
		b.progress.tick(r+1, rounds)
	}
	res := latencyResult(ops, floors)
	res.N = rounds * per
	res.PerS = round3(float64(rounds*per) / opWall.Seconds())
	res.FloorPerS = ptr(float64(rounds*per) / floorWall.Seconds())
	res.Ratio = ptr(*res.FloorPerS / res.PerS)
	return res, nil
}

// cancelQueued cancels the queued tasks the other operations left (their
// trees were committed, never run), so that the drain claims its own tasks
// only.
func (b *bench) cancelQueued() error {
	p := store.ListParams{Actor: "bench", Limit: 500}
	for {
		page, err := b.cfg.Store.ListBatches(b.ctx, p)
		if err != nil {
			return err
		}
		for _, bt := range page {
			if bt.Counts.Queued > 0 {
				if _, err := b.cfg.Store.CancelBatch(b.ctx, "bench", bt.ID); err != nil {
					return err
				}
			}
		}
		if len(page) < p.Limit {
			return nil
		}
		p.After = page[len(page)-1].ID
	}
}

// queueNoop commits n queued tasks of the noop generator, in batches of at
// most 600, and returns the batch ids.
func (b *bench) queueNoop(n int) ([]string, error) {
	var ids []string
	for n > 0 {
		size := min(n, 600)
		in, err := newTree("bench", b.id("drain"), size, generator.Noop)
		if err != nil {
			return nil, err
		}
		if _, _, err := b.cfg.Store.CreateIntent(b.ctx, in); err != nil {
			return nil, err
		}
		ids = append(ids, in.Batch.ID)
		n -= size
	}
	return ids, nil
}

// batchSizes are the sizes of a pool's claims and completions, in order.
type batchSizes struct {
	mu                  sync.Mutex
	claims, completions []int
}

func (z *batchSizes) add(into *[]int, n int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n > 0 {
		*into = append(*into, n)
	}
}

// recordingStore records the sizes of the claims and completions made
// through it.
type recordingStore struct {
	store.TaskStore
	sizes *batchSizes
}

func (s recordingStore) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	cs, err := s.TaskStore.ClaimTasks(ctx, p)
	s.sizes.add(&s.sizes.claims, len(cs))
	return cs, err
}

func (s recordingStore) CompleteLeases(ctx context.Context, cs []store.Completion) ([]store.CompletionResult, error) {
	s.sizes.add(&s.sizes.completions, len(cs))
	return s.TaskStore.CompleteLeases(ctx, cs)
}

// drainPool runs a worker pool until every task of batches has succeeded,
// and answers the sizes of its claims and completions.
func (b *bench) drainPool(workers int, blobs blob.Store, batches []string) (*batchSizes, error) {
	sizes := &batchSizes{}
	p, err := worker.New(worker.Config{
		Options: leasequeue.Options{
			Concurrency: workers,
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			PollMin:     time.Millisecond,
			PollMax:     10 * time.Millisecond,
		},
		Store:      recordingStore{b.cfg.Store, sizes},
		Generators: noopGenerators{},
		Blobs:      blobs,
		SweepEvery: -1,
	})
	if err != nil {
		return nil, err
	}
	if err := p.Start(b.ctx); err != nil {
		return nil, err
	}
	defer p.Stop(context.WithoutCancel(b.ctx))
	for _, id := range batches {
		for {
			bt, err := b.cfg.Store.GetBatch(b.ctx, "bench", id)
			if err != nil {
				return nil, err
			}
			if bt.Counts.Ended() == bt.TaskCount {
				if bt.Counts.Succeeded != bt.TaskCount {
					return nil, fmt.Errorf("batch %s ended %+v", id, bt.Counts)
				}
				break
			}
			select {
			case <-time.After(time.Millisecond):
			case <-b.ctx.Done():
				return nil, b.ctx.Err()
			}
		}
	}
	return sizes, nil
}

// noopGenerators is the catalog of the drain: the noop generator only.
type noopGenerators struct{}

func (noopGenerators) Get(id string) (generator.Generator, error) {
	if id != generator.Noop {
		return nil, generator.Permanent(fmt.Errorf("generator %q is not in the bench's catalog", id))
	}
	return generator.NewNoop(), nil
}

// drainFloor makes the claims and completions of a pool's run, the same
// sizes in the same order, until n tasks are done: the statements with
// nothing around them.
func (b *bench) drainFloor(sizes *batchSizes, batches []string, n int) error {
	if sizes == nil || len(sizes.claims) == 0 || len(sizes.completions) == 0 {
		return errors.New("the floor needs the batches of a pool's run")
	}
	sum := sha256.Sum256([]byte("bench"))
	sha := hex.EncodeToString(sum[:])
	var pending []store.Lease
	complete := func(k int) error {
		comps := make([]store.Completion, k)
		for i, l := range pending[:k] {
			id, err := intent.NewID()
			if err != nil {
				return err
			}
			comps[i] = store.Completion{Lease: l, Asset: intent.Asset{ID: id, SHA256: sha, ContentType: "image/png", Size: 67, Width: 1, Height: 1}}
		}
		res, err := b.cfg.Store.CompleteLeases(b.ctx, comps)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return errors.Join(errors.New("floor completion"), r.Err)
			}
		}
		pending = pending[k:]
		return nil
	}
	claimed, done, ci, ki := 0, 0, 0, 0
	for done < n {
		if claimed < n {
			c := sizes.claims[ci%len(sizes.claims)]
			ci++
			cs, err := b.cfg.Store.ClaimTasks(b.ctx, store.ClaimParams{Owner: "bench-floor", Limit: c, TTL: time.Minute})
			if err != nil {
				return err
			}
			if len(cs) == 0 {
				return fmt.Errorf("the floor found no task after %d of %d", claimed, n)
			}
			for _, c := range cs {
				if !slices.Contains(batches, c.BatchID) {
					return fmt.Errorf("the floor claimed a task of batch %s, not one of its own", c.BatchID)
				}
				pending = append(pending, c.Lease)
			}
			claimed += len(cs)
		}
		for len(pending) > 0 {
			k := sizes.completions[ki%len(sizes.completions)]
			if k > len(pending) {
				if claimed < n {
					break // claim more first, as the pool would have
				}
				k = len(pending)
			}
			ki++
			if err := complete(k); err != nil {
				return err
			}
			done += k
		}
	}
	return nil
}
