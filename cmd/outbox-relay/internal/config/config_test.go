package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestLoopbackHostLists: the certificate warning is skipped only when every
// host of a multi-host URL is local.
func TestLoopbackHostLists(t *testing.T) {
	for hosts, want := range map[string]bool{
		"":                    true,
		"localhost":           true,
		"127.0.0.1,::1":       true,
		"[::1],[::1]":         true,
		"/var/run/postgresql": true,
		"127.0.0.1,pg-b":      false,
		"pg-a":                false,
		"10.0.0.1":            false,
	} {
		if got := allLoopback(hosts); got != want {
			t.Errorf("allLoopback(%q) = %v, want %v", hosts, got, want)
		}
	}
}

// TestKafkaSecurityFieldsHaveFlags: every path of kafkaSecurityFields
// names flags (run's, which every command falls back to).
func TestKafkaSecurityFieldsHaveFlags(t *testing.T) {
	run := map[string]string{}
	declared(reflect.TypeFor[struct {
		KafkaFlags
		RunFlags
	}](), run)
	names := FlagNames(nil, run)
	for field := range kafkaSecurityFields {
		if got := names[field]; !strings.HasPrefix(got, "--kafka-") {
			t.Errorf("%s: %q", field, got)
		}
	}
}

// declared adds the flags of the fields of t (and of the structs it
// embeds) to names, by their to tags: run's flags, without its model.
func declared(t reflect.Type, names map[string]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			declared(f.Type, names)
		} else if to := f.Tag.Get("to"); to != "" {
			to = strings.Replace(strings.TrimPrefix(to, "Relay."), "KafkaConn.", kafkaConnPrefix, 1)
			names[to] = "--" + f.Tag.Get("name")
		}
	}
}
