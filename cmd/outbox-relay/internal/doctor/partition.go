package doctor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// partitionRoot checks that the publication of a partitioned outbox sends
// inserts under the outbox's own name (publish_via_partition_root): without
// it pgoutput names the leaf partitions and the relay skips every event.
func partitionRoot(ctx context.Context, db DB, t Target, r *Report) {
	quoted := pgx.Identifier{t.Schema, t.Table}.Sanitize()
	var partitioned, viaRoot *bool
	err := db.QueryRow(ctx, `SELECT (SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)),
		(SELECT pubviaroot FROM pg_publication WHERE pubname = $2)`, quoted, t.Publication).Scan(&partitioned, &viaRoot)
	switch {
	case err != nil:
		r.add("partitioned outbox", Warn, "cannot read: "+err.Error(), "check the role's access")
	case partitioned == nil || !*partitioned:
		// a plain table: nothing to check
	case viaRoot != nil && !*viaRoot:
		r.add("partitioned outbox", Fail, fmt.Sprintf("%s is partitioned but publication %s lacks publish_via_partition_root: its events are not relayed", quoted, t.Publication),
			"outbox-relay migrate (sets it), or ALTER PUBLICATION "+pgx.Identifier{t.Publication}.Sanitize()+" SET (publish_via_partition_root = true)")
	default:
		r.add("partitioned outbox", Pass, quoted+" is partitioned, published via its root", "")
	}
}
