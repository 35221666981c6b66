package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestCleanupScheduleFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_CLEANUP_OLDER_THAN", "72h")
	cfg, err := parse("run", []string{"--cleanup-interval", "5m"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Relay.Cleanup; c.OlderThan != 72*time.Hour || c.Interval != 5*time.Minute {
		t.Fatalf("schedule %+v", c)
	}
	_, err = parse("run", []string{"--cleanup-older-than", "-1h", "--cleanup-interval", "1ms"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `--cleanup-older-than "-1h": negative: use 0 or more`) {
		t.Fatalf("negative --cleanup-older-than: %v", err)
	}
	_, err = parse("run", []string{"--cleanup-older-than", "1h", "--cleanup-interval", "1ms"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--cleanup-interval 1ms: use at least 100ms") {
		t.Fatalf("tiny --cleanup-interval: %v", err)
	}
}

func TestCleanupCommandConfig(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "", "--older-than 0s: use a positive duration"},
		{[]string{"--older-than", "1h", "--batch-size", "20000"}, "", "--batch-size 20000: use 1..10000"},
		{[]string{"--older-than", "1h", "--pause", "1m"}, "", "--pause 1m0s: use 0..10s"},
		{[]string{"--older-than", "1h", "--max-duration", "-1s"}, "", `--max-duration "-1s": negative`},
		{nil, "OUTBOX_RELAY_OLDER_THAN=soon", "OUTBOX_RELAY_OLDER_THAN=\"soon\": not a duration"},
	} {
		if tc.env != "" {
			k, v, _ := strings.Cut(tc.env, "=")
			t.Setenv(k, v)
		}
		var out, errOut bytes.Buffer
		code := run(append([]string{"cleanup"}, tc.args...), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("cleanup %v %s: exit %d, want 2 with %q\n%s", tc.args, tc.env, code, tc.want, errOut.String())
		}
	}
}
