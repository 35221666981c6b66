// Package apicheck guards the module's public surface: which packages a
// user can import, what they declare (testdata/api.txt, TestAPIRecord),
// and that their exported API names no internal type (a user could not
// construct or name it, and every change to it would break them anyway).
package apicheck

import (
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/record"
)

const module = "github.com/outbox-relay/outbox-relay"

// public is the importable API: the engine, the producer and consumer
// libraries, the schema, the vocabulary both ends share (poison), and the
// data path's building blocks (slot -> replication -> publisher ->
// checkpoint), and the OAUTHBEARER mechanism embedders plug their token
// providers into (oauthbearer). Adding to it is a decision, not
// a side effect of a new directory: put new code under internal/.
var public = []string{
	"checkpoint",
	"fielderr", // the one configuration error type of relay, inbox and outbox (their FieldError aliases it)
	"inbox",
	"inbox/inboxprom",
	"migrations",
	"oauthbearer",
	"outbox",
	"outbox/outboxprom",
	"outbox/outboxschema",
	"poison",
	"publisher",
	"record",
	"relay",
	"replication",
	"slot",
}

// internalPath matches the packages under an internal directory, at the
// root or nested (record/internal/jsonexpand): Go lets no other module
// import them.
var internalPath = regexp.MustCompile(`(^|/)internal(/|$)`)

// notAPI are importable paths that are programs or tests, not libraries.
var notAPI = regexp.MustCompile(`^(cmd|examples|integration)(/|$)`)

func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

func TestOnlyTheAPIIsImportable(t *testing.T) {
	var got []string
	for _, p := range strings.Fields(goCmd(t, "list", "./...")) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if internalPath.MatchString(rel) || notAPI.MatchString(rel) {
			continue
		}
		got = append(got, rel)
	}
	slices.Sort(got)
	if !slices.Equal(got, public) {
		t.Fatalf("importable packages are %v, want %v: move new packages under internal/ (or extend the list on purpose)", got, public)
	}
}

// opaque are internal names the API shows on purpose (none: the options
// of relay, outbox and inbox are sealed interfaces over unexported
// settings).
var opaque = map[string]bool{}

