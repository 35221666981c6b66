package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
)

// The failover chain (PostgreSQL 17+) keeps the relay's slot through a
// failover: the slot has failover = true; the primary's
// synchronized_standby_slots names each standby's physical slot, so the
// relay never receives a change before those standbys have its WAL; each
// standby copies the slot (sync_replication_slots = on, which also needs
// hot_standby_feedback, primary_slot_name, a dbname in primary_conninfo and
// wal_level = logical there) and shows it with synced = true.
//
// Severity: a missing piece fails only when the chain is in use, i.e. the
// slot has failover = true. Then the operator relies on it, and a gap
// means a failover loses the slot or lets the relay publish events the new
// primary never had. With failover = false the gaps are warnings: the
// slot flag itself is the first fix. The flag fails when a standby is named
// with --standby-url (that standby cannot carry the slot over) and warns
// when the primary merely has physical slots. A primary with neither gets
// no chain findings: there is nothing to fail over to.

const failoverVersion = 170000

// Standby is a standby to check, reached with --standby-url.
type Standby struct {
	// Name is host:port, for the report: never the URL, which may hold a
	// password.
	Name string
	// DB is the connection; nil when connecting failed (Err).
	DB  DB
	Err error
}

// physicalSlot is a physical slot on the primary.
type physicalSlot struct {
	active    bool
	walStatus string
}

// primaryFacts is what the chain checks read on the primary.
type primaryFacts struct {
	version      int
	systemID     string
	slotExists   bool
	slotFailover bool
	// syncSlots is synchronized_standby_slots, parsed (17+).
	syncSlots []string
	physical  map[string]physicalSlot
	// provider chooses the fixes' wording; its standbys run on the same
	// service.
	provider pgprovider.Provider
}

// standbySlot is the relay's slot as a standby has it.
type standbySlot struct {
	synced, failover, temporary bool
	invalidation                string
}

// standbyFacts is what the chain checks read on one standby.
type standbyFacts struct {
	name string
	// err: the standby could not be reached or read; nothing else is set.
	err        error
	inRecovery bool
	systemID   string
	// settings holds sync_replication_slots, hot_standby_feedback,
	// primary_slot_name and wal_level ("" when the server lacks one).
	settings map[string]string
	// conninfo is primary_conninfo, unless reading it failed (conninfoErr:
	// it needs superuser or pg_read_all_settings).
	conninfo    string
	conninfoErr error
	// slot is the relay's slot on the standby; nil when absent.
	slot *standbySlot
}

// CheckFailover checks the failover chain of the relay's slot from the
// primary db through each standby and adds a finding per piece, each with
// its fix. Before PostgreSQL 17 it says that failover slots need 17 and
// checks only what those standbys have (recovery, system identifier,
// hot_standby_feedback).
func CheckFailover(ctx context.Context, db DB, t Target, standbys []Standby, r *Report) {
	p, err := readPrimary(ctx, db, t.Slot)
	if err != nil {
		level := Warn // nothing known to be wrong, but the chain is unchecked
		if len(standbys) > 0 {
			level = Fail
		}
		r.add("failover slot", level, "cannot read the failover chain: "+err.Error(), "check the role's access")
		return
	}
	p.provider, _ = pgprovider.Detect(ctx, db) // unrecognised: the self-hosted fixes
	facts := make([]standbyFacts, len(standbys))
	for i, s := range standbys {
		facts[i] = readStandby(ctx, s, t.Slot)
	}
	evalFailover(p, t.Slot, facts, r)
}

