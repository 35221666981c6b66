package process

import (
	"os"
	"runtime"
)

// DefaultMaxProcs is --max-procs' default: 1, unless the operator set
// GOMAXPROCS, which then wins (0 keeps it).
//
// Why 1: the relay is a pipeline fed by one WAL sender, and one thread
// running Go code keeps up with it (1.04–1.55 × pg_recvlogical on the
// same backlog, docs/benchmarks.md). A second P mostly adds scheduler
// spinning: every goroutine hand-off (stream → lanes → senders → acks)
// wakes an idle thread that spins looking for work. On a 2-core host that
// cost about 35 % more CPU per event, taken from the WAL sender and the
// broker next to it.
func DefaultMaxProcs() int {
	if _, ok := os.LookupEnv("GOMAXPROCS"); ok {
		return 0
	}
	return 1
}

// ApplyMaxProcs sets GOMAXPROCS to n when n > 0 and returns the value in
// effect.
func ApplyMaxProcs(n int) int {
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0)
}
