//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/avro"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// registryURL is the stack's schema registry (Apicurio's Confluent API,
// scripts/stack.sh); the registry tests need it and fail without it.
func registryURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_SCHEMA_REGISTRY_URL")
	if u == "" {
		t.Fatal("TEST_SCHEMA_REGISTRY_URL is not set: start the stack (scripts/stack.sh up) and eval \"$(scripts/stack.sh env)\"")
	}
	return u
}

// register adds a version of subject to the registry at base and returns
// its schema id.
func register(t testing.TB, base, subject, schemaType, schema string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema, "schemaType": schemaType})
	resp, err := http.Post(base+"/subjects/"+url.PathEscape(subject)+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var r struct{ ID int }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &r) != nil || r.ID < 1 {
		t.Fatalf("register %s: HTTP %d: %s", subject, resp.StatusCode, out)
	}
	return r.ID
}

// registryFormat is one registry format of the end-to-end test: the
// schema of version 2 (the rows' schema_version), an unrelated version 1,
// and how a record's value (after the 5-byte frame) is read back without
// the relay's code.
type registryFormat struct {
	name, schemaType string
	v1, v2           string
	decode           func(t *testing.T, schema string, body []byte) map[string]any
}

var registryFormats = []registryFormat{
	{
		name: "avro", schemaType: "AVRO",
		v1: `{"type":"record","name":"Old","fields":[{"name":"x","type":"string"}]}`,
		v2: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"n","type":"int"},{"name":"sku","type":"string"},
			{"name":"qty","type":"long","default":1}]}`,
		decode: func(t *testing.T, schema string, body []byte) map[string]any {
			s, err := avro.Parse(schema)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			rest, err := s.Decode(body, &v)
			if err != nil || len(rest) != 0 {
				t.Fatalf("avro decode %x: %v (%d bytes left)", body, err, len(rest))
			}
			return normalize(t, v)
		},
	},
	{
		name: "protobuf", schemaType: "PROTOBUF",
		v1: `syntax = "proto3"; package old; message Old { string x = 1; }`,
		v2: `syntax = "proto3"; package shop; message Order { int32 n = 1; string sku = 2; int64 qty = 3; }`,
		decode: func(t *testing.T, schema string, body []byte) map[string]any {
			// The message indexes of the first message: a single 0.
			if len(body) == 0 || body[0] != 0 {
				t.Fatalf("protobuf value %x: want the message index list [0] (a single zero byte) first", body)
			}
			files, err := (&protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(
				map[string]string{"order.proto": schema})}}).Compile(context.Background(), "order.proto")
			if err != nil {
				t.Fatal(err)
			}
			md := files[0].Messages().Get(0)
			m := dynamicpb.NewMessage(protoreflect.MessageDescriptor(md))
			if err := proto.Unmarshal(body[1:], m); err != nil {
				t.Fatalf("protobuf decode %x: %v", body, err)
			}
			js, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(js, &v); err != nil {
				t.Fatal(err)
			}
			return normalize(t, v)
		},
	},
	{
		name: "json-schema", schemaType: "JSON",
		v1: `{"type":"object","properties":{"x":{"type":"string"}}}`,
		v2: `{"type":"object","properties":{"n":{"type":"integer"},"sku":{"type":"string"},"qty":{"type":"integer"}},
			"required":["n","sku","qty"],"additionalProperties":false}`,
		decode: func(t *testing.T, _ string, body []byte) map[string]any {
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("json-schema value %q: %v", body, err)
			}
			return normalize(t, v)
		},
	},
}

// normalize renders every number of v as its decimal text, so that an
// Avro int32, a protojson int64 string and a JSON float compare equal.
func normalize(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	out := map[string]any{}
	for k, x := range v {
		switch n := x.(type) {
		case int32, int64, int:
			out[k] = fmt.Sprint(n)
		case float64:
			out[k] = fmt.Sprint(int64(n))
		default:
			out[k] = fmt.Sprint(n)
		}
	}
	return out
}

// registryEnv is the relay's environment for a registry format.
func registryEnv(format, registry string, extra ...string) []string {
	return append([]string{"OUTBOX_RELAY_RECORD_FORMAT=" + format, "OUTBOX_RELAY_SCHEMA_REGISTRY_URL=" + registry}, extra...)
}

// TestRegistryFormats runs the relay binary with each registry format
// against the stack's registry (Apicurio): every event arrives framed with
// the id of the version its row names, its value decodes with that schema
// by an independent decoder (twmb/avro; protobuf-go's dynamicpb) into the
// payload, key, partition and headers as in the other formats, in
// per-aggregate order.
func TestRegistryFormats(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	for _, f := range registryFormats {
		t.Run(f.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{Partitions: 3})
			subject := env.Topic + "-value"
			register(t, reg, subject, f.schemaType, f.v1)
			id := register(t, reg, subject, f.schemaType, f.v2)
			relay := env.StartRelay(registryEnv(f.name, reg)...)
			defer relay.Term(10 * time.Second)
			const n = 12
			rows := writeFormatRows(t, env, n, false, func(i int) any {
				return fmt.Sprintf(`{"n": %d, "sku": "s-%d", "qty": %d}`, i, i, 10*i)
			})
			recs := waitRaw(t, env.Topic, env.Partitions, len(rows), 60*time.Second)
			byID := recordsByID(t, recs)
			lastVersion := map[string]int64{}
			for _, r := range recs { // partition order, then offset: per aggregate, commit order
				id, _ := r.header("event_id")
				for _, row := range rows {
					if row.id == id {
						if row.version <= lastVersion[row.aggID] {
							t.Errorf("aggregate %s: version %d after %d", row.aggID, row.version, lastVersion[row.aggID])
						}
						lastVersion[row.aggID] = row.version
					}
				}
			}
			for _, row := range rows {
				r := byID[row.id]
				if string(r.Key) != row.aggID || r.Partition != partitionOf(row.aggID, env.Partitions) {
					t.Fatalf("event %s: key %q on partition %d, want %q on %d", row.id, r.Key, r.Partition, row.aggID, partitionOf(row.aggID, env.Partitions))
				}
				if len(r.Value) < 6 || r.Value[0] != 0 || binary.BigEndian.Uint32(r.Value[1:5]) != uint32(id) {
					t.Fatalf("event %s: value %x, want the Confluent frame of schema id %d", row.id, r.Value, id)
				}
				got := f.decode(t, f.v2, r.Value[5:])
				var payload map[string]any
				if err := json.Unmarshal(row.payload, &payload); err != nil {
					t.Fatal(err)
				}
				want := normalize(t, payload)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("event %s: decoded %v, want %v", row.id, got, want)
				}
				if sv, _ := r.header("schema_version"); sv != "2" {
					t.Errorf("event %s: schema_version header %q, want 2", row.id, sv)
				}
			}
			t.Logf("%d events, framed with schema id %d, decoded by an independent %s decoder", len(rows), id, f.name)
			// reconcile reads these topics too: it needs only the headers'
			// event ids, whatever the value's format.
			res := env.RunCLI(60*time.Second, nil, "reconcile", "--since", "10m", "--settle", "0s")
			if res.Code != 0 || !strings.Contains(res.Stdout, "nothing missing") ||
				!regexp.MustCompile(fmt.Sprintf(`TOTAL\s+%d\s+%d\s+0`, n, n)).MatchString(res.Stdout) {
				t.Fatalf("reconcile over the %s topic: exit %d, want 0 with %d of %d found:\n%s%s", f.name, res.Code, n, n, res.Stdout, tail(res.Stderr, 10))
			}
		})
	}
}

// TestRegistryPoisonThenRetry: an event whose schema_version the
// registry does not have, and one whose payload its schema refuses, are
// dead-lettered with their reasons and quarantine their aggregates while
// the others flow; once the version is registered, dlq retry delivers it
// and the events parked behind it, in order. Nothing is skipped.
func TestRegistryPoisonThenRetry(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	f := registryFormats[0] // avro
	env := NewEnv(t, EnvOptions{Partitions: 2})
	subject := env.Topic + "-value"
	register(t, reg, subject, f.schemaType, f.v1)
	id2 := register(t, reg, subject, f.schemaType, f.v2)
	relayEnv := registryEnv(f.name, reg)
	relay := env.StartRelay(relayEnv...)
	defer relay.Term(10 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insert := func(agg string, version, schemaVersion int, payload string) {
		t.Helper()
		if _, err := env.DB.Exec(ctx, `insert into `+env.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, payload) values (gen_random_uuid(), $1, $2, $3, 'order.changed', $4, $5)`,
			env.AggType, agg, version, schemaVersion, payload); err != nil {
			t.Fatal(err)
		}
	}
	ok := `{"n": 1, "sku": "s", "qty": 1}`
	insert("unregistered", 1, 3, ok) // version 3 is not registered yet
	insert("unregistered", 2, 2, ok) // parked behind it
	insert("mismatch", 1, 2, `{"n": "one", "sku": "s", "qty": 1}`)
	insert("healthy", 1, 2, ok)
	insert("healthy", 2, 2, ok)

	// The healthy aggregate's two events arrive; the others are dead
	// letters: the poison events dead, the one behind parked.
	recs := waitRaw(t, env.Topic, env.Partitions, 2, 60*time.Second)
	var rows []dlRow
	if !within(30*time.Second, 200*time.Millisecond, func() bool { rows = dlRows(t, env, ""); return len(rows) == 3 }) {
		t.Fatalf("dead letters: %v, want 3 rows", rows)
	}
	reasons := map[string]string{}
	for _, r := range rows {
		reasons[r.AggID+"/"+r.Status] = r.Class + ": " + r.Reason
	}
	t.Logf("dead letters: %v", reasons)
	for key, want := range map[string]string{"unregistered/dead": "schema_not_found", "unregistered/parked": "", "mismatch/dead": "schema_mismatch"} {
		got, found := reasons[key]
		if !found || !strings.Contains(got, want) {
			t.Errorf("dead letter %s: %q, want one mentioning %q", key, got, want)
		}
	}
	for _, r := range recs {
		if k := string(r.Key); k != "healthy" {
			t.Errorf("a record of aggregate %s reached Kafka", k)
		}
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d); tail:\n%s", relay.exitCode, relay.LogTail(20))
	}

	// Register version 3, then retry the aggregate: both of its events
	// arrive, in order, framed with version 3's id and version 2's.
	id3 := register(t, reg, subject, f.schemaType, `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"n","type":"int"},{"name":"sku","type":"string"},
		{"name":"qty","type":"long"},{"name":"note","type":"string","default":""}]}`)
	res := env.RunCLI(60*time.Second, relayEnv, "dlq", "retry", "--aggregate", "unregistered")
	if res.Code != 0 {
		t.Fatalf("dlq retry: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, tail(res.Stdout, 10), tail(res.Stderr, 20))
	}
	recs = waitRaw(t, env.Topic, env.Partitions, 4, 60*time.Second)
	var ids []uint32
	for _, r := range recs {
		if string(r.Key) == "unregistered" {
			ids = append(ids, binary.BigEndian.Uint32(r.Value[1:5]))
		}
	}
	if want := []uint32{uint32(id3), uint32(id2)}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("after dlq retry, aggregate unregistered has records framed with ids %v, want %v (its two events in order)", ids, want)
	}
	if rows := dlRows(t, env, "mismatch"); len(rows) != 1 || rows[0].Status != "dead" {
		t.Errorf("the mismatching event: %v, want it still dead", rows)
	}
}

