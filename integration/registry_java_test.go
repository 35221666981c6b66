//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestRegistryJavaDecode: the relay's records in every registry format,
// read from Kafka and decoded by the reference Java libraries
// (interop/schemas/SchemaDecode.java: Apache Avro's GenericDatumReader and
// protobuf-java's DynamicMessage, each schema fetched from the registry by
// the record's id), give back every field of the row's payload. The Java
// side shares no code with the relay; protobuf-java cannot parse .proto
// text, so the test hands it the schema as a descriptor set, compiled here.
func TestRegistryJavaDecode(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	for _, f := range registryFormats {
		t.Run(f.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{Partitions: 2})
			subject := env.Topic + "-value"
			register(t, reg, subject, f.schemaType, f.v1)
			register(t, reg, subject, f.schemaType, f.v2)
			relay := env.StartRelay(registryEnv(f.name, reg)...)
			defer relay.Term(10 * time.Second)
			rows := writeFormatRows(t, env, 6, false, func(i int) any {
				// no field at its zero value: protobuf-java's JSON leaves those out
				return fmt.Sprintf(`{"n": %d, "sku": "s-%d \u00e9", "qty": %d}`, i+1, i, 1000000000000+int64(i))
			})
			recs := recordsByID(t, waitRaw(t, env.Topic, env.Partitions, len(rows), 60*time.Second))
			var in strings.Builder
			for _, row := range rows {
				in.WriteString(hex.EncodeToString(recs[row.id].Value) + "\n")
			}
			args := []string{"run", reg}
			if f.schemaType == "PROTOBUF" {
				args = append(args, descriptorSet(t, f.v2))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(repoRoot, "scripts", "schemacheck.sh")}, args...)...)
			cmd.Stdin = strings.NewReader(in.String())
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("scripts/schemacheck.sh %v: %v\n%s", args, err, tail(stderr.String(), 20))
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != len(rows) {
				t.Fatalf("the Java decoder printed %d lines for %d values:\n%s", len(lines), len(rows), out)
			}
			for i, row := range rows {
				var got, want map[string]any
				if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
					t.Fatalf("event %s: the Java decoder printed %q: %v", row.id, lines[i], err)
				}
				if err := json.Unmarshal(row.payload, &want); err != nil {
					t.Fatal(err)
				}
				if g, w := normalize(t, got), normalize(t, want); !reflect.DeepEqual(g, w) {
					t.Errorf("event %s: Java decoded %v, want the row's payload %v", row.id, g, w)
				}
			}
			t.Logf("%d %s records decoded by the Java reference libraries, every field equal to the row's payload, e.g. %s", len(rows), f.name, lines[0])
		})
	}
}

// descriptorSet compiles a .proto schema and writes it as a serialized
// FileDescriptorSet (with its imports first) to a file of the test's.
func descriptorSet(t *testing.T, schema string) string {
	t.Helper()
	files, err := (&protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": schema})})}).Compile(context.Background(), "order.proto")
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	for i := 0; i < files[0].Imports().Len(); i++ {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(files[0].Imports().Get(i).FileDescriptor))
	}
	set.File = append(set.File, protodesc.ToFileDescriptorProto(files[0]))
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "order.desc")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
