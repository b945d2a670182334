package riverworker

import (
	"context"
	"sync"
	"time"
)

// batcher groups the requests of concurrent callers into one call of fn: a
// caller blocks until the batch holding its request was executed. Flushers
// take whatever has queued up while the previous batch ran, so batches grow
// with load and a lone request is executed at once.
type batcher[In, Out any] struct {
	fn       func(ctx context.Context, in []In) ([]Out, error)
	maxBatch int
	reqs     chan *batchReq[In, Out]
	timeout  time.Duration

	startOnce sync.Once
	stopOnce  sync.Once
	wg        sync.WaitGroup
}

type batchReq[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

func newBatcher[In, Out any](maxBatch int, timeout time.Duration, fn func(ctx context.Context, in []In) ([]Out, error)) *batcher[In, Out] {
	return &batcher[In, Out]{
		fn:       fn,
		maxBatch: maxBatch,
		reqs:     make(chan *batchReq[In, Out], maxBatch),
		timeout:  timeout,
	}
}

// start runs flushers goroutines. With one, the next batch fills up while
// the current one is in the database; more would let batches overlap.
func (b *batcher[In, Out]) start(flushers int) {
	b.startOnce.Do(func() {
		for range flushers {
			b.wg.Add(1)
			go b.flushLoop()
		}
	})
}

// stop lets the flushers finish what was queued and waits for them. No call
// to do may be made after stop.
func (b *batcher[In, Out]) stop() {
	b.stopOnce.Do(func() { close(b.reqs) })
	b.wg.Wait()
}

// do executes in as part of a batch. It does not return before the batch is
// done, whatever ctx does: a write that may have committed must not be
// reported as abandoned. ctx only bounds the wait for room in the queue.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (Out, error) {
	r := &batchReq[In, Out]{in: in, done: make(chan struct{})}
	// Queue without looking at ctx first: a select with both cases ready
	// picks one at random, and a cancelled caller with room in the queue
	// must still get its request in.
	select {
	case b.reqs <- r:
	default:
		select {
		case b.reqs <- r:
		case <-ctx.Done():
			var zero Out
			return zero, ctx.Err()
		}
	}
	<-r.done
	return r.out, r.err
}

func (b *batcher[In, Out]) flushLoop() {
	defer b.wg.Done()
	batch := make([]*batchReq[In, Out], 0, b.maxBatch)
	ins := make([]In, 0, b.maxBatch)
	for first := range b.reqs {
		batch = append(batch[:0], first)
	collect:
		for len(batch) < b.maxBatch {
			select {
			case r, ok := <-b.reqs:
				if !ok {
					break collect
				}
				batch = append(batch, r)
			default:
				break collect
			}
		}
		ins = ins[:0]
		for _, r := range batch {
			ins = append(ins, r.in)
		}
		// The batch's own deadline, not any caller's: one caller giving up
		// must not cancel the write of the others.
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		outs, err := b.fn(ctx, ins)
		cancel()
		for i, r := range batch {
			if err != nil {
				r.err = err
			} else {
				r.out = outs[i]
			}
			close(r.done)
		}
	}
}
