//go:build integration

package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// steadyLoad writes a transaction of 4 aggregates' events (of 40) every
// 10 ms through w until the returned stop is called; stop waits for the
// writer and fails t if a write failed. The writer stops between
// transactions, never by cancelling a write: a commit cancelled on its way
// could be committed and unrecorded, and its events would count as
// unexpected.
func steadyLoad(t *testing.T, w *Writer) (stop func()) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		writeErr atomic.Value
		stopped  atomic.Bool
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		aggs := make([]string, 40)
		for i := range aggs {
			aggs[i] = fmt.Sprintf("agg-%02d", i)
		}
		for i := 0; !stopped.Load(); i++ {
			if _, err := w.Write(context.Background(), aggs[(i*4)%40:(i*4)%40+4], true); err != nil {
				writeErr.Store(err)
				return
			}
			// wall-clock: paces the load writer (a transaction every 10 ms)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			stopped.Store(true)
			wg.Wait()
		})
		if err, _ := writeErr.Load().(error); err != nil {
			t.Fatalf("load writer: %v", err)
		}
	}
}