func TestAPINamesNoInternalType(t *testing.T) {
	var names []string
	for _, p := range strings.Fields(goCmd(t, "list", "./...")) {
		if internalPath.MatchString(strings.TrimPrefix(p, module)) {
			names = append(names, p[strings.LastIndex(p, "/")+1:])
		}
	}
	// An identifier qualified by an internal package's name, outside
	// comments: "kafkaconn.Security" in a field or signature.
	ref := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\.[A-Z]\w*`)
	for _, p := range public {
		for i, line := range strings.Split(goCmd(t, "doc", "-all", "./"+p), "\n") {
			code, _, _ := strings.Cut(line, "//")
			if strings.HasPrefix(line, "    ") { // doc text of a declaration
				continue
			}
			if m := ref.FindString(code); m != "" && !opaque[m] {
				t.Errorf("%s: go doc line %d names internal %s: %s", p, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// TestLibrariesImportNoAWSSDK keeps the AWS SDK (the binary's
// --database-auth aws-rds-iam, cmd/outbox-relay/internal/rdsiam) out of
// the libraries' import graph: an embedder plugs its own token into
// relay.DatabaseConfig.BeforeConnect and must not pay for the SDK.
func TestLibrariesImportNoAWSSDK(t *testing.T) {
	args := []string{"list", "-deps"}
	for _, p := range public {
		args = append(args, "./"+p)
	}
	for _, dep := range strings.Fields(goCmd(t, args...)) {
		if strings.HasPrefix(dep, "github.com/aws/") {
			t.Errorf("a library imports %s: only cmd/ may", dep)
		}
	}
}

// TestLibrariesLinkNoOpenTelemetrySDK keeps the OpenTelemetry SDK and
// its exporters (the binary's --trace-publish,
// cmd/outbox-relay/internal/tracing) out of every library's build: the
// libraries take a trace.TracerProvider from the API, and an application
// chooses its SDK, its version and its exporters (gRPC and all) itself.
// go list -deps is per package, the same on every platform, so this
// checks what a program importing a library links, not only its direct
// imports.
func TestLibrariesLinkNoOpenTelemetrySDK(t *testing.T) {
	for _, p := range public {
		var sdk []string
		for _, dep := range strings.Fields(goCmd(t, "list", "-deps", "./"+p)) {
			if sdkPackage(dep) {
				sdk = append(sdk, dep)
			}
		}
		if len(sdk) > 0 {
			slices.Sort(sdk)
			t.Errorf("%s links %d packages of the OpenTelemetry SDK or its exporters (%s): only cmd/ may", p, len(sdk), strings.Join(sdk[:min(3, len(sdk))], ", "))
		}
	}
}

// sdkPackage reports whether an import path is the OpenTelemetry SDK, an
// exporter, or the OTLP wire types and transport the exporters bring.
func sdkPackage(path string) bool {
	for _, prefix := range []string{
		"go.opentelemetry.io/otel/sdk",
		"go.opentelemetry.io/otel/exporters",
		"go.opentelemetry.io/proto/otlp",
		"google.golang.org/grpc",
	} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

func TestSDKPackage(t *testing.T) {
	for path, want := range map[string]bool{
		"go.opentelemetry.io/otel/sdk":                                           true,
		"go.opentelemetry.io/otel/sdk/trace":                                     true,
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp":        true,
		"go.opentelemetry.io/proto/otlp/trace/v1":                                true,
		"google.golang.org/grpc":                                                 true,
		"go.opentelemetry.io/otel":                                               false,
		"go.opentelemetry.io/otel/trace":                                         false,
		"go.opentelemetry.io/otel/propagation":                                   false,
		"go.opentelemetry.io/otel/sdkx":                                          false,
		"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/tracing": false,
	} {
		if got := sdkPackage(path); got != want {
			t.Errorf("sdkPackage(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestConsumerLinksNoReplicationStack: a consumer application imports
// inbox (and with it record, which decodes what the relay wrote); it must
// not link the relay's replication stack. record owns the wire-neutral
// row (record.Row) that replication produces, not the other way round.
func TestConsumerLinksNoReplicationStack(t *testing.T) {
	for _, dep := range strings.Fields(goCmd(t, "list", "-deps", "./inbox", "./record")) {
		switch {
		case dep == "github.com/jackc/pglogrepl",
			strings.HasPrefix(dep, "github.com/outbox-relay/outbox-relay/replication"),
			strings.HasPrefix(dep, "github.com/outbox-relay/outbox-relay/migrations"),
			strings.HasPrefix(dep, "github.com/outbox-relay/outbox-relay/slot"):
			t.Errorf("inbox or record links %s", dep)
		}
	}
}

// TestProducerLinksNoRegistryStack: every producer service imports
// outbox, so it links only what writing an event needs. The schema check
// (outbox/outboxschema: the registry client, the Avro, Protobuf and JSON
// Schema parsers, record's encoders, and kafka-go through them) plugs in
// through outbox.EventChecker and is linked only by a producer that
// imports it (issue 48).
func TestProducerLinksNoRegistryStack(t *testing.T) {
	for _, dep := range strings.Fields(goCmd(t, "list", "-deps", "./outbox", "./outbox/outboxprom")) {
		switch {
		case dep == module+"/record", strings.HasPrefix(dep, module+"/record/"),
			strings.HasPrefix(dep, module+"/internal/schemareg"),
			strings.HasPrefix(dep, module+"/outbox/outboxschema"),
			strings.HasPrefix(dep, "github.com/segmentio/kafka-go"),
			strings.HasPrefix(dep, "github.com/bufbuild/protocompile"),
			strings.HasPrefix(dep, "github.com/twmb/avro"),
			strings.Contains(dep, "jsonschema"):
			t.Errorf("outbox links %s", dep)
		}
	}
}

// TestEventShapesAgree: outbox.Event (what a service appends, with its
// write-side Priority and a generated EventID) and record.Event (what a
// consumer decodes, with the Kafka coordinates it came from) are the two
// ends of one contract. They stay two types - one embedded in the other
// would make every composite literal of the write path nest - but the
// fields they share keep one name and one type each, and a field added to
// one end is either added to the other or listed here as that end's own.
func TestEventShapesAgree(t *testing.T) {
	w, r := reflect.TypeFor[outbox.Event](), reflect.TypeFor[record.Event]()
	shared := []string{"AggregateType", "AggregateID", "AggregateVersion", "EventType", "SchemaVersion", "Payload", "Headers"}
	own := map[reflect.Type][]string{
		w: {"EventID", "Priority"}, // the id is a uuid.UUID the writer generates
		r: {"ID", "Topic", "Partition", "Offset", "Time", "Format", // the id as the record carries it
			"SchemaID", "Subject", // the registry schema a framed value was written with (issue 48)
			"KeySchemaID"}, // and a framed key's (--schema-key, issue 48)
	}
	for _, name := range shared {
		fw, okw := w.FieldByName(name)
		fr, okr := r.FieldByName(name)
		if !okw || !okr || fw.Type != fr.Type {
			t.Errorf("%s: outbox.Event has %v (%v), record.Event %v (%v): one name, one type", name, okw, fw.Type, okr, fr.Type)
		}
	}
	for typ, names := range own {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.IsExported() && !slices.Contains(shared, f.Name) && !slices.Contains(names, f.Name) {
				t.Errorf("%s.%s: add it to the other end of the contract, or list it as this end's own", typ, f.Name)
			}
		}
	}
}
