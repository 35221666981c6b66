//go:build integration

package integration

import (
	"flag"
	"strings"
	"testing"
)

// Every test of this package starts with inSuites, which says two things
// about it: which suites it belongs to, and whether it may run beside other
// tests. A suite is one run of this package against one set of servers, and
// the build tag of that run (suite_*_test.go) selects it; `make test` runs
// every suite. Membership is declared here, in the test, never by a -run
// regular expression that a renamed test would silently fall out of, and
// TestSuiteMembership (suites_check_test.go, a unit test) fails when a test
// declares none or names a suite `make test` does not run.

// suite is a set of suites.
type suite uint8

const (
	// stack: PostgreSQL 15 and one Kafka 4.1.1 broker of scripts/stack.sh
	// (make integration; the default without a suite tag).
	stack suite = 1 << iota
	// cluster: the stack's PostgreSQL and a three-node Kafka cluster of
	// scripts/kafkacluster.sh (make cluster-test; tag suite_cluster).
	cluster
	// kafkaVersions: the oldest and newest supported Kafka, one throwaway
	// broker each (make kafka-versions; tag suite_kafka_versions).
	kafkaVersions
	// pgVersions: a fresh PostgreSQL 16, 17 and 18 cluster each with the
	// stack's Kafka (make versions; tag suite_pg_versions).
	pgVersions
)

// suiteNames are the names of the suites in bit order, as the check and the
// skip messages print them.
var suiteNames = []string{"stack", "cluster", "kafka-versions", "pg-versions"}

func (s suite) String() string {
	var names []string
	for i, n := range suiteNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}

// sharing says whether a test may run beside other tests.
type sharing int

const (
	// parallel: the test changes nothing others see. It uses the shared
	// servers only through resources of its own (Env's suffixed table, slot,
	// publication and topics; its own temp clusters, brokers and proxies), so
	// it calls t.Parallel and runs beside the others, at most -parallel at a
	// time.
	parallel sharing = iota
	// exclusive: the test stops, crashes or freezes a shared server, or
	// alters or locks a shared table, or what it proves depends on timing
	// that other tests' load upsets (its doc says why). It does not call t.Parallel, and Go
	// runs every such test of the package alone, one after another, before
	// it releases the parallel tests: no parallel test ever sees its fault.
	exclusive
)

// sharingFlag selects the tests of the suite by sharing: all of them (the
// default), only the exclusive ones, or only the parallel ones. make test
// runs the stack suite's exclusive tests first and its parallel tests beside
// the other suites; make test-fast runs only the parallel ones.
var sharingFlag = flag.String("it.sharing", "all", "which tests of the suite run: all, exclusive or parallel")

// inSuites skips t unless the running suite is one of member and -it.sharing
// selects it, and marks it parallel when it shares nothing (see sharing). It
// must be the first statement of every test.
func inSuites(t *testing.T, s sharing, member suite) {
	t.Helper()
	if member&runningSuite == 0 {
		t.Skipf("not in the %s suite (member of %s)", runningSuite, member)
	}
	switch *sharingFlag {
	case "all":
	case "exclusive":
		if s != exclusive {
			t.Skip("parallel test skipped (-it.sharing=exclusive)")
		}
	case "parallel":
		if s != parallel {
			t.Skip("exclusive test skipped (-it.sharing=parallel)")
		}
	default:
		t.Fatalf("-it.sharing=%q: want all, exclusive or parallel", *sharingFlag)
	}
	if s == parallel {
		t.Parallel()
	}
}
