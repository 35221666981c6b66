package pgprovider

import (
	"slices"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		f    facts
		want Kind
		sig  string
	}{
		{"plain", facts{}, SelfHosted, ""},
		{"plain with unrelated settings", facts{settings: []string{"pg_stat_statements.max"}}, SelfHosted, ""},
		{"rds by setting", facts{settings: []string{"rds.logical_replication"}}, RDS, "setting rds.logical_replication"},
		{"rds by role", facts{roles: []string{"rds_superuser"}}, RDS, "role rds_superuser"},
		{"aurora over rds", facts{auroraVersion: true, roles: []string{"rds_superuser"}, settings: []string{"rds.logical_replication"}}, Aurora, "function aurora_version()"},
		{"cloud sql by role", facts{roles: []string{"cloudsqlsuperuser"}}, CloudSQL, "role cloudsqlsuperuser"},
		{"cloud sql by flag", facts{settings: []string{"cloudsql.logical_decoding"}}, CloudSQL, "setting cloudsql.logical_decoding"},
		{"azure", facts{roles: []string{"azuresu", "azure_pg_admin"}}, Azure, "role azure_pg_admin"},
		{"azure by setting", facts{settings: []string{"azure.extensions"}}, Azure, "setting azure.extensions"},
		{"supabase", facts{roles: []string{"supabase_admin"}}, Supabase, "role supabase_admin"},
		{"neon", facts{roles: []string{"neon_superuser"}}, Neon, "role neon_superuser"},
	}
	for _, c := range cases {
		p := classify(c.f)
		if p.Kind != c.want {
			t.Errorf("%s: got %q (%v), want %q", c.name, p.Kind, p.Signals, c.want)
		}
		if c.sig != "" && !slices.Contains(p.Signals, c.sig) {
			t.Errorf("%s: signals %v lack %q", c.name, p.Signals, c.sig)
		}
		if c.want == SelfHosted && (p.Managed() || len(p.Signals) > 0) {
			t.Errorf("%s: claims a provider: %+v", c.name, p)
		}
	}
}

func TestFixes(t *testing.T) {
	self := Provider{}
	if got := self.WALLevelFix(); got != "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL" {
		t.Errorf("self-hosted wal_level fix changed: %q", got)
	}
	if got := self.SettingFix("max_wal_senders", "20"); got != "ALTER SYSTEM SET max_wal_senders = 20; then restart PostgreSQL" {
		t.Errorf("self-hosted static fix: %q", got)
	}
	if got := self.SettingFix("wal_sender_timeout", "60s"); got != "ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT pg_reload_conf()" {
		t.Errorf("self-hosted dynamic fix: %q", got)
	}
	cases := []struct {
		p    Kind
		got  string
		want []string
	}{
		{RDS, Provider{Kind: RDS}.WALLevelFix(), []string{"rds.logical_replication = 1", "DB parameter group", "reboot"}},
		{Aurora, Provider{Kind: Aurora}.WALLevelFix(), []string{"rds.logical_replication = 1", "DB cluster parameter group", "reboot the writer"}},
		{CloudSQL, Provider{Kind: CloudSQL}.WALLevelFix(), []string{"cloudsql.logical_decoding = on", "restart"}},
		{Azure, Provider{Kind: Azure}.WALLevelFix(), []string{"server parameter wal_level = logical", "restart the server"}},
		{Neon, Provider{Kind: Neon}.WALLevelFix(), []string{"Neon console"}},
		{RDS, Provider{Kind: RDS}.SettingFix("max_replication_slots", "20"), []string{"max_replication_slots = 20 in the instance's custom DB parameter group, then reboot"}},
		{RDS, Provider{Kind: RDS}.ReplicationFix(`"r"`), []string{`GRANT rds_replication TO "r"`}},
		{CloudSQL, Provider{Kind: CloudSQL}.ReplicationFix(`"r"`), []string{`ALTER ROLE "r" WITH REPLICATION`, "cloudsqlsuperuser"}},
		{Azure, Provider{Kind: Azure}.ReplicationFix(`"r"`), []string{"azure_pg_admin"}},
		{Azure, Provider{Kind: Azure}.SettingFix("max_slot_wal_keep_size", "50GB"), []string{"read-only", "drops an inactive logical slot"}},
		{CloudSQL, Provider{Kind: CloudSQL}.SettingFix("max_wal_senders", "20"), []string{"database flag max_wal_senders = 20", "restart"}},
	}
	for _, c := range cases {
		for _, w := range c.want {
			if !strings.Contains(c.got, w) {
				t.Errorf("%s: %q lacks %q", c.p, c.got, w)
			}
		}
		if strings.Contains(c.got, "ALTER SYSTEM") {
			t.Errorf("%s: %q proposes ALTER SYSTEM, which managed services refuse", c.p, c.got)
		}
	}
	for _, k := range []Kind{RDS, Aurora, CloudSQL, Azure, Supabase, Neon} {
		p := Provider{Kind: k}
		if !p.Managed() || p.Name() == (Provider{}).Name() || len(p.GrantRoleNotes(`"r"`)) == 0 {
			t.Errorf("%s: name %q, notes %v", k, p.Name(), p.GrantRoleNotes(`"r"`))
		}
	}
	if (Provider{}).ReplicationRole() != "" || (Provider{Kind: Aurora}).ReplicationRole() != "rds_replication" {
		t.Error("ReplicationRole: only RDS and Aurora have one")
	}
}
