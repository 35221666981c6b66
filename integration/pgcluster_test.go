//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgBinDir = "/usr/lib/postgresql/15/bin"

// TempCluster is a throwaway PostgreSQL 15 cluster run as OS user postgres.
type TempCluster struct {
	Dir  string
	Port int
	URL  string // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
}

// asPostgres runs a command as the postgres OS user (the tests run as root).
func asPostgres(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// StartTempCluster initdb's and starts a cluster with the given extra settings
// (e.g. "wal_level=replica"). It is stopped and removed by a test cleanup.
func StartTempCluster(t testing.TB, settings ...string) *TempCluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBinDir, "initdb")); err != nil {
		t.Fatalf("PostgreSQL 15 server binaries not found in %s: %v", pgBinDir, err)
	}
	// Not t.TempDir(): its parents are 0700 root and postgres can't traverse them.
	dir, err := os.MkdirTemp("", "outbox-relay-it-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("OS user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c := &TempCluster{Dir: dir, Port: freePort(t)}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
	data := filepath.Join(dir, "data")
	logFile := filepath.Join(dir, "server.log")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := asPostgres(ctx, filepath.Join(pgBinDir, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := []string{
		"-c listen_addresses=127.0.0.1",
		"-c port=" + strconv.Itoa(c.Port),
		"-c unix_socket_directories=" + dir,
		"-c fsync=off",
	}
	for _, s := range settings {
		opts = append(opts, "-c "+s)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if out, err := asPostgres(sctx, filepath.Join(pgBinDir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("temp cluster log:\n%s", tail(string(b), 30))
			}
		}
		os.RemoveAll(dir)
	})
	out, err = asPostgres(ctx, filepath.Join(pgBinDir, "pg_ctl"), "-D", data, "-l", logFile, "-w", "-t", "60",
		"-o", strings.Join(opts, " "), "start").CombinedOutput()
	if err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, b)
	}
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatalf("connect to temp cluster: %v", err)
	}
	defer conn.Close(ctx)
	var wal string
	if err := conn.QueryRow(ctx, `show wal_level`).Scan(&wal); err != nil {
		t.Fatalf("show wal_level: %v", err)
	}
	t.Logf("temp cluster on port %d, wal_level=%s, dir %s", c.Port, wal, dir)
	return c
}

// Exec runs sql on the temp cluster.
func (c *TempCluster) Exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatalf("connect to temp cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("temp cluster exec %q: %v", sql, err)
	}
}