func readPrimary(ctx context.Context, db DB, slotName string) (primaryFacts, error) {
	var p primaryFacts
	var syncSlots, physical string
	err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, (SELECT system_identifier::text FROM pg_control_system()),
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		coalesce((SELECT (to_jsonb(s) ->> 'failover')::bool FROM pg_replication_slots s WHERE slot_name = $1), false),
		coalesce(current_setting('synchronized_standby_slots', true), ''),
		coalesce((SELECT json_agg(json_build_array(slot_name, active, coalesce(wal_status, '')))::text
			FROM pg_replication_slots WHERE slot_type = 'physical'), '[]')`, slotName).
		Scan(&p.version, &p.systemID, &p.slotExists, &p.slotFailover, &syncSlots, &physical)
	if err != nil {
		return p, err
	}
	p.syncSlots = splitNames(syncSlots)
	p.physical, err = parsePhysical(physical)
	return p, err
}

func readStandby(ctx context.Context, s Standby, slotName string) standbyFacts {
	f := standbyFacts{name: s.Name, err: s.Err, settings: map[string]string{}}
	if s.DB == nil {
		if f.err == nil {
			f.err = errors.New("no connection")
		}
		return f
	}
	var sync, feedback, slotSetting, walLevel string
	err := s.DB.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system()),
		coalesce(current_setting('sync_replication_slots', true), ''), current_setting('hot_standby_feedback'),
		current_setting('primary_slot_name'), current_setting('wal_level')`).
		Scan(&f.inRecovery, &f.systemID, &sync, &feedback, &slotSetting, &walLevel)
	if err != nil {
		f.err = err
		return f
	}
	f.settings["sync_replication_slots"], f.settings["hot_standby_feedback"] = sync, feedback
	f.settings["primary_slot_name"], f.settings["wal_level"] = slotSetting, walLevel
	if err := s.DB.QueryRow(ctx, `SELECT current_setting('primary_conninfo')`).Scan(&f.conninfo); err != nil {
		f.conninfoErr = err
	}
	var sl standbySlot
	err = s.DB.QueryRow(ctx, `SELECT coalesce((to_jsonb(s) ->> 'synced')::bool, false), coalesce((to_jsonb(s) ->> 'failover')::bool, false),
		temporary, coalesce(to_jsonb(s) ->> 'invalidation_reason', '')
		FROM pg_replication_slots s WHERE slot_name = $1`, slotName).Scan(&sl.synced, &sl.failover, &sl.temporary, &sl.invalidation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		f.err = err
	default:
		f.slot = &sl
	}
	return f
}

// parsePhysical reads the JSON list of [name, active, wal_status] rows.
func parsePhysical(s string) (map[string]physicalSlot, error) {
	var rows [][]any
	if err := json.Unmarshal([]byte(s), &rows); err != nil {
		return nil, fmt.Errorf("read physical slots: %w", err)
	}
	out := make(map[string]physicalSlot, len(rows))
	for _, row := range rows {
		name, _ := row[0].(string)
		active, _ := row[1].(bool)
		walStatus, _ := row[2].(string)
		out[name] = physicalSlot{active: active, walStatus: walStatus}
	}
	return out, nil
}

