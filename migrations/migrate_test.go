package migrations

import (
	"regexp"
	"strings"
	"testing"
)

func TestLoadMigrations(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 || migs[0].version != 1 {
		t.Fatalf("migrations = %v, want to start at version 1", migs)
	}
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != len(migs) {
		t.Fatalf("Versions() = %v", vs)
	}
}

func TestRenderMigration1(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	tbl := Table{"app", "order"}
	for _, pt := range []string{"jsonb", "bytea"} {
		sql, err := migs[0].render(templateData{Table: tbl.Quoted(), PayloadType: pt})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`CREATE TABLE IF NOT EXISTS "app"."order"`,
			"payload           " + pt + " NOT NULL",
			"event_id          uuid PRIMARY KEY",
			"created_at        timestamptz NOT NULL DEFAULT now()",
		} {
			if !strings.Contains(sql, want) {
				t.Errorf("rendered migration (%s) lacks %q:\n%s", pt, want, sql)
			}
		}
		if strings.Contains(sql, "{{") || strings.Contains(sql, "<no value>") {
			t.Errorf("unrendered template action in:\n%s", sql)
		}
		sql, err = migs[0].render(templateData{Table: tbl.Quoted(), PayloadType: pt, NullablePayload: true})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sql, "payload           "+pt+",\n") {
			t.Errorf("NullablePayload: rendered migration (%s) lacks a nullable payload:\n%s", pt, sql)
		}
	}
}

// Every column migration 1 creates must be one Validate accepts with the
// first (preferred) type, so the two cannot drift apart.
func TestMigration1MatchesColumns(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	sql, err := migs[0].render(templateData{Table: `"public"."outbox"`, PayloadType: "jsonb"})
	if err != nil {
		t.Fatal(err)
	}
	ddlType := map[string]string{"int8": "bigint", "int4": "int"}
	for _, c := range Columns() {
		typ := c.Types[0]
		if d, ok := ddlType[typ]; ok {
			typ = d
		}
		re := regexp.MustCompile(`(?m)^\s*` + c.Name + `\s+` + typ + `\b`)
		if !re.MatchString(sql) {
			t.Errorf("migration 1 does not create column %s %s", c.Name, typ)
		}
	}
}

func TestApplyOptionsPayloadType(t *testing.T) {
	for in, want := range map[string]string{"": "jsonb", "jsonb": "jsonb", "bytea": "bytea"} {
		got, err := ApplyOptions{PayloadType: in}.payloadType()
		if err != nil || got != want {
			t.Errorf("payloadType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"json", "text", "JSONB", "bytea; DROP TABLE x"} {
		if _, err := (ApplyOptions{PayloadType: in}).payloadType(); err == nil {
			t.Errorf("payloadType(%q) succeeded, want error", in)
		}
	}
}