// TestRegistryOutage: a relay that starts while its registry cannot be
// reached (a network cut: no route, no answer) holds the events, with the
// slot position, and dead-letters nothing; when the registry is back
// every event arrives, in order, none twice.
func TestRegistryOutage(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	u, err := url.Parse(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := registryFormats[0]
	env := NewEnv(t, EnvOptions{Partitions: 2})
	subject := env.Topic + "-value"
	register(t, reg, subject, f.schemaType, f.v1)
	id := register(t, reg, subject, f.schemaType, f.v2)
	proxy := StartProxy(t, "registry", "127.0.0.1:0", u.Host)
	proxied := *u
	proxied.Host = proxy.Addr
	proxy.Blackhole(time.Minute)
	node := &relayNode{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	relay := env.StartRelay(registryEnv(f.name, proxied.String(), "OUTBOX_RELAY_SCHEMA_REGISTRY_TIMEOUT=1s", "OUTBOX_RELAY_METRICS_ADDR="+node.addr)...)
	defer relay.Term(10 * time.Second)
	rows := writeFormatRows(t, env, 8, false, func(i int) any { return fmt.Sprintf(`{"n": %d, "sku": "s-%d", "qty": 1}`, i, i) })
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains("schema registry") }) {
		t.Fatalf("no log of the unreachable registry within 30s; tail:\n%s", relay.LogTail(20))
	}
	// /readyz names the registry, whether the stream is backing off or
	// restarted and waiting for it.
	var h readiness
	if !within(20*time.Second, 100*time.Millisecond, func() bool {
		var err error
		h, err = node.ready()
		return err == nil && h.code == 503 && strings.Contains(h.Reason, "schema registry unavailable")
	}) {
		t.Fatalf("/readyz during the outage: %+v, want 503 naming the schema registry", h)
	}
	t.Logf("/readyz during the outage: %d %q", h.code, h.Reason)
	// Never ready while the registry is away: sampled until the stream
	// has ended and restarted twice more (the moments the probe flapped).
	const restarted = "replication stream ended, reconnecting"
	before := len(relay.LogLines(restarted, 1000))
	if !within(30*time.Second, 50*time.Millisecond, func() bool {
		if h, err := node.ready(); err == nil && h.code == 200 {
			t.Fatalf("/readyz 200 during the registry outage: %+v", h)
		}
		return len(relay.LogLines(restarted, 1000)) >= before+2
	}) {
		t.Fatalf("the stream did not restart twice within 30s of the outage; tail:\n%s", relay.LogTail(20))
	}
	if recs, err := fetchRaw(env.Topic, env.Partitions); err != nil || len(recs) != 0 {
		t.Fatalf("with the registry unreachable: %d records (%v), want none", len(recs), err)
	}
	if dl := dlRows(t, env, ""); len(dl) != 0 {
		t.Fatalf("dead letters while the registry was unreachable: %v", dl)
	}
	proxy.Restore()
	recs := waitRaw(t, env.Topic, env.Partitions, len(rows), 60*time.Second)
	byID := recordsByID(t, recs) // fails on a duplicate
	for _, row := range rows {
		if r, ok := byID[row.id]; !ok || binary.BigEndian.Uint32(r.Value[1:5]) != uint32(id) {
			t.Fatalf("event %s: %x, want it framed with id %d", row.id, r.Value, id)
		}
	}
	if dl := dlRows(t, env, ""); len(dl) != 0 {
		t.Fatalf("dead letters after the outage: %v", dl)
	}
	if !within(20*time.Second, 100*time.Millisecond, func() bool { h, err := node.ready(); return err == nil && h.code == 200 }) {
		h, _ := node.ready()
		t.Fatalf("/readyz after the outage: %+v, want 200", h)
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	t.Logf("%d events held through the outage and delivered after it, none dead-lettered, none twice", len(rows))
}

// TestRegistryExactlyOnce: with --delivery exactly-once, a registry
// format's records are written in Kafka transactions like the others: a
// relay killed with SIGKILL between two batches and restarted leaves a
// read_committed consumer every event once, framed with its schema id.
func TestRegistryExactlyOnce(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	f := registryFormats[1] // protobuf: the message index too
	env := NewEnv(t, EnvOptions{Partitions: 3})
	subject := env.Topic + "-value"
	register(t, reg, subject, f.schemaType, f.v1)
	id := register(t, reg, subject, f.schemaType, f.v2)
	relayEnv := append(registryEnv(f.name, reg), env.eosArgs()...)
	rc := StartTxnConsumer(t, env.Topic, env.Partitions, true)
	relay := env.StartRelay(relayEnv...)
	batch := func(name string, from int) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var ids []string
		err := env.DB.WithConn(ctx, func(c *pgx.Conn) error {
			rows, err := c.Query(ctx, `insert into `+env.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
				select gen_random_uuid(), $1, 'agg-' || (i % 3), i, 'order.changed', 2, jsonb_build_object('n', i, 'sku', $2 || i, 'qty', 1)
				from generate_series($3::int, $3::int + 8) i returning event_id::text`, env.AggType, name, from)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil || len(ids) != 9 {
			t.Fatalf("insert %s: %d rows, %v", name, len(ids), err)
		}
		return ids
	}
	first := batch("a-", 1)
	if !rc.WaitCount(len(first), 60*time.Second) {
		t.Fatalf("read_committed consumer got %d records, want %d; relay tail:\n%s", rc.Count(), len(first), relay.LogTail(20))
	}
	relay.Kill9()
	second := batch("b-", 10)
	relay = env.StartRelay(relayEnv...)
	defer relay.Term(10 * time.Second)
	want := len(first) + len(second)
	expected := map[string]Event{}
	for _, id := range append(first, second...) {
		expected[id] = Event{ID: id}
	}
	// WaitFor keeps reading for a grace window in which a late duplicate would show up.
	if !rc.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("read_committed consumer got %d records, want %d; relay tail:\n%s", rc.Count(), want, relay.LogTail(20))
	}
	seen := map[string]int{}
	for _, r := range rc.Records() {
		seen[r.EventID()]++
		if len(r.Value) < 6 || r.Value[0] != 0 || binary.BigEndian.Uint32(r.Value[1:5]) != uint32(id) || r.Value[5] != 0 {
			t.Fatalf("event %s: value %x, want the frame of schema id %d and message index [0]", r.EventID(), r.Value, id)
		}
	}
	for _, id := range append(first, second...) {
		if seen[id] != 1 {
			t.Errorf("event %s read %d times by the read_committed consumer, want once", id, seen[id])
		}
	}
	if len(seen) != want {
		t.Errorf("read_committed consumer saw %d distinct events, want %d", len(seen), want)
	}
}

// TestDoctorRegistry: doctor with a registry format checks each subject
// and version the outbox's rows need: a registered one passes, a missing
// one fails with the command that registers it (exit 1), and a registry
// that does not answer fails the check.
func TestDoctorRegistry(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	f := registryFormats[0]
	env := NewEnv(t, EnvOptions{Partitions: 1})
	subject := env.Topic + "-value"
	register(t, reg, subject, f.schemaType, f.v1)
	register(t, reg, subject, f.schemaType, f.v2)
	writeFormatRows(t, env, 2, false, func(i int) any { return fmt.Sprintf(`{"n": %d, "sku": "s", "qty": 1}`, i) }) // schema_version 2
	doctor := func(url string) CLIResult {
		return env.RunCLI(60*time.Second, registryEnv(f.name, url), "doctor", "--topics", env.Topic)
	}
	res := doctor(reg)
	if !strings.Contains(res.Stdout, "PASS  schema registry") {
		t.Fatalf("doctor with version 2 registered: no passing registry check:\n%s\n%s", res.Stdout, tail(res.Stderr, 10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.DB.Exec(ctx, `update `+env.QuotedTable()+` set schema_version = 5`); err != nil {
		t.Fatal(err)
	}
	res = doctor(reg)
	if res.Code != 1 || !strings.Contains(res.Stdout, "FAIL  schema "+subject) || !strings.Contains(res.Stdout, "version 5 is not registered") ||
		!strings.Contains(res.Stdout, "/subjects/"+url.PathEscape(subject)+"/versions") {
		t.Fatalf("doctor with version 5 missing: exit %d, want 1 naming it with the command that registers it:\n%s", res.Code, res.Stdout)
	}
	res = doctor("http://127.0.0.1:1/apis/ccompat/v7")
	if res.Code != 1 || !strings.Contains(res.Stdout, "FAIL  schema registry") || !strings.Contains(res.Stdout, "unreachable") {
		t.Fatalf("doctor with no registry at the URL: exit %d, want 1 with the registry unreachable:\n%s", res.Code, res.Stdout)
	}
	// --schema-key: the topic's key subject, missing, then registered.
	if _, err := env.DB.Exec(ctx, `update `+env.QuotedTable()+` set schema_version = 2`); err != nil {
		t.Fatal(err)
	}
	keySubject := env.Topic + "-key"
	keyDoctor := func() CLIResult {
		return env.RunCLI(60*time.Second, registryEnv(f.name, reg, "OUTBOX_RELAY_SCHEMA_KEY=true"), "doctor", "--topics", env.Topic)
	}
	res = keyDoctor()
	if res.Code != 1 || !strings.Contains(res.Stdout, "FAIL  schema "+keySubject) || !strings.Contains(res.Stdout, "is not registered") ||
		!strings.Contains(res.Stdout, "/subjects/"+url.PathEscape(keySubject)+"/versions") {
		t.Fatalf("doctor --schema-key, key subject missing: exit %d, want 1 naming %s with the command that registers it:\n%s", res.Code, keySubject, res.Stdout)
	}
	register(t, reg, keySubject, f.schemaType, `"string"`)
	res = keyDoctor()
	if strings.Contains(res.Stdout, "FAIL  schema "+keySubject) || !strings.Contains(res.Stdout, "key subject(s) registered with a string schema") {
		t.Fatalf("doctor --schema-key, key subject registered: exit %d, want its check passing:\n%s", res.Code, res.Stdout)
	}
}

// setCompatibility sets subject's compatibility level in the registry at
// base (PUT /config/{subject}).
func setCompatibility(t testing.TB, base, subject, level string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"compatibility": level})
	req, err := http.NewRequest(http.MethodPut, base+"/config/"+url.PathEscape(subject), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("set compatibility of %s: %v", subject, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set compatibility of %s: HTTP %d: %s", subject, resp.StatusCode, out)
	}
}

// TestRegistryCompatibility: the registry's own rules govern the topic:
// with BACKWARD on the subject, a v2 that adds a field with a default is
// accepted and a v3 that adds one without is refused (HTTP 409), and rows
// written for v1 and for v2 both deliver, each framed with its version's
// id, in per-aggregate order.
func TestRegistryCompatibility(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	env := NewEnv(t, EnvOptions{Partitions: 1})
	subject := env.Topic + "-value"
	setCompatibility(t, reg, subject, "BACKWARD")
	const v1 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"sku","type":"string"}]}`
	const v2 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"long","default":1}]}`
	const v3 = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"long","default":1},{"name":"note","type":"string"}]}`
	id1 := register(t, reg, subject, "AVRO", v1)
	id2 := register(t, reg, subject, "AVRO", v2)
	body, _ := json.Marshal(map[string]string{"schema": v3, "schemaType": "AVRO"})
	resp, err := http.Post(reg+"/subjects/"+url.PathEscape(subject)+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("an incompatible v3 under BACKWARD: HTTP %d %s, want 409", resp.StatusCode, out)
	}
	t.Logf("v3 refused by the registry: HTTP %d %s", resp.StatusCode, out)

	relay := env.StartRelay(registryEnv("avro", reg)...)
	defer relay.Term(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, row := range []struct {
		version int
		payload string
	}{{1, `{"sku": "a"}`}, {2, `{"sku": "b", "qty": 3}`}, {1, `{"sku": "c"}`}, {2, `{"sku": "d"}`}} {
		if _, err := env.DB.Exec(ctx, `insert into `+env.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
			values (gen_random_uuid(), $1, 'o-1', $2, 'order.changed', $3, $4)`, env.AggType, i+1, row.version, row.payload); err != nil {
			t.Fatal(err)
		}
	}
	recs := waitRaw(t, env.Topic, env.Partitions, 4, 60*time.Second)
	var ids []uint32
	for _, r := range recs {
		ids = append(ids, binary.BigEndian.Uint32(r.Value[1:5]))
	}
	if want := []uint32{uint32(id1), uint32(id2), uint32(id1), uint32(id2)}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("records framed with ids %v, want %v (v1, v2, v1, v2 in commit order)", ids, want)
	}
	if dl := dlRows(t, env, ""); len(dl) != 0 {
		t.Fatalf("dead letters: %v", dl)
	}
}

// TestRegistryKeySchema runs the relay with --schema-key in avro and
// json-schema against the stack's registry: every key is the aggregate_id
// framed with the id of the <topic>-key schema, decodes with that
// registered schema by an independent decoder (twmb/avro; encoding/json),
// and the record sits on the partition murmur2 gives the plain aggregate_id,
// as without the option.
func TestRegistryKeySchema(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	for _, c := range []struct {
		f         registryFormat
		keySchema string
		decode    func(t *testing.T, schema string, body []byte) string
	}{
		{registryFormats[0], `"string"`, func(t *testing.T, schema string, body []byte) string {
			s, err := avro.Parse(schema)
			if err != nil {
				t.Fatal(err)
			}
			var v string
			rest, err := s.Decode(body, &v)
			if err != nil || len(rest) != 0 {
				t.Fatalf("avro key %x: %v (%d bytes left)", body, err, len(rest))
			}
			return v
		}},
		{registryFormats[2], `{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}`, func(t *testing.T, schema string, body []byte) string {
			var js struct{ Type string }
			if err := json.Unmarshal([]byte(schema), &js); err != nil || js.Type != "string" {
				t.Fatalf("key schema %s: %v", schema, err)
			}
			var v string
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("json-schema key %q: %v", body, err)
			}
			return v
		}},
	} {
		t.Run(c.f.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{Partitions: 3})
			register(t, reg, env.Topic+"-value", c.f.schemaType, c.f.v1)
			register(t, reg, env.Topic+"-value", c.f.schemaType, c.f.v2)
			keyID := register(t, reg, env.Topic+"-key", c.f.schemaType, c.keySchema)
			keySchema := schemaByID(t, reg, keyID) // what a consumer's deserializer reads
			relay := env.StartRelay(registryEnv(c.f.name, reg, "OUTBOX_RELAY_SCHEMA_KEY=true")...)
			defer relay.Term(10 * time.Second)
			rows := writeFormatRows(t, env, 12, false, func(i int) any {
				return fmt.Sprintf(`{"n": %d, "sku": "s-%d", "qty": %d}`, i, i, 10*i)
			})
			recs := waitRaw(t, env.Topic, env.Partitions, len(rows), 60*time.Second)
			byID := recordsByID(t, recs)
			for _, row := range rows {
				r := byID[row.id]
				if len(r.Key) < 6 || r.Key[0] != 0 || binary.BigEndian.Uint32(r.Key[1:5]) != uint32(keyID) {
					t.Fatalf("event %s: key %x, want the Confluent frame of key schema id %d", row.id, r.Key, keyID)
				}
				if got := c.decode(t, keySchema, r.Key[5:]); got != row.aggID {
					t.Errorf("event %s: key decodes to %q, want %q", row.id, got, row.aggID)
				}
				if want := partitionOf(row.aggID, env.Partitions); r.Partition != want {
					t.Errorf("event %s: partition %d, want %d, the aggregate_id's", row.id, r.Partition, want)
				}
			}
			t.Logf("%d events keyed with key schema id %d, on their aggregate_id's partitions", len(rows), keyID)
		})
	}
}

// schemaByID is the text of schema id at base (GET /schemas/ids/{id}).
func schemaByID(t testing.TB, base string, id int) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/schemas/ids/%d", base, id))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Schema string }
	if out, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || json.Unmarshal(out, &r) != nil || r.Schema == "" {
		t.Fatalf("schema %d: HTTP %d: %s", id, resp.StatusCode, out)
	}
	return r.Schema
}
