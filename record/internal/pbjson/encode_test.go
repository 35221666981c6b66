package pbjson

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// richProto3 has every scalar kind, enums (a negative value too), nested
// and recursive messages, repeated fields packed and not, maps of several
// key kinds, two oneofs declared against their field numbers' order,
// proto3 optional fields, a json_name, and fields declared out of number
// order: what the direct encoder must write as proto.Marshal does.
const richProto3 = `syntax = "proto3";
package t.v1;
message All {
  int64 i64 = 2; int32 i32 = 1; uint32 u32 = 3; uint64 u64 = 4;
  sint32 s32 = 5; sint64 s64 = 6; fixed32 f32 = 7; fixed64 f64 = 8;
  sfixed32 sf32 = 9; sfixed64 sf64 = 10; float fl = 11; double db = 12;
  bool b = 13; string s = 14; bytes by = 15; Color color = 16;
  Inner inner = 17;
  oneof early { int32 e_int = 61; string e_str = 62; }
  repeated int32 ri32 = 18; repeated sint64 rs64 = 19; repeated double rdb = 20;
  repeated fixed32 rf32 = 21 [packed = false];
  repeated string rs = 22; repeated bytes rby = 23; repeated Color rcolor = 24;
  repeated Inner rinner = 25; repeated bool rb = 26; repeated float rfl = 54;
  map<string, string> mss = 27; map<int32, Inner> mi = 28; map<int64, int32> m64 = 29;
  map<uint32, Color> mu = 30; map<bool, bytes> mb = 31; map<sint32, double> ms = 32;
  map<fixed64, string> mf = 33; map<sfixed32, bool> msf = 34; map<uint64, uint64> mu64 = 35;
  oneof choice { string o_str = 40; Inner o_inner = 41; int32 o_int = 42; Color o_color = 43; }
  oneof other { bool x_b = 44; bytes x_by = 45; }
  optional int32 opt_i32 = 46; optional string opt_s = 47; optional Color opt_color = 48;
  optional double opt_db = 49; optional Inner opt_inner = 50; optional bool opt_b = 55;
  int32 json_named = 51 [json_name = "jn"];
  All rec = 52;
  uint32 field_with_under_score = 53;
}
message Inner { string name = 2; int32 n = 1; repeated Inner kids = 3; map<string, Inner> tree = 4; }
enum Color { COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2; NEG = -1; }
`

// richProto2 is a proto2 file: explicit presence everywhere, repeated
// fields unpacked unless marked, a closed enum.
const richProto2 = `syntax = "proto2";
package t.v2;
message P2 {
  optional int32 a = 1; optional string s = 2 [default = "x"]; optional bool b = 3;
  repeated int32 r = 4; repeated int32 rp = 5 [packed = true];
  optional E e = 6; repeated E re = 7; map<string, E> me = 8;
  optional P2 child = 9; optional bytes by = 10; optional float f = 11;
  oneof o { int64 oi = 12; string os = 13; }
  optional sint32 z = 14; repeated string rs = 15;
}
enum E { ZERO = 0; ONE = 1; TWO = 2; }
`

// richEditions: edition 2023 features (implicit presence by file, an
// explicit field, expanded and packed repeated fields).
const richEditions = `edition = "2023";
package t.ed;
option features.field_presence = IMPLICIT;
message Ed {
  int32 a = 1; string s = 2 [features.field_presence = EXPLICIT];
  repeated int32 r = 3 [features.repeated_field_encoding = EXPANDED]; repeated int32 p = 4;
  Ed child = 5; bool b = 6;
}
`

// wideProto has more fields and oneofs than one 64-bit word of the
// encoder's seen set holds, declared from the highest number down.
var wideProto = func() string {
	var b strings.Builder
	b.WriteString(`syntax = "proto3"; package t.w; message Wide {`)
	for i := 70; i > 0; i-- {
		fmt.Fprintf(&b, " int32 f%d = %d;", i, i)
	}
	b.WriteString(" oneof o1 { string a1 = 80; int32 b1 = 81; } oneof o2 { bool a2 = 71; } }")
	return b.String()
}()

