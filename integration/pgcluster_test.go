//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pg15BinDir holds the Debian PostgreSQL 15 server binaries, the default for
// temp clusters. OUTBOX_RELAY_TEST_PG_BIN picks others (the version matrix of
// `make test` points it at .stack/pg-bin/VERSION/bin).
const pg15BinDir = "/usr/lib/postgresql/15/bin"

// testPGBin returns the server binaries temp clusters use.
func testPGBin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("OUTBOX_RELAY_TEST_PG_BIN")
	if dir == "" {
		dir = pg15BinDir
	}
	if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
		t.Fatalf("PostgreSQL server binaries not found in %s (OUTBOX_RELAY_TEST_PG_BIN): %v", dir, err)
	}
	return dir
}

var pgVersionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// testPGMajor returns the major version of the server binaries in binDir.
func testPGMajor(t testing.TB, binDir string) int {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").CombinedOutput()
	if err != nil && os.Geteuid() == 0 {
		// postgres refuses to run as root, even for --version on some builds.
		out, err = asPostgres(context.Background(), filepath.Join(binDir, "postgres"), "--version").CombinedOutput()
	}
	m := pgVersionRE.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s/postgres --version: %v\n%s", binDir, err, out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

// TempCluster is a throwaway PostgreSQL cluster run as OS user postgres.
type TempCluster struct {
	Dir    string
	Port   int
	URL    string // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	BinDir string
	Data   string
	Log    string
	opts   []string
}

// asPostgres runs a command as the postgres OS user (the tests run as root).
func asPostgres(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// StartTempCluster initdb's and starts a cluster of the test's PostgreSQL
// (testPGBin) with the given extra settings (e.g. "wal_level=replica"). It
// is stopped and removed by a test cleanup.
func StartTempCluster(t testing.TB, settings ...string) *TempCluster {
	t.Helper()
	return StartTempClusterBin(t, testPGBin(t), settings...)
}

// StartTempClusterBin is StartTempCluster with the server binaries of binDir.
func StartTempClusterBin(t testing.TB, binDir string, settings ...string) *TempCluster {
	t.Helper()
	c := newTempCluster(t, binDir, settings)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := asPostgres(ctx, filepath.Join(binDir, "initdb"), "-D", c.Data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.Start(t)
	var wal string
	if err := c.query(ctx, "postgres", `show wal_level`, &wal); err != nil {
		t.Fatalf("show wal_level: %v", err)
	}
	t.Logf("temp cluster on port %d, wal_level=%s, dir %s", c.Port, wal, c.Dir)
	return c
}

// newTempCluster makes the cluster's directory (owned by postgres) and
// registers the cleanup that stops the server and removes it.
func newTempCluster(t testing.TB, binDir string, settings []string) *TempCluster {
	t.Helper()
	// Not t.TempDir(): its parents are 0700 root and postgres can't traverse them.
	dir, err := os.MkdirTemp("", "outbox-relay-it-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chownPostgres(t, dir)
	c := &TempCluster{Dir: dir, Port: freePort(t), BinDir: binDir,
		Data: filepath.Join(dir, "data"), Log: filepath.Join(dir, "server.log")}
	c.URL = c.DBURL("postgres")
	c.opts = []string{
		"-c listen_addresses=127.0.0.1",
		"-c port=" + strconv.Itoa(c.Port),
		"-c unix_socket_directories=" + dir,
		"-c fsync=off",
	}
	for _, s := range settings {
		c.opts = append(c.opts, "-c "+s)
	}
	t.Cleanup(func() {
		c.stop("immediate")
		if t.Failed() {
			if b, err := os.ReadFile(c.Log); err == nil {
				t.Logf("temp cluster (port %d) log:\n%s", c.Port, tail(string(b), 30))
			}
		}
		os.RemoveAll(dir)
	})
	return c
}

func chownPostgres(t testing.TB, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("OS user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// DBURL is the URL of database db on the cluster, as superuser postgres.
func (c *TempCluster) DBURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Start starts the (stopped) server with its settings and waits until it
// accepts connections (a standby: until it accepts read-only ones).
func (c *TempCluster) Start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := asPostgres(ctx, filepath.Join(c.BinDir, "pg_ctl"), "-D", c.Data, "-l", c.Log, "-w", "-t", "90",
		"-o", strings.Join(c.opts, " "), "start").CombinedOutput()
	if err != nil {
		b, _ := os.ReadFile(c.Log)
		t.Fatalf("pg_ctl start (port %d): %v\n%s\n%s", c.Port, err, out, tail(string(b), 30))
	}
}

// Stop stops the server: mode "fast" (clean shutdown) or "immediate" (a
// crash: no shutdown checkpoint, WAL not sent to standbys after this).
func (c *TempCluster) Stop(t testing.TB, mode string) {
	t.Helper()
	if out, err := c.stop(mode); err != nil {
		t.Fatalf("pg_ctl stop -m %s (port %d): %v\n%s", mode, c.Port, err, out)
	}
}

func (c *TempCluster) stop(mode string) ([]byte, error) {
	if _, err := os.Stat(filepath.Join(c.Data, "postmaster.pid")); err != nil {
		return nil, nil // not running
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return asPostgres(ctx, filepath.Join(c.BinDir, "pg_ctl"), "-D", c.Data, "-m", mode, "-w", "stop").CombinedOutput()
}

// Promote promotes a standby to primary and waits until it accepts writes.
func (c *TempCluster) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := asPostgres(ctx, filepath.Join(c.BinDir, "pg_ctl"), "-D", c.Data, "-w", "-t", "90", "promote").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl promote (port %d): %v\n%s", c.Port, err, out)
	}
}

// StartStandby makes a physical standby of c and starts it: it creates the
// physical slot on c, stops c cleanly, copies its data directory (a cold
// copy: the jars of PostgreSQL 16+ carry no pg_basebackup), restarts c, and
// starts the copy on its own port streaming from c through that slot, with
// settings (e.g. "sync_replication_slots=on", "hot_standby_feedback=on")
// in its postgresql.auto.conf. The copy's replication slots are removed: a
// standby gets its logical slots only by synchronization. It returns once
// the standby streams.
func (c *TempCluster) StartStandby(t testing.TB, physicalSlot string, settings ...string) *TempCluster {
	t.Helper()
	c.Exec(t, fmt.Sprintf(`SELECT pg_create_physical_replication_slot('%s', true)`, physicalSlot))
	c.Stop(t, "fast")
	s := newTempCluster(t, c.BinDir, nil)
	s.opts = append(append([]string(nil), c.opts...), "-c port="+strconv.Itoa(s.Port), "-c unix_socket_directories="+s.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "-a", c.Data, s.Data).CombinedOutput(); err != nil {
		t.Fatalf("copy data directory: %v\n%s", err, out)
	}
	c.Start(t)
	for _, p := range []string{"postmaster.pid", "postmaster.opts"} {
		os.Remove(filepath.Join(s.Data, p))
	}
	slots, _ := filepath.Glob(filepath.Join(s.Data, "pg_replslot", "*"))
	for _, p := range slots {
		os.RemoveAll(p)
	}
	conf := []string{
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=%s'", c.Port, physicalSlot),
		fmt.Sprintf("primary_slot_name = '%s'", physicalSlot),
	}
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		conf = append(conf, fmt.Sprintf("%s = '%s'", strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), "'")))
	}
	appendFile(t, filepath.Join(s.Data, "postgresql.auto.conf"), strings.Join(conf, "\n")+"\n")
	appendFile(t, filepath.Join(s.Data, "standby.signal"), "")
	chownPostgres(t, filepath.Join(s.Data, "postgresql.auto.conf"))
	chownPostgres(t, filepath.Join(s.Data, "standby.signal"))
	s.Start(t)
	s.WaitFor(t, 60*time.Second, "postgres", `SELECT coalesce((SELECT status FROM pg_stat_wal_receiver), 'none')`, "streaming")
	t.Logf("standby of port %d on port %d (slot %s), dir %s", c.Port, s.Port, physicalSlot, s.Dir)
	return s
}

func appendFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func (c *TempCluster) query(ctx context.Context, db, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, c.DBURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// Query returns the first column of the first row of sql on database db,
// as text (cast it in sql: QueryRow scans into a string).
func (c *TempCluster) Query(t testing.TB, db, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s string
	if err := c.query(ctx, db, sql, &s, args...); err != nil {
		t.Fatalf("temp cluster (port %d) query %q: %v", c.Port, sql, err)
	}
	return s
}

// WaitFor polls sql (first column as text) on database db until it returns
// want, failing the test after timeout with the last value or error.
func (c *TempCluster) WaitFor(t testing.TB, timeout time.Duration, db, sql, want string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got string
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = c.query(ctx, db, sql, &got, args...)
		cancel()
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("temp cluster (port %d): %q = %q (err %v) after %s, want %q", c.Port, sql, got, err, timeout, want)
		}
		// wall-clock: poll interval of a wait on a query with a deadline
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitReplayed waits until c, a standby, has replayed the WAL up to lsn.
func (c *TempCluster) WaitReplayed(t testing.TB, lsn string, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, timeout, "postgres", `SELECT (pg_last_wal_replay_lsn() >= $1::pg_lsn)::text`, "true", lsn)
}

// Exec runs sql on the temp cluster's postgres database.
func (c *TempCluster) Exec(t testing.TB, sql string) {
	t.Helper()
	c.ExecDB(t, "postgres", sql)
}

// ExecDB runs sql on database db of the temp cluster.
func (c *TempCluster) ExecDB(t testing.TB, db, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DBURL(db))
	if err != nil {
		t.Fatalf("connect to temp cluster (port %d): %v", c.Port, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("temp cluster (port %d) exec %q: %v", c.Port, sql, err)
	}
}
