//go:build integration

package integration

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestPostgresUnreachableAtStart: a relay started while PostgreSQL cannot
// be reached keeps running, logs each retry (stage startup, attempt,
// backoff) and streams once the database answers - no crash loop under a
// supervisor. A failure no retry can cure still exits 1 at once with its
// fix (TestSecurity covers a wrong password and TLS errors).
func TestPostgresUnreachableAtStart(t *testing.T) {
	inSuites(t, parallel, stack)
	t.Run("RetriesUntilReachable", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{})
		proxy, proxied := StartPGProxy(t)
		proxy.Cut() // connections are accepted and reset, as by a server not up yet
		r := env.StartRelay("OUTBOX_RELAY_DATABASE_URL=" + proxied)
		if code, exited := r.Wait(6 * time.Second); exited {
			t.Fatalf("relay exited %d with PostgreSQL unreachable, want it to keep retrying; tail:\n%s", code, r.LogTail(20))
		}
		lines := r.LogLines("PostgreSQL unreachable, retrying", 3)
		if len(lines) < 2 {
			t.Fatalf("%d retry warnings in 6s, want several; tail:\n%s", len(lines), r.LogTail(20))
		}
		for _, want := range []string{`"level":"warn"`, `"stage":"startup"`, `"attempt":2`, `"backoff":`} {
			if !strings.Contains(strings.Join(lines, "\n"), want) {
				t.Errorf("retry warnings lack %s:\n%s", want, strings.Join(lines, "\n"))
			}
		}
		proxy.Restore()
		c := StartConsumer(t, env.Topic, env.Partitions)
		defer c.Stop()
		waitCaughtUp(t, env, c, env.NewWriter(NewLedger()), 60*time.Second)
		if !r.LogContains("PostgreSQL reachable") {
			t.Errorf("no \"PostgreSQL reachable\" line after the retries; tail:\n%s", r.LogTail(20))
		}
		if code, exited := r.Term(20 * time.Second); !exited || code != 0 {
			t.Errorf("SIGTERM: exit %d (exited %v), want 0", code, exited)
		}
	})

	t.Run("SIGTERMWhileRetrying", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true})
		proxy, proxied := StartPGProxy(t)
		proxy.Cut()
		r := env.StartRelay("OUTBOX_RELAY_DATABASE_URL=" + proxied)
		if !within(10*time.Second, 100*time.Millisecond, func() bool { return r.LogContains("PostgreSQL unreachable, retrying") }) {
			t.Fatalf("no retry warning; tail:\n%s", r.LogTail(20))
		}
		if code, exited := r.Term(10 * time.Second); !exited || code != 0 {
			t.Errorf("SIGTERM while retrying: exit %d (exited %v), want 0 promptly", code, exited)
		}
	})

	t.Run("MissingDatabaseExitsAtOnce", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{NoTopic: true, NoMigrate: true})
		u, err := url.Parse(env.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/no_such_db_" + env.Sfx
		start := time.Now()
		r := env.StartRelay("OUTBOX_RELAY_DATABASE_URL=" + u.String())
		code, exited := r.Wait(10 * time.Second)
		if !exited {
			t.Fatalf("relay still running 10s after start with a missing database (retrying what no retry cures?); tail:\n%s", r.LogTail(20))
		}
		t.Logf("exit %d after %s", code, time.Since(start).Round(time.Millisecond))
		if code != 1 {
			t.Errorf("exit code %d, want 1", code)
		}
		for _, want := range []string{"does not exist", "fix: the database in --database-url does not exist"} {
			if !r.LogContains(want) {
				t.Errorf("output lacks %q; tail:\n%s", want, r.LogTail(10))
			}
		}
		if r.LogContains("retrying") {
			t.Errorf("a missing database was retried; tail:\n%s", r.LogTail(10))
		}
	})
}
