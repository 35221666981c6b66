// Package pbjson encodes an outbox row's JSON payload into the Protobuf
// binary form of a message of a registered .proto schema (issue 48: the
// protobuf record format), and names that message's place in its file the
// way Confluent's wire format does (the message-index list).
//
// The schema is the .proto source text a registry stores. It is compiled
// with github.com/bufbuild/protocompile, with Google's well-known types
// (google/protobuf/timestamp.proto and the others) available to import;
// other imports are the registry's references, which Parse takes by their
// import path. The payload is read as protojson reads it, the canonical
// JSON mapping: field names in lowerCamelCase or as declared, enums by
// name or number, 64-bit integers as numbers or strings, Timestamp as RFC
// 3339. Most messages are encoded directly from the JSON (encode.go);
// those with a well-known type, a group, an extension or a required field
// by protojson itself and dynamicpb.
// A member the message does not have is an error, as in the avro format: a
// payload for another schema version is poison, not data to drop.
package pbjson

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// schemaPath is the name the schema's own text is compiled under.
const schemaPath = "schema.proto"

// Schema is a compiled .proto schema.
type Schema struct {
	file protoreflect.FileDescriptor
}

// Parse compiles a .proto schema. refs are the sources of the files it
// imports, by import path (a registry's schema references); the
// well-known types need none.
func Parse(ctx context.Context, text string, refs map[string]string) (*Schema, error) {
	srcs := map[string]string{schemaPath: text}
	for path, src := range refs {
		if path == schemaPath {
			return nil, fmt.Errorf("protobuf schema: a reference may not be named %s", schemaPath)
		}
		srcs[path] = src
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(srcs),
		}),
	}
	files, err := c.Compile(ctx, schemaPath)
	if err != nil {
		return nil, fmt.Errorf("protobuf schema: %w", err)
	}
	if files[0].Messages().Len() == 0 {
		return nil, errors.New("protobuf schema: it declares no message")
	}
	return &Schema{file: files[0]}, nil
}

// Message is one message of a schema, ready to encode payloads.
type Message struct {
	desc protoreflect.MessageDescriptor
	// direct is the message's plan for the direct encoder, nil when the
	// message reaches what only protojson handles (a well-known type, a
	// group, an extension, a required field): planned on the first
	// Append, not for a message only decoded (MessageAt, JSON).
	direct     *plan
	directOnce sync.Once
	// Indexes is the message's path in its file: its index among the
	// file's top-level messages, then among each enclosing message's
	// nested ones. [0] is the file's first message.
	Indexes []int
}

// Message returns the message named name (fully qualified,
// "shop.v1.OrderPlaced", or relative to the file's package,
// "OrderPlaced"); "" is the file's first message, as Confluent's
// serializer picks by default.
func (s *Schema) Message(name string) (*Message, error) {
	if name == "" {
		return &Message{desc: s.file.Messages().Get(0), Indexes: []int{0}}, nil
	}
	full := protoreflect.FullName(name)
	if pkg := s.file.Package(); pkg != "" && !strings.HasPrefix(name, string(pkg)+".") {
		full = pkg.Append(protoreflect.Name(name))
		if strings.Contains(name, ".") {
			full = protoreflect.FullName(string(pkg) + "." + name) // a nested message: "Order.Line"
		}
	}
	if m := find(s.file.Messages(), full, nil); m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("protobuf schema: no message %s in it", full)
}

// find looks for the message named full among ms and their nested
// messages, with path the indexes of the enclosing ones.
func find(ms protoreflect.MessageDescriptors, full protoreflect.FullName, path []int) *Message {
	for i := range ms.Len() {
		m := ms.Get(i)
		p := append(append([]int(nil), path...), i)
		if m.FullName() == full {
			return &Message{desc: m, Indexes: p}
		}
		if strings.HasPrefix(string(full), string(m.FullName())+".") {
			if found := find(m.Messages(), full, p); found != nil {
				return found
			}
		}
	}
	return nil
}

// Name is the message's full name.
func (m *Message) Name() string { return string(m.desc.FullName()) }

// Error is a payload that does not fit the message.
type Error struct {
	Message string // the message's full name
	// Field is the path of the first offending field, by declared names
	// ("lines[2].qty", `attrs["k"]`); "" when the payload as a whole does
	// not fit, and when the message is one protojson reads (then Reason,
	// protojson's account, names the member).
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Message + ": " + e.Reason }

// Append appends the Protobuf binary encoding (deterministic: map entries
// in key order) of payload, read as the message's canonical JSON, to dst.
// An error is an *Error.
//
// The encoding is direct (encode.go), from the JSON to the wire format,
// unless the message reaches a well-known type, a group, an extension or
// a required field: then protojson reads the payload into a dynamicpb
// message that proto.Marshal writes (appendDynamic), ten times slower.
// Both accept the same payloads and write the same bytes.
func (m *Message) Append(dst, payload []byte) ([]byte, error) {
	m.directOnce.Do(func() { m.direct = newPlan(m.desc) })
	if m.direct != nil {
		return appendDirect(m.direct, m.Name(), dst, payload)
	}
	return m.appendDynamic(dst, payload)
}

// appendDynamic is Append by protojson and dynamicpb.
func (m *Message) appendDynamic(dst, payload []byte) ([]byte, error) {
	msg := dynamicpb.NewMessage(m.desc)
	if err := protojson.Unmarshal(payload, msg); err != nil {
		return dst, &Error{Message: m.Name(), Reason: trimProto(err.Error())}
	}
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, msg)
	if err != nil {
		return dst, &Error{Message: m.Name(), Reason: trimProto(err.Error())}
	}
	return out, nil
}

// MessageAt is the message at indexes (Confluent's message-index path).
func (s *Schema) MessageAt(indexes []int) (*Message, error) {
	if len(indexes) == 0 {
		return nil, errors.New("protobuf value: no message index")
	}
	ms := s.file.Messages()
	var m protoreflect.MessageDescriptor
	for _, i := range indexes {
		if i < 0 || i >= ms.Len() {
			return nil, fmt.Errorf("protobuf value: message index %v is not in the schema", indexes)
		}
		m = ms.Get(i)
		ms = m.Messages()
	}
	return &Message{desc: m, Indexes: indexes}, nil
}

// JSON decodes body, a Protobuf binary value of the message, into its
// canonical JSON (protojson; field names as declared, so a payload
// written with them round-trips).
func (m *Message) JSON(body []byte) ([]byte, error) {
	msg := dynamicpb.NewMessage(m.desc)
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, fmt.Errorf("protobuf value of %s: %s", m.Name(), trimProto(err.Error()))
	}
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
}

// trimProto drops the "proto:" prefix of the protobuf module's errors
// (followed by a space or, at random, a no-break space).
func trimProto(s string) string {
	if rest, ok := strings.CutPrefix(s, "proto:"); ok {
		return strings.TrimLeft(rest, " \u00a0")
	}
	return s
}
