package doctor

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
)

// goodPrimary is a PostgreSQL 17 primary whose chain is complete for one
// standby with physical slot sb1.
func goodPrimary() primaryFacts {
	return primaryFacts{version: 170006, systemID: "7", slotExists: true, slotFailover: true,
		syncSlots: []string{"sb1"}, physical: map[string]physicalSlot{"sb1": {active: true, walStatus: "reserved"}}}
}

func goodStandby() standbyFacts {
	return standbyFacts{name: "h:5433", inRecovery: true, systemID: "7",
		settings: map[string]string{"sync_replication_slots": "on", "hot_standby_feedback": "on", "primary_slot_name": "sb1", "wal_level": "logical"},
		conninfo: "host=h port=5432 user=rep dbname=postgres", slot: &standbySlot{synced: true, failover: true}}
}

func evalReport(p primaryFacts, standbys ...standbyFacts) *Report {
	r := &Report{}
	evalFailover(p, "outbox_relay", standbys, r)
	return r
}

// lines renders findings as "LEVEL check: detail | fix" for matching.
// A want is "LEVEL detail-part" or "LEVEL detail-part | fix-part".
func lines(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Level)+" "+f.Check+": "+f.Detail+" | "+f.Fix)
	}
	return out
}

// expect checks that each want (LEVEL and a piece of the line) is found,
// and that no other finding is of a level in forbid.
func expect(t *testing.T, r *Report, want []string, forbid ...Level) {
	t.Helper()
	ls := lines(r)
	for _, w := range want {
		detail, fix, _ := strings.Cut(w[5:], " | ")
		if !slices.ContainsFunc(ls, func(l string) bool {
			d, f, _ := strings.Cut(l, " | ")
			return strings.HasPrefix(l, w[:4]) && strings.Contains(d, detail) && strings.Contains(f, fix)
		}) {
			t.Errorf("no finding %q in:\n%s", w, strings.Join(ls, "\n"))
		}
	}
	for _, f := range r.Findings {
		if slices.Contains(forbid, f.Level) {
			t.Errorf("unexpected %s %s: %s", f.Level, f.Check, f.Detail)
		}
	}
}

func TestFailoverChainComplete(t *testing.T) {
	r := evalReport(goodPrimary(), goodStandby())
	expect(t, r, []string{`PASS "outbox_relay" has failover = true`, "PASS sb1: physical, active",
		"PASS in recovery, same system identifier", `PASS synchronizes "outbox_relay" (synced = true, failover = true)`}, Warn, Fail)
}

// TestFailoverSingleServer: a primary without standbys (no physical slot,
// no --standby-url) has nothing to fail over to: no warnings, whatever the
// slot's flag, and nothing at all before 17.
func TestFailoverSingleServer(t *testing.T) {
	p := goodPrimary()
	p.syncSlots, p.physical = nil, map[string]physicalSlot{}
	expect(t, evalReport(p), []string{`PASS "outbox_relay" has failover = true`}, Warn, Fail)
	p.slotFailover = false
	expect(t, evalReport(p), []string{"PASS no standby"}, Warn, Fail)
	p.version = 150018
	if r := evalReport(p); len(r.Findings) != 0 {
		t.Errorf("PostgreSQL 15 without standbys: %v", lines(r))
	}
}

// TestFailoverChainBroken: with failover = true every missing piece fails
// and names its fix.
func TestFailoverChainBroken(t *testing.T) {
	p := goodPrimary()
	p.syncSlots = nil
	s := goodStandby()
	s.settings = map[string]string{"sync_replication_slots": "off", "hot_standby_feedback": "off", "primary_slot_name": "sb1", "wal_level": "replica"}
	s.conninfo = "host=h port=5432 user=rep"
	s.slot = nil
	r := evalReport(p, s)
	expect(t, r, []string{
		"FAIL synchronized_standby_slots: empty: the relay receives changes", "FAIL Kafka holds events of transactions the new primary never had",
		"FAIL sync_replication_slots is off | on the standby: ALTER SYSTEM SET sync_replication_slots = on; SELECT pg_reload_conf()",
		"FAIL hot_standby_feedback is off | on the standby: ALTER SYSTEM SET hot_standby_feedback = on",
		"FAIL wal_level is replica", "FAIL primary_conninfo has no dbname | on the standby: add dbname=postgres",
		`FAIL its slot "sb1" is not in the primary's synchronized_standby_slots | on the primary: ALTER SYSTEM SET synchronized_standby_slots = 'sb1'`,
		`FAIL has no copy of slot "outbox_relay"`,
	})
	if !r.Failed() {
		t.Fatal("a broken chain does not fail")
	}
}