// splitNames parses a list setting of names (synchronized_standby_slots)
// as PostgreSQL does: comma-separated, double quotes keep case and commas,
// unquoted names are folded to lower case.
func splitNames(s string) []string {
	var names []string
	var cur strings.Builder
	quoted, inQuotes := false, false
	flush := func() {
		n := strings.TrimSpace(cur.String())
		if !quoted {
			n = strings.ToLower(n)
		}
		if n != "" {
			names = append(names, n)
		}
		cur.Reset()
		quoted = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && inQuotes && i+1 < len(s) && s[i+1] == '"':
			cur.WriteByte('"')
			i++
		case c == '"':
			inQuotes, quoted = !inQuotes, true
		case c == ',' && !inQuotes:
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return names
}

// evalFailover turns the facts into findings (see the package comment on
// the chain for the levels).
func evalFailover(p primaryFacts, slotName string, standbys []standbyFacts, r *Report) {
	haveStandby := len(standbys) > 0 || len(p.physical) > 0
	if p.version < failoverVersion {
		if haveStandby {
			r.add("failover slot", Warn, fmt.Sprintf("PostgreSQL %d has no failover slots (they need 17): after a failover the new primary lacks slot %q and the relay refuses to start",
				p.version/10000, slotName),
				"after a failover run outbox-relay recover on the new primary (it recreates the slot and back-fills from the outbox table); upgrade to PostgreSQL 17+ to keep the slot")
		}
		for _, s := range standbys {
			checkStandbyBasics(p, s, "--standby-url", r)
		}
		return
	}
	level := Warn
	if p.slotFailover {
		level = Fail
	}
	slotFlag(p, slotName, haveStandby, len(standbys) > 0, r)
	if haveStandby || len(p.syncSlots) > 0 {
		syncStandbySlots(p, level, len(standbys) > 0, r)
	}
	for _, s := range standbys {
		if checkStandbyBasics(p, s, "--standby-url", r) {
			checkStandbyChain(p, slotName, s, level, r)
		}
	}
}

// slotFlag reports the failover flag of the relay's slot (17+).
func slotFlag(p primaryFacts, slotName string, haveStandby, named bool, r *Report) {
	q := pgx.Identifier{slotName}.Sanitize()
	switch {
	case !p.slotExists:
		// the slot check reports it; migrate creates it with failover = true
	case p.slotFailover:
		r.add("failover slot", Pass, fmt.Sprintf("%s has failover = true", q), "")
	case !haveStandby:
		r.add("failover slot", Pass, fmt.Sprintf("%s has failover = false; no standby (no physical slot, no --standby-url) to fail over to", q), "")
	default:
		level := Warn
		if named {
			level = Fail
		}
		r.add("failover slot", level, fmt.Sprintf("%s has failover = false: standbys do not keep it, so after a failover it is gone and the relay refuses to start", q),
			fmt.Sprintf("stop the relay, then outbox-relay migrate --failover-slot (ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection)", q))
	}
}

// syncStandbySlots checks synchronized_standby_slots: it must name the
// standbys' physical slots, each existing and streaming.
func syncStandbySlots(p primaryFacts, level Level, named bool, r *Report) {
	const check = "synchronized_standby_slots"
	if len(p.syncSlots) == 0 {
		if !named {
			level = Warn // a physical slot need not be a synchronizing standby's
		}
		r.add(check, level, "empty: the relay receives changes as soon as the primary flushes them, before any standby has their WAL, "+
			"and publishes them; after a failover to a standby that lagged, Kafka holds events of transactions the new primary never had, "+
			"and its copy of the slot may be missing or behind",
			"on the primary: "+p.provider.SettingFix("synchronized_standby_slots", "<each standby's primary_slot_name, comma-separated>"))
		return
	}
	ok := true
	for _, n := range p.syncSlots {
		s, exists := p.physical[n]
		q := pgx.Identifier{n}.Sanitize()
		switch {
		case !exists:
			ok = false
			r.add(check, level, fmt.Sprintf("names %s, which is not a physical slot on the primary: the relay's changes wait for it forever", q),
				fmt.Sprintf("SELECT pg_create_physical_replication_slot('%s') and set it as a standby's primary_slot_name, or remove it from synchronized_standby_slots", n))
		case s.walStatus == "lost":
			ok = false
			r.add(check, level, fmt.Sprintf("names %s, which is invalidated (wal_status = lost): the relay's changes wait for it forever", q),
				"rebuild that standby with a new physical slot, or remove it from synchronized_standby_slots")
		case !s.active:
			ok = false
			r.add(check, level, fmt.Sprintf("names %s, which is not active: its standby is down or not streaming, so the relay waits for it while WAL accumulates", q),
				"start that standby (check its primary_conninfo and log), or remove it from synchronized_standby_slots while it is down (the relay may then get ahead of it)")
		}
	}
	if ok {
		r.add(check, Pass, strings.Join(p.syncSlots, ", ")+": physical, active", "")
	}
}
