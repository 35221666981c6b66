// Package benchkit is what the benchmark commands under bench/cmd
// (outbox-bench and inbox-bench) share: Kafka topic administration
// (kafka.go), a process's CPU time and memory from /proc (proc.go), the
// machine and versions a run reports (host.go), the number formats of the
// reports (format.go), the generated sections of docs/benchmarks.md
// (docs.go), the PostgreSQL pool (pg.go) and the flags that find the
// stack (flags.go).
package benchkit
