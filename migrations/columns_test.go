package migrations

import (
	"errors"
	"strings"
	"testing"
)

func TestRequiredColumns(t *testing.T) {
	var names []string
	for _, c := range RequiredColumns() {
		if !c.Required {
			t.Errorf("RequiredColumns returned optional column %q", c.Name)
		}
		names = append(names, c.Name)
	}
	want := "event_id aggregate_type aggregate_id aggregate_version event_type schema_version payload"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("RequiredColumns = %s, want %s", got, want)
	}
}

func TestColumnsReturnsFreshSlice(t *testing.T) {
	a := Columns()
	a[0].Types[0] = "text"
	a[1].Name = "changed"
	b := Columns()
	if b[0].Types[0] != "uuid" || b[1].Name != ColAggregateType {
		t.Fatal("mutating the result of Columns changed later results")
	}
}

func TestColumnWant(t *testing.T) {
	tests := []struct {
		c    Column
		want string
	}{
		{Column{Types: []string{"int8"}}, "bigint"},
		{Column{Types: []string{"int4", "int8"}}, "integer or bigint"},
		{Column{Types: []string{"jsonb", "json", "bytea", "text"}}, "jsonb, json, bytea or text"},
	}
	for _, tt := range tests {
		if got := tt.c.Want(); got != tt.want {
			t.Errorf("Want(%v) = %q, want %q", tt.c.Types, got, tt.want)
		}
	}
}

func TestTypeDisplayName(t *testing.T) {
	for in, want := range map[string]string{
		"int8": "bigint", "int4": "integer", "text": "text", "_text": "text[]", "_int8": "bigint[]", "uuid": "uuid",
	} {
		if got := TypeDisplayName(in); got != want {
			t.Errorf("TypeDisplayName(%q) = %q, want %q", in, got, want)
		}
	}
}

// goodColumns is the table migration 1 creates.
func goodColumns() map[string]string {
	return map[string]string{
		"event_id": "uuid", "aggregate_type": "text", "aggregate_id": "text",
		"aggregate_version": "int8", "event_type": "text", "schema_version": "int4",
		"payload": "jsonb", "headers": "jsonb", "created_at": "timestamptz",
	}
}

func TestCheckColumnsAccepts(t *testing.T) {
	tbl := Table{"public", "outbox"}
	s, err := checkColumns(tbl, goodColumns())
	if err != nil {
		t.Fatal(err)
	}
	if s != (Schema{PayloadType: "jsonb", HasHeaders: true, HasCreatedAt: true}) {
		t.Fatalf("Schema = %+v", s)
	}

	// Minimal hand-made table with the alternative types and an extra column.
	cols := map[string]string{
		"event_id": "uuid", "aggregate_type": "varchar", "aggregate_id": "varchar",
		"aggregate_version": "int8", "event_type": "varchar", "schema_version": "int8",
		"payload": "bytea", "tenant": "text",
	}
	s, err = checkColumns(tbl, cols)
	if err != nil {
		t.Fatal(err)
	}
	if s != (Schema{PayloadType: "bytea"}) {
		t.Fatalf("Schema = %+v", s)
	}
	for _, p := range []string{"json", "text"} {
		cols["payload"] = p
		if s, err := checkColumns(tbl, cols); err != nil || s.PayloadType != p {
			t.Fatalf("payload %s: %+v, %v", p, s, err)
		}
	}
}

func TestCheckColumnsProblems(t *testing.T) {
	tbl := Table{"public", "outbox"}
	cols := goodColumns()
	delete(cols, "aggregate_id")
	cols["aggregate_version"] = "text"
	cols["schema_version"] = "int2"
	cols["headers"] = "text"
	cols["payload"] = "_text"

	_, err := checkColumns(tbl, cols)
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *SchemaError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"public.outbox",
		`missing column "aggregate_id"`,
		`column "aggregate_version" has type text, want bigint`,
		`column "schema_version" has type smallint, want integer or bigint`,
		`column "headers" has type text, want jsonb or json`,
		`column "payload" has type text[], want jsonb, json, bytea or text`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if len(se.Problems) != 5 {
		t.Errorf("Problems = %q, want 5 entries", se.Problems)
	}
}

func TestSchemaErrorTableMissing(t *testing.T) {
	err := &SchemaError{Table: Table{"public", "outbox"}, TableMissing: true}
	want := `table public.outbox does not exist (run "outbox-relay migrate")`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}
