// Package testenv gates in-process tests on the local stack (scripts/stack.sh)
// the way pgx gates on PGX_TEST_DATABASE: a test that needs PostgreSQL or
// Kafka calls DatabaseURL or KafkaBrokers and is skipped when the variable
// is unset, so a plain `go test ./...` never needs (or touches) a database.
// `make test` exports both from `scripts/stack.sh env`.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// Variables naming the stack for in-process tests. They differ from the
// binary's OUTBOX_RELAY_DATABASE_URL on purpose: a shell configured to run
// the relay must not point unit tests at that database.
const (
	DatabaseURLVar  = "OUTBOX_RELAY_TEST_DATABASE_URL"
	KafkaBrokersVar = "OUTBOX_RELAY_TEST_KAFKA_BROKERS"
)

// DatabaseURL returns the test database URL, or skips t when none is set.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(DatabaseURLVar)
	if u == "" {
		tb.Skipf("%s not set: run `eval \"$(scripts/stack.sh env)\"` (make test does) to run this test against the local stack", DatabaseURLVar)
	}
	return u
}

// KafkaBrokers returns the test brokers, or skips t when none are set.
func KafkaBrokers(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv(KafkaBrokersVar)
	if v == "" {
		tb.Skipf("%s not set: run `eval \"$(scripts/stack.sh env)\"` (make test does) to run this test against the local stack", KafkaBrokersVar)
	}
	return strings.Split(v, ",")
}
