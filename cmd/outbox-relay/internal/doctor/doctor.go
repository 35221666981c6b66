// Package doctor checks a deployment's PostgreSQL settings, publication and
// slot before (or while) the relay runs, and reports each finding as pass,
// warn or fail with the fix.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
	"github.com/outbox-relay/outbox-relay/slot"
)

// Level is the severity of a finding.
type Level string

// Levels, from fine to broken.
const (
	Pass Level = "PASS"
	Warn Level = "WARN"
	Fail Level = "FAIL"
)

// Finding is one check's result. Fix is empty for a pass.
type Finding struct {
	Check  string
	Level  Level
	Detail string
	Fix    string
}

// Report is every finding of a run, in check order.
type Report struct{ Findings []Finding }

func (r *Report) add(check string, l Level, detail, fix string) {
	r.Findings = append(r.Findings, Finding{Check: check, Level: l, Detail: detail, Fix: fix})
}

// Failed reports whether any finding is a fail.
func (r *Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Level == Fail {
			return true
		}
	}
	return false
}

// Write prints the report, one finding per line and its fix below it.
func (r *Report) Write(w io.Writer) {
	counts := map[Level]int{}
	for _, f := range r.Findings {
		counts[f.Level]++
		fmt.Fprintf(w, "%-4s  %-28s %s\n", f.Level, f.Check, f.Detail)
		if f.Fix != "" {
			fmt.Fprintf(w, "      %-28s fix: %s\n", "", f.Fix)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed\n", counts[Pass], counts[Warn], counts[Fail])
}

// DB is what the checks need from a pgx connection or pool.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Target names what the relay uses in PostgreSQL.
type Target struct {
	Slot, Publication string
	Schema, Table     string
	// Cleanup: the relay runs the cleanup schedule, so its role also
	// needs DELETE on the outbox.
	Cleanup bool
	// SlotDB is the hot standby the relay decodes from (--replication-url),
	// where the slot lives; nil: the primary.
	SlotDB DB
}

// CheckPostgres recognises the provider (internal/pgprovider) and runs the
// server, publication, role privilege and slot checks, whose fixes are the
// provider's.
func CheckPostgres(ctx context.Context, db DB, t Target, r *Report) {
	p := provider(ctx, db, r)
	settings(ctx, db, p, r)
	publication(ctx, db, t, r)
	privileges(ctx, db, t, p, r)
	slotDB := db
	if t.SlotDB != nil {
		slotDB = t.SlotDB
	}
	replicationSlot(ctx, slotDB, t, r)
}

func setting(ctx context.Context, db DB, name string) (string, error) {
	var v string
	err := db.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v)
	return v, err
}

func settings(ctx context.Context, db DB, p pgprovider.Provider, r *Report) {
	if v, err := setting(ctx, db, "wal_level"); err != nil {
		r.add("wal_level", Fail, "cannot read: "+err.Error(), "check the database URL and the role's access")
	} else if v != "logical" {
		r.add("wal_level", Fail, fmt.Sprintf("is %q; logical replication needs logical", v),
			p.WALLevelFix())
	} else {
		r.add("wal_level", Pass, "logical", "")
	}

	var maxSlots, usedSlots, maxSenders, usedSenders int
	err := db.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)`).
		Scan(&maxSlots, &usedSlots, &maxSenders, &usedSenders)
	if err != nil {
		r.add("max_replication_slots", Fail, "cannot read: "+err.Error(), "check the role's access")
	} else {
		lim := func(name string, max, used int, fix string) {
			switch {
			case used >= max:
				r.add(name, Fail, fmt.Sprintf("%d of %d in use: no room for the relay", used, max), fix)
			case max-used < 2:
				r.add(name, Warn, fmt.Sprintf("%d of %d in use: one left", used, max), fix)
			default:
				r.add(name, Pass, fmt.Sprintf("%d of %d in use", used, max), "")
			}
		}
		lim("max_replication_slots", maxSlots, usedSlots, p.SettingFix("max_replication_slots", strconv.Itoa(max(10, maxSlots*2))))
		lim("max_wal_senders", maxSenders, usedSenders, p.SettingFix("max_wal_senders", strconv.Itoa(max(10, maxSenders*2))))
	}

	if v, err := setting(ctx, db, "max_slot_wal_keep_size"); err == nil {
		if v == "-1" {
			r.add("max_slot_wal_keep_size", Warn, "unlimited: a stopped relay or a Kafka outage retains WAL until the disk fills",
				p.SettingFix("max_slot_wal_keep_size", "<disk budget, e.g. 50GB>"))
		} else {
			r.add("max_slot_wal_keep_size", Pass, v, "")
		}
	}
	if risk := p.SlotRisk(); risk != "" {
		r.add("slot removal", Warn, risk, "alert when the relay is down; after such a removal run outbox-relay recover")
	}
	if v, err := setting(ctx, db, "wal_sender_timeout"); err == nil {
		d, perr := pgDuration(v)
		switch {
		case perr != nil:
			r.add("wal_sender_timeout", Warn, fmt.Sprintf("unreadable value %q", v), "")
		case d == 0:
			r.add("wal_sender_timeout", Warn, "0 (disabled): a dead relay keeps the slot busy and a standby cannot take over",
				p.SettingFix("wal_sender_timeout", "60s")+" (or set --wal-sender-timeout)")
		case d < 10*time.Second:
			r.add("wal_sender_timeout", Warn, fmt.Sprintf("%s: large transactions may be cut off while the server decodes them", d),
				"raise it to 30s or more, or set --wal-sender-timeout for the relay only")
		default:
			r.add("wal_sender_timeout", Pass, d.String(), "")
		}
	}
}

// pgDuration parses current_setting's rendering of a time setting.
func pgDuration(v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	units := []struct {
		suffix string
		d      time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"min", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			if i, err := strconv.Atoi(n); err == nil {
				return time.Duration(i) * u.d, nil
			}
		}
	}
	if i, err := strconv.Atoi(v); err == nil {
		return time.Duration(i) * time.Millisecond, nil
	}
	return 0, fmt.Errorf("bad duration %q", v)
}

func publication(ctx context.Context, db DB, t Target, r *Report) {
	partitionRoot(ctx, db, t, r)
	quoted := pgx.Identifier{t.Schema, t.Table}.Sanitize()
	pub := pgx.Identifier{t.Publication}.Sanitize()
	var ins, upd, del, trunc, all bool
	err := db.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables FROM pg_publication WHERE pubname = $1`,
		t.Publication).Scan(&ins, &upd, &del, &trunc, &all)
	if errors.Is(err, pgx.ErrNoRows) {
		r.add("publication", Fail, fmt.Sprintf("%s does not exist", pub), "outbox-relay migrate (or CREATE PUBLICATION "+pub+" FOR TABLE "+quoted+" WITH (publish = 'insert'))")
		return
	}
	if err != nil {
		r.add("publication", Fail, "cannot read: "+err.Error(), "check the role's access")
		return
	}
	if !ins {
		r.add("publication", Fail, pub+" does not publish inserts", "ALTER PUBLICATION "+pub+" SET (publish = 'insert')")
	} else if upd || del || trunc {
		r.add("publication", Warn, pub+" also publishes updates, deletes or truncates (decoded and skipped: wasted work)",
			"ALTER PUBLICATION "+pub+" SET (publish = 'insert')")
	} else {
		r.add("publication", Pass, pub+" publishes inserts only", "")
	}
	var has bool
	var n int
	err = db.QueryRow(ctx, `SELECT coalesce(bool_or(schemaname = $2 AND tablename = $3), false), count(*) FROM pg_publication_tables WHERE pubname = $1`,
		t.Publication, t.Schema, t.Table).Scan(&has, &n)
	switch {
	case err != nil:
		r.add("publication tables", Fail, "cannot read: "+err.Error(), "check the role's access")
	case !has:
		r.add("publication tables", Fail, pub+" does not include "+quoted, "ALTER PUBLICATION "+pub+" ADD TABLE "+quoted)
	case all || n > 1:
		r.add("publication tables", Warn, fmt.Sprintf("%s holds %d tables: the others are decoded and skipped", pub, n),
			"publish only the outbox: ALTER PUBLICATION "+pub+" SET TABLE "+quoted)
	default:
		r.add("publication tables", Pass, quoted, "")
	}
}

