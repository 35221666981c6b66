package main

// Exit codes of every command. run returns only these; the table below is
// what docs/configuration.md lists (configdoc_test.go renders it), so the
// documented codes are the ones the code uses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitMissing     = 3
	exitNotChecked  = 4
	exitInterrupted = 130
)

// exitCode documents one exit code.
type exitCode struct {
	code     int
	commands string // which commands use it
	meaning  string
}

var exitCodes = []exitCode{
	{exitOK, "all", "success; `run` and `recover` also exit 0 after a clean shutdown on SIGTERM or SIGINT (in-flight events acknowledged and confirmed, or --shutdown-timeout reached)"},
	{exitFailure, "all", "a runtime failure: the message says what failed and, for failures no retry can cure (wrong password, missing database, missing privilege, TLS), how to fix it; `doctor`: at least one check failed (FAIL lines, each with its fix); `dlq retry`/`dlq discard`: an event still fails, or the relay's position did not pass the aggregate's earliest open event within --wait (nothing published: run it again once the relay has caught up)"},
	{exitUsage, "all", "invalid usage or configuration: an unknown command or flag, an `OUTBOX_RELAY_*` environment variable no flag reads (a misspelt name), a malformed value (from a flag or its environment variable), a missing required setting; nothing was done"},
	{exitMissing, "reconcile", "events are missing from Kafka or the consumer's inbox"},
	{exitNotChecked, "doctor", "the checks could not run (PostgreSQL unreachable or refusing the connection): nothing was checked, unlike exit 1"},
	{exitInterrupted, "all", "a second SIGINT or SIGTERM during the shutdown drain: the process exits at once, without waiting for in-flight acknowledgements (those events are sent again on the next start)"},
}
