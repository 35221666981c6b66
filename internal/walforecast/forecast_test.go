package walforecast

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

// series returns samples every step starting at t0 with the given values.
func series(step time.Duration, values ...int64) []Sample {
	out := make([]Sample, len(values))
	for i, v := range values {
		out[i] = Sample{At: t0.Add(time.Duration(i) * step), Retained: v}
	}
	return out
}

func ptr(v int64) *int64 { return &v }

func TestGrowthRate(t *testing.T) {
	cases := []struct {
		name    string
		samples []Sample
		want    float64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"one", series(time.Second, 5), 0, false},
		{"same instant", []Sample{{At: t0, Retained: 1}, {At: t0, Retained: 9}}, 0, false},
		{"linear", series(15*time.Second, 0, 1500, 3000, 4500), 100, true},
		{"flat", series(15*time.Second, 700, 700, 700), 0, true},
		{"shrinking", series(10*time.Second, 3000, 2000, 1000), -100, true},
		// A least-squares fit, not last minus first: the outlier at the
		// end moves the slope less than first-to-last would (150/s).
		{"noisy", series(10*time.Second, 0, 1000, 2000, 3000, 6000), 140, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := GrowthRate(c.samples)
			if ok != c.ok || math.Abs(got-c.want) > 1e-9 {
				t.Fatalf("GrowthRate = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestForecast(t *testing.T) {
	grow := series(10*time.Second, 0, 1000, 2000, 3000) // 100 B/s, retained 3000
	cases := []struct {
		name    string
		samples []Sample
		lim     Limits
		want    float64
		ok      bool
	}{
		{"no limit", grow, Limits{}, 0, false},
		{"no samples", nil, Limits{DiskBudget: 1 << 30}, 0, false},
		{"one sample, headroom ahead", grow[:1], Limits{DiskBudget: 1 << 30}, 0, false},
		{"safe_wal_size", grow, Limits{SafeWALSize: ptr(6000)}, 60, true},
		{"budget", grow, Limits{DiskBudget: 13000}, 100, true},
		{"smaller of both: budget", grow, Limits{SafeWALSize: ptr(1e6), DiskBudget: 5000}, 20, true},
		{"smaller of both: safe", grow, Limits{SafeWALSize: ptr(500), DiskBudget: 1e6}, 5, true},
		{"budget reached", grow, Limits{DiskBudget: 3000}, 0, true},
		{"budget exceeded, one sample", grow[3:], Limits{DiskBudget: 10}, 0, true},
		{"unreserved: negative safe_wal_size", grow, Limits{SafeWALSize: ptr(-42)}, 0, true},
		{"not growing", series(10*time.Second, 3000, 3000, 3000), Limits{DiskBudget: 1e6}, math.Inf(1), true},
		{"shrinking", series(10*time.Second, 3000, 2000, 1000), Limits{SafeWALSize: ptr(1e6)}, math.Inf(1), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Forecast(c.samples, c.lim)
			if ok != c.ok || !(got == c.want || math.Abs(got-c.want) < 1e-9) {
				t.Fatalf("Forecast = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestHistoryKeepsWindow(t *testing.T) {
	h := History{Window: time.Minute}
	var got []Sample
	for i := 0; i < 20; i++ {
		got = h.Add(Sample{At: t0.Add(time.Duration(i) * 15 * time.Second), Retained: int64(i)})
	}
	// Last sample at 285 s: samples at 225..285 s are within a minute.
	if len(got) != 5 || got[0].Retained != 15 || got[4].Retained != 19 {
		t.Fatalf("window kept %v, want retained 15..19", got)
	}
	// A window shorter than the interval still keeps two samples.
	h = History{Window: time.Second}
	for i := 0; i < 5; i++ {
		got = h.Add(Sample{At: t0.Add(time.Duration(i) * time.Minute), Retained: int64(i)})
	}
	if len(got) != 2 || got[0].Retained != 3 {
		t.Fatalf("short window kept %v, want the last two", got)
	}
	h.Reset()
	if got = h.Add(Sample{At: t0, Retained: 1}); len(got) != 1 {
		t.Fatalf("after reset: %v", got)
	}
}
