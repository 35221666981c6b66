package migrations

import (
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	tests := []struct {
		in      string
		want    Table
		quoted  string
		wantErr string
	}{
		{in: "outbox", want: Table{"public", "outbox"}, quoted: `"public"."outbox"`},
		{in: "app.outbox", want: Table{"app", "outbox"}, quoted: `"app"."outbox"`},
		{in: "App.Outbox_2", want: Table{"app", "outbox_2"}, quoted: `"app"."outbox_2"`},
		{in: "_x._y", want: Table{"_x", "_y"}, quoted: `"_x"."_y"`},
		{in: "order", want: Table{"public", "order"}, quoted: `"public"."order"`},
		{in: "", wantErr: "want \"name\" or \"schema.name\""},
		{in: "   ", wantErr: "want \"name\" or \"schema.name\""},
		{in: "a.b.c", wantErr: "too many dots"},
		{in: ".outbox", wantErr: "empty name part"},
		{in: "app.", wantErr: "empty name part"},
		{in: "1outbox", wantErr: "starts with a digit"},
		{in: "out-box", wantErr: `invalid character '-'`},
		{in: `"outbox"`, wantErr: "invalid character"},
		{in: "out box", wantErr: "invalid character"},
		{in: "outbøx", wantErr: "invalid character"},
		{in: strings.Repeat("a", 64), wantErr: "longer than 63"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTable(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseTable(%q) = %v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTable(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), "letters, digits and underscores") {
					t.Fatalf("ParseTable(%q) error = %q does not say what is accepted", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTable(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseTable(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if q := got.Quoted(); q != tt.quoted {
				t.Fatalf("Quoted() = %s, want %s", q, tt.quoted)
			}
			if s := got.String(); s != tt.want.Schema+"."+tt.want.Name {
				t.Fatalf("String() = %s", s)
			}
		})
	}
}

func TestParseTableMaxLength(t *testing.T) {
	name := strings.Repeat("a", 63)
	got, err := ParseTable("s." + name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != name {
		t.Fatalf("Name = %q", got.Name)
	}
}

func TestQuotedEscapes(t *testing.T) {
	// Table values built by hand (not by ParseTable) must still be safe in
	// SQL text.
	got := Table{Schema: `we"ird`, Name: "x"}.Quoted()
	if want := `"we""ird"."x"`; got != want {
		t.Fatalf("Quoted() = %s, want %s", got, want)
	}
}
