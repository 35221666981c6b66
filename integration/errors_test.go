//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// expectFailure starts the relay with extra env, waits up to 30s for it to
// exit, and checks the exit is non-zero and stderr contains want.
func expectFailure(t *testing.T, env *Env, want string, extra ...string) {
	t.Helper()
	r := env.StartRelay(extra...)
	start := time.Now()
	code, exited := r.Wait(30 * time.Second)
	if !exited {
		t.Fatalf("relay still running after 30s, want a non-zero exit mentioning %q; log tail:\n%s", want, r.LogTail(20))
	}
	lines := r.LogLines(want, 3)
	t.Logf("exit %d after %s; matching lines: %v", code, time.Since(start).Round(time.Millisecond), lines)
	if code == 0 {
		t.Errorf("exit code 0, want non-zero")
	}
	if !r.LogContains(want) {
		t.Errorf("stderr does not contain %q; tail:\n%s", want, r.LogTail(20))
	}
}

func TestClearErrors(t *testing.T) {
	inSuites(t, parallel, stack)
	t.Run("WalLevelNotLogical", func(t *testing.T) {
		pg := StartTempCluster(t, "wal_level=replica")
		env := NewEnv(t, EnvOptions{NoMigrate: true, NoTopic: true})
		env.DatabaseURL = pg.URL
		// Give the relay a table to look at, so wal_level is the only problem.
		if res := env.RunCLI(60*time.Second, nil, "migrate"); res.Code != 0 {
			t.Logf("migrate against the wal_level=replica cluster: exit %d: %s", res.Code, tail(res.Stderr, 5))
		}
		expectFailure(t, env, "wal_level")
	})

	t.Run("SlotActiveElsewhere", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		if !env.SlotInfo().Exists {
			if res := env.RunCLI(60*time.Second, nil, "slot", "create"); res.Code != 0 {
				t.Fatalf("outbox-relay slot create: exit %d\n%s", res.Code, tail(res.Stderr, 20))
			}
		}
		if !env.SlotInfo().Exists {
			t.Fatalf("slot %s does not exist after migrate and slot create", env.Slot)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out strings.Builder
		rl := exec.CommandContext(ctx, "pg_recvlogical", "-d", env.DatabaseURL, "--slot", env.Slot, "--start",
			"-o", "proto_version=1", "-o", "publication_names="+env.Publication, "-f", "/dev/null")
		rl.Stdout, rl.Stderr = &out, &out
		rl.Cancel = func() error { return rl.Process.Signal(syscall.SIGTERM) }
		rl.WaitDelay = 5 * time.Second
		if err := rl.Start(); err != nil {
			t.Fatalf("pg_recvlogical: %v", err)
		}
		// Runs before the Env cleanup (which drops the slot).
		t.Cleanup(func() { cancel(); _ = rl.Wait() })
		if !env.WaitSlotActive(true, 15*time.Second) {
			t.Fatalf("pg_recvlogical did not take the slot: %+v\n%s", env.SlotInfo(), out.String())
		}
		t.Logf("slot held by pid %d", env.SlotInfo().ActivePID)
		expectFailure(t, env, "is active")
	})

	t.Run("SlotOfAnotherPlugin", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		if env.SlotInfo().Exists {
			env.Exec(`select pg_drop_replication_slot($1)`, env.Slot)
		}
		env.Exec(`select pg_create_logical_replication_slot($1, 'test_decoding')`, env.Slot)
		expectFailure(t, env, "plugin")
	})

	t.Run("MissingTable", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		env.Exec(`drop table ` + env.QuotedTable())
		expectFailure(t, env, "does not exist")
	})

	t.Run("MissingColumn", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		env.Exec(`alter table ` + env.QuotedTable() + ` drop column aggregate_version cascade`)
		expectFailure(t, env, `missing column "aggregate_version"`)
	})

	t.Run("KafkaUnreachableAtStart", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		port := freePort(t) // nothing listens there
		r := env.StartRelay(fmt.Sprintf("OUTBOX_RELAY_KAFKA_BROKERS=127.0.0.1:%d", port))
		if code, exited := r.Wait(8 * time.Second); exited {
			t.Fatalf("relay exited (code %d) within 8s with Kafka unreachable, want it to keep retrying; tail:\n%s", code, r.LogTail(20))
		}
		if !r.LogContains("retrying") {
			t.Errorf("log does not contain %q after 8s; tail:\n%s", "retrying", r.LogTail(20))
		}
		t.Logf("retry lines: %v", r.LogLines("retrying", 2))
		start := time.Now()
		code, exited := r.Term(10 * time.Second)
		if !exited {
			t.Fatalf("relay did not exit within 10s of SIGTERM while Kafka is unreachable")
		}
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
		t.Logf("SIGTERM -> exit %d in %s", code, time.Since(start).Round(time.Millisecond))
	})
}
