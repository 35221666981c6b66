package wire

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// The byte layouts Confluent's serializers write (magic, id, Protobuf's
// zig-zag varint index path with [0] as one 0 byte).
var frameVectors = []struct {
	name    string
	id      uint32
	indexes []int
	body    []byte
	want    []byte
}{
	{"avro", 7, nil, []byte{0x02, 'x'}, []byte{0, 0, 0, 0, 7, 0x02, 'x'}},
	{"json, big id", 0x01020304, nil, []byte(`{}`), []byte{0, 1, 2, 3, 4, '{', '}'}},
	{"empty body", 1, nil, nil, []byte{0, 0, 0, 0, 1}},
	{"protobuf first message", 7, []int{0}, []byte{0x0a}, []byte{0, 0, 0, 0, 7, 0, 0x0a}},
	{"protobuf empty path means [0]", 7, []int{}, []byte{0x0a}, []byte{0, 0, 0, 0, 7, 0, 0x0a}},
	{"protobuf second message", 7, []int{1}, nil, []byte{0, 0, 0, 0, 7, 2, 2}},
	{"protobuf nested", 7, []int{0, 2}, nil, []byte{0, 0, 0, 0, 7, 4, 0, 4}},
	{"protobuf index 64", 7, []int{64}, nil, []byte{0, 0, 0, 0, 7, 2, 0x80, 0x01}},
}

func TestFrame(t *testing.T) {
	for _, v := range frameVectors {
		got := Frame(v.id, v.indexes, v.body)
		if !bytes.Equal(got, v.want) {
			t.Errorf("%s: Frame % x, want % x", v.name, got, v.want)
		}
		if got := AppendFrame([]byte("pre"), v.id, v.indexes, v.body); !bytes.Equal(got, append([]byte("pre"), v.want...)) {
			t.Errorf("%s: AppendFrame % x", v.name, got)
		}
		if v.indexes == nil {
			id, body, err := Unframe(v.want)
			if err != nil || id != v.id || !bytes.Equal(body, v.body) {
				t.Errorf("%s: Unframe %d % x %v", v.name, id, body, err)
			}
			continue
		}
		id, idx, body, err := UnframeProtobuf(v.want)
		want := v.indexes
		if len(want) == 0 {
			want = []int{0}
		}
		if err != nil || id != v.id || !slices.Equal(idx, want) || !bytes.Equal(body, v.body) {
			t.Errorf("%s: UnframeProtobuf %d %v % x %v", v.name, id, idx, body, err)
		}
	}
}

func TestFrameAllocatesOnce(t *testing.T) {
	body := make([]byte, 100)
	if n := testing.AllocsPerRun(100, func() { _ = Frame(7, []int{0, 3}, body) }); n != 1 {
		t.Errorf("Frame allocates %v times, want 1", n)
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = AppendFrame(buf[:0], 7, nil, body) }); n != 0 {
		t.Errorf("AppendFrame into room allocates %v times, want 0", n)
	}
}

func TestUnframeRejects(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {0, 0, 0, 0}, {1, 0, 0, 0, 7, 'x'}, {'{', '"', 'a', '"', ':'}} {
		if _, _, err := Unframe(b); !errors.Is(err, ErrNotFramed) {
			t.Errorf("Unframe(% x): got %v, want ErrNotFramed", b, err)
		}
		if _, _, _, err := UnframeProtobuf(b); !errors.Is(err, ErrNotFramed) {
			t.Errorf("UnframeProtobuf(% x): got %v, want ErrNotFramed", b, err)
		}
	}
	for name, b := range map[string][]byte{
		"no index path":          {0, 0, 0, 0, 7},
		"count not a varint":     {0, 0, 0, 0, 7, 0x80},
		"negative count":         {0, 0, 0, 0, 7, 1},
		"count past the bytes":   {0, 0, 0, 0, 7, 6, 0},
		"index cut off":          {0, 0, 0, 0, 7, 2, 0x80},
		"negative index":         {0, 0, 0, 0, 7, 2, 1},
		"count over maxIndexes":  append([]byte{0, 0, 0, 0, 7, 0x82, 0x02}, make([]byte, 200)...),
		"index over int32 range": {0, 0, 0, 0, 7, 2, 0x80, 0x80, 0x80, 0x80, 0x10},
	} {
		if _, _, _, err := UnframeProtobuf(b); !errors.Is(err, ErrBadIndexes) {
			t.Errorf("%s: got %v, want ErrBadIndexes", name, err)
		}
	}
}

// FuzzUnframe: no input panics; what Unframe accepts frames back to the
// same bytes, and what UnframeProtobuf accepts frames back to bytes that
// unframe to the same id, path and body (varints may be written longer
// than needed, and [0] either way).
func FuzzUnframe(f *testing.F) {
	for _, v := range frameVectors {
		f.Add(v.want)
	}
	f.Add([]byte{0, 0, 0, 0, 7, 2, 0, 'x'})                   // [0] written long
	f.Add([]byte{0, 0, 0, 0, 7, 0x82, 0x80, 0x00, 0x02, 'y'}) // overlong count
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, body, err := Unframe(b); err == nil {
			if got := Frame(id, nil, body); !bytes.Equal(got, b) {
				t.Fatalf("Unframe(% x) = %d, % x; framed again: % x", b, id, body, got)
			}
		} else if !errors.Is(err, ErrNotFramed) {
			t.Fatalf("Unframe: %v", err)
		}
		id, idx, body, err := UnframeProtobuf(b)
		if err != nil {
			if !errors.Is(err, ErrNotFramed) && !errors.Is(err, ErrBadIndexes) {
				t.Fatalf("UnframeProtobuf: %v", err)
			}
			return
		}
		if len(idx) == 0 {
			t.Fatalf("UnframeProtobuf(% x): empty path", b)
		}
		again := Frame(id, idx, body)
		id2, idx2, body2, err := UnframeProtobuf(again)
		if err != nil || id2 != id || !slices.Equal(idx2, idx) || !bytes.Equal(body2, body) {
			t.Fatalf("round trip of % x: % x gives %d %v % x %v", b, again, id2, idx2, body2, err)
		}
		if len(again) > len(b) {
			t.Fatalf("framed again longer: % x from % x", again, b)
		}
	})
}

// FuzzFrameRoundTrip: every id, index path and body comes back.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(uint32(7), []byte{}, []byte("body"), true)
	f.Add(uint32(1<<32-1), []byte{0, 200, 3}, []byte{}, true)
	f.Add(uint32(0), []byte{}, []byte{0, 0}, false)
	f.Fuzz(func(t *testing.T, id uint32, path []byte, body []byte, protobuf bool) {
		if !protobuf {
			gotID, gotBody, err := Unframe(Frame(id, nil, body))
			if err != nil || gotID != id || !bytes.Equal(gotBody, body) {
				t.Fatalf("Avro round trip: %d % x %v", gotID, gotBody, err)
			}
			return
		}
		idx := make([]int, 0, len(path))
		for _, p := range path {
			idx = append(idx, int(p)*int(p)*1000) // spread over multi-byte varints
		}
		if len(idx) > maxIndexes {
			idx = idx[:maxIndexes]
		}
		want := idx
		if len(want) == 0 {
			want = []int{0}
		}
		gotID, gotIdx, gotBody, err := UnframeProtobuf(Frame(id, idx, body))
		if err != nil || gotID != id || !slices.Equal(gotIdx, want) || !bytes.Equal(gotBody, body) {
			t.Fatalf("Protobuf round trip of %d %v: %d %v % x %v", id, idx, gotID, gotIdx, gotBody, err)
		}
	})
}
