package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	for in, want := range map[string][2]string{
		"plain":         {`"plain"`, `"plain"`},
		"":              {`""`, `""`},
		"a\"b\\c/":      {`"a\"b\\c/"`, `"a\"b\\c/"`},
		"\n\r\t":        {`"\n\r\t"`, `"\n\r\t"`},
		"\b\f\x01\x1f":  {`"\u0008\u000c\u0001\u001f"`, `"\b\f\u0001\u001F"`},
		"\x7f é☃":       {"\"\x7f é☃\"", "\"\x7f é☃\""},
		"😀":             {`"😀"`, `"\uD83D\uDE00"`},
		"a\xffb":        {`"a\ufffdb"`, "\"a\uFFFDb\""},
		"\xed\xa0\x80x": {`"\ufffd\ufffd\ufffdx"`, "\"\uFFFD\uFFFD\uFFFDx\""},
	} {
		if got := string(AppendString([]byte("x"), in)); got != "x"+want[0] {
			t.Errorf("AppendString(%q) = %s, want %s", in, got, want[0])
		}
		if got := string(AppendJacksonString(nil, in)); got != want[1] {
			t.Errorf("AppendJacksonString(%q) = %s, want %s", in, got, want[1])
		}
	}
}

func TestScanner(t *testing.T) {
	s := NewScanner([]byte(` {"a\"b": -1.5e+3, "c": [true, null]} `))
	s.SkipSpace()
	if !s.Consume('{') || s.Consume('{') {
		t.Fatal("Consume")
	}
	tok, plain, err := s.StringToken()
	if err != nil || string(tok) != `"a\"b"` || plain {
		t.Fatalf("StringToken: %s %v %v", tok, plain, err)
	}
	if v, ok := Unquote(tok); !ok || v != `a"b` {
		t.Fatalf("Unquote: %q %v", v, ok)
	}
	s.SkipSpace()
	s.Consume(':')
	s.SkipSpace()
	if n, ok := s.NumberToken(); !ok || string(n) != "-1.5e+3" {
		t.Fatalf("NumberToken: %s %v", n, ok)
	}
	s.Consume(',')
	s.SkipSpace()
	if tok, plain, _ := s.StringToken(); string(tok) != `"c"` || !plain {
		t.Fatalf("plain token %s %v", tok, plain)
	}
	s.Consume(':')
	s.SkipSpace()
	s.Consume('[')
	if !s.ConsumeLiteral("true") || s.ConsumeLiteral("null") {
		t.Fatal("ConsumeLiteral")
	}
	for _, c := range []byte{',', ' '} {
		if b, _ := s.Peek(); b != c || !s.Consume(c) {
			t.Fatalf("Peek %q", b)
		}
	}
	if !s.ConsumeLiteral("null") || !s.Consume(']') || !s.Consume('}') || s.AtEnd() {
		t.Fatal("end")
	}
	s.SkipSpace()
	if !s.AtEnd() {
		t.Fatal("AtEnd")
	}
	if _, _, err := NewScanner([]byte(`x`)).StringToken(); err != ErrNotString {
		t.Fatal(err)
	}
	if _, _, err := NewScanner([]byte(`"ab\"`)).StringToken(); err != ErrUnterminated {
		t.Fatal(err)
	}
	for _, bad := range []string{"01", "-", "1.", "1e", ".5", "-a"} {
		if n, ok := NewScanner([]byte(bad)).NumberToken(); ok {
			t.Errorf("NumberToken(%q) = %s", bad, n)
		}
	}
	for _, good := range []string{"0", "-0", "10", "1.25", "1E9", "2e-7", "0.0e+0"} {
		if n, ok := NewScanner([]byte(good + ",")).NumberToken(); !ok || string(n) != good {
			t.Errorf("NumberToken(%q) = %s %v", good, n, ok)
		}
	}
}

func TestUnquoteStrict(t *testing.T) {
	for _, bad := range []string{`"\x"`, `"\u12"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, "\"\x01\"", "\"\xff\"", `"\"`, `x`} {
		if v, ok := Unquote([]byte(bad)); ok {
			t.Errorf("Unquote(%s) = %q", bad, v)
		}
	}
	if v, ok := Unquote([]byte(`"\ud83d\ude00 \u00e9\/\b\f\n\r\t"`)); !ok || v != "😀 é/\b\f\n\r\t" {
		t.Fatalf("%q %v", v, ok)
	}
}

// FuzzUnquote: a string token that Unquote accepts is a JSON string
// encoding/json reads to the same value; one it refuses is invalid JSON,
// or holds invalid UTF-8 or a lone surrogate (which encoding/json
// replaces). What AppendString and AppendJacksonString write reads back
// as the input (invalid UTF-8 as U+FFFD).
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00"`, `"\ud83d"`, "\"\xff\"", `"\u0000"`, `"a\"b\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sc := NewScanner(in)
		tok, plain, err := sc.StringToken()
		var want string
		jerr := json.Unmarshal(in, &want)
		if err == nil && sc.AtEnd() {
			got, ok := Unquote(tok)
			switch {
			case ok && (jerr != nil || got != want):
				t.Fatalf("Unquote(%q) = %q, encoding/json %q (%v)", in, got, want, jerr)
			case !ok && jerr == nil && utf8.Valid(in) && want == string([]rune(want)) && !containsReplacement(want):
				t.Fatalf("Unquote(%q) refused what encoding/json reads as %q", in, want)
			case plain && (!ok || got != string(tok[1:len(tok)-1])):
				t.Fatalf("plain token %q reads %q", tok, got)
			}
		}
		for _, w := range [][]byte{AppendString(nil, string(in)), AppendJacksonString(nil, string(in))} {
			var back string
			if err := json.Unmarshal(w, &back); err != nil || back != string([]rune(string(in))) {
				t.Fatalf("%q written %q reads back %q (%v)", in, w, back, err)
			}
		}
	})
}

// containsReplacement reports whether s holds U+FFFD, which encoding/json
// also yields for a lone surrogate escape that Unquote refuses.
func containsReplacement(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError {
			return true
		}
	}
	return false
}

// TestSkipValue: SkipValue accepts what encoding/json calls valid (for
// one value) and ends at the value's end.
func TestSkipValue(t *testing.T) {
	for _, in := range []string{`"a\"b"`, `-1.5e3`, `true`, `false`, `null`, `{}`, `[]`, ` { "a" : [1, {"b": null}, "c"] , "d": {} }`,
		`{"a":}`, `[1,]`, `{"a" 1}`, `[1 2]`, `tru`, `"open`, `{`, `01`, `{1:2}`} {
		s := NewScanner([]byte(in))
		ok := s.SkipValue()
		if ok {
			s.SkipSpace()
			ok = s.AtEnd()
		}
		if want := json.Valid([]byte(in)); ok != want {
			t.Errorf("%s: SkipValue %v, json.Valid %v", in, ok, want)
		}
	}
	deep := strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2)
	if NewScanner([]byte(deep)).SkipValue() {
		t.Errorf("nesting deeper than %d accepted", maxDepth)
	}
}