// replicationSlot reads the slot as the relay does (slot.Manager.Status,
// which on a standby measures from the replayed position and tells the
// causes of an invalidation apart).
func replicationSlot(ctx context.Context, db DB, t Target, r *Report) {
	st, err := slot.NewManager(db, slot.Config{Name: t.Slot}).Status(ctx)
	if errors.Is(err, slot.ErrSlotNotFound) {
		r.add("slot", Warn, fmt.Sprintf("%q does not exist: events committed before it is created are not relayed", t.Slot), "outbox-relay migrate (creates it)")
		return
	}
	if err != nil {
		r.add("slot", Fail, "cannot read: "+err.Error(), "check the role's access")
		return
	}
	switch {
	case st.Plugin != slot.Plugin:
		r.add("slot", Fail, fmt.Sprintf("%q uses plugin %q, the relay needs pgoutput", t.Slot, st.Plugin),
			"outbox-relay slot drop, then outbox-relay slot create (or choose another --slot)")
	case st.LostError() != nil:
		r.add("slot", Fail, st.LostError().Error(), "outbox-relay recover (back-fills from the outbox table), and the change the detail names")
	case st.WALStatus == "unreserved":
		r.add("slot", Warn, fmt.Sprintf("%q is about to be invalidated (wal_status = unreserved)", t.Slot),
			"get the relay streaming now; raise max_slot_wal_keep_size")
	default:
		detail := fmt.Sprintf("%q pgoutput, wal_status %s, active %v", t.Slot, st.WALStatus, st.Active)
		r.add("slot", Pass, detail, "")
	}
	if st.ConfirmedFlushLSN == 0 {
		return
	}
	detail := fmt.Sprintf("%d bytes not yet confirmed", st.LagBytes)
	if st.SafeWALSize >= 0 {
		detail += fmt.Sprintf(", %d bytes until invalidation", st.SafeWALSize)
	}
	if st.SafeWALSize >= 0 && st.SafeWALSize < st.LagBytes {
		r.add("slot lag", Warn, detail, "the slot is closer to invalidation than its lag: check the relay and Kafka")
	} else {
		r.add("slot lag", Pass, detail, "")
	}
}
