//go:build integration && !suite_cluster && !suite_kafka_versions && !suite_pg_versions

package integration

// runningSuite is the suite this build runs: the stack's, without a suite tag.
const runningSuite = stack
