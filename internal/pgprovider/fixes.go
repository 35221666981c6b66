package pgprovider

import (
	"fmt"
	"strconv"
)

// WALLevelFix says how to get wal_level = logical. Managed services never
// take ALTER SYSTEM: each has its own switch, and wal_level follows it
// after a restart.
func (p Provider) WALLevelFix() string {
	switch p.Kind {
	case RDS:
		return "set rds.logical_replication = 1 in the instance's custom DB parameter group, then reboot the instance; wal_level follows"
	case Aurora:
		return "set rds.logical_replication = 1 in the custom DB cluster parameter group, then reboot the writer instance; wal_level follows"
	case CloudSQL:
		return "set the database flag cloudsql.logical_decoding = on (console: Edit, Flags; or gcloud sql instances patch), then restart the instance; wal_level follows"
	case Azure:
		return "set the server parameter wal_level = logical (portal: Server parameters), save, then restart the server"
	case Neon:
		return "enable logical replication in the Neon console (project settings; it cannot be turned off and restarts the project's computes)"
	}
	return "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"
}

// staticSettings take a server restart; the others a reload.
var staticSettings = map[string]bool{"wal_level": true, "max_replication_slots": true, "max_wal_senders": true}

// SettingFix says how to set server setting name to value (as PostgreSQL
// spells it: 20, 60s, 50GB) on the provider, with the restart or reload it
// takes. Use WALLevelFix for wal_level.
func (p Provider) SettingFix(name, value string) string {
	static := staticSettings[name]
	switch p.Kind {
	case RDS, Aurora:
		group, reboot := "instance's custom DB parameter group", "reboot the instance"
		if p.Kind == Aurora {
			group, reboot = "custom DB cluster parameter group", "reboot the writer instance"
		}
		if static {
			return fmt.Sprintf("set %s = %s in the %s, then %s", name, value, group, reboot)
		}
		return fmt.Sprintf("set %s = %s in the %s (a dynamic parameter: no reboot)", name, value, group)
	case CloudSQL:
		if static {
			return fmt.Sprintf("set the database flag %s = %s (console: Edit, Flags), then restart the instance", name, value)
		}
		return fmt.Sprintf("set the database flag %s = %s (console: Edit, Flags)", name, value)
	case Azure:
		if name == "max_slot_wal_keep_size" {
			return "none: it is read-only (-1) on Azure, which instead drops an inactive logical slot itself when storage runs short"
		}
		if static {
			return fmt.Sprintf("set the server parameter %s = %s (portal: Server parameters), save, then restart the server", name, value)
		}
		return fmt.Sprintf("set the server parameter %s = %s (portal: Server parameters), save", name, value)
	case Supabase, Neon:
		return fmt.Sprintf("%s manages %s (no ALTER SYSTEM): raise it to %s through %s's settings or support", p.Name(), name, value, p.Name())
	}
	if static {
		return fmt.Sprintf("ALTER SYSTEM SET %s = %s; then restart PostgreSQL", name, sqlValue(value))
	}
	return fmt.Sprintf("ALTER SYSTEM SET %s = %s; SELECT pg_reload_conf()", name, sqlValue(value))
}

// sqlValue quotes a setting's value for ALTER SYSTEM unless it is a plain
// integer or on/off.
func sqlValue(v string) string {
	if _, err := strconv.Atoi(v); err == nil || v == "on" || v == "off" {
		return v
	}
	return "'" + v + "'"
}

// ReplicationRole is the role whose membership gives the right to stream
// from a slot where customers cannot have the REPLICATION attribute
// (RDS and Aurora: rds_replication); empty elsewhere.
func (p Provider) ReplicationRole() string {
	if p.Kind == RDS || p.Kind == Aurora {
		return "rds_replication"
	}
	return ""
}

