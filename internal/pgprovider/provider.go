// Package pgprovider recognises the managed PostgreSQL service a database
// runs on (Amazon RDS, Aurora, Cloud SQL, Azure Flexible Server, Supabase,
// Neon) from what the server exposes to an ordinary role, and says how a
// setting or a right the relay needs is obtained there. Managed services
// refuse ALTER SYSTEM and the REPLICATION attribute in their own ways, so a
// fix that is right on a self-hosted server is wrong, or impossible, on
// them: doctor, migrate --grant-role and the relay's start-up errors print
// the provider's fix instead.
//
// Recognition is a hint, not proof: it only chooses fix texts and never
// makes a check pass or fail by itself (docs/managed-postgresql.md lists
// the signals and their sources).
package pgprovider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Kind names a hosting service. The zero value is SelfHosted: a server
// whose provider is not recognised gets the community PostgreSQL fixes.
type Kind string

// The recognised providers.
const (
	SelfHosted Kind = ""
	RDS        Kind = "rds"
	Aurora     Kind = "aurora"
	CloudSQL   Kind = "cloudsql"
	Azure      Kind = "azure"
	Supabase   Kind = "supabase"
	Neon       Kind = "neon"
)

// Provider is the recognised service and the signals it was recognised by,
// for the user to judge a surprising answer.
type Provider struct {
	Kind Kind
	// Signals lists what matched, such as "role rds_superuser" or
	// "setting rds.logical_replication"; empty for SelfHosted.
	Signals []string
}

// Name is the provider's product name, as its documentation spells it.
func (p Provider) Name() string {
	switch p.Kind {
	case RDS:
		return "Amazon RDS for PostgreSQL"
	case Aurora:
		return "Amazon Aurora PostgreSQL"
	case CloudSQL:
		return "Google Cloud SQL for PostgreSQL"
	case Azure:
		return "Azure Database for PostgreSQL flexible server"
	case Supabase:
		return "Supabase"
	case Neon:
		return "Neon"
	}
	return "self-hosted PostgreSQL"
}

// Managed reports whether a provider was recognised.
func (p Provider) Managed() bool { return p.Kind != SelfHosted }

// Querier is what Detect needs from a pgx connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// signalRoles are the roles that give a provider away; pg_roles is
// readable by every role, which makes them the most robust signals.
var signalRoles = []string{
	"rds_superuser", "rds_replication", "rds_iam",
	"cloudsqlsuperuser",
	"azure_pg_admin", "azuresu",
	"supabase_admin", "supabase_auth_admin",
	"neon_superuser",
}

// signalSettings are provider settings looked up by name with
// current_setting(name, true), which also sees custom placeholders that
// pg_settings hides; signalPrefixes are looked up in pg_settings.
var (
	signalSettings = []string{"rds.logical_replication", "cloudsql.logical_decoding", "cloudsql.iam_authentication",
		"azure.extensions", "neon.timeline_id", "neon.tenant_id"}
	signalPrefixes = []string{"rds.%", "cloudsql.%", "azure.%", "neon.%"}
)

// Detect reads the signals in one query and classifies them. It needs no
// privilege beyond connecting.
func Detect(ctx context.Context, db Querier) (Provider, error) {
	var f facts
	err := db.QueryRow(ctx, `SELECT to_regproc('aurora_version') IS NOT NULL,
		ARRAY(SELECT rolname::text FROM pg_catalog.pg_roles WHERE rolname = ANY($1::text[])),
		ARRAY(SELECT s FROM unnest($2::text[]) s WHERE current_setting(s, true) IS NOT NULL
			UNION SELECT name FROM pg_catalog.pg_settings WHERE name LIKE ANY($3::text[]))`,
		signalRoles, signalSettings, signalPrefixes).Scan(&f.auroraVersion, &f.roles, &f.settings)
	if err != nil {
		return Provider{}, fmt.Errorf("recognise the PostgreSQL provider: %w", err)
	}
	return classify(f), nil
}

// facts are the raw signals Detect reads.
type facts struct {
	auroraVersion bool
	roles         []string
	settings      []string
}

// classify picks the first provider whose signals match, Aurora before RDS
// (Aurora has RDS's roles and settings too).
func classify(f facts) Provider {
	slices.Sort(f.roles)
	slices.Sort(f.settings)
	match := func(roles []string, prefix string) []string {
		var sig []string
		for _, r := range f.roles {
			if slices.Contains(roles, r) {
				sig = append(sig, "role "+r)
			}
		}
		for _, s := range f.settings {
			if prefix != "" && strings.HasPrefix(s, prefix) {
				sig = append(sig, "setting "+s)
			}
		}
		return sig
	}
	rds := match([]string{"rds_superuser", "rds_replication", "rds_iam"}, "rds.")
	if f.auroraVersion {
		return Provider{Kind: Aurora, Signals: append([]string{"function aurora_version()"}, rds...)}
	}
	candidates := []struct {
		kind Kind
		sig  []string
	}{
		{RDS, rds},
		{CloudSQL, match([]string{"cloudsqlsuperuser"}, "cloudsql.")},
		{Azure, match([]string{"azure_pg_admin", "azuresu"}, "azure.")},
		{Supabase, match([]string{"supabase_admin", "supabase_auth_admin"}, "")},
		{Neon, match([]string{"neon_superuser"}, "neon.")},
	}
	for _, c := range candidates {
		if len(c.sig) > 0 {
			return Provider{Kind: c.kind, Signals: c.sig}
		}
	}
	return Provider{}
}
