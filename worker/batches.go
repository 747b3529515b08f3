package worker

import (
	"context"
	"sync"
	"time"

	"studio/intent"
)

// BatchReader reads a batch: store.Store has it. A pool with one logs each
// batch it worked on once it has ended.
type BatchReader interface {
	GetBatch(ctx context.Context, actor, id string) (intent.Batch, error)
}

// batchEndEvery is how often the pool looks at the batches whose tasks it
// ended since it last looked.
const batchEndEvery = time.Second

// batchEnds logs "batch finished" for the batches a pool worked on, once
// each has ended: after a task of the batch ends here, the batch is read
// (at most once a second per batch) and logged if every task has ended.
// Each worker process logs a batch it ended tasks of; several processes
// ending the last tasks of one batch at once may each log it.
type batchEnds struct {
	read BatchReader
	mu   sync.Mutex
	seen map[string]string   // batch -> actor: a task of it ended here
	done map[string]struct{} // logged
}

// touch notes that a task of the batch ended here.
func (b *batchEnds) touch(batchID, actor string) {
	b.mu.Lock()
	b.seen[batchID] = actor
	b.mu.Unlock()
}

// loop checks the touched batches every batchEndEvery, and once more when
// the pool stops.
func (h *tasks) batchEndLoop(ctx context.Context) {
	t := time.NewTicker(batchEndEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchEndEvery)
			h.logBatchEnds(last)
			cancel()
			return
		case <-t.C:
			h.logBatchEnds(ctx)
		}
	}
}

func (h *tasks) logBatchEnds(ctx context.Context) {
	b := h.batchEnds
	b.mu.Lock()
	seen := b.seen
	b.seen = map[string]string{}
	b.mu.Unlock()
	for id, actor := range seen {
		if _, ok := b.done[id]; ok {
			continue
		}
		batch, err := b.read.GetBatch(ctx, actor, id)
		if err != nil {
			if ctx.Err() == nil {
				h.cfg.Logger.Warn("read a batch to see whether it ended", "batch", id, "err", err)
			}
			continue
		}
		if batch.TaskCount == 0 || batch.Counts.Ended() < batch.TaskCount {
			continue
		}
		if len(b.done) >= 4096 {
			clear(b.done) // a batch ended long ago is not touched again
		}
		b.done[id] = struct{}{}
		h.cfg.Logger.Info("batch finished", "batch", id, "actor", actor, "state", string(batch.State),
			"tasks", batch.TaskCount, "succeeded", batch.Counts.Succeeded, "failed", batch.Counts.Failed,
			"canceled", batch.Counts.Canceled, "duration", batch.UpdatedAt.Sub(batch.CreatedAt))
	}
}
