package doctor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// OpenStandby connects to the standby at url for CheckFailover. A failed
// connection is returned in Standby.Err, to be reported as a finding: the
// primary's checks still run. close releases the connection. before, when
// not nil, sets the credentials first, as for the primary (the same role
// signs in on a standby).
func OpenStandby(ctx context.Context, url string, before func(context.Context, *pgconn.Config) error) (s Standby, close func()) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return Standby{Name: "(unparsable --standby-url)", Err: err}, func() {}
	}
	s.Name = cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if before != nil {
		if err := before(cctx, &cfg.Config); err != nil {
			s.Err = err
			return s, func() {}
		}
	}
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		s.Err = err
		return s, func() {}
	}
	s.DB = conn
	return s, func() { conn.Close(context.Background()) }
}

// checkStandbyBasics checks what makes s a standby of this primary, on
// every version: it is in recovery, it has the primary's system
// identifier, and (a piece of the failover chain, but harmless before 17)
// hot_standby_feedback. flag is the one that named it, for the fixes. It
// reports whether the chain checks can go on.
func checkStandbyBasics(p primaryFacts, s standbyFacts, flag string, r *Report) bool {
	check := "standby " + s.name
	switch {
	case s.err != nil:
		r.add(check, Fail, "cannot check: "+oneLine(s.err.Error()), "check "+flag+", that the standby accepts connections (pg_hba.conf) and the role's access")
		return false
	case !s.inRecovery:
		r.add(check, Fail, "is not in recovery: not a standby (a promoted standby, or the primary itself?)", "point "+flag+" at a standby of this primary")
		return false
	case s.systemID != p.systemID:
		r.add(check, Fail, fmt.Sprintf("system identifier %s differs from the primary's %s: a standby of another cluster", s.systemID, p.systemID),
			"point "+flag+" at a standby of this primary")
		return false
	}
	r.add(check, Pass, "in recovery, same system identifier as the primary", "")
	if p.version < failoverVersion && s.settings["hot_standby_feedback"] != "on" {
		r.add(check, Warn, "hot_standby_feedback is off: a synchronized slot there needs it once on PostgreSQL 17+ (failover slots)",
			"on the standby: "+p.provider.SettingFix("hot_standby_feedback", "on"))
	}
	return true
}

// dbnameKey finds a dbname keyword in a libpq key=value connection string.
var dbnameKey = regexp.MustCompile(`(^|\s)dbname\s*=`)

// checkStandbyChain checks the standby's half of the failover chain on
// 17+: the settings slot synchronization needs, its physical slot named in
// synchronized_standby_slots, and the synchronized copy of the relay's slot.
func checkStandbyChain(p primaryFacts, slotName string, s standbyFacts, level Level, r *Report) {
	check := "standby " + s.name
	before := len(r.Findings)
	reload := "; SELECT pg_reload_conf()"
	if v := s.settings["sync_replication_slots"]; v != "on" {
		r.add(check, level, fmt.Sprintf("sync_replication_slots is %s: the standby does not copy the relay's slot, so a failover to it loses the slot", orNone(v)),
			"on the standby: "+p.provider.SettingFix("sync_replication_slots", "on"))
	}
	if s.settings["hot_standby_feedback"] != "on" {
		r.add(check, level, "hot_standby_feedback is off: the primary may remove catalog rows the synchronized slot still needs, which invalidates the copy",
			"on the standby: "+p.provider.SettingFix("hot_standby_feedback", "on"))
	}
	if s.settings["wal_level"] != "logical" {
		r.add(check, level, fmt.Sprintf("wal_level is %s: slot synchronization needs logical on the standby too", orNone(s.settings["wal_level"])),
			"on the standby: "+p.provider.WALLevelFix())
	}
	standbySlotName(p, s, check, level, r)
	switch {
	case s.conninfoErr != nil:
		r.add(check, Warn, "cannot read primary_conninfo: "+s.conninfoErr.Error(),
			"run doctor as a role with pg_read_all_settings (GRANT pg_read_all_settings TO <role>), or check that primary_conninfo has a dbname")
	case !dbnameKey.MatchString(s.conninfo):
		r.add(check, level, "primary_conninfo has no dbname: slot synchronization connects to a database on the primary to read the slots, and cannot",
			"on the standby: add dbname=postgres (any database; streaming ignores it) to primary_conninfo (ALTER SYSTEM SET primary_conninfo = '... dbname=postgres')"+reload)
	}
	standbyCopy(p, slotName, s, check, level, r)
	if len(r.Findings) == before {
		r.add(check, Pass, fmt.Sprintf("synchronizes %s (synced = true, failover = true)", pgx.Identifier{slotName}.Sanitize()), "")
	}
}