// directMessages are the messages the differential tests encode both
// ways.
func directMessages(t testing.TB) []*Message {
	t.Helper()
	var ms []*Message
	for _, c := range []struct{ text, name string }{
		{richProto3, "All"}, {richProto3, "Inner"}, {richProto2, "P2"}, {richEditions, "Ed"}, {wideProto, "Wide"},
	} {
		s, err := Parse(context.Background(), c.text, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Message(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if m.direct = newPlan(m.desc); m.direct == nil {
			t.Fatalf("%s: no plan: the direct encoder refuses it", m.Name())
		}
		ms = append(ms, m)
	}
	return ms
}

// sameAsProtojson encodes payload both ways and fails unless both refuse
// it or both write the same bytes.
func sameAsProtojson(t *testing.T, m *Message, payload []byte) {
	t.Helper()
	want, werr := m.appendDynamic(nil, payload)
	got, gerr := appendDirect(m.direct, m.Name(), nil, payload)
	if gerr != nil {
		var pe *Error
		if !errors.As(gerr, &pe) || pe.Message != m.Name() {
			t.Fatalf("%s %q: error %v is not an *Error of the message", m.Name(), payload, gerr)
		}
	}
	switch {
	case (werr == nil) != (gerr == nil):
		t.Fatalf("%s %q:\nprotojson: %v\ndirect:    %v", m.Name(), payload, werr, gerr)
	case werr == nil && !bytes.Equal(want, got):
		t.Fatalf("%s %q:\nprotojson+Marshal % x\ndirect            % x", m.Name(), payload, want, got)
	}
}

// trickyPayloads are the cases the direct encoder must treat exactly as
// protojson does; they seed FuzzDirect too.
var trickyPayloads = []string{
	`{}`, ` {} `, `{"i32":1}`, "\t{\"i32\" : 1 }\n", `{"i32":0}`, `{"i32":-0}`, `{"i32":"1"}`, `{"i32":" 1"}`, `{"i32":"1 "}`,
	`{"i32":1.0}`, `{"i32":1e2}`, `{"i32":1.5e1}`, `{"i32":100e-2}`, `{"i32":10e-2}`, `{"i32":1e}`, `{"i32":1E+}`, `{"i32":1e-}`,
	`{"i32":1.0e}`, `{"i32":"1e"}`, `{"i32":2147483647}`, `{"i32":2147483648}`, `{"i32":-2147483648}`, `{"i32":-2147483649}`,
	`{"i32":1.5}`, `{"i32":"0x10"}`, `{"i32":"\u0031"}`, `{"i32":0.00000000000000000000001e23}`, `{"i32":1e-0}`, `{"i32":true}`,
	`{"i32":null}`, `{"i32":01}`, `{"i32":-}`, `{"i32":1e400}`, `{"i32":0e-99999999999}`, `{"i32":1e99999999999}`, `{"i32":-0.0e5}`,
	`{"i64":"9223372036854775807"}`, `{"i64":"9223372036854775808"}`, `{"i64":-9223372036854775808}`, `{"i64":"-9223372036854775809"}`,
	`{"u64":18446744073709551615}`, `{"u64":18446744073709551616}`, `{"u64":-1}`, `{"u64":"-0"}`, `{"u32":4294967295}`, `{"u32":4294967296}`,
	`{"u64":10000000000000000000000e-3}`, `{"u64":100000000000000000000e-1}`, `{"u64":1844674407370955161.5e1}`,
	`{"s32":-1}`, `{"s64":"-9223372036854775808"}`, `{"f32":4294967295}`, `{"f64":"18446744073709551615"}`, `{"sf32":-2147483648}`, `{"sf64":-1}`,
	`{"fl":1.5}`, `{"fl":"NaN"}`, `{"fl":"Infinity"}`, `{"fl":"-Infinity"}`, `{"fl":"nan"}`, `{"fl":1e39}`, `{"fl":3.4028235e38}`,
	`{"fl":3.4028236e38}`, `{"fl":1e-50}`, `{"fl":-0.0}`, `{"fl":"-0"}`, `{"fl":0}`, `{"db":1.7976931348623157e308}`, `{"db":1e309}`,
	`{"db":5e-324}`, `{"db":"1.5"}`, `{"db":-0}`, `{"db":"NaN"}`, `{"db":" 1.5"}`, `{"db":1e}`, `{"db":"\u0031.5"}`,
	`{"b":true}`, `{"b":false}`, `{"b":"true"}`, `{"b":0}`, `{"b":truex}`, `{"b":tru}`,
	`{"s":""}`, `{"s":"abc"}`, `{"s":"\u00e9"}`, `{"s":"é"}`, `{"s":"\ud83d\ude00"}`, `{"s":"\ud83d"}`, `{"s":"\udc00\ud83d"}`,
	`{"s":"\ud83dx"}`, `{"s":"\u0000"}`, `{"s":"a\"b"}`, `{"s":"\/"}`, "{\"s\":\"\xff\"}", "{\"s\":\"\x01\"}", `{"s":1}`, `{"s":"\x"}`,
	`{"s":"\u12"}`, `{"s":"\uD83D\uDE00"}`, "{\"s\":\"\xed\xa0\x80\"}", `{"s":"` + strings.Repeat("x", 200) + `"}`,
	`{"s":"` + strings.Repeat(`\n`, 100) + `"}`, `{"s":"` + strings.Repeat(`\u00e9`, 30) + `"}`,
	`{"by":""}`, `{"by":"AQID"}`, `{"by":"AQI"}`, `{"by":"AQI="}`, `{"by":"-_8"}`, `{"by":"+/8="}`, `{"by":"AQ=="}`, `{"by":"AQ="}`,
	`{"by":"A"}`, `{"by":"AQID\n"}`, `{"by":"AQ\nID"}`, `{"by":"_-_-"}`, `{"by":"ab+-"}`, `{"by":"AR=="}`, `{"by":"$$$$"}`, `{"by":"AQ\r\nID"}`,
	`{"color":"RED"}`, `{"color":"NEG"}`, `{"color":"COLOR_UNSPECIFIED"}`, `{"color":"BLUE"}`, `{"color":0}`, `{"color":-1}`, `{"color":99}`,
	`{"color":2147483648}`, `{"color":"1"}`, `{"color":1.0}`, `{"color":1e}`, `{"color":true}`, `{"color":"R\u0045D"}`,
	`{"inner":{}}`, `{"inner":null}`, `{"inner":{"n":0,"name":""}}`, `{"inner":{"name":"x","n":1}}`, `{"inner":[]}`, `{"inner":1}`,
	`{"ri32":[]}`, `{"ri32":[0,1,-1]}`, `{"ri32":[null]}`, `{"ri32":null}`, `{"ri32":[1,]}`, `{"ri32":1}`, `{"ri32":["1",2e0]}`,
	`{"rf32":[0,1]}`, `{"rcolor":["RED",0,"NEG",5]}`, `{"rinner":[{},{"n":1}]}`, `{"rinner":[null]}`, `{"rs":["","a"]}`, `{"rb":[false,true]}`,
	`{"rby":["","AQ"]}`, `{"rdb":["NaN",-0,1e-7]}`, `{"rs64":[-1,"-2"]}`, `{"rfl":[0.1,"Infinity"]}`,
	`{"ri32":[` + strings.Repeat("1,", 200) + `1]}`,
	`{"mss":{}}`, `{"mss":{"b":"2","a":"1"}}`, `{"mss":{"a":"1","a":"2"}}`, `{"mss":{"a":"1","\u0061":"2"}}`, `{"mss":{"":""}}`,
	`{"mss":{"a":null}}`, `{"mss":{"é":"x","z":"y"}}`, `{"mss":{"b":"","a":"","c":""}}`, `{"mss":null}`, `{"mss":[]}`,
	`{"mi":{"1":{},"01":{}}}`, `{"mi":{"+1":{"n":2}}}`, `{"mi":{"-0":{}}}`, `{"mi":{"1e2":{}}}`, `{"mi":{" 1":{}}}`, `{"mi":{"2147483648":{}}}`,
	`{"mi":{"-1":{},"1":{},"-2":{}}}`, `{"mi":{"a":{}}}`, `{"mi":{"\u0031":{}}}`, `{"mi":{"1":null}}`,
	`{"m64":{"9223372036854775807":1,"-9223372036854775808":2}}`, `{"mu":{"4294967295":"RED","0":1,"7":"X"}}`, `{"mu":{"-1":0}}`,
	`{"mb":{"true":"AQ","false":""}}`, `{"mb":{"True":""}}`, `{"mb":{"1":""}}`, `{"mb":{"true":"","true":"AA"}}`,
	`{"ms":{"-5":1.5,"5":"NaN"}}`, `{"mf":{"18446744073709551615":"x","1":""}}`, `{"msf":{"-1":true,"0":false}}`, `{"mu64":{"2":3,"10":1}}`,
	`{"oStr":"x"}`, `{"o_str":""}`, `{"oInt":0}`, `{"oColor":"COLOR_UNSPECIFIED"}`, `{"oInner":{}}`, `{"oStr":"x","oInt":1}`,
	`{"oStr":null,"oInt":1}`, `{"oStr":"x","oInt":null}`, `{"oStr":null,"oInt":null}`, `{"xB":false,"eInt":0,"oStr":"a","i32":3}`,
	`{"eStr":"z","xBy":"","s":"q","oInt":5}`,
	`{"optI32":0}`, `{"optS":""}`, `{"optColor":0}`, `{"optDb":0}`, `{"optDb":-0}`, `{"optInner":{}}`, `{"optB":false}`, `{"opt_i32":null}`,
	`{"jn":5}`, `{"json_named":5}`, `{"jsonNamed":5}`, `{"jn":1,"json_named":2}`,
	`{"fieldWithUnderScore":1}`, `{"field_with_under_score":1}`, `{"fieldWithUnderScore":1,"field_with_under_score":2}`,
	`{"i32":1,"i32":2}`, `{"i32":1,"i32":null}`, `{"i32":null,"i32":1}`, `{"colour":1}`, `{"I32":1}`, `{"\u0069\u0033\u0032":7}`,
	`{"rec":{"rec":{"i32":1}}}`, `{"rec":{"mss":{"k":"v"},"inner":{"tree":{"x":{"kids":[{"n":1}]}}}}}`,
	`{"s":"x","i32":1,"inner":{"n":1},"b":true,"i64":2}`, `{"u64":1,"i32":2,"rec":{"u32":1,"i64":3}}`,
	`{"inner":{"name":"` + strings.Repeat("n", 300) + `"}}`, `{"mss":{"k":"` + strings.Repeat("v", 300) + `"}}`,
	`{"rinner":[{"name":"` + strings.Repeat("n", 130) + `"}]}`,
	`{"mi":{"3":{"name":"` + strings.Repeat("n", 130) + `"},"1":{}}}`,
	``, ` `, `null`, `[]`, `[1]`, `{`, `}`, `{"i32"}`, `{"i32":}`, `{"i32" 1}`, `{,}`, `{"i32":1,}`, `{"i32":1}{}`, `{"i32":1} x`,
	`{"i32":1}}`, "\ufeff{}", `{i32:1}`, `{"i32":1 "u32":2}`, `{"inner":{"n":1}`, `{"inner":{"n":1}}]`, `"x"`, `1`,
	// proto2
	`{"a":0}`, `{"s":""}`, `{"b":false}`, `{"e":"ZERO"}`, `{"e":7}`, `{"e":-3}`, `{"re":[0,"TWO",9]}`, `{"me":{"k":"ONE","j":5}}`,
	`{"r":[1,2]}`, `{"rp":[1,2]}`, `{"rp":[]}`, `{"child":{"child":{}}}`, `{"oi":"0"}`, `{"os":"","oi":null}`, `{"z":-0}`, `{"rs":[""]}`,
	`{"f":"-Infinity"}`, `{"by":"AA"}`,
	// editions
	`{"a":0,"s":""}`, `{"r":[0,1],"p":[0,1]}`, `{"child":{"b":false}}`, `{"b":true}`,
	// wide
	`{"f70":1,"f1":2,"f64":3,"f65":4,"a2":false,"a1":"x","f69":5}`, `{"f66":1,"f66":2}`, `{"a1":"","b1":0}`, `{"b1":1,"a2":true,"f2":-1}`,
	// protojson's recursion limit: 10,000 nested messages, not one more
	strings.Repeat(`{"rec":`, 9999) + `{}` + strings.Repeat(`}`, 9999),
	strings.Repeat(`{"rec":`, 10000) + `{}` + strings.Repeat(`}`, 10000),
}

// TestDirectMatchesProtojson: the tricky cases, against every rich
// message, accepted exactly when protojson+Marshal accepts them and then
// written as the same bytes.
func TestDirectMatchesProtojson(t *testing.T) {
	for _, m := range directMessages(t) {
		for _, p := range trickyPayloads {
			sameAsProtojson(t, m, []byte(p))
		}
	}
}

// TestDirectMatchesProtojsonGenerated: random payloads built from the
// messages' fields (names as declared or as JSON names, values from pools
// of valid and invalid tokens, now and then a null, a duplicate, an
// unknown name, nested messages, lists and maps), the same test.
func TestDirectMatchesProtojsonGenerated(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	ms := directMessages(t)
	r := rand.New(rand.NewPCG(48, 1))
	for range n {
		m := ms[r.IntN(len(ms))]
		g := &gen{r: r}
		g.message(m.desc, 0)
		sameAsProtojson(t, m, g.b.Bytes())
	}
}

// gen writes a random payload for a message descriptor.
type gen struct {
	r *rand.Rand
	b bytes.Buffer
}

func (g *gen) pick(pool []string) string { return pool[g.r.IntN(len(pool))] }

func (g *gen) sp() {
	if g.r.IntN(8) == 0 {
		g.b.WriteString(g.pick([]string{" ", "\n", "\t", "\r\n  "}))
	}
}

func (g *gen) message(md protoreflect.MessageDescriptor, depth int) {
	g.b.WriteByte('{')
	fields := md.Fields()
	n := g.r.IntN(5)
	if depth > 3 {
		n = g.r.IntN(2)
	}
	for i := range n {
		if i > 0 {
			g.b.WriteByte(',')
		}
		g.sp()
		if g.r.IntN(60) == 0 {
			g.b.WriteString(`"nope":1`)
			continue
		}
		fd := fields.Get(g.r.IntN(fields.Len()))
		name := fd.JSONName()
		if g.r.IntN(2) == 0 {
			name = string(fd.Name())
		}
		fmt.Fprintf(&g.b, "%q", name)
		g.sp()
		g.b.WriteByte(':')
		g.sp()
		if g.r.IntN(15) == 0 {
			g.b.WriteString("null")
			continue
		}
		g.field(fd, depth)
		g.sp()
	}
	g.b.WriteByte('}')
}

func (g *gen) field(fd protoreflect.FieldDescriptor, depth int) {
	switch {
	case fd.IsMap():
		g.b.WriteByte('{')
		for i := range g.r.IntN(4) {
			if i > 0 {
				g.b.WriteByte(',')
			}
			g.b.WriteString(g.mapKey(fd.MapKey().Kind()))
			g.b.WriteByte(':')
			g.single(fd.MapValue(), depth)
		}
		g.b.WriteByte('}')
	case fd.IsList():
		g.b.WriteByte('[')
		for i := range g.r.IntN(4) {
			if i > 0 {
				g.b.WriteByte(',')
				g.sp()
			}
			g.single(fd, depth)
		}
		g.b.WriteByte(']')
	default:
		g.single(fd, depth)
	}
}

func (g *gen) mapKey(k protoreflect.Kind) string {
	switch k {
	case protoreflect.StringKind:
		return g.pick([]string{`"a"`, `"b"`, `""`, `"é"`, `"\u0061"`, `"ab"`, `"Z"`})
	case protoreflect.BoolKind:
		return g.pick([]string{`"true"`, `"false"`, `"True"`, `"1"`})
	}
	return g.pick([]string{`"1"`, `"01"`, `"+1"`, `"-0"`, `"0"`, `"-1"`, `"1e2"`, `"2147483648"`, `"4294967295"`, `"-2147483648"`, `"10"`, `"2"`, `"x"`})
}

var (
	intPool = []string{`0`, `-0`, `1`, `-1`, `"1"`, `" 1"`, `1.0`, `1e2`, `1.5e1`, `100e-2`, `1e`, `2147483647`, `2147483648`,
		`-2147483648`, `-2147483649`, `4294967295`, `4294967296`, `9223372036854775807`, `"9223372036854775808"`,
		`-9223372036854775808`, `18446744073709551615`, `1.5`, `"-5"`, `12345`, `-300`, `"0"`, `true`}
	floatPool = []string{`0`, `-0`, `1.5`, `-2.25`, `"NaN"`, `"Infinity"`, `"-Infinity"`, `1e39`, `3.4028235e38`, `1e-50`,
		`1e309`, `"1.5"`, `5e-324`, `0.1`, `"x"`, `1e`, `123456789012345678901234567890`}
	stringPool = []string{`""`, `"abc"`, `"\u00e9"`, `"é"`, `"\ud83d\ude00"`, `"\ud83d"`, `"a\"b"`, `"\n"`, "\"\xff\"",
		`1`, `"` + strings.Repeat("y", 130) + `"`}
	bytesPool = []string{`""`, `"AQID"`, `"AQI"`, `"AQI="`, `"-_8"`, `"+/8="`, `"A"`, `"AR=="`, `"$$"`, `"AQ\nID"`}
	boolPool  = []string{`true`, `false`, `"true"`, `0`}
)

func (g *gen) single(fd protoreflect.FieldDescriptor, depth int) {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		if depth > 5 || g.r.IntN(30) == 0 {
			g.b.WriteString(g.pick([]string{"{}", "null", "1", "[]"}))
			return
		}
		g.message(fd.Message(), depth+1)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		switch g.r.IntN(4) {
		case 0:
			g.b.WriteString(g.pick([]string{`0`, `1`, `-1`, `99`, `"BLUE"`, `"1"`, `null`, `2147483648`}))
		default:
			fmt.Fprintf(&g.b, "%q", vals.Get(g.r.IntN(vals.Len())).Name())
		}
	case protoreflect.BoolKind:
		g.b.WriteString(g.pick(boolPool))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		g.b.WriteString(g.pick(floatPool))
	case protoreflect.StringKind:
		g.b.WriteString(g.pick(stringPool))
	case protoreflect.BytesKind:
		g.b.WriteString(g.pick(bytesPool))
	default:
		g.b.WriteString(g.pick(intPool))
	}
}

// FuzzDirect: for arbitrary input against each rich message, the direct
// encoder refuses exactly what protojson+Marshal refuses and otherwise
// writes the same bytes.
func FuzzDirect(f *testing.F) {
	for _, p := range trickyPayloads {
		f.Add([]byte(p))
	}
	ms := directMessages(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, m := range ms {
			sameAsProtojson(t, m, payload)
		}
	})
}

