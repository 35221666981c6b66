package doctor

import (
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

func finding(t *testing.T, r *Report, check string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Check == check {
			return f
		}
	}
	t.Fatalf("no finding %q in %+v", check, r.Findings)
	return Finding{}
}

func TestCheckRetention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    Retention
		check string
		level Level
		want  string // in Detail
		fix   string // in Fix
	}{
		{"consistent", Retention{Outbox: 7 * day, Checkpoint: 7 * day, Kafka: 7 * day, Dedupe: 14 * day}, "retention dedupe", Pass, "covers the replay range 7d", ""},
		{"checkpoints shorter", Retention{Outbox: 14 * day, Checkpoint: 7 * day}, "retention checkpoints", Warn, "reaches back 7d only", "--checkpoint-retention to at least 14d"},
		{"checkpoints longer", Retention{Outbox: 3 * day, Checkpoint: 7 * day}, "retention checkpoints", Pass, "replay range 3d", ""},
		{"checkpoints forever", Retention{Outbox: 3 * day}, "retention checkpoints", Pass, "replay range 3d", ""},
		{"kafka shorter", Retention{Outbox: 7 * day, Checkpoint: 7 * day, Kafka: 3 * day, Dedupe: 30 * day}, "retention kafka", Warn, "less than the replay range 7d", "retention.ms to at least 604800000"},
		{"kafka infinite", Retention{Outbox: 7 * day, Checkpoint: 7 * day, KafkaInfinite: true, Dedupe: 30 * day}, "retention kafka", Pass, "forever", ""},
		{"no cleanup, kafka finite", Retention{Checkpoint: 7 * day, Kafka: 3 * day}, "retention kafka", Warn, "replay range 7d", ""},
		{"dedupe shorter than replay", Retention{Outbox: 7 * day, Checkpoint: 7 * day, Kafka: 7 * day, Dedupe: 2 * day}, "retention dedupe", Fail, "applied twice", "at least 7d"},
		{"dedupe shorter than kafka", Retention{Outbox: 2 * day, Checkpoint: 7 * day, Kafka: 7 * day, Dedupe: 3 * day}, "retention dedupe", Warn, "Kafka retention 7d", "retention.ms"},
		{"dedupe unknown", Retention{Outbox: 2 * day}, "retention dedupe", Warn, "unknown", "--consumer-dedupe-retention"},
		{"no cleanup", Retention{Checkpoint: 7 * day}, "retention outbox", Pass, "no cleanup configured", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{}
			CheckRetention(tc.in, r)
			f := finding(t, r, tc.check)
			if f.Level != tc.level || !strings.Contains(f.Detail, tc.want) || !strings.Contains(f.Fix, tc.fix) {
				t.Fatalf("%s = %s %q fix %q; want %s with %q, fix with %q", tc.check, f.Level, f.Detail, f.Fix, tc.level, tc.want, tc.fix)
			}
			if tc.level == Pass && f.Fix != "" {
				t.Fatalf("a pass with a fix: %q", f.Fix)
			}
		})
	}
}

func TestReplayWindow(t *testing.T) {
	if w := (Retention{Outbox: 3 * day, Checkpoint: 7 * day}).ReplayWindow(); w != 3*day {
		t.Fatalf("ReplayWindow = %s, want 72h", w)
	}
	if w := (Retention{}).ReplayWindow(); w != forever {
		t.Fatalf("ReplayWindow of nothing = %s, want forever", w)
	}
}
