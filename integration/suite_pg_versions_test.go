//go:build integration && suite_pg_versions

package integration

// runningSuite is the suite this build runs (tag suite_pg_versions).
const runningSuite = pgVersions
