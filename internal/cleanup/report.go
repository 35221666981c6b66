package cleanup

import (
	"fmt"
	"io"
	"time"
)

// Write prints the outcome of a run of table (a dry run's counts when
// dryRun). The line "deleted N rows in B batches" is stable: tests and
// scripts read it.
func (r Result) Write(w io.Writer, table string, dryRun bool) {
	fmt.Fprintf(w, "cleanup %s: rows created before %s and below xid %d (%s)\n", table,
		r.Cutoff.UTC().Format(time.RFC3339), r.Xid, r.LimitedBy)
	if dryRun {
		fmt.Fprintf(w, "dry run: %d rows older than the cutoff; %d confirmed by a checkpoint; %d would be deleted; %d kept (not yet confirmed, dead-lettered or quarantined)\n",
			r.Old, r.Confirmed, r.Eligible, r.KeptOld())
		for _, d := range r.Dropped {
			fmt.Fprintf(w, "  would drop partition %s (%d rows)\n", d.Partition, d.Rows)
		}
		fmt.Fprintln(w, "dry run: nothing deleted")
		return
	}
	for _, d := range r.Dropped {
		fmt.Fprintf(w, "  dropped partition %s (%d rows)\n", d.Partition, d.Rows)
	}
	for _, k := range r.Kept {
		fmt.Fprintf(w, "  kept partition %s\n", k)
	}
	if r.PrunedCheckpoints > 0 {
		fmt.Fprintf(w, "  pruned %d checkpoints older than the cutoff\n", r.PrunedCheckpoints)
	}
	fmt.Fprintf(w, "deleted %d rows in %d batches, dropped %d partitions, in %s; WAL written meanwhile %d bytes\n",
		r.Deleted, r.Batches, len(r.Dropped), r.Elapsed.Round(time.Millisecond), r.WALBytes)
	if r.Stopped != "" {
		fmt.Fprintf(w, "stopped early (%s): run again to continue\n", r.Stopped)
	}
}
