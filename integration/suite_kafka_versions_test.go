//go:build integration && suite_kafka_versions

package integration

// runningSuite is the suite this build runs (tag suite_kafka_versions).
const runningSuite = kafkaVersions
