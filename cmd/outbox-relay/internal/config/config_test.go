package config

import (
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
	names := FlagNames(nil)
	for field := range kafkaSecurityFields {
		if got := names[field]; !strings.HasPrefix(got, "--kafka-") {
			t.Errorf("%s: %q", field, got)
		}
	}
}
