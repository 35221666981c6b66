package config

import (
	"maps"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// The environment check. Every flag reads an OUTBOX_RELAY_* variable, so
// a variable no flag reads is a mistake: most often a misspelt name
// (OUTBOX_RELAY_MAX_INFLIGHT_EVNTS=50000), which would otherwise leave the
// flag at its default without a word. Every command that reads its
// configuration (all but version and --help) refuses such a variable
// before doing anything, with one line per variable naming it and the
// closest known name, exit code 2 (exitUsage). Values are never printed:
// they may be Secrets. configure runs the check once the command line is
// parsed (so --help still helps) and before the configuration is validated.
//
// The check is global, not per command: a variable is known when a flag
// of any command reads it. One environment commonly serves several
// commands - docker-compose.yml runs `migrate` and then `run` with the
// same variables (OUTBOX_RELAY_KAFKA_BROKERS, _CREATE_TOPICS and
// _METRICS_ADDR are none of migrate's flags), the image sets
// OUTBOX_RELAY_METRICS_ADDR (run's and recover's) for every command, a
// Helm release or a deployment script shares one set of variables between
// its jobs, and an operator's shell exports the relay's settings before
// `slot status` or `dlq list` - so `migrate` must accept
// OUTBOX_RELAY_MAX_INFLIGHT_EVENTS, which only run and recover read, and
// ignore it. What the check rejects is a name nothing reads.
//
// The known names are those of the flags the commands register, listed by
// walking the command tree (knownEnv), plus each secret flag's <ENV>_FILE:
// there is no list of flags to keep in step, and a new flag is known as
// soon as it is declared.

// testStatusHoldEnv names a test hook of binaries built with -tags
// testhooks (the integration suite's): standby status updates confirm only
// positions acknowledged at least that long ago, while checkpoints are
// saved as usual. It widens the (normally ~100 ms) interval in which a
// checkpoint is ahead of the slot, so a kill -9 test can land in it
// deterministically. Not a flag, and not in release builds (relay/testhook_on.go):
// it only makes redelivery worse.
const testStatusHoldEnv = EnvPrefix + "TEST_STATUS_HOLD"

// NotFlagEnv are the OUTBOX_RELAY_* variables no flag reads that the
// tests and scripts of this repository do, with who reads them. They may
// be in the environment the relay inherits - from CI, from `make`, from
// `eval "$(scripts/stack.sh env)"` (which make test and scripts/demo.sh
// run before starting the relay) - so they must not stop it. Keep this
// short: TestRepositoryVariablesAreAccepted fails on any OUTBOX_RELAY_*
// name in the repository that is neither a flag's nor listed here.
var NotFlagEnv = map[string]string{
	testStatusHoldEnv:                "the relay built with -tags testhooks (relay/testhook_on.go); set by integration/checkpoint_test.go",
	EnvPrefix + "TEST_DATABASE_URL":  "in-process tests against the local stack (internal/testutil/testenv); exported by scripts/stack.sh env and scripts/pgversions.sh run",
	EnvPrefix + "TEST_KAFKA_BROKERS": "in-process tests against the local stack (internal/testutil/testenv); exported by scripts/stack.sh env",
	EnvPrefix + "TEST_PG_BIN":        "the integration tests' temporary clusters (integration/pgcluster_test.go); exported by scripts/pgversions.sh run",
	EnvPrefix + "IT_HARNESS_ONLY":    "the integration harness (integration/harness_test.go): its self-tests only",
	EnvPrefix + "CHAOS_SEED":         "integration/chaos_test.go: the fault schedule's seed",
	EnvPrefix + "CHAOS_LONG":         "integration/chaos_test.go: the long chaos run",
	EnvPrefix + "CHAOS_DELIVERY":     "integration/chaos_test.go: exactly-once for the chaos run",
	EnvPrefix + "CACHE":              "scripts/stack.sh, scripts/interop.sh, integration/secure_stack_test.go: the download cache",
}

// CheckEnv returns an UnknownEnvError for each OUTBOX_RELAY_* variable of
// environ (os.Environ's form) that is not in own (the variables of the
// command's flags), of another command's flags or in NotFlagEnv.
func CheckEnv(environ, own []string, knownEnv func() map[string]bool) error {
	known := map[string]bool{}
	for _, name := range own {
		known[name] = true
	}
	maps.Copy(known, notFlagKnown())
	if envflag.Unknown(environ, EnvPrefix, known) == nil {
		return nil // the usual case: only the command's own variables
	}
	all := knownEnv()
	maps.Copy(all, notFlagKnown())
	unknown := UnknownEnvError(envflag.Unknown(environ, EnvPrefix, all))
	if len(unknown) == 0 {
		return nil
	}
	return unknown
}

// notFlagKnown is NotFlagEnv as a set.
func notFlagKnown() map[string]bool {
	m := make(map[string]bool, len(NotFlagEnv))
	for name := range NotFlagEnv {
		m[name] = true
	}
	return m
}

// UnknownEnvError lists the unknown variables; run prints one line each.
type UnknownEnvError []envflag.UnknownVar

// Lines are the error's lines, one per variable.
func (e UnknownEnvError) Lines() []string {
	var lines []string
	for _, v := range e {
		line := "unknown environment variable " + v.Name
		if v.Closest != "" {
			line += " (did you mean " + v.Closest + "?)"
		}
		lines = append(lines, line)
	}
	return lines
}

func (e UnknownEnvError) Error() string { return strings.Join(e.Lines(), "\n") }
