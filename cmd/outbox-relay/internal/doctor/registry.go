package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/record"
)

// Schemas is the registry as doctor reads it: the schema the relay would
// encode a row with (publisher.Schemas has the same method).
type Schemas interface {
	Schema(ctx context.Context, ref record.SchemaRef) (*record.Schema, error)
}

// RegistryTarget is a registry record format's registry: what the relay
// looks up for each row (Record's strategy and version source), where
// (URL, as configured: the fix prints it without its credentials), and
// the client.
type RegistryTarget struct {
	Record  record.Config
	URL     string
	Schemas Schemas
}

// maxRegistryChecks bounds the subject and version pairs doctor looks up.
const maxRegistryChecks = 50

// CheckRegistry looks up, for each topic, event type and schema_version of
// a bounded sample of the outbox (as OutboxTopics samples it), the subject
// and version the relay would encode it with: a registry that does not
// answer fails once; each pair it does not have, or whose schema the
// relay cannot use, fails with the command that registers it.
func CheckRegistry(ctx context.Context, db Querier, table migrations.Table, render func(aggregateType, eventType string) string, t RegistryTarget, r *Report) {
	rows, err := db.Query(ctx, `SELECT DISTINCT aggregate_type, event_type, schema_version::text FROM (SELECT aggregate_type, event_type, schema_version FROM `+
		table.Quoted()+` LIMIT 10000) s LIMIT 100`)
	if err != nil {
		r.add("schema registry", Warn, "cannot read the outbox's event types and schema versions: "+err.Error(), "see the PostgreSQL checks")
		return
	}
	refs := map[record.SchemaRef]bool{}
	topics := map[string]bool{}
	for rows.Next() {
		var at, et, sv string
		if rows.Scan(&at, &et, &sv) != nil {
			continue
		}
		topics[render(at, et)] = true
		ref, err := t.Record.SchemaRef(render(at, et), &record.Row{AggregateType: at, EventType: et, SchemaVersion: sv})
		if err != nil {
			r.add("schema registry", Fail, fmt.Sprintf("event type %q, schema_version %s: %v", et, sv, err),
				"give the rows a schema_version that is a registry version, or use --schema-version latest")
			continue
		}
		refs[ref] = true
	}
	rows.Close()
	if len(refs) == 0 {
		r.add("schema registry", Warn, "no event in the outbox to check a subject for", "")
		return
	}
	sorted := make([]record.SchemaRef, 0, len(refs))
	for ref := range refs {
		sorted = append(sorted, ref)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Subject != sorted[j].Subject {
			return sorted[i].Subject < sorted[j].Subject
		}
		return sorted[i].Version < sorted[j].Version
	})
	if len(sorted) > maxRegistryChecks {
		sorted = sorted[:maxRegistryChecks]
	}
	passed := 0
	for _, ref := range sorted {
		s, err := t.Schemas.Schema(ctx, ref)
		what := fmt.Sprintf("subject %q version %s", ref.Subject, ref.Version)
		switch {
		case errors.Is(err, record.ErrSchemaNotFound):
			r.add("schema "+ref.Subject, Fail, what+" is not registered: the relay dead-letters these events",
				registerFix(withoutUserinfo(t.URL), ref, t.Record.Format))
		case errors.Is(err, record.ErrSchemaInvalid):
			r.add("schema "+ref.Subject, Fail, fmt.Sprintf("%s cannot be used: %v", what, err),
				"register a schema the relay can parse (docs/schemas.md), or use --schema-version latest after registering one")
		case err != nil:
			r.add("schema registry", Fail, "unreachable: "+err.Error(),
				"check --schema-registry-url, the credentials (--schema-registry-username/-password or -token) and the network path")
			return
		default:
			if s.Type != t.Record.Format.SchemaType() {
				r.add("schema "+ref.Subject, Fail, fmt.Sprintf("%s is a %s schema; --record-format %s needs %s", what, s.Type, t.Record.Format, t.Record.Format.SchemaType()),
					"register a "+t.Record.Format.SchemaType()+" schema under the subject, or use the --record-format of its type")
				continue
			}
			passed++
		}
	}
	if passed > 0 {
		r.add("schema registry", Pass, strconv.Itoa(passed)+" subject version(s) of the outbox's events registered and usable", "")
	}
	if t.Record.KeySchema {
		checkKeySubjects(ctx, topics, t, r)
	}
}