// TestDirectOrFallback: a message reaching a well-known type, a group,
// an extension range or a required field is left to protojson; a plain
// one is not.
func TestDirectOrFallback(t *testing.T) {
	for text, direct := range map[string]bool{
		`syntax = "proto3"; message M { int32 a = 1; }`:                                                                               true,
		`syntax = "proto3"; message M { N n = 1; } message N { M m = 1; }`:                                                            true,
		`syntax = "proto3"; import "google/protobuf/timestamp.proto"; message M { google.protobuf.Timestamp t = 1; }`:                 false,
		`syntax = "proto3"; import "google/protobuf/struct.proto"; message M { N n = 1; } message N { google.protobuf.Value v = 1; }`: false,
		`syntax = "proto3"; import "google/protobuf/struct.proto"; message M { google.protobuf.NullValue v = 1; }`:                    false,
		`syntax = "proto3"; import "google/protobuf/wrappers.proto"; message M { map<string, google.protobuf.Int32Value> v = 1; }`:    false,
		`syntax = "proto2"; message M { optional group G = 1 { optional int32 a = 2; } }`:                                             false,
		`syntax = "proto2"; message M { optional int32 a = 1; extensions 100 to 200; }`:                                               false,
		`syntax = "proto2"; message M { required int32 a = 1; }`:                                                                      false,
		`syntax = "proto2"; message M { optional N n = 1; } message N { required int32 a = 1; }`:                                      false,
	} {
		s, err := Parse(context.Background(), text, nil)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		m, _ := s.Message("M")
		if got := newPlan(m.desc) != nil; got != direct {
			t.Errorf("%s: direct %v, want %v", text, got, direct)
		}
	}
}

