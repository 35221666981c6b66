package backfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestStatsRate(t *testing.T) {
	if r := (Stats{Acked: 10}).Rate(); r != 0 {
		t.Fatalf("Rate without elapsed time = %v", r)
	}
	if r := (Stats{Acked: 500, Elapsed: 2 * time.Second}).Rate(); r != 250 {
		t.Fatalf("Rate = %v, want 250", r)
	}
}

// rowsDB returns a fake table of n events of one aggregate, e0..e(n-1).
func rowsDB(n int) (*fakeDB, []string) {
	db := &fakeDB{}
	var want []string
	for i := range n {
		id := fmt.Sprintf("e%d", i)
		db.rows = append(db.rows, outboxRow(id, "order", "9", fmt.Sprint(i+1)))
		want = append(want, id)
	}
	return db, want
}

// The Runner tests run in synctest bubbles: fakePub acknowledges once
// nothing was published for 10 ms, which on the fake clock is exactly when
// the runner waits (for window space, or at the end), however loaded the
// machine is.

// Run publishes in scan order, never has more than Window events in
// flight, and returns only when every event is acknowledged.
func TestRunnerWindowAndOrder(t *testing.T) {
	for _, window := range []int{1, 3, 64} {
		t.Run(fmt.Sprint("window ", window), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db, want := rowsDB(12)
				pub := newFakePub()
				defer pub.close()
				var mu sync.Mutex
				var reports []Stats
				r := &Runner{Source: &Source{Table: testTable, Schema: fullSchema}, Pub: pub, Window: window,
					ProgressEvery: time.Millisecond, Progress: func(s Stats) {
						mu.Lock()
						reports = append(reports, s)
						mu.Unlock()
					}}
				st, err := r.Run(context.Background(), db, Selection{}, 12)
				if err != nil {
					t.Fatal(err)
				}
				if got := pub.ids(); !slices.Equal(got, want) {
					t.Fatalf("published %v, want %v", got, want)
				}
				pub.mu.Lock()
				maxIn, pending := pub.maxInflight, len(pub.pending)
				pub.mu.Unlock()
				if maxIn > window {
					t.Fatalf("%d events in flight with a window of %d", maxIn, window)
				}
				if window <= 12 && maxIn != window {
					t.Fatalf("at most %d events in flight, want the window (%d) filled", maxIn, window)
				}
				if pending != 0 || st.Read != 12 || st.Acked != 12 || st.Total != 12 || st.Elapsed <= 0 {
					t.Fatalf("Run returned with %d unacknowledged, stats %+v", pending, st)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(reports) == 0 || reports[len(reports)-1].Acked != 12 {
					t.Fatalf("last progress report %+v, want the final stats", reports)
				}
			})
		})
	}
}

func TestRunnerDefaultWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, _ := rowsDB(10)
		pub := newFakePub()
		defer pub.close()
		r := &Runner{Source: &Source{Table: testTable, Schema: fullSchema}, Pub: pub}
		st, err := r.Run(context.Background(), db, Selection{}, 10)
		if err != nil || st.Acked != 10 {
			t.Fatalf("Run = %+v, %v", st, err)
		}
	})
}

func TestRunnerPublishError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, _ := rowsDB(10)
		pub := newFakePub()
		defer pub.close()
		pub.failAt = "e6"
		r := &Runner{Source: &Source{Table: testTable, Schema: fullSchema}, Pub: pub, Window: 4}
		st, err := r.Run(context.Background(), db, Selection{}, 10)
		if !errors.Is(err, errPublish) || !strings.Contains(err.Error(), "event e6 (aggregate 9)") {
			t.Fatalf("Run = %v, want the publish error naming the event", err)
		}
		if got := pub.ids(); len(got) != 6 || st.Read != 7 {
			t.Fatalf("published %v, read %d: the run must stop at the failing event", got, st.Read)
		}
	})
}

// A fatal publisher error ends the run even while it waits for window
// space or for the last acknowledgements.
func TestRunnerFatal(t *testing.T) {
	for _, n := range []int{2, 10} { // inside the window: the final wait; past it: the window wait
		synctest.Test(t, func(t *testing.T) {
			db, _ := rowsDB(n)
			pub := newFakePub()
			defer pub.close()
			pub.noAcks = true
			pub.fatal <- errors.New("kafka: not authorized")
			r := &Runner{Source: &Source{Table: testTable, Schema: fullSchema}, Pub: pub, Window: 4}
			done := make(chan error, 1)
			go func() {
				_, err := r.Run(context.Background(), db, Selection{}, int64(n))
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "publish: kafka: not authorized") {
					t.Fatalf("%d events: Run = %v", n, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%d events: Run did not stop on a fatal publisher error", n)
			}
		})
	}
}

func TestRunnerInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, _ := rowsDB(3)
		pub := newFakePub()
		defer pub.close()
		pub.noAcks = true
		ctx, cancel := context.WithCancel(context.Background())
		r := &Runner{Source: &Source{Table: testTable, Schema: fullSchema}, Pub: pub, Window: 10}
		done := make(chan error, 1)
		go func() {
			_, err := r.Run(ctx, db, Selection{}, 3)
			done <- err
		}()
		synctest.Wait() // Run published the 3 events and waits for their acknowledgements
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after 0 of 3 events") {
				t.Fatalf("Run = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run ignored the cancellation")
		}
	})
}
