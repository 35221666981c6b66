package pbjson

import (
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// plan is a message prepared for the direct encoder (encode.go): its
// fields with their tags, presence and order precomputed, and a name
// table for both the JSON and the declared names, so that an event costs
// lookups, not descriptor calls.
type plan struct {
	name   string // the message's full name
	fields []planField
	byName map[string]int // a JSON member name -> index in fields
	// words is the length of the bit set of the fields and real oneofs
	// seen in one object (fields first, then oneofs).
	words int
}

// planField is one field of a plan.
type planField struct {
	name  string // as declared, for the error's field path
	kind  protoreflect.Kind
	tag   []byte // tag of one value; length-delimited for a packed list
	order uint32 // proto.MarshalOptions{Deterministic: true}'s place
	// presence: a default value (0, "", false) is still written (proto3
	// optional, proto2 optional, a oneof member).
	presence bool
	list     bool
	packed   bool
	oneof    int // bit of the real oneof in the seen set, -1 for none
	msg      *plan
	enum     map[string]int32 // value numbers by name
	key, val *planField       // a map's entry fields
}

// orderOneof is where the members of the real oneofs go: after every
// other field. proto.Marshal's deterministic field order for a message
// without fast-path methods (dynamicpb) is order.LegacyFieldOrder: fields
// outside a oneof (a proto3 optional's synthetic one included) by number,
// then the oneofs' members by the oneof's declaration index.
const orderOneof = 1 << 30

// planner builds the plans of a message and the messages it reaches,
// once each (recursive messages refer to their own plan).
type planner struct {
	plans  map[protoreflect.FullName]*plan
	failed bool
}

// newPlan returns the plan of md, or nil when md reaches something the
// direct encoder leaves to protojson: a well-known type (its JSON form is
// not the message's fields), a group or delimited message, an
// extension range, a required field (protojson checks them after
// decoding).
func newPlan(md protoreflect.MessageDescriptor) *plan {
	p := &planner{plans: map[protoreflect.FullName]*plan{}}
	pl := p.message(md)
	if p.failed {
		return nil
	}
	return pl
}

func (p *planner) message(md protoreflect.MessageDescriptor) *plan {
	if pl, ok := p.plans[md.FullName()]; ok {
		return pl
	}
	// A MessageSet has extension ranges too.
	if wellKnown(md.FullName()) || md.ExtensionRanges().Len() > 0 {
		p.failed = true
		return nil
	}
	fds := md.Fields()
	pl := &plan{name: string(md.FullName()), byName: map[string]int{}}
	p.plans[md.FullName()] = pl
	oneofs := 0
	oneofBit := map[int]int{}
	for i := range md.Oneofs().Len() {
		if od := md.Oneofs().Get(i); !od.IsSynthetic() {
			oneofBit[od.Index()] = fds.Len() + oneofs
			oneofs++
		}
	}
	pl.words = (fds.Len() + oneofs + 63) / 64
	pl.fields = make([]planField, fds.Len())
	for i := range fds.Len() {
		fd := fds.Get(i)
		f, ok := p.field(fd)
		if !ok {
			p.failed = true
			return nil
		}
		f.oneof = -1
		f.order = uint32(fd.Number())
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			f.oneof = oneofBit[od.Index()]
			f.order = orderOneof + uint32(od.Index())
		}
		pl.fields[i] = f
	}
	// The names protojson resolves: ByJSONName first, then ByTextName.
	for i := range fds.Len() {
		fd := fds.Get(i)
		for _, name := range []string{fd.JSONName(), fd.TextName(), string(fd.Name())} {
			r := fds.ByJSONName(name)
			if r == nil {
				r = fds.ByTextName(name)
			}
			if r != nil {
				pl.byName[name] = r.Index()
			}
		}
	}
	return pl
}

// field plans fd (not its oneof and order); false when fd is not for
// the direct encoder.
func (p *planner) field(fd protoreflect.FieldDescriptor) (planField, bool) {
	if fd.Cardinality() == protoreflect.Required || fd.IsExtension() {
		return planField{}, false
	}
	f := planField{
		name:     string(fd.Name()),
		kind:     fd.Kind(),
		presence: fd.HasPresence(),
		list:     fd.IsList(),
		packed:   fd.IsList() && fd.IsPacked(),
	}
	switch {
	case fd.IsMap():
		k, okK := p.field(fd.MapKey())
		v, okV := p.field(fd.MapValue())
		if !okK || !okV {
			return planField{}, false
		}
		k.oneof, v.oneof = -1, -1
		f.key, f.val = &k, &v
		f.tag = protowire.AppendTag(nil, fd.Number(), protowire.BytesType)
		return f, true
	case f.kind == protoreflect.GroupKind:
		return planField{}, false
	case f.kind == protoreflect.MessageKind:
		if f.msg = p.message(fd.Message()); f.msg == nil {
			return planField{}, false
		}
	case f.kind == protoreflect.EnumKind:
		ed := fd.Enum()
		if wellKnown(ed.FullName()) {
			return planField{}, false // google.protobuf.NullValue reads null
		}
		f.enum = map[string]int32{}
		for i := range ed.Values().Len() {
			v := ed.Values().Get(i)
			f.enum[string(v.Name())] = int32(v.Number())
		}
	}
	wt := wireType(f.kind)
	if f.packed {
		wt = protowire.BytesType
	}
	f.tag = protowire.AppendTag(nil, fd.Number(), wt)
	return f, true
}

// wellKnown reports a type of package google.protobuf: the well-known
// types with a JSON form of their own (Timestamp, Duration, Any, Struct,
// Value, NullValue, ListValue, the wrappers, FieldMask, Empty), and the
// descriptor types, all left to protojson.
func wellKnown(name protoreflect.FullName) bool {
	return strings.HasPrefix(string(name), "google.protobuf.")
}

// wireType is the wire type of a value of kind k (proto's wireTypes).
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	}
	return protowire.VarintType
}