// TestFailoverSlotOff: a slot without failover fails when a standby is
// named (it cannot carry the slot over), warns when the primary only has
// physical slots; the other gaps are warnings then.
func TestFailoverSlotOff(t *testing.T) {
	p := goodPrimary()
	p.slotFailover = false
	p.syncSlots = nil
	s := goodStandby()
	s.settings["sync_replication_slots"] = "off"
	s.slot = nil
	r := evalReport(p, s)
	expect(t, r, []string{`FAIL "outbox_relay" has failover = false | stop the relay, then outbox-relay migrate --failover-slot (ALTER_REPLICATION_SLOT "outbox_relay" (FAILOVER true)`,
		"WARN synchronized_standby_slots: empty", "WARN sync_replication_slots is off", "WARN has no copy"})
	if n := slices.IndexFunc(r.Findings[1:], func(f Finding) bool { return f.Level == Fail }); n >= 0 {
		t.Errorf("a fail besides the slot flag's:\n%s", strings.Join(lines(r), "\n"))
	}
	s = goodStandby() // a copy left from when the slot had failover = true
	expect(t, evalReport(p, s), []string{`WARN its copy of "outbox_relay" is obsolete`})
	r = evalReport(p) // physical slot sb1, no --standby-url
	expect(t, r, []string{`WARN "outbox_relay" has failover = false`, "WARN synchronized_standby_slots: empty"}, Fail)
}

func TestSynchronizedStandbySlotsNamesUsableSlots(t *testing.T) {
	p := goodPrimary()
	p.syncSlots = []string{"sb1", "gone", "down", "lost"}
	p.physical["down"] = physicalSlot{walStatus: "reserved"}
	p.physical["lost"] = physicalSlot{active: true, walStatus: "lost"}
	expect(t, evalReport(p), []string{`FAIL names "gone", which is not a physical slot on the primary: the relay's changes wait for it forever`,
		`FAIL names "down", which is not active`, `FAIL names "lost", which is invalidated`})
	// Without failover slots nobody waits: warnings.
	p.slotFailover = false
	expect(t, evalReport(p), []string{`WARN names "gone"`}, Fail)
}

func TestStandbyCopyOfTheSlot(t *testing.T) {
	for _, tc := range []struct {
		slot standbySlot
		want string
	}{
		{standbySlot{failover: true}, `FAIL has a slot "outbox_relay" with synced = false | on the standby: SELECT pg_drop_replication_slot('outbox_relay')`},
		{standbySlot{synced: true, failover: true, temporary: true}, "FAIL is not persisted yet (temporary)"},
		{standbySlot{synced: true, failover: true, invalidation: "rows_removed"}, "FAIL is invalidated (rows_removed)"},
		{standbySlot{synced: true}, "FAIL has failover = false"},
	} {
		s := goodStandby()
		s.slot = &tc.slot
		expect(t, evalReport(goodPrimary(), s), []string{tc.want})
	}
}

func TestStandbyIdentity(t *testing.T) {
	s := goodStandby()
	s.inRecovery = false
	r := evalReport(goodPrimary(), s)
	expect(t, r, []string{"FAIL is not in recovery: not a standby"})
	if len(r.Findings) != 3 { // slot flag, synchronized_standby_slots, this
		t.Errorf("checks went on past a server that is no standby:\n%s", strings.Join(lines(r), "\n"))
	}
	s = goodStandby()
	s.systemID = "8"
	expect(t, evalReport(goodPrimary(), s), []string{"FAIL system identifier 8 differs from the primary's 7"})
	s = standbyFacts{name: "h:1", err: errors.New("failed to connect to `user=x`:\n\th:1: refused\n\th:1: refused")}
	r = evalReport(goodPrimary(), s)
	expect(t, r, []string{"FAIL cannot check: failed to connect to `user=x`: h:1: refused h:1: refused"})
	s = goodStandby()
	s.conninfo, s.conninfoErr = "", errors.New("permission denied")
	expect(t, evalReport(goodPrimary(), s), []string{"WARN cannot read primary_conninfo | run doctor as a role with pg_read_all_settings"}, Fail)
}