// checkKeySubjects looks up the key subject (<topic>-key, latest) of each
// topic under --schema-key: one the registry does not have fails with the
// command that registers the string schema; one that is not a string's
// fails too (the relay dead-letters both).
func checkKeySubjects(ctx context.Context, topics map[string]bool, t RegistryTarget, r *Report) {
	sorted := make([]string, 0, len(topics))
	for topic := range topics {
		sorted = append(sorted, topic)
	}
	sort.Strings(sorted)
	if len(sorted) > maxRegistryChecks {
		sorted = sorted[:maxRegistryChecks]
	}
	passed := 0
	for _, topic := range sorted {
		ref := t.Record.KeyRef(topic)
		s, err := t.Schemas.Schema(ctx, ref)
		what := fmt.Sprintf("key subject %q version latest", ref.Subject)
		fix := keyRegisterFix(withoutUserinfo(t.URL), ref, t.Record.Format)
		if err != nil && !errors.Is(err, record.ErrSchemaNotFound) && !errors.Is(err, record.ErrSchemaInvalid) {
			r.add("schema registry", Fail, "unreachable: "+err.Error(),
				"check --schema-registry-url, the credentials (--schema-registry-username/-password or -token) and the network path")
			return
		}
		if err == nil && s.Type != t.Record.Format.SchemaType() {
			err = fmt.Errorf("%w: a %s schema; --record-format %s needs %s", record.ErrSchemaInvalid, s.Type, t.Record.Format, t.Record.Format.SchemaType())
		}
		if err == nil {
			// a string's schema takes any string; a JSON Schema with a
			// pattern may refuse some aggregate ids (those are poison)
			if _, kerr := s.AppendKey(nil, "x"); errors.Is(kerr, record.ErrSchemaInvalid) {
				err = kerr
			}
		}
		switch {
		case errors.Is(err, record.ErrSchemaNotFound):
			r.add("schema "+ref.Subject, Fail, what+" is not registered: with --schema-key the relay dead-letters these events", fix)
		case err != nil:
			r.add("schema "+ref.Subject, Fail, fmt.Sprintf("%s cannot be used for the key: %v", what, err), "register a string key schema: "+fix)
		default:
			passed++
		}
	}
	if passed > 0 {
		r.add("schema registry", Pass, strconv.Itoa(passed)+" key subject(s) registered with a string schema", "")
	}
}

// keyRegisterFix is the command that registers the string key schema of
// format f under ref's subject.
func keyRegisterFix(base string, ref record.SchemaRef, f record.Format) string {
	schema := `\"string\"`
	if f == record.FormatJSONSchema {
		schema = `{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"string\"}` // Apicurio wants the $schema
	}
	return fmt.Sprintf(`curl -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' --data '{"schemaType":"%s","schema":"%s"}' %s/subjects/%s/versions`,
		f.SchemaType(), schema, base, url.PathEscape(ref.Subject))
}

// registerFix is the command that registers a schema for ref.
func registerFix(base string, ref record.SchemaRef, f record.Format) string {
	version := ""
	if ref.Version != "latest" {
		version = " (the registry numbers versions in the order they are registered: it must become version " + ref.Version + ")"
	}
	return fmt.Sprintf(`curl -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' --data '{"schemaType":"%s","schema":"<the schema, JSON-escaped>"}' %s/subjects/%s/versions%s`,
		f.SchemaType(), base, url.PathEscape(ref.Subject), version)
}

// withoutUserinfo is a registry URL fit to print in a fix: no user, no
// password.
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<--schema-registry-url>"
	}
	u.User = nil
	return strings.TrimSuffix(u.String(), "/")
}