// standbySlotName checks primary_slot_name: set, a physical slot on the
// primary, and named in synchronized_standby_slots.
func standbySlotName(p primaryFacts, s standbyFacts, check string, level Level, r *Report) {
	n := s.settings["primary_slot_name"]
	q := pgx.Identifier{n}.Sanitize()
	switch {
	case n == "":
		r.add(check, level, "primary_slot_name is empty: slot synchronization needs a physical slot, which synchronized_standby_slots then names",
			"on the primary: SELECT pg_create_physical_replication_slot('<name>'); on the standby: ALTER SYSTEM SET primary_slot_name = '<name>'; SELECT pg_reload_conf(); "+
				"then add <name> to the primary's synchronized_standby_slots")
	case !hasSlot(p, n):
		r.add(check, level, fmt.Sprintf("primary_slot_name is %s, which is not a physical slot on the primary", q),
			fmt.Sprintf("on the primary: SELECT pg_create_physical_replication_slot('%s')", n))
	case !slices.Contains(p.syncSlots, n):
		r.add(check, level, fmt.Sprintf("its slot %s is not in the primary's synchronized_standby_slots: the relay can publish events this standby does not have yet", q),
			"on the primary: "+p.provider.SettingFix("synchronized_standby_slots", joinNames(append(slices.Clone(p.syncSlots), n))))
	}
}

func hasSlot(p primaryFacts, n string) bool {
	_, ok := p.physical[n]
	return ok
}

// standbyCopy checks the relay's slot on the standby: present, synced
// from the primary, a failover slot, persistent and valid; and not left
// over from a primary slot that is no failover slot (any more).
func standbyCopy(p primaryFacts, slotName string, s standbyFacts, check string, level Level, r *Report) {
	q := pgx.Identifier{slotName}.Sanitize()
	c := s.slot
	switch {
	case c != nil && c.synced && !p.slotFailover:
		r.add(check, level, fmt.Sprintf("its copy of %s is obsolete: the primary's slot has failover = false, so the standby drops the copy and a failover loses the slot", q),
			"set failover = true on the primary's slot: stop the relay, then outbox-relay migrate --failover-slot")
	case c == nil:
		r.add(check, level, fmt.Sprintf("has no copy of slot %s: a failover to it loses the slot", q),
			"with failover = true on the primary's slot and the settings above the standby copies it within seconds; check the standby's log for slot synchronization errors")
	case !c.synced:
		r.add(check, level, fmt.Sprintf("has a slot %s with synced = false: it was created there, not copied from the primary, and does not follow the relay", q),
			fmt.Sprintf("on the standby: SELECT pg_drop_replication_slot('%s'); the standby then copies the primary's", slotName))
	case c.invalidation != "":
		r.add(check, level, fmt.Sprintf("its copy of %s is invalidated (%s): a failover to it cannot resume the relay", q, c.invalidation),
			"check hot_standby_feedback and the primary's max_slot_wal_keep_size; the standby recreates the copy from the primary's slot")
	case c.temporary:
		r.add(check, level, fmt.Sprintf("its copy of %s is not persisted yet (temporary): the standby has not caught up with the primary's slot, and a promotion now drops it", q),
			"wait for the standby to catch up (pg_stat_replication on the primary); the copy is then persisted")
	case !c.failover:
		r.add(check, level, fmt.Sprintf("its copy of %s has failover = false", q), "set failover = true on the primary's slot: outbox-relay migrate --failover-slot")
	}
}

// oneLine joins the lines of a multi-line error (pgx lists each address
// it tried) for the one-line report.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, ":\n", ": ")), " ")
}

func orNone(v string) string {
	if v == "" {
		return "not set"
	}
	return v
}

// plainName is a name synchronized_standby_slots takes unquoted.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// joinNames renders names as a synchronized_standby_slots value, inside
// the single quotes of ALTER SYSTEM SET.
func joinNames(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		if !plainName.MatchString(n) {
			n = pgx.Identifier{n}.Sanitize()
		}
		out[i] = strings.ReplaceAll(n, "'", "''")
	}
	return strings.Join(out, ", ")
}
