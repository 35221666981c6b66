package envflag

import (
	"reflect"
	"testing"
	"time"
)

func TestUnknown(t *testing.T) {
	known := map[string]bool{"P_MAX_INFLIGHT_EVENTS": true, "P_DATABASE_URL": true}
	env := []string{"P_MAX_INFLIGHT_EVNTS=5", "P_DATABASE_URL=x", "OTHER=1", "P_DATABASE_URL_FILE=/f", "P_ZZZZZZ=1",
		"P_MAX_INFLIGHT_EVNTS=6"}
	want := []UnknownVar{{"P_DATABASE_URL_FILE", "P_DATABASE_URL"}, {"P_MAX_INFLIGHT_EVNTS", "P_MAX_INFLIGHT_EVENTS"}, {"P_ZZZZZZ", ""}}
	if got := Unknown(env, "P_", known); !reflect.DeepEqual(got, want) {
		t.Fatalf("Unknown = %+v, want %+v", got, want)
	}
	if got := Unknown([]string{"P_DATABASE_URL=x", "OTHER=1"}, "P_", known); got != nil {
		t.Fatalf("only known variables: %+v", got)
	}
}

func TestExplicitZeros(t *testing.T) {
	type inner struct{ D, Off time.Duration }
	type cfg struct {
		N, M  int
		In    inner
		S     string
		Fixed int64
	}
	def := cfg{N: 5, M: 7, In: inner{D: time.Second}, S: "s", Fixed: 0}
	c := cfg{N: 0, M: 3, In: inner{D: 0, Off: 0}}
	ExplicitZeros(&c, def)
	if want := (cfg{N: -1, M: 3, In: inner{D: -1}}); c != want {
		t.Fatalf("ExplicitZeros = %+v, want %+v", c, want)
	}
}
