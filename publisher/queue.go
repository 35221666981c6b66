package publisher

import (
	"context"
	"sync"
)

// queue is a FIFO of records handed from one goroutine to another. It has
// no bound of its own: the relay's in-flight window bounds what can be in
// all queues together, so pushing never blocks the replication stream.
type queue struct {
	mu     sync.Mutex
	items  []*record
	notify chan struct{}
}

func newQueue() *queue { return &queue{notify: make(chan struct{}, 1)} }

func (q *queue) push(rs ...*record) {
	q.mu.Lock()
	q.items = append(q.items, rs...)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// take waits for records and removes up to maxCount of them whose summed
// size stays within maxBytes (the first is always taken). It returns nil
// when ctx is done.
func (q *queue) take(ctx context.Context, maxCount, maxBytes int, dst []*record) []*record {
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
			return dst
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil
		}
	}
}
