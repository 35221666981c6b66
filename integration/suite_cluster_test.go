//go:build integration && suite_cluster

package integration

// runningSuite is the suite this build runs (tag suite_cluster).
const runningSuite = cluster