// AdminRole is the provider's stand-in for a superuser: a relay connected
// as one of its members holds far more than it needs, as a superuser would.
func (p Provider) AdminRole() string {
	switch p.Kind {
	case RDS, Aurora:
		return "rds_superuser"
	case CloudSQL:
		return "cloudsqlsuperuser"
	case Azure:
		return "azure_pg_admin"
	case Neon:
		return "neon_superuser"
	}
	return ""
}

// ReplicationFix says how to give quotedRole (a quoted identifier) the
// right to stream from a slot, and who may do it there.
func (p Provider) ReplicationFix(quotedRole string) string {
	switch p.Kind {
	case RDS, Aurora:
		return "GRANT rds_replication TO " + quotedRole + " (as a member of rds_superuser, such as the master user; the REPLICATION attribute is not available there)"
	case CloudSQL:
		return "ALTER ROLE " + quotedRole + " WITH REPLICATION (as a member of cloudsqlsuperuser, such as the postgres user)"
	case Azure:
		return "ALTER ROLE " + quotedRole + " REPLICATION (as the server's administrator, a member of azure_pg_admin)"
	case Neon:
		return "ALTER ROLE " + quotedRole + " REPLICATION (as a role created in the Neon console, a member of neon_superuser)"
	case Supabase:
		return "ALTER ROLE " + quotedRole + " WITH REPLICATION (as the postgres user)"
	}
	return "ALTER ROLE " + quotedRole + " REPLICATION"
}

// GrantRoleNotes lists, for migrate --grant-role, what differs for role
// (a quoted identifier) on the provider and what only its console (or its
// own tooling) can do: the password or token login, the switch for
// logical decoding, limits to keep in mind.
func (p Provider) GrantRoleNotes(role string) []string {
	switch p.Kind {
	case RDS, Aurora:
		group, cli := "DB parameter group", "aws rds modify-db-parameter-group"
		if p.Kind == Aurora {
			group, cli = "DB cluster parameter group", "aws rds modify-db-cluster-parameter-group"
		}
		return []string{
			"the replication right is membership in rds_replication (granted), not the REPLICATION attribute",
			"logical decoding is the " + group + "'s rds.logical_replication = 1 (console or " + cli + ", then a reboot)",
			"give " + role + " a password (ALTER ROLE " + role + " PASSWORD '...'), or GRANT rds_iam TO " + role + " for IAM tokens (which the relay cannot refresh yet)",
			"slot names starting with rds are reserved there (unverified): keep Database.Slot clear of that prefix",
		}
	case CloudSQL:
		return []string{
			"Cloud SQL refuses logins without a password: ALTER ROLE " + role + " PASSWORD '...' (or use an IAM database user, whose tokens the relay cannot refresh yet)",
			"logical decoding is the database flag cloudsql.logical_decoding = on (console or gcloud, then a restart)",
		}
	case Azure:
		return []string{
			"give " + role + " a password (ALTER ROLE " + role + " PASSWORD '...'); Microsoft Entra principals are mapped by an Entra administrator, not here",
			"wal_level, max_replication_slots and max_wal_senders are server parameters (portal, then a restart)",
		}
	case Supabase:
		return []string{
			"give " + role + " a password (ALTER ROLE " + role + " PASSWORD '...') and connect directly, not through the pooler (Supavisor)",
			"max_slot_wal_keep_size and max_wal_senders are set with the Supabase CLI",
		}
	case Neon:
		return []string{
			"give " + role + " a password (ALTER ROLE " + role + " PASSWORD '...')",
			"logical replication is a project setting in the Neon console; Neon removes slots inactive for about 40 hours",
		}
	}
	return nil
}

// SlotRisk is how the provider itself removes an idle logical slot, which
// for the relay means a lost slot and `outbox-relay recover`; empty where
// no such behaviour is documented.
func (p Provider) SlotRisk() string {
	switch p.Kind {
	case Azure:
		return "Azure drops an inactive logical slot when storage passes a threshold: a relay stopped then loses its slot"
	case Neon:
		return "Neon removes replication slots inactive for about 40 hours: a relay stopped that long loses its slot"
	}
	return ""
}
