package main

import "testing"

// sweep marks a test that parses command lines by the thousand on its one
// goroutine: every flag, each with its values, bad inputs and variables.
// Under -race such a test costs eight times its time and finds nothing
// the race detector could (no goroutine shares its data), which made
// these sweeps about 70 s of make unit's CPU beside the integration
// phases (issue 49). So it skips under -race, and make unit runs this
// package once more without it, where every sweep runs.
func sweep(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a single-goroutine sweep: make unit runs it without -race (sweep_test.go)")
	}
}
