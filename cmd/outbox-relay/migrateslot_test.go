package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestFailoverSlotFlag: --failover-slot defaults to true on every command
// that creates the slot, reaches relay.Config, and records whether it was
// given (flag or environment): only then does migrate change an existing
// slot.
func TestFailoverSlotFlag(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_FAILOVER_SLOT", "")
	for _, tc := range []struct {
		env  string
		args []string
		on   bool
		set  bool
	}{
		{"", nil, true, false},
		{"", []string{"--failover-slot=false"}, false, true},
		{"", []string{"--failover-slot"}, true, true},
		{"false", nil, false, true},
		{"false", []string{"--failover-slot"}, true, true},
	} {
		t.Setenv("OUTBOX_RELAY_FAILOVER_SLOT", tc.env) // and restored after the test
		if tc.env == "" {
			os.Unsetenv("OUTBOX_RELAY_FAILOVER_SLOT")
		}
		for _, name := range []string{"migrate", "run"} {
			cfg, err := parse(name, tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.FailoverSlot() != tc.on || cfg.FailoverSlotSet != tc.set || cfg.Relay.Database.NoFailoverSlot == tc.on {
				t.Errorf("%s env %q args %q: failover %v set %v, want %v %v", name, tc.env, tc.args, cfg.FailoverSlot(), cfg.FailoverSlotSet, tc.on, tc.set)
			}
		}
	}
}

// TestFailoverSlotFlagWhereSlotsAreCreated: the commands that create the
// slot take --failover-slot, the others do not; doctor takes --standby-url.
func TestFailoverSlotFlagWhereSlotsAreCreated(t *testing.T) {
	for cmd, want := range map[string]bool{"migrate": true, "run": true, "recover": true, "slot create": true,
		"slot status": false, "slot drop": false, "doctor": false, "replay": false} {
		if got := regexp.MustCompile(`(?m)^ +--failover-slot `).MatchString(helpOf(t, cmd)); got != want {
			t.Errorf("%s --help lists --failover-slot: %v, want %v", cmd, got, want)
		}
	}
	if !regexp.MustCompile(`(?m)^ +--standby-url=`).MatchString(helpOf(t, "doctor")) {
		t.Error("doctor --help lacks --standby-url")
	}
}

// TestDoctorStandbyURLInvalid: an unparsable --standby-url is a
// configuration error (exit 2) that does not show its password.
func TestDoctorStandbyURLInvalid(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"doctor", "--database-url", "postgres://u@127.0.0.1:1/db", "--kafka-brokers", "127.0.0.1:1",
		"--standby-url", "postgres://u@127.0.0.1:2/db", "--standby-url", "postgres://u:s3cretpw@h:notaport/db"}, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--standby-url #2") || strings.Contains(errOut.String(), "s3cretpw") {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
}