// TestDirectErrors: the direct encoder's errors name the message and the
// offending field's path.
func TestDirectErrors(t *testing.T) {
	s, err := Parse(context.Background(), richProto3, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Message("All")
	for payload, want := range map[string]struct{ field, reason string }{
		`{"colour":1}`:                       {"colour", `unknown field "colour"`},
		`{"rinner":[{"colour":1}]}`:          {"rinner[0].colour", `unknown field "colour"`},
		`{"rinner":[{},{"n":"many"}]}`:       {"rinner[1].n", `invalid value for int32 field rinner[1].n: "many"`},
		`{"mi":{"7":{"kids":[{"name":5}]}}}`: {`mi["7"].kids[0].name`, `invalid value for string field`},
		`{"color":"LOST"}`:                   {"color", `invalid value for enum field color: "LOST"`},
		`{"i32":1,"i32":2}`:                  {"i32", `duplicate field "i32"`},
		`{"oStr":"a","oInt":1}`:              {"o_int", `oneof is already set`},
		`{"mss":{"a":"1","a":"2"}}`:          {"mss", `duplicate map key`},
		`{"mi":{"x":{}}}`:                    {"mi", `invalid value for int32 key: "x"`},
		`[1]`:                                {"", `unexpected token [1]`},
		"{\"inner\":{\n\"n\":true}}":         {"inner.n", `(line 2:5): invalid value for int32 field inner.n: true`},
		`{"inner":{"n":1}`:                   {"", `unexpected end of the payload`},
	} {
		_, err := m.Append(nil, []byte(payload))
		var pe *Error
		if !errors.As(err, &pe) || pe.Message != "t.v1.All" || pe.Field != want.field || !strings.Contains(pe.Reason, want.reason) {
			t.Errorf("%s: %#v, want field %q and a reason containing %q", payload, err, want.field, want.reason)
		}
	}
}

// benchRounds repeats BenchmarkAppendPaths' variants in turn (go test's
// -count repeats each sub-benchmark in a row): go test -bench AppendPaths
// -args -rounds 5.
var benchRounds = flag.Int("rounds", 1, "BenchmarkAppendPaths: rounds of its interleaved variants")

// BenchmarkAppendPaths compares the direct encoder with the dynamicpb
// path it replaces, on the publisher's BenchmarkMessage payload and on a
// richer one (a map, a nested message, enums), interleaved (-rounds) so
// that a loaded machine skews both alike.
func BenchmarkAppendPaths(b *testing.B) {
	order, err := Parse(context.Background(), `syntax = "proto3"; message Order { int64 id = 1; repeated Item items = 2; string note = 3; double total = 4; }
		message Item { string sku = 1; int32 qty = 2; double price = 3; }`, nil)
	if err != nil {
		b.Fatal(err)
	}
	rich, err := Parse(context.Background(), richProto3, nil)
	if err != nil {
		b.Fatal(err)
	}
	for range *benchRounds {
		benchAppendPaths(b, order, rich)
	}
}

func benchAppendPaths(b *testing.B, order, rich *Schema) {
	for _, c := range []struct {
		name    string
		s       *Schema
		payload string
	}{
		{"order", order, `{"id": 1, "items": [{"sku": "a-1", "qty": 2, "price": 9.99}], "note": null, "total": 19.98}`},
		{"rich", rich, `{"i64":"12345","s":"o-1","color":"RED","rinner":[{"name":"s1","n":2},{"name":"s2","n":1}],
			"mss":{"b":"2","a":"1"},"inner":{"name":"x","kids":[{"n":3}]},"ri32":[1,2,3],"optS":"","db":1.5}`},
	} {
		m, err := c.s.Message("")
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name string
			fn   func(dst, payload []byte) ([]byte, error)
		}{{"direct", m.Append}, {"dynamicpb", m.appendDynamic}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				payload := []byte(c.payload)
				var dst []byte
				b.ReportAllocs()
				for b.Loop() {
					if dst, err = v.fn(dst[:0], payload); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestAppendAllocates: encoding the publisher's benchmark payload into a
// buffer with room allocates nothing (the dynamicpb path: 53 times).
func TestAppendAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items")
	}
	s, err := Parse(context.Background(), `syntax = "proto3"; message Order { int64 id = 1; repeated Item items = 2; string note = 3; double total = 4; map<string, string> attrs = 5; }
		message Item { string sku = 1; int32 qty = 2; double price = 3; }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Message("")
	payload := []byte(`{"id": 1, "items": [{"sku": "a-1", "qty": 2, "price": 9.99}], "note": null, "total": 19.98, "attrs": {"b": "2", "a": "1"}}`)
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		if buf, err = m.Append(buf[:0], payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Append allocates %v times, want 0", n)
	}
}
