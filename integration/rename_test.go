//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRenamedOutboxStops: the outbox renamed (ALTER TABLE … RENAME) or
// moved (… SET SCHEMA) under a running relay stays in the publication
// (publications follow the OID), so its next inserts arrive under the new
// name. The relay must stop (exit 1) naming both names and the fix, with
// the slot before those inserts; a restart while the table is still
// renamed is refused with a hint naming the new name; after the rename is
// undone a restarted relay delivers every event (lost 0).
func TestRenamedOutboxStops(t *testing.T) {
	inSuites(t, parallel, stack)
	for _, tc := range []struct {
		name string
		// away and back move the table (%s: quoted name); moved is the
		// new schema-qualified name, quoted and not.
		away, back    func(e *Env) string
		moved, quoted func(e *Env) string
		setup         func(e *Env)
	}{
		{
			name: "Rename",
			away: func(e *Env) string {
				return fmt.Sprintf(`alter table %s rename to %s`, e.QuotedTable(), pgx.Identifier{e.TableName + "_v2"}.Sanitize())
			},
			back: func(e *Env) string {
				return fmt.Sprintf(`alter table %s rename to %s`, pgx.Identifier{"public", e.TableName + "_v2"}.Sanitize(), pgx.Identifier{e.TableName}.Sanitize())
			},
			moved:  func(e *Env) string { return "public." + e.TableName + "_v2" },
			quoted: func(e *Env) string { return pgx.Identifier{"public", e.TableName + "_v2"}.Sanitize() },
		},
		{
			name:  "SetSchema",
			setup: func(e *Env) { e.Exec(`create schema ` + pgx.Identifier{"it_mv_" + e.Sfx}.Sanitize()) },
			away: func(e *Env) string {
				return fmt.Sprintf(`alter table %s set schema %s`, e.QuotedTable(), pgx.Identifier{"it_mv_" + e.Sfx}.Sanitize())
			},
			back: func(e *Env) string {
				return fmt.Sprintf(`alter table %s set schema public`, pgx.Identifier{"it_mv_" + e.Sfx, e.TableName}.Sanitize())
			},
			moved:  func(e *Env) string { return "it_mv_" + e.Sfx + "." + e.TableName },
			quoted: func(e *Env) string { return pgx.Identifier{"it_mv_" + e.Sfx, e.TableName}.Sanitize() },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{Partitions: 3})
			if tc.setup != nil {
				tc.setup(env)
			}
			t.Cleanup(func() { // after a failure the table may still be elsewhere
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = env.DB.Exec(ctx, `drop table if exists `+tc.quoted(env))
				_, _ = env.DB.Exec(ctx, `drop schema if exists `+pgx.Identifier{"it_mv_" + env.Sfx}.Sanitize()+` cascade`)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			relay := env.StartRelay()
			c := StartConsumer(t, env.Topic, env.Partitions)
			ledger := NewLedger()
			w := env.NewWriter(ledger)
			write := func(w *Writer, prefix string, n int) {
				t.Helper()
				for i := 0; i < n; i++ {
					if _, err := w.Write(ctx, []string{fmt.Sprintf("%s-%d", prefix, i%4)}, true); err != nil {
						t.Fatal(err)
					}
				}
			}
			write(w, "rn", 20)
			if !c.WaitFor(ledger.Committed(), 30*time.Second, 0) {
				t.Fatalf("events before the rename not delivered; tail:\n%s", relay.LogTail(20))
			}

			env.Exec(tc.away(env))
			// The same aggregates go on in the moved table (versions continue).
			moved := &Writer{DB: w.DB, Table: tc.quoted(env), AggregateType: w.AggregateType, EventType: w.EventType,
				SchemaVersion: w.SchemaVersion, Ledger: ledger, versions: w.versions}
			if _, err := moved.Write(ctx, []string{"rn-0"}, true); err != nil {
				t.Fatal(err)
			}
			afterFirst := env.CurrentInsertLSN() // past the first insert into the moved table
			write(moved, "rn", 9)

			code, exited := relay.Wait(30 * time.Second)
			if !exited {
				t.Fatalf("relay still running 30s after the outbox became %s (its inserts skipped?); tail:\n%s", tc.moved(env), relay.LogTail(20))
			}
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, want := range []string{"outbox table " + env.Table, "renamed or moved to " + tc.moved(env), "rename it back",
				"--table " + tc.moved(env), "slot position held"} {
				if !relay.LogContains(want) {
					t.Errorf("relay log lacks %q; tail:\n%s", want, relay.LogTail(10))
				}
			}
			t.Logf("relay stopped: %s", strings.TrimSpace(tail(relay.Log(), 1)))
			if env.ConfirmedAtLeast(afterFirst) {
				t.Fatalf("slot confirmed %s, past the first insert into the moved table (before %s): events skipped", env.SlotInfo().ConfirmedFlush, afterFirst)
			}

			// Restarted while the table is still moved: refused at start-up,
			// naming the table the publication holds now.
			again := env.StartRelay()
			if code, exited := again.Wait(30 * time.Second); !exited || code != 1 {
				t.Fatalf("restart while moved: exited=%v code=%d, want 1; tail:\n%s", exited, code, again.LogTail(10))
			}
			for _, want := range []string{"does not exist", "includes " + tc.moved(env), "rename it back"} {
				if !again.LogContains(want) {
					t.Errorf("start-up refusal lacks %q; tail:\n%s", want, again.LogTail(5))
				}
			}
			if env.ConfirmedAtLeast(afterFirst) {
				t.Fatalf("slot moved past the moved table's inserts during the refused start")
			}

			// Undone: every event arrives, those written meanwhile included.
			env.Exec(tc.back(env))
			write(w, "rn", 5)
			fixed := env.StartRelay()
			committed := ledger.Committed()
			ok := c.WaitFor(committed, 60*time.Second, time.Second)
			rep := c.Check(committed, CheckOptions{})
			t.Logf("%s: %s", tc.name, rep)
			if !ok {
				t.Errorf("not every event arrived after the rename was undone; tail:\n%s", fixed.LogTail(20))
			}
			RequireOK(t, rep)
			if code, exited := fixed.Term(20 * time.Second); !exited || code != 0 {
				t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
			}
		})
	}
}
