package cleanup

import (
	"strings"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Every statement of a run binds the rule's values first:
// $1 the cutoff, $2 the fence xid (64-bit), $3 the outbox table's name as
// dead-letter rows record it.
func ruleArgs(b Bound, t migrations.Table) []any {
	return []any{b.Cutoff, int64(b.Xid), t.String()}
}

// confirmedCond is rules 1 and 2 for alias o: old enough and committed
// before the fence (age() compares the 32-bit xmin with the 64-bit fence;
// a wrapped-around xmin compares as young and is kept).
const confirmedCond = `o.created_at < $1
	AND age(o.xmin) > age(($2::bigint % 4294967296)::text::xid)`

// openDeadLetterCond is rule 3 for alias o: no open dead-letter row of the
// event, its aggregate not quarantined, and the ids not NULL (NULLs are
// always poison and cannot be matched to their dead-letter rows).
const openDeadLetterCond = `o.event_id IS NOT NULL AND o.aggregate_id IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM DL d WHERE d.outbox_table = $3
		AND d.event_id = o.event_id::text AND d.status IN ('dead', 'parked'))
	AND NOT EXISTS (SELECT 1 FROM DL d WHERE d.outbox_table = $3
		AND d.aggregate_type = o.aggregate_type AND d.aggregate_id = o.aggregate_id AND d.status IN ('dead', 'parked'))`

// eligibleCond is the whole rule for alias alias, against the dead-letter
// table of t.
func eligibleCond(t migrations.Table, alias string) string {
	c := strings.ReplaceAll(confirmedCond+"\n\tAND "+openDeadLetterCond, "o.", alias+".")
	return strings.ReplaceAll(c, "FROM DL d", "FROM "+migrations.DeadLetterTable(t).Quoted()+" d")
}
