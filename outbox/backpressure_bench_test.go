package outbox

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// nopExecer accepts every statement: the benchmarks measure the Writer,
// not a database.
type nopExecer struct{}

func (nopExecer) Exec(context.Context, string, ...any) error { return nil }

// BenchmarkAppend compares Append without back-pressure, with a monitor
// whose budgets are not crossed (the normal case: one atomic load per
// Append), with the soft budget crossed for a critical event (admitted:
// also a clock read), and a refused non-critical event (no SQL at all).
//
//	go test -run '^$' -bench BenchmarkAppend -benchmem ./outbox/
func BenchmarkAppend(b *testing.B) {
	quiet := func(b *testing.B) *HealthMonitor {
		db := &fakeSlot{}
		db.set("reserved", int64(4<<30), 10*mib, 2000, 1000)
		m, err := NewHealthMonitor(db, HealthConfig{Slot: "orders", Soft: Budget{MaxRetainedWAL: 100 * mib}})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
		return m
	}
	cases := []struct {
		name     string
		opts     func(b *testing.B) []Option
		priority Priority
		refused  bool
	}{
		{"without_monitor", func(*testing.B) []Option { return nil }, PriorityCritical, false},
		{"with_monitor", func(b *testing.B) []Option { return []Option{WithBackpressure(quiet(b))} }, PriorityLow, false},
		{"with_monitor_engaged_critical", func(b *testing.B) []Option { return []Option{WithBackpressure(engagedMonitor(b, false))} },
			PriorityCritical, false},
		{"with_monitor_engaged_refused", func(b *testing.B) []Option { return []Option{WithBackpressure(engagedMonitor(b, false))} },
			PriorityLow, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			w := NewWriter(testTable, c.opts(b)...)
			ctx := context.Background()
			e := validEvent()
			e.Priority = c.priority
			b.ReportAllocs()
			for b.Loop() {
				e.EventID = uuid.Nil
				err := w.Append(ctx, nopExecer{}, e)
				if (err != nil) != c.refused {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheck is the monitor's share of an Append on its own.
func BenchmarkCheck(b *testing.B) {
	db := &fakeSlot{}
	db.set("reserved", int64(4<<30), 10*mib, 2000, 1000)
	m, err := NewHealthMonitor(db, HealthConfig{Slot: "orders", Soft: Budget{MaxRetainedWAL: 100 * mib}})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Run("not_engaged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if m.Check(PriorityLow) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("not_engaged_parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if m.Check(PriorityLow) != nil {
					b.Error("refused")
					return
				}
			}
		})
	})
	engaged := engagedMonitor(b, false)
	b.Run("engaged_refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if engaged.Check(PriorityLow) == nil {
				b.Fatal("admitted")
			}
		}
	})
}
