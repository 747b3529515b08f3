package leasequeue

import "context"

// Batcher commits writes of many items together: one loop takes whatever
// requests wait (up to max) and runs them in one call, one transaction.
// While a call runs, the next requests gather, so the batch grows with the
// load and a lone request waits for no timer. A call that fails for a batch
// of several is tried again for each item alone, so that one bad item does
// not spoil the others.
type Batcher[T, R any] struct {
	reqs chan batchReq[T, R]
	max  int
	call func(ctx context.Context, items []T) ([]R, error)
}

type batchReq[T, R any] struct {
	item  T
	reply chan batchReply[R]
}

type batchReply[R any] struct {
	r   R
	err error
}

// NewBatcher makes a Batcher of at most max items a call. call answers one
// result per item, in order.
func NewBatcher[T, R any](max int, call func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	return &Batcher[T, R]{reqs: make(chan batchReq[T, R]), max: max, call: call}
}

// Do runs item in the next batch and answers its result, or the batch's
// error. Loop must be running until every caller has returned (a Runner
// runs it as one of its Loops).
func (b *Batcher[T, R]) Do(item T) (R, error) {
	reply := make(chan batchReply[R], 1)
	b.reqs <- batchReq[T, R]{item: item, reply: reply}
	rep := <-reply
	return rep.r, rep.err
}

// Loop serves requests until ctx ends.
func (b *Batcher[T, R]) Loop(ctx context.Context) {
	batch := make([]batchReq[T, R], 0, b.max)
	items := make([]T, 0, b.max)
	for {
		batch, items = batch[:0], items[:0]
		select {
		case q := <-b.reqs:
			batch = append(batch, q)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < b.max {
			select {
			case q := <-b.reqs:
				batch = append(batch, q)
			default:
				break gather
			}
		}
		for _, q := range batch {
			items = append(items, q.item)
		}
		rs, err := b.call(ctx, items)
		if err != nil && len(batch) > 1 {
			// One item may spoil the transaction for all: try each alone.
			for _, q := range batch {
				r, err := b.call(ctx, []T{q.item})
				q.reply <- reply(r, err)
			}
			continue
		}
		for i, q := range batch {
			var r R
			if err == nil {
				r = rs[i]
			}
			q.reply <- batchReply[R]{r: r, err: err}
		}
	}
}

func reply[R any](rs []R, err error) batchReply[R] {
	if err != nil {
		return batchReply[R]{err: err}
	}
	return batchReply[R]{r: rs[0]}
}
