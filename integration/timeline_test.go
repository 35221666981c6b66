//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestCheckpointAcrossTimelines: a real promotion (timeline 1 -> 2 of one
// cluster) read with TIMELINE_HISTORY on the relay's replication
// connection. A checkpoint of timeline 1 before the switch point applies
// on timeline 2 (Store.Resume skips to it, checkpoint show says usable);
// one past the switch point neither stops the relay nor applies; one of a
// timeline 2 does not descend from is refused.
func TestCheckpointAcrossTimelines(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	pg := StartTempCluster(t, "wal_level=logical")
	env := NewEnv(t, EnvOptions{NoMigrate: true, NoTopic: true})
	env.DatabaseURL = pg.URL
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tbl := migrations.Table{Schema: "public", Name: env.TableName}
	if _, err := migrations.Apply(ctx, pool, tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	store := checkpoint.NewStore(pool, tbl, env.Slot)
	identify := func() (checkpoint.Identity, pglogrepl.LSN) {
		t.Helper()
		conn, err := replication.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		id, wal, err := checkpoint.Identify(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return id, wal
	}
	old, _ := identify()
	fence, err := checkpoint.CaptureFence(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	saved := checkpoint.Checkpoint{LSN: fence.LSN, Identity: old, Fence: &fence}
	if err := store.Save(ctx, saved, 0); err != nil {
		t.Fatal(err)
	}

	// Promote the cluster's own data directory: restart it as a standby
	// (it replays its WAL and waits for more), then promote it.
	data := filepath.Join(pg.Dir, "data")
	if out, err := asPostgres(ctx, "touch", filepath.Join(data, "standby.signal")).CombinedOutput(); err != nil {
		t.Fatalf("standby.signal: %v\n%s", err, out)
	}
	pool.Reset()
	for _, args := range [][]string{{"-m", "fast", "-w", "restart"}, {"-w", "promote"}} {
		if out, err := asPostgres(ctx, filepath.Join(pg.BinDir, "pg_ctl"), append([]string{"-D", data, "-l", filepath.Join(pg.Dir, "server.log")}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("pg_ctl %v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "standby.signal")); err == nil {
		t.Fatal("standby.signal still there after the promotion")
	}
	id, walEnd := identify()
	if id.SystemID != old.SystemID || id.Timeline != old.Timeline+1 {
		t.Fatalf("after the promotion: %s, before %s", id, old)
	}

	conn, err := replication.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	h, err := checkpoint.ReadHistory(ctx, conn, id.Timeline)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Switches) != 1 || h.Switches[0].Timeline != old.Timeline || h.Switches[0].End < saved.LSN || h.Switches[0].End > walEnd ||
		h.Switches[0].Reason != "no recovery target specified" {
		t.Fatalf("history of timeline %d: %+v; checkpoint at %s, WAL end %s", id.Timeline, h, saved.LSN, walEnd)
	}
	end := h.Switches[0].End
	t.Logf("timeline %d ended at %s; checkpoint at %s, new WAL end %s", old.Timeline, end, saved.LSN, walEnd)

	show := func() string {
		t.Helper()
		res := env.RunCLI(30*time.Second, nil, "checkpoint", "show")
		if res.Code != 0 {
			t.Fatalf("checkpoint show: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		t.Logf("checkpoint show:\n%s", res.Stdout)
		return res.Stdout
	}

	// Within the shared WAL: applied, as on its own timeline.
	res, err := store.Resume(ctx, conn, id, 0, walEnd)
	if err != nil || res.Prev == nil || res.Prev.LSN != saved.LSN || res.SkipBefore != saved.LSN || res.Diverged != nil ||
		res.Lineage != (checkpoint.Lineage{Ancestor: true, Timeline: old.Timeline, End: end}) {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if out := show(); !strings.Contains(out, `"usable": true`) || !strings.Contains(out, "promoted standby of the same cluster") ||
		!strings.Contains(out, `"timeline_switch_lsn": "`+end.String()+`"`) {
		t.Fatalf("checkpoint show within the shared WAL:\n%s", out)
	}

	// Past the switch point (WAL the promoted standby never had): not
	// refused, not applied.
	if err := store.Save(ctx, checkpoint.Checkpoint{LSN: end + 0x1000, Identity: old}, 0); err != nil {
		t.Fatal(err)
	}
	res, err = store.Resume(ctx, conn, id, 0, walEnd)
	if err != nil || res.Prev != nil || res.SkipBefore != 0 || res.Diverged == nil || res.Diverged.LSN != end+0x1000 {
		t.Fatalf("Resume past the switch point = %+v, %v", res, err)
	}
	if out := show(); !strings.Contains(out, `"usable": false`) || strings.Contains(out, `"refused"`) || !strings.Contains(out, "past the point where timeline") {
		t.Fatalf("checkpoint show past the switch point:\n%s", out)
	}

	// A timeline 2 does not descend from (here a later one): refused.
	if err := store.Save(ctx, checkpoint.Checkpoint{LSN: saved.LSN, Identity: checkpoint.Identity{SystemID: id.SystemID, Timeline: id.Timeline + 1}}, 0); err != nil {
		t.Fatal(err)
	}
	var me *checkpoint.MismatchError
	if _, err := store.Resume(ctx, conn, id, 0, walEnd); !errors.As(err, &me) {
		t.Fatalf("Resume with a later timeline's checkpoint = %v", err)
	}
	if out := show(); !strings.Contains(out, `"usable": false`) || !strings.Contains(out, "another timeline") {
		t.Fatalf("checkpoint show of a later timeline:\n%s", out)
	}
}
