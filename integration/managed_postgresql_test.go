//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// managedCase emulates one managed PostgreSQL service on a temp cluster:
// the provider's settings as custom placeholders on the command line
// (PostgreSQL accepts rds.logical_replication = 0 as it accepts any
// dotted name), its roles and functions created by setup, and a
// non-superuser role "app" for doctor to connect as. No cloud account is
// involved: what is tested is recognition from these signals and the fix
// texts, not the providers themselves.
type managedCase struct {
	name     string
	settings []string
	setup    string
	// want must all appear in doctor's output, absent must not.
	want, absent []string
}

// managedCases are the emulated providers. Each cluster runs with
// wal_level = replica and max_wal_senders = 1, so the wal_level check
// fails and the max_wal_senders one warns, each printing its fix; the
// default max_slot_wal_keep_size = -1 warns too.
var managedCases = []managedCase{{
	name:     "RDS",
	settings: []string{"rds.logical_replication=0", "rds.force_ssl=0"},
	setup:    `CREATE ROLE rds_superuser NOLOGIN; CREATE ROLE rds_replication NOLOGIN; CREATE ROLE app LOGIN`,
	want: []string{"PASS  provider", "Amazon RDS for PostgreSQL (recognised by role rds_replication, role rds_superuser, setting rds.logical_replication",
		"FAIL  wal_level", "fix: set rds.logical_replication = 1 in the instance's custom DB parameter group, then reboot the instance",
		"WARN  max_wal_senders", "fix: set max_wal_senders = 10 in the instance's custom DB parameter group, then reboot the instance",
		"fix: set max_slot_wal_keep_size = <disk budget, e.g. 50GB> in the instance's custom DB parameter group",
		`FAIL  role`, `"app" lacks membership in rds_replication`, `fix: GRANT rds_replication TO "app" (as a member of rds_superuser`},
	absent: []string{"ALTER SYSTEM", "Aurora", `ALTER ROLE "app"`},
}, {
	name:     "Aurora",
	settings: []string{"rds.logical_replication=0"},
	setup: `CREATE ROLE rds_superuser NOLOGIN; CREATE ROLE rds_replication NOLOGIN; CREATE ROLE app LOGIN;
		CREATE FUNCTION aurora_version() RETURNS text LANGUAGE sql AS $$SELECT '16.4.1'$$`,
	want: []string{"Amazon Aurora PostgreSQL (recognised by function aurora_version()",
		"fix: set rds.logical_replication = 1 in the custom DB cluster parameter group, then reboot the writer instance",
		"fix: set max_wal_senders = 10 in the custom DB cluster parameter group, then reboot the writer instance",
		`fix: GRANT rds_replication TO "app"`},
	absent: []string{"ALTER SYSTEM", "Amazon RDS for PostgreSQL"},
}, {
	name:     "CloudSQL",
	settings: []string{"cloudsql.logical_decoding=off", "cloudsql.iam_authentication=on"},
	setup:    `CREATE ROLE cloudsqlsuperuser NOLOGIN; CREATE ROLE app LOGIN`,
	want: []string{"Google Cloud SQL for PostgreSQL (recognised by role cloudsqlsuperuser, setting cloudsql.iam_authentication, setting cloudsql.logical_decoding)",
		"fix: set the database flag cloudsql.logical_decoding = on", "fix: set the database flag max_wal_senders = 10 (console: Edit, Flags), then restart the instance",
		`"app" lacks the REPLICATION attribute`, `fix: ALTER ROLE "app" WITH REPLICATION (as a member of cloudsqlsuperuser`},
	absent: []string{"ALTER SYSTEM", "rds_replication"},
}, {
	name:     "Azure",
	settings: []string{"azure.extensions=pg_stat_statements"},
	// An app role that is a member of the admin role: a warning like a
	// superuser's.
	setup: `CREATE ROLE azure_pg_admin NOLOGIN; CREATE ROLE azuresu NOLOGIN; CREATE ROLE app LOGIN REPLICATION IN ROLE azure_pg_admin`,
	want: []string{"Azure Database for PostgreSQL flexible server (recognised by role azure_pg_admin, role azuresu, setting azure.extensions)",
		"fix: set the server parameter wal_level = logical (portal: Server parameters), save, then restart the server",
		"fix: set the server parameter max_wal_senders = 10 (portal: Server parameters), save, then restart the server",
		"fix: none: it is read-only (-1) on Azure", "WARN  slot removal", "Azure drops an inactive logical slot",
		`WARN  role`, `"app" is a member of azure_pg_admin`},
	absent: []string{"ALTER SYSTEM", "FAIL  role"},
}, {
	name:  "Supabase",
	setup: `CREATE ROLE supabase_admin NOLOGIN; CREATE ROLE supabase_auth_admin NOLOGIN; CREATE ROLE app LOGIN`,
	want: []string{"Supabase (recognised by role supabase_admin, role supabase_auth_admin)",
		"fix: Supabase manages max_wal_senders (no ALTER SYSTEM): raise it to 10", `fix: ALTER ROLE "app" WITH REPLICATION (as the postgres user)`},
}, {
	name:  "Neon",
	setup: `CREATE ROLE neon_superuser NOLOGIN REPLICATION; CREATE ROLE app LOGIN`,
	want: []string{"Neon (recognised by role neon_superuser)", "fix: enable logical replication in the Neon console",
		"WARN  slot removal", "Neon removes replication slots inactive for about 40 hours"},
}, {
	name:  "plain",
	setup: `CREATE ROLE app LOGIN`,
	want: []string{"PASS  provider", "no managed service recognised: the fixes below are for self-hosted PostgreSQL",
		"fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
		"fix: ALTER SYSTEM SET max_wal_senders = 10; then restart PostgreSQL",
		`fix: ALTER ROLE "app" REPLICATION (or outbox-relay migrate --grant-role app as an admin)`},
	absent: []string{"recognised by", "parameter group", "Azure", "Cloud SQL", "slot removal"},
}}

