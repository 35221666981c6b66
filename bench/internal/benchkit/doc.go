// Package benchkit is what the benchmark commands under bench/cmd
// (outbox-bench and inbox-bench) share: Kafka topic administration,
// reading a process's CPU time and memory from /proc, the machine and
// versions a run reports, the number formats of their reports and the
// generated sections of docs/benchmarks.md.
package benchkit
