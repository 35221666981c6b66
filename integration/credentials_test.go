//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRotatingPassword runs the relay with --database-password-file
// against a cluster that accepts the relay's role only by SCRAM password,
// under load, and rotates the role's password several times: each time
// the old password stops working, the file is replaced (as Kubernetes
// swaps a mounted secret), and every session of the role - the
// replication connection, the leader's lock connection, the pool's - is
// terminated. The relay must come back each time, which it can only do
// with the password of the moment, and deliver every committed event in
// per-aggregate order. The last rotation replaces the file 2 s late, as a
// secret reaches a pod after the database changed: the refused reconnects
// in between must not stop the relay.
func TestRotatingPassword(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	t0 := time.Now()
	pg := StartTempCluster(t, "wal_level=logical", "password_encryption=scram-sha-256")
	// The admin postgres by trust (the test's writer and checks); every
	// other role, replication included, by SCRAM password only.
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(pg.Data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, `select pg_reload_conf()`)
	env := pairEnv(t, pg.URL, nil)
	const role = "outbox_relay"
	if res := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role); res.Code != 0 {
		t.Fatalf("migrate --grant-role: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	roleURL := func(password string) string {
		u := role
		if password != "" {
			u += ":" + password
		}
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", u, pg.Port)
	}
	pwFile := filepath.Join(t.TempDir(), "password")
	var passwords []string
	// setPassword sets a new password on the role; writeFile replaces the
	// file atomically (a rename, as the kubelet's symlink swap).
	setPassword := func() string {
		pw := "pw-" + randSuffix()
		passwords = append(passwords, pw)
		env.Exec(fmt.Sprintf(`ALTER ROLE %s PASSWORD '%s'`, role, pw))
		return pw
	}
	writeFile := func(pw string) {
		tmp := pwFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, pwFile); err != nil {
			t.Fatal(err)
		}
	}
	rotate := func() string {
		pw := setPassword()
		writeFile(pw)
		return pw
	}
	// signIn reports whether the role can sign in with password, and
	// fails the test on any error but a refused password.
	signIn := func(password string) bool {
		t.Helper()
		db, err := OpenDB(ctx, roleURL(password))
		if err == nil {
			db.Close()
			return true
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "28P01" {
			return false
		}
		t.Fatalf("sign in as %s: %v", role, err)
		return false
	}
	rotate()
	if signIn("") {
		t.Fatal("the role signs in without a password: pg_hba.conf is not in force")
	}

	// sessions returns the backend start (server clock) of the role's
	// newest walsender and lock session, zero when there is none.
	sessions := func() (walsender, lock time.Time) {
		_ = env.DB.QueryRow(ctx, `select coalesce(max(backend_start) filter (where backend_type = 'walsender'), 'epoch'),
			coalesce(max(backend_start) filter (where application_name = 'outbox-relay-leader'), 'epoch')
			from pg_stat_activity where usename = $1`, role).Scan(&walsender, &lock)
		return walsender, lock
	}
	serverNow := func() (now time.Time) {
		if err := env.DB.QueryRow(ctx, `select clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}

	c := StartConsumer(t, env.Topic, env.Partitions)
	r := env.StartRelay(
		"OUTBOX_RELAY_DATABASE_URL="+roleURL(""),
		"OUTBOX_RELAY_DATABASE_PASSWORD_FILE="+pwFile,
		"OUTBOX_RELAY_BACKOFF_MAX=500ms",
		"OUTBOX_RELAY_LEADER_TIMEOUT=4s",
		"OUTBOX_RELAY_LEADER_KEEPALIVE_INTERVAL=500ms",
		"OUTBOX_RELAY_LEADER_POLL_INTERVAL=500ms",
	)
	ledger := NewLedger()
	stopWriter := backgroundWriter(t, env.NewWriter(ledger), 30, 5*time.Millisecond)
	defer stopWriter()
	if !c.WaitCount(200, 30*time.Second) {
		t.Fatalf("fewer than 200 records within 30s (got %d)\n%s", c.Count(), r.LogTail(30))
	}

	// The last rotation updates the file only 2 s after the role and the
	// cut, as a secret reaches the pod after the database changed: the
	// relay's reconnects are refused meanwhile, and it must keep trying.
	const rotations = 5
	lateFile := 2 * time.Second
	var back []time.Duration
	for i := range rotations {
		late := i == rotations-1
		old := passwords[len(passwords)-1]
		var pw string
		if late {
			pw = setPassword()
		} else {
			pw = rotate()
		}
		if signIn(old) {
			t.Fatalf("rotation %d: the old password still signs in", i+1)
		}
		if !signIn(pw) {
			t.Fatalf("rotation %d: the new password does not sign in", i+1)
		}
		cut := serverNow()
		var n int
		if err := env.DB.QueryRow(ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity where usename = $1`, role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		before := c.Count()
		if late {
			// wall-clock: the secret's delay: the file lags the role change by lateFile
			time.Sleep(lateFile)
			if !r.Running() {
				t.Fatalf("relay exited while the file still held the old password\n%s", r.LogTail(30))
			}
			if !r.LogContains("password authentication failed") {
				t.Errorf("no refused reconnect logged while the file held the old password\n%s", r.LogTail(20))
			}
			writeFile(pw)
		}
		// Back means: a walsender and a lock session signed in after the
		// cut (with the new password: the old one no longer works), and
		// events flow again.
		if !within(20*time.Second, 100*time.Millisecond, func() bool {
			ws, lk := sessions()
			return ws.After(cut) && lk.After(cut) && c.Count() > before+50
		}) {
			ws, lk := sessions()
			t.Fatalf("rotation %d: relay not back within 20s (walsender since %s, lock since %s, cut %s, records %d -> %d)\n%s",
				i+1, ws.Format(time.RFC3339Nano), lk.Format(time.RFC3339Nano), cut.Format(time.RFC3339Nano), before, c.Count(), r.LogTail(40))
		}
		d := serverNow().Sub(cut)
		back = append(back, d.Round(10*time.Millisecond))
		t.Logf("rotation %d (file late: %v): terminated %d sessions; replication, lock and delivery back with the new password in %s", i+1, late, n, d.Round(time.Millisecond))
		// wall-clock: load flows between rotations, so the next one lands mid-stream
		time.Sleep(time.Second)
	}

	stopWriter()
	committed := ledger.Committed()
	ok := c.WaitFor(committed, 60*time.Second, 2*time.Second)
	rep := c.Check(committed, CheckOptions{})
	msg := fmt.Sprintf("TestRotatingPassword: rotations=%d committed=%d delivered=%d lost=%d duplicates=%d inversions=%d back_after=%v elapsed=%s",
		rotations, rep.Committed, rep.Delivered, len(rep.Lost), rep.Duplicates, rep.Inversions, back, time.Since(t0).Round(100*time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
	if !r.Running() {
		t.Errorf("relay exited\n%s", r.LogTail(30))
	}
	log := r.Log()
	// The operator commands sign in through the file too: a pool
	// (slot status) and a replication connection (checkpoint show).
	for _, cmd := range [][]string{{"slot", "status"}, {"checkpoint", "show"}} {
		res := env.RunCLI(30*time.Second, []string{"OUTBOX_RELAY_DATABASE_URL=" + roleURL(""), "OUTBOX_RELAY_DATABASE_PASSWORD_FILE=" + pwFile}, cmd...)
		if res.Code != 0 {
			t.Errorf("%s with the password file: exit %d\n%s\n%s", strings.Join(cmd, " "), res.Code, res.Stdout, tail(res.Stderr, 10))
		}
		log += res.Stdout + res.Stderr
	}
	for _, pw := range passwords {
		if strings.Contains(log, pw) {
			t.Errorf("the relay's log or a command's output shows a password (%q)", pw)
		}
	}
}