// TestManagedPostgreSQLDoctor runs doctor, as a non-superuser, on a temp
// cluster per emulated provider (RDS, Aurora, Cloud SQL, Azure flexible
// server, Supabase, Neon) and on a plain one: doctor names the provider
// with the signals it saw, and every failed or warning check prints that
// provider's fix (parameter group and reboot, database flag, server
// parameter, GRANT rds_replication) instead of ALTER SYSTEM; the plain
// server claims no provider and keeps the self-hosted fixes.
func TestManagedPostgreSQLDoctor(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	for _, c := range managedCases {
		t.Run(c.name, func(t *testing.T) {
			pg := StartTempCluster(t, append([]string{"wal_level=replica", "max_wal_senders=1"}, c.settings...)...)
			pg.Exec(t, c.setup)
			res := runCLI(t, 30*time.Second, processEnv([]string{
				"OUTBOX_RELAY_DATABASE_URL=" + appURL(pg),
				"OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(kafkaBrokers, ","),
			}), "doctor", "--topics", "it.managed.none")
			t.Logf("doctor on emulated %s: exit %d\n%s", c.name, res.Code, res.Stdout)
			if res.Code != 1 {
				t.Errorf("exit %d, want 1 (wal_level fails)\n%s", res.Code, tail(res.Stderr, 10))
			}
			for _, w := range c.want {
				if !strings.Contains(res.Stdout, w) {
					t.Errorf("doctor output lacks %q", w)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(res.Stdout, a) {
					t.Errorf("doctor output has %q", a)
				}
			}
		})
	}
}

// TestManagedPostgreSQLGrantRole runs migrate --grant-role on an emulated
// RDS (as the superuser; on RDS it would be the rds_superuser master
// user): the role gets membership in rds_replication instead of the
// REPLICATION attribute, migrate prints what only the console can do, and
// doctor, connected as that role, counts the membership as the right to
// stream (rolreplication stays false). On an emulated Cloud SQL with
// wal_level = replica, migrate's start-up check names the Cloud SQL flag.
func TestManagedPostgreSQLGrantRole(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	pg := StartTempCluster(t, "wal_level=logical", "rds.logical_replication=1")
	pg.Exec(t, `CREATE ROLE rds_superuser NOLOGIN; CREATE ROLE rds_replication NOLOGIN`)
	env := processEnv([]string{
		"OUTBOX_RELAY_DATABASE_URL=" + pg.URL,
		"OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(kafkaBrokers, ","),
	})
	res := runCLI(t, 60*time.Second, env, "migrate", "--grant-role", "relay_rds")
	t.Logf("migrate --grant-role on emulated RDS: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 {
		t.Fatalf("exit %d\n%s", res.Code, tail(res.Stderr, 10))
	}
	for _, w := range []string{"role relay_rds created (LOGIN, member of rds_replication, no password",
		"on Amazon RDS for PostgreSQL (what only its console or tooling can do, and what differs):",
		"rds.logical_replication = 1 (console or aws rds modify-db-parameter-group, then a reboot)", "keep --slot clear of that prefix", `GRANT rds_iam TO "relay_rds"`} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("migrate output lacks %q", w)
		}
	}
	if got := pg.Query(t, "postgres", `SELECT rolreplication::text || ' ' || pg_has_role('relay_rds', 'rds_replication', 'MEMBER')::text
		FROM pg_roles WHERE rolname = 'relay_rds'`); got != "false true" {
		t.Errorf("relay_rds rolreplication, member of rds_replication = %q, want \"false true\"", got)
	}
	asRole := processEnv(env, []string{"OUTBOX_RELAY_DATABASE_URL=" + strings.Replace(pg.URL, "postgres@", "relay_rds@", 1)})
	res = runCLI(t, 30*time.Second, asRole, "doctor", "--topics", "it.managed.none")
	t.Logf("doctor as relay_rds: exit %d\n%s", res.Code, res.Stdout)
	for _, w := range []string{`PASS  role`, `"relay_rds" is a member of rds_replication (the replication right on Amazon RDS for PostgreSQL)`,
		"PASS  privileges"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("doctor as relay_rds lacks %q", w)
		}
	}

	sql := StartTempCluster(t, "wal_level=replica", "cloudsql.logical_decoding=off")
	sql.Exec(t, `CREATE ROLE cloudsqlsuperuser NOLOGIN`)
	res = runCLI(t, 60*time.Second, processEnv(env, []string{"OUTBOX_RELAY_DATABASE_URL=" + sql.URL}), "migrate")
	if res.Code == 0 || !strings.Contains(res.Stderr, "on Google Cloud SQL for PostgreSQL: set the database flag cloudsql.logical_decoding = on") {
		t.Errorf("migrate on emulated Cloud SQL with wal_level=replica: exit %d, want the Cloud SQL fix\n%s", res.Code, tail(res.Stderr, 10))
	}
}

// appURL is the URL of the temp cluster's postgres database as role app
// (the temp clusters trust local connections).
func appURL(c *TempCluster) string {
	return fmt.Sprintf("postgres://app@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}
