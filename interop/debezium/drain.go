package main

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// sample is one reading of a draining process.
type sample struct {
	at        time.Duration // since the process started
	delivered int64         // records in the side's topics
	cpu       float64       // utime+stime, seconds
	hwm       int64         // VmHWM, bytes
}

// drainResult is one process's drain of the backlog.
type drainResult struct {
	Name    string
	Events  int64
	Samples []sample
	StopErr error
}

// watched is what the sampler needs of a process.
type watched interface {
	pid() int
	exited() error
}

// sampleDrain reads every interval how many of want records topics hold
// and p's CPU time and peak RSS, until all are there; failed, when not
// nil, is asked every second whether the process has failed.
func sampleDrain(ctx context.Context, c *kafka.Client, p watched, started time.Time, topics []string, want int64,
	interval, timeout time.Duration, failed func(context.Context) error) (out []sample, misses int, err error) {
	deadline := time.Now().Add(timeout)
	lastCheck := time.Now()
	for {
		n, err := countRecords(ctx, c, topics)
		at := time.Since(started)
		if err != nil {
			misses++
		} else {
			cpu, err1 := procCPU(p.pid())
			hwm, err2 := procPeakRSS(p.pid())
			if err1 == nil && err2 == nil {
				out = append(out, sample{at: at, delivered: n, cpu: cpu, hwm: hwm})
			}
			if n >= want {
				if err1 != nil || err2 != nil {
					return out, misses, fmt.Errorf("read /proc of pid %d: %v %v", p.pid(), err1, err2)
				}
				return out, misses, nil
			}
		}
		if err := p.exited(); err != nil {
			return out, misses, err
		}
		if failed != nil && time.Since(lastCheck) >= time.Second {
			lastCheck = time.Now()
			if err := failed(ctx); err != nil {
				return out, misses, err
			}
		}
		if time.Now().After(deadline) {
			return out, misses, fmt.Errorf("%d of %d records after %s", lastDelivered(out), want, timeout)
		}
		select {
		case <-ctx.Done():
			return out, misses, ctx.Err()
		case <-time.After(interval):
		}
	}
}

func lastDelivered(s []sample) int64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].delivered
}

// The steady state is the window between the samples where 10 % and 90 %
// of the backlog had arrived: start-up (the JVM, the connector's and the
// relay's connections) before it, the tail after it.
const (
	steadyFrom = 0.10
	steadyTo   = 0.90
)

// drainStats are the numbers a drain reports.
type drainStats struct {
	Events        int64
	FirstEvent    time.Duration // first record in Kafka, since the process started
	AllEvents     time.Duration // last record in Kafka, since the process started
	RateFromStart float64       // events / AllEvents
	SteadyRate    float64       // events/s in the steady window
	CPUTotal      float64       // seconds, start to the last record
	CPUSteady     float64       // seconds in the steady window
	CPUPer100k    float64       // steady CPU seconds per 100,000 events
	PeakRSS       int64
}

// stats computes the drain's numbers from its samples.
func (d *drainResult) stats() drainStats {
	s := drainStats{Events: d.Events}
	if len(d.Samples) == 0 {
		return s
	}
	last := d.Samples[len(d.Samples)-1]
	s.AllEvents, s.CPUTotal = last.at, last.cpu
	for _, x := range d.Samples {
		s.PeakRSS = max(s.PeakRSS, x.hwm)
		if s.FirstEvent == 0 && x.delivered > 0 {
			s.FirstEvent = x.at
		}
	}
	if s.AllEvents > 0 {
		s.RateFromStart = float64(d.Events) / s.AllEvents.Seconds()
	}
	a, b := d.at(steadyFrom), d.at(steadyTo)
	if a != nil && b != nil && b.at > a.at && b.delivered > a.delivered {
		n := float64(b.delivered - a.delivered)
		s.SteadyRate = n / (b.at - a.at).Seconds()
		s.CPUSteady = b.cpu - a.cpu
		s.CPUPer100k = s.CPUSteady / n * 100000
	}
	return s
}

// at is the first sample holding at least frac of the events.
func (d *drainResult) at(frac float64) *sample {
	want := int64(frac * float64(d.Events))
	for i := range d.Samples {
		if d.Samples[i].delivered >= want {
			return &d.Samples[i]
		}
	}
	return nil
}
