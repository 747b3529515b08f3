package bench

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"studio/generator"
)

// assetsImage is the size of the assets_drain images: 512x512 grey noise
// from the noop generator, 256 KiB each, which cost a copy to make.
const assetsImage = 512

// maxAssetsTasks bounds the tasks of one assets_drain side (--tasks is
// 6000 by default, for the drain operations): 2400 images of 256 KiB make
// 600 MiB a side, long enough that a checkpoint or a worker's start-up
// weighs little in the rate, short enough that a run takes a few minutes.
const maxAssetsTasks = 2400

// drainAssets: procs worker processes (4 tasks at once each) drain
// 512x512 images on PostgreSQL, with the bytes in the object store
// (--assets) and, alternating, in the blobs table; each side's rate and
// the WAL it writes per task (pg_current_wal_lsn() before and after).
// The operation is the object store, its "floor" the blobs table: the
// ratio is the blobs table's rate over the object store's (below 1: the
// object store drains faster).
func (b *bench) drainAssets(procs int) (*Result, error) {
	if b.cfg.Workers == nil || b.cfg.WALPosition == nil || b.cfg.Assets == "" {
		return nil, errors.New("needs PostgreSQL and an object store: studio bench --database postgres://HOST/DB --assets s3://BUCKET/PREFIX")
	}
	if err := b.cancelQueued(); err != nil {
		return nil, err
	}
	per := min(b.cfg.Tasks, maxAssetsTasks)
	rounds := b.samples(2)
	var objRates, blobRates, objWAL, blobWAL, objCPU, blobCPU []float64
	for r := range rounds {
		sides := []struct {
			assets          string
			rates, wal, cpu *[]float64
		}{{b.cfg.Assets, &objRates, &objWAL, &objCPU}, {"", &blobRates, &blobWAL, &blobCPU}}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			d, err := b.drainProcesses(procs, side.assets, per)
			if err != nil {
				return nil, err
			}
			*side.rates = append(*side.rates, d.rate)
			*side.wal = append(*side.wal, d.walPerTask)
			*side.cpu = append(*side.cpu, d.cpuPerTaskUS)
		}
		b.progress.tick(r+1, rounds)
	}
	res := &Result{N: rounds * per, PerS: round3(median(objRates))}
	// The wall time per task, for the table's median column.
	res.MedianUS = round3(1e6 / res.PerS)
	res.P99US = res.MedianUS
	res.FloorPerS = ptr(median(blobRates))
	res.Ratio = ptr(*res.FloorPerS / res.PerS)
	res.WALBytesPerTask = ptr(median(objWAL))
	res.FloorWALBytesPerTask = ptr(median(blobWAL))
	res.WorkerCPUPerTaskUS = ptr(round3(median(objCPU)))
	res.FloorWorkerCPUPerTaskUS = ptr(round3(median(blobCPU)))
	return res, nil
}

// drained is what one drain run measured.
type drained struct {
	// rate is the tasks per second from the commit to the last success.
	rate float64
	// walPerTask is the WAL bytes written per task.
	walPerTask float64
	// cpuPerTaskUS is the worker processes' CPU time per task, from their
	// start to their exit, in microseconds.
	cpuPerTaskUS float64
}

// drainProcesses starts procs worker processes with assets, commits n
// tasks of 512x512 images, and answers what the run measured.
func (b *bench) drainProcesses(procs int, assets string, n int) (d drained, err error) {
	stop, err := b.cfg.Workers(b.ctx, procs, assets)
	if err != nil {
		return d, fmt.Errorf("start workers: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	wal0, err := b.cfg.WALPosition(b.ctx)
	if err != nil {
		return d, err
	}
	start := time.Now()
	// A seed of its own per batch of a run: no image is stored already
	// (the batches' tasks have the same frames, so one seed for all
	// would make the same images again, which the blobs table keeps once
	// and an object store overwrites).
	seed := time.Now().UnixNano() & (1<<52 - 1)
	var batches []string
	for left := n; left > 0; left -= 600 {
		in, err := newTree("bench", b.id("drain-assets"), min(left, 600), generator.Noop)
		if err != nil {
			return d, err
		}
		in.Batch.Spec = fmt.Appendf(nil, `{"prompt":"drain","seed":%d,"params":{"width":%d,"height":%d}}`,
			seed+int64(len(batches)), assetsImage, assetsImage)
		if _, _, err := b.cfg.Store.CreateIntent(b.ctx, in); err != nil {
			return d, err
		}
		batches = append(batches, in.Batch.ID)
	}
	for _, id := range batches {
		if err := b.waitDrained(id); err != nil {
			return d, err
		}
	}
	took := time.Since(start)
	wal1, err := b.cfg.WALPosition(b.ctx)
	if err != nil {
		return d, err
	}
	stopped = true
	cpu, err := stop()
	if err != nil {
		return d, fmt.Errorf("stop workers: %w", err)
	}
	return drained{rate: float64(n) / took.Seconds(), walPerTask: float64(wal1-wal0) / float64(n),
		cpuPerTaskUS: float64(cpu.Microseconds()) / float64(n)}, nil
}

// waitDrained polls a batch until it has ended, every task succeeded.
func (b *bench) waitDrained(id string) error {
	for {
		bt, err := b.cfg.Store.GetBatch(b.ctx, "bench", id)
		if err != nil {
			return err
		}
		if bt.Counts.Ended() == bt.TaskCount {
			if bt.Counts.Succeeded != bt.TaskCount {
				return fmt.Errorf("batch %s ended %+v", id, bt.Counts)
			}
			return nil
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-b.ctx.Done():
			return b.ctx.Err()
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
