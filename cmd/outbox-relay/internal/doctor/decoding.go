package doctor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// decodingVersion is the first server_version_num that decodes on a hot
// standby (PostgreSQL 16).
const decodingVersion = 160000

// CheckDecodingStandby checks the hot standby the relay decodes from
// (--replication-url): a standby of this primary on PostgreSQL 16+, with
// hot_standby_feedback on and a physical slot on the primary
// (primary_slot_name), without which the primary removes catalog rows the
// logical slot needs and PostgreSQL invalidates it; and the relay's slot
// there, valid, with no namesake left on the primary.
func CheckDecodingStandby(ctx context.Context, db DB, t Target, s Standby, r *Report) {
	const check = "decoding standby"
	p, err := readPrimary(ctx, db, t.Slot)
	if err != nil {
		r.add(check, Fail, "cannot read the primary: "+err.Error(), "check the role's access")
		return
	}
	p.provider = provider(ctx, db, &Report{})
	f := readStandby(ctx, s, t.Slot)
	if !checkStandbyBasics(p, f, "--replication-url", r) {
		return
	}
	before := len(r.Findings)
	if p.version < decodingVersion {
		r.add(check, Fail, fmt.Sprintf("PostgreSQL %d.%d cannot decode on a standby (16 or later)", p.version/10000, p.version%10000),
			"decode on the primary (drop --replication-url), or upgrade")
		return
	}
	if f.settings["hot_standby_feedback"] != "on" {
		r.add(check, Fail, "hot_standby_feedback is off: the primary may remove catalog rows the slot needs, and PostgreSQL then invalidates it",
			"on the standby: "+p.provider.SettingFix("hot_standby_feedback", "on"))
	}
	switch n := f.settings["primary_slot_name"]; {
	case n == "":
		r.add(check, Fail, "primary_slot_name is empty: without a physical slot on the primary, hot_standby_feedback is lost whenever the standby reconnects",
			"on the primary: SELECT pg_create_physical_replication_slot('<name>'); on the standby: ALTER SYSTEM SET primary_slot_name = '<name>'; SELECT pg_reload_conf()")
	case !hasSlot(p, n):
		r.add(check, Fail, fmt.Sprintf("primary_slot_name is %s, which is not a physical slot on the primary", pgx.Identifier{n}.Sanitize()),
			fmt.Sprintf("on the primary: SELECT pg_create_physical_replication_slot('%s')", n))
	}
	q := pgx.Identifier{t.Slot}.Sanitize()
	switch {
	case f.slot == nil:
		r.add(check, Warn, fmt.Sprintf("has no slot %s yet: events committed before it is created are not relayed", q),
			"outbox-relay migrate --replication-url <the standby> (creates it there)")
	case f.slot.invalidation != "":
		r.add(check, Fail, fmt.Sprintf("slot %s is invalidated (invalidation_reason = %s): events may be missing", q, f.slot.invalidation),
			"outbox-relay recover, after fixing hot_standby_feedback and primary_slot_name")
	}
	if p.slotExists {
		r.add(check, Warn, fmt.Sprintf("the primary has a slot %s too: unused while the relay decodes on the standby, it retains WAL there", q),
			fmt.Sprintf("on the primary, once nothing streams from it: SELECT pg_drop_replication_slot('%s')", t.Slot))
	}
	if len(r.Findings) == before {
		r.add(check, Pass, fmt.Sprintf("PostgreSQL 16+, hot_standby_feedback on, primary_slot_name a physical slot on the primary, slot %s there", q), "")
	}
}
