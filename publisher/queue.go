package publisher

import (
	"context"
	"sync"
	"time"
)

// queue is a FIFO of records handed from one goroutine to another. It has
// no bound of its own: the relay's in-flight window bounds what can be in
// all queues together, so pushing never blocks the replication stream.
type queue struct {
	mu    sync.Mutex
	items []*outgoing
	// closed is set by closeIfEmpty when the consuming goroutine exits;
	// a push after that is refused, so no record is left in a queue
	// nobody reads.
	closed bool
	notify chan struct{}
}

func newQueue() *queue { return &queue{notify: make(chan struct{}, 1)} }

// push appends rs and reports whether it could: false once the queue is
// closed (nothing is appended then).
func (q *queue) push(rs ...*outgoing) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, rs...)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return true
}

// closeIfEmpty closes the queue if it holds nothing and reports whether
// it did. Its consumer calls it before exiting: a record pushed before
// that is still in the queue (and the consumer stays), one pushed after
// is refused (and the pusher finds another way).
func (q *queue) closeIfEmpty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 {
		return false
	}
	q.closed = true
	return true
}

// take waits for records and removes up to maxCount of them whose summed
// size stays within maxBytes (the first is always taken). It returns nil
// when ctx is done.
func (q *queue) take(ctx context.Context, maxCount, maxBytes int, dst []*outgoing) []*outgoing {
	dst, ok := q.poll(ctx, nil, maxCount, maxBytes, dst)
	if !ok {
		return nil
	}
	return dst
}

// poll is take that also returns, with no records, when tick fires while
// the queue is empty (a nil tick never fires). ok is false when ctx is
// done.
func (q *queue) poll(ctx context.Context, tick <-chan time.Time, maxCount, maxBytes int, dst []*outgoing) (_ []*outgoing, ok bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			n, size := 0, 0
			for n < len(q.items) && n < maxCount {
				s := q.items[n].size
				if n > 0 && size+s > maxBytes {
					break
				}
				size += s
				n++
			}
			dst = append(dst[:0], q.items[:n]...)
			rest := copy(q.items, q.items[n:])
			clear(q.items[rest:])
			q.items = q.items[:rest]
			q.mu.Unlock()
			return dst, true
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-tick:
			return dst[:0], true
		case <-ctx.Done():
			return nil, false
		}
	}
}