func TestStandbySlotName(t *testing.T) {
	s := goodStandby()
	s.settings["primary_slot_name"] = ""
	expect(t, evalReport(goodPrimary(), s), []string{"FAIL primary_slot_name is empty | on the primary: SELECT pg_create_physical_replication_slot"})
	s.settings["primary_slot_name"] = "nope"
	expect(t, evalReport(goodPrimary(), s), []string{`FAIL primary_slot_name is "nope", which is not a physical slot on the primary`})
	p := goodPrimary()
	p.physical["Sb2"] = physicalSlot{active: true}
	s.settings["primary_slot_name"] = "Sb2"
	expect(t, evalReport(p, s), []string{`FAIL not in the primary's synchronized_standby_slots | on the primary: ALTER SYSTEM SET synchronized_standby_slots = 'sb1, "Sb2"'`})
}

// TestFailoverBefore17: 15 and 16 have no failover slots: doctor says so
// when there is a standby, and checks only what those standbys have.
func TestFailoverBefore17(t *testing.T) {
	p := goodPrimary()
	p.version, p.slotFailover, p.syncSlots = 160010, false, nil
	s := goodStandby()
	s.settings = map[string]string{"hot_standby_feedback": "off", "primary_slot_name": "", "wal_level": "replica"}
	s.slot = nil
	r := evalReport(p, s)
	expect(t, r, []string{"WARN PostgreSQL 16 has no failover slots (they need 17) | after a failover run outbox-relay recover",
		"PASS in recovery", "WARN hot_standby_feedback is off"}, Fail)
	if len(r.Findings) != 3 {
		t.Errorf("checks of 17's settings on 16:\n%s", strings.Join(lines(r), "\n"))
	}
}

func TestSplitNames(t *testing.T) {
	got := splitNames(` sb1, "Sb,2" ,SB3,,"a""b"`)
	if want := []string{"sb1", "Sb,2", "sb3", `a"b`}; !slices.Equal(got, want) {
		t.Fatalf("splitNames = %q, want %q", got, want)
	}
	if len(splitNames("")) != 0 {
		t.Fatal("empty setting names a slot")
	}
	if got := joinNames([]string{"sb1", "Sb,2", "o'k"}); got != `sb1, "Sb,2", "o''k"` {
		t.Fatalf("joinNames = %s", got)
	}
}

func TestParsePhysical(t *testing.T) {
	got, err := parsePhysical(`[["sb1", true, "reserved"], ["sb2", false, ""]]`)
	if err != nil || got["sb1"] != (physicalSlot{active: true, walStatus: "reserved"}) || got["sb2"].active || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
}

// TestFailoverChainProviderFixes: on a managed service (here RDS, whose
// standbys are read replicas with their own parameter groups) the chain's
// settings are fixed in the provider's way, never with ALTER SYSTEM.
func TestFailoverChainProviderFixes(t *testing.T) {
	p := goodPrimary()
	p.provider = pgprovider.Provider{Kind: pgprovider.RDS}
	p.syncSlots = nil
	s := goodStandby()
	s.settings = map[string]string{"sync_replication_slots": "off", "hot_standby_feedback": "off", "primary_slot_name": "sb1", "wal_level": "replica"}
	r := evalReport(p, s)
	expect(t, r, []string{
		"FAIL sync_replication_slots is off | on the standby: set sync_replication_slots = on in the instance's custom DB parameter group (a dynamic parameter: no reboot)",
		"FAIL hot_standby_feedback is off | on the standby: set hot_standby_feedback = on in the instance's custom DB parameter group",
		"FAIL wal_level is replica | on the standby: set rds.logical_replication = 1",
		`FAIL not in the primary's synchronized_standby_slots | on the primary: set synchronized_standby_slots = sb1 in the instance's custom DB parameter group`,
	})
	for _, l := range lines(r) {
		if strings.Contains(l, "ALTER SYSTEM SET sync") || strings.Contains(l, "ALTER SYSTEM SET hot") {
			t.Errorf("RDS fix proposes ALTER SYSTEM: %s", l)
		}
	}
}
