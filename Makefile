# outbox-relay developer entry points. The local stack (PostgreSQL 15 + Kafka 4.1.1)
# is managed by scripts/stack.sh; ports and paths are in docs/design.md ("The local stack").
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO          ?= go
# -trimpath for every go command make runs (tests, vet, staticcheck's go list, the binaries): the
# build cache keys a package compiled without it by its directory too, so every new clone (each
# CI run's) compiled all of this module's packages again, for -race, the fuzzers and each tag,
# and a warm cache saved only the dependencies' compiles (issue 49). Stack traces and
# runtime.Caller then name files by import path, not by the clone's directory.
export GOFLAGS := -trimpath $(GOFLAGS)
STACK       := scripts/stack.sh
BIN         := bin/outbox-relay
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
INTEGRATION_TIMEOUT ?= 25m

.PHONY: all build release up down status env stack-clean clean unit integration integration-parallel integration-fast test-fast versions versions-fetch version-suite cluster-test kafka-versions test it-build it-build-stack demo lint vulncheck fuzz-short fuzz-calibrate bench bench-inbox chaos interop interop-schemas

all: build

# Build information stamped into internal/buildinfo (outbox-relay version, the
# outbox_relay_build_info metric). Each is overridable: make release VERSION=v1.2.3.
# Simply expanded, so every binary of a release carries the same date.
BUILDINFO  := github.com/outbox-relay/outbox-relay/internal/buildinfo
VERSION    := $(or $(VERSION),$(shell git describe --tags --always --dirty 2>/dev/null),dev)
REVISION   := $(or $(REVISION),$(shell git rev-parse HEAD 2>/dev/null),unknown)
BUILD_DATE := $(or $(BUILD_DATE),$(shell date -u +%Y-%m-%dT%H:%M:%SZ))
LDFLAGS    := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION) -X $(BUILDINFO).date=$(BUILD_DATE)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/outbox-relay

# Static (CGO_ENABLED=0), stripped, path-independent binaries for every
# RELEASE_PLATFORMS entry, named outbox-relay_<version>_<os>_<arch>, and their
# SHA-256 checksums in dist/SHA256SUMS (check with: cd dist && sha256sum -c SHA256SUMS).
DIST              := dist
RELEASE_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
release:
	rm -rf $(DIST)
	mkdir -p $(DIST)
	for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(DIST)/outbox-relay_$(VERSION)_$${os}_$${arch}; \
		echo "release: $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $$out ./cmd/outbox-relay; \
	done
	cd $(DIST) && if command -v sha256sum >/dev/null; then sha256sum outbox-relay_*; else shasum -a 256 outbox-relay_*; fi >SHA256SUMS
	cat $(DIST)/SHA256SUMS

up:
	$(STACK) up

down:
	$(STACK) down

status:
	$(STACK) status

env:
	@$(STACK) env

# Stops the stack and deletes .stack (PostgreSQL and Kafka data).
stack-clean:
	$(STACK) clean

clean:
	rm -rf bin $(DIST)

# The test-only modules under interop/ (each its own go.mod, replacing this module with ../..):
# heavy third-party SDKs the relay itself must not depend on. Their tests that need the stack
# skip without its variables (unit) and run in integration. interop/debezium is the program of
# `make interop`; here only its unit tests run (the comparison and report logic).
INTEROP_MODULES := interop/cloudevents interop/tracing interop/debezium

# Unit tests only: integration tests sit behind the `integration` build tag.
# GORACE atexit_sleep_ms: the race detector's wait before a test binary exits, for reports
# from goroutines still running, 1 s by default: a second per package, about 25 s of the run.
# -timeout 20m: on a cold machine, at nice 19 beside make test's phases, cmd/outbox-relay's
# generated flag sweeps under -race took 600 s and hit go test's default 10m (issue 49). Those
# sweeps now skip under -race (cmd/outbox-relay/sweep_test.go) and run in the package's second
# run, without it: 12 s instead of 70 s of CPU.
unit:
	$(GO) vet ./... && GORACE=atexit_sleep_ms=100 $(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 ./cmd/outbox-relay/
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd bench && $(GO) test -count=1 ./...
	for m in $(INTEROP_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) test -count=1 ./...); done

# Lists the packages whose in-process tests need the stack (they import internal/testutil/testenv).
STACK_TEST_PKGS = $(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/internal\/testutil\/testenv/ {print $$1}'

# The integration suites (integration/suites_test.go): every test of ./integration/ declares the
# suites it belongs to (stack, cluster, kafka-versions, pg-versions) and whether it is parallel or
# exclusive; a suite's run selects it by build tag (integration[,suite_NAME]), never by -run.
# Exclusive tests (a shared server stopped, crashed or frozen, a shared table altered or locked)
# run alone, first; the parallel ones then run IT_PARALLEL at a time (measured fastest on the
# 2-core machines: docs/design.md#tests). IT_SHARING=exclusive|parallel runs only one kind;
# IT_RUN narrows any suite with a go test -run expression (a developer's filter, not membership).
IT_PARALLEL ?= 4
IT_SHARING  ?= all
IT_RUN      ?=
IT_TEST      = $(GO) test -count=1 -v -parallel $(IT_PARALLEL) $(if $(IT_RUN),-run '$(IT_RUN)')

# The stack suite (PostgreSQL 15 and Kafka 4.1.1 of scripts/stack.sh), the packages with an
# integration build tag (migrations, outbox), the in-process tests that need the stack, and the
# interop modules' stack tests. IT_SHARING=exclusive runs only the stack suite's exclusive tests.
integration: up
	@if [ ! -d integration ]; then echo "no ./integration directory: no integration tests to run"; exit 0; fi; \
	eval "$$($(STACK) env)"; \
	echo "OUTBOX_RELAY_DATABASE_URL=$$OUTBOX_RELAY_DATABASE_URL OUTBOX_RELAY_KAFKA_BROKERS=$$OUTBOX_RELAY_KAFKA_BROKERS"; \
	$(IT_TEST) -tags integration -timeout $(INTEGRATION_TIMEOUT) ./integration/ -args -it.sharing=$(IT_SHARING); \
	if [ "$(IT_SHARING)" = exclusive ]; then exit 0; fi; \
	$(GO) test -tags integration -count=1 -timeout 10m ./migrations/ ./outbox/; \
	pkgs=$$($(STACK_TEST_PKGS)); \
	echo "in-process tests against the stack: $$pkgs"; \
	if [ -n "$$pkgs" ]; then $(GO) test -count=1 -timeout 10m $$pkgs; fi; \
	for m in $(INTEROP_MODULES); do echo "interop tests against the stack: $$m"; (cd $$m && $(GO) test -count=1 -timeout 10m ./...); done

# The version matrix: on each of PG_VERSIONS, the pg-versions suite of ./integration (tag
# suite_pg_versions), then the in-process tests that need the stack (STACK_TEST_PKGS). Each version
# gets a fresh cluster of its own (scripts/pgversions.sh run: a new initdb on a free port,
# stopped and deleted afterwards even on failure) and the stack's Kafka;
# OUTBOX_RELAY_TEST_PG_BIN points the tests' temp clusters (standbys, WAL safety) at the same
# binaries. A failing version does not stop the others; each prints its time.
# make versions PG_VERSIONS=17 runs one; PG_VERSIONS= skips the matrix (also in make test).
PG_VERSIONS        ?= 16 17 18
PG_VERSION_TIMEOUT ?= 20m
PGVERSIONS         := scripts/pgversions.sh
versions:
	@if [ -z "$(strip $(PG_VERSIONS))" ]; then echo "versions: PG_VERSIONS is empty: no version matrix"; exit 0; fi; \
	$(STACK) up; \
	$(MAKE) --no-print-directory versions-fetch; \
	eval "$$($(STACK) env)"; \
	failed=""; summary=""; \
	for v in $(PG_VERSIONS); do \
		t0=$$SECONDS; \
		if $(PGVERSIONS) run $$v $(MAKE) --no-print-directory version-suite; then r=ok; else r=FAILED; failed="$$failed $$v"; fi; \
		summary="$$summary"$$'\n'"versions: PostgreSQL $$v: $$r in $$((SECONDS - t0)) s"; \
	done; \
	echo "$$summary"; \
	if [ -n "$$failed" ]; then echo "versions: failed on PostgreSQL$$failed"; exit 1; fi

# The server binaries of PG_VERSIONS (Maven; cached in .stack/pg-bin and the local Maven
# repository). .ci/run fetches them before the tests, so a fetch failure shows early.
versions-fetch:
	@for v in $(PG_VERSIONS); do $(PGVERSIONS) fetch $$v; done

# One version's tests, run by `versions` inside scripts/pgversions.sh run (which exports
# that cluster's OUTBOX_RELAY_DATABASE_URL, OUTBOX_RELAY_TEST_DATABASE_URL and
# OUTBOX_RELAY_TEST_PG_BIN; Kafka's variables come from the stack).
version-suite:
	@echo "version-suite: $$OUTBOX_RELAY_DATABASE_URL: the pg-versions suite of ./integration/"
	$(IT_TEST) -tags integration,suite_pg_versions -timeout $(PG_VERSION_TIMEOUT) ./integration/
	pkgs=$$($(STACK_TEST_PKGS)); \
	echo "version-suite: in-process tests against $$OUTBOX_RELAY_TEST_DATABASE_URL: $$pkgs"; \
	$(GO) test -count=1 -timeout 10m $$pkgs

# The long chaos run (integration/chaos_test.go): 20+ kill -9, broker stops, PostgreSQL
# restarts, network cuts and hangs under steady load; a few minutes. The short variant runs
# in `make integration`. CHAOS_SEED=N replays a schedule (default: the test's fixed seed).
# CHAOS_KAFKA=cluster runs it against a three-node cluster (scripts/kafkacluster.sh run): broker
# kill -9, controlled shutdown and freeze of random nodes replace the single broker's faults.
# CHAOS_DELIVERY=exactly-once runs the relay with --delivery exactly-once: consumers read
# read_committed and a duplicate fails the run; PostgreSQL crashes, frozen leaders (a standby
# takes over, the thawed zombie is fenced) and, on a cluster, kill -9 of the transaction
# coordinator's node join the schedule. CHAOS_ONLY=kind,kind runs only those faults of the plan (e.g.
# CHAOS_ONLY=leader-pg-cut,leader-kafka-cut: the leader cut off PostgreSQL, then off Kafka, a standby beside it).
CHAOS_TIMEOUT ?= 20m
CHAOS_KAFKA   ?= stack
chaos: up
	eval "$$($(STACK) env)"; \
	$(if $(filter cluster,$(CHAOS_KAFKA)),KAFKA_VERSION=$(KAFKA_CLUSTER_VERSION) KAFKA_NODES=3 $(KAFKACLUSTER) run) \
	$(GO) test -tags integration -run '^TestChaos' -count=1 -v -timeout $(CHAOS_TIMEOUT) ./integration/ \
		-args -chaos.long $(if $(CHAOS_SEED),-chaos.seed=$(CHAOS_SEED)) $(if $(filter exactly-once,$(CHAOS_DELIVERY)),-chaos.exactly-once) $(if $(CHAOS_ONLY),-chaos.only=$(CHAOS_ONLY))

# The three-node Kafka cluster suite (integration/cluster*_test.go: leader kill, rolling
# restart, ISR shrink, frozen leader, reassignment, the inbox across a coordinator kill; and
# the short chaos run, whose schedule then has broker faults instead of the single broker's):
# scripts/kafkacluster.sh run starts a throwaway KRaft cluster of KAFKA_CLUSTER_VERSION (3 nodes,
# replication factor 3, min.insync.replicas=2), points OUTBOX_RELAY_KAFKA_BROKERS at it for the
# tests (PostgreSQL is the stack's), and stops and deletes it afterwards, also on failure.
# The tests drive the nodes through the same script (kill, stop, start, pause, resume).
# The suite is the cluster suite of ./integration (tag suite_cluster); its tests are exclusive
# (they fault the cluster's nodes) and run one after another. CLUSTER_ARGS go to the test
# binary, e.g. CLUSTER_ARGS=-cluster.idempotent=false.
# It runs as two halves side by side, each on a cluster of its own, since the suite mostly waits
# on session timeouts and fault durations (issue 49): CLUSTER_HALF_A on the cluster of ports
# 29n92 and the stack's PostgreSQL (the chaos run restarts it), the rest on one of ports 30n92
# (KAFKA_PORT_PREFIX=30) and a fresh PostgreSQL 15 cluster of its own (scripts/pgversions.sh run
# 15). The second half's output is printed whole after the first's. CLUSTER_HALVES=1 runs the
# suite as one, on the first cluster.
KAFKACLUSTER          := scripts/kafkacluster.sh
KAFKA_CLUSTER_VERSION ?= 4.1.1
CLUSTER_TIMEOUT       ?= 20m
CLUSTER_HALF_A        ?= ^(TestChaos|TestClusterLeaderKill|TestClusterISRShrink)$$
CLUSTER_HALVES        ?= 2
CLUSTER_SUITE          = $(IT_TEST) -tags integration,suite_cluster -timeout $(CLUSTER_TIMEOUT)
cluster-test: up
	@eval "$$($(STACK) env)"; \
	if [ "$(CLUSTER_HALVES)" = 1 ]; then \
		KAFKA_VERSION=$(KAFKA_CLUSTER_VERSION) KAFKA_NODES=3 $(KAFKACLUSTER) run \
			$(CLUSTER_SUITE) ./integration/ $(if $(CLUSTER_ARGS),-args $(CLUSTER_ARGS)); \
		exit; \
	fi; \
	out=$$(mktemp); trap 'rm -f "$$out"' EXIT; t0=$$SECONDS; \
	( KAFKA_PORT_PREFIX=30 KAFKA_VERSION=$(KAFKA_CLUSTER_VERSION) KAFKA_NODES=3 $(PGVERSIONS) run 15 $(KAFKACLUSTER) run \
		$(CLUSTER_SUITE) -skip '$(CLUSTER_HALF_A)' ./integration/ $(if $(CLUSTER_ARGS),-args $(CLUSTER_ARGS)) ) >"$$out" 2>&1 & half=$$!; \
	rc=0; KAFKA_VERSION=$(KAFKA_CLUSTER_VERSION) KAFKA_NODES=3 $(KAFKACLUSTER) run \
		$(CLUSTER_SUITE) -run '$(CLUSTER_HALF_A)' ./integration/ $(if $(CLUSTER_ARGS),-args $(CLUSTER_ARGS)) || rc=$$?; \
	ta=$$((SECONDS - t0)); hrc=0; wait $$half || hrc=$$?; \
	echo "=== cluster-test: the second half (ports 30n92, its own PostgreSQL 15):"; cat "$$out"; \
	echo "cluster-test: first half exit $$rc in $$ta s, second half exit $$hrc, both in $$((SECONDS - t0)) s"; \
	[ $$rc = 0 ] && [ $$hrc = 0 ]

# The oldest and newest Kafka the relay supports (docs/kafka.md): on each of KAFKA_VERSIONS a
# throwaway single broker of that version (scripts/kafkacluster.sh run, KAFKA_NODES=1), with a
# fresh PostgreSQL 15 cluster of its own (scripts/pgversions.sh run 15; the stack's registry),
# runs the kafka-versions suite of ./integration (tag suite_kafka_versions), then, when
# KAFKA_VERSION_CLUSTER_TESTS is set, those tests on a three-node cluster of that version
# (e.g. KAFKA_VERSION_CLUSTER_TESTS='^TestClusterLeaderKill$$', about 95 s each; off in make
# test to keep CI short). A failing version does not stop the others.
KAFKA_VERSIONS      ?= 3.9.2 4.4.0
KAFKA_VERSION_CLUSTER_TESTS ?=
kafka-versions: up
	@if [ -z "$(strip $(KAFKA_VERSIONS))" ]; then echo "kafka-versions: KAFKA_VERSIONS is empty"; exit 0; fi; \
	eval "$$($(STACK) env)"; \
	failed=""; summary=""; \
	for v in $(KAFKA_VERSIONS); do \
		t0=$$SECONDS; r=ok; \
		$(PGVERSIONS) run 15 env KAFKA_VERSION=$$v KAFKA_NODES=1 $(KAFKACLUSTER) run \
			$(IT_TEST) -tags integration,suite_kafka_versions -timeout 15m ./integration/ || r=FAILED; \
		if [ -n '$(KAFKA_VERSION_CLUSTER_TESTS)' ]; then \
			KAFKA_VERSION=$$v KAFKA_NODES=3 $(KAFKACLUSTER) run \
				$(GO) test -tags integration,suite_cluster -count=1 -v -timeout 10m -run '$(KAFKA_VERSION_CLUSTER_TESTS)' ./integration/ || r=FAILED; \
		fi; \
		[ $$r = ok ] || failed="$$failed $$v"; \
		summary="$$summary"$$'\n'"kafka-versions: Kafka $$v: $$r in $$((SECONDS - t0)) s"; \
	done; \
	echo "$$summary"; \
	if [ -n "$$failed" ]; then echo "kafka-versions: failed on Kafka$$failed"; exit 1; fi

# The full proof, in phases (issue 49: on a fresh machine the cold compiles, not the servers,
# had set the pace). scripts/lib/phases.sh runs them: a phase in the foreground, its time printed
# after it ("=== phase NAME: N s"); a job beside the phases in the background, from its start to
# the phase that needs its result, its output printed whole there; a failed job fails make test
# like a failed phase, and a failed phase skips the later phases (the jobs already started are
# still waited for and printed).
#   t=0       lint and unit (-race builds, staticcheck: CPU only, no server), and fuzz-short, start
#             at nice 19 and run beside the phases, in the CPU the phases leave (the exclusive phase
#             uses about 0.8 of the 2 cores). lint and unit are collected only at the end, fuzz-short
#             before the cluster phase. lint and unit run side by side (-j2): unit's longest
#             package, cmd/outbox-relay, runs its tests one after another on one core. fuzz-short's
#             targets run fixed numbers of executions (FUZZ_EXECS), so the contention costs none of
#             its work.
#   it-build-stack  compiles the relay binary (testhooks) and the stack suite's test binary, at
#             normal priority: the exclusive tests need them first.
#   exclusive the stack suite's exclusive tests (they stop, crash and freeze the stack's servers:
#             nothing that uses those servers runs beside them), with two jobs at nice 10 beside:
#             it-build (the other suites' and the stack-backed packages' compiles, so the later
#             phases only link) and kafka-versions, which shares no server with the stack suite
#             (its own brokers, its own PostgreSQL 15). kafka-versions is collected after the
#             middle phase: the cluster phase needs its node-1 ports.
#   middle    what shares the stack without faulting it, TEST_JOBS at a time (each target's output
#             printed whole when it ends): the stack suite's parallel tests and the PostgreSQL
#             versions of TEST_PG_MIDDLE (their own clusters, the stack's Kafka).
#   cluster   the cluster suite, which mostly waits on session timeouts and fault durations: its
#             two halves side by side (cluster-test), with the PostgreSQL versions not in
#             TEST_PG_MIDDLE beside it at nice TEST_PG_BESIDE_NICE (none by default).
#             Nothing CPU-bound runs beside the cluster phase by default: fuzz-short at nice 19
#             beside the two cluster halves once took the CPU their elections need
#             (TestClusterLeaderKill: delivery resumed 4 s after the election, bound 2 s), though
#             that was before phases.sh set the autogroup's nice value too.
# TEST_JOBS=3 overloaded the 2 cores: the stack's broker then answered metadata too late for
# kafka-go's 1 s refresh, and tests failed on it. The checks at normal priority beside the cluster
# suite made a leader election take 28 s instead of 8: the versions beside it yield to it
# (TEST_PG_BESIDE_NICE). Times per phase: docs/design.md#tests.
TEST_JOBS           ?= 2
# Every version runs in the middle phase: beside the cluster suite (TEST_PG_MIDDLE=16) they
# slowed its recovery past its bounds (TestClusterLeaderKill: delivery resumed 2.65 s after the
# election, bound 2 s) and the phase from about 341 s to 428-519 s (issue 49).
TEST_PG_MIDDLE      ?= 16 17 18
TEST_PG_BESIDE_NICE ?= 5
PHASES              := scripts/lib/phases.sh
test:
	@. $(PHASES); \
	beside lint-unit 19 $(MAKE) --no-print-directory -j2 --output-sync=target lint unit; \
	beside fuzz-short 19 $(MAKE) --no-print-directory fuzz-short; \
	phase it-build-stack $(MAKE) --no-print-directory it-build-stack; \
	beside it-build 10 $(MAKE) --no-print-directory it-build; \
	beside kafka-versions 10 $(MAKE) --no-print-directory kafka-versions; \
	phase exclusive $(MAKE) --no-print-directory integration IT_SHARING=exclusive; \
	collect it-build; \
	phase middle $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target integration-parallel $(addprefix versions-,$(filter $(TEST_PG_MIDDLE),$(PG_VERSIONS))); \
	collect kafka-versions; \
	collect fuzz-short; \
	beside versions $(TEST_PG_BESIDE_NICE) $(MAKE) --no-print-directory versions PG_VERSIONS='$(filter-out $(TEST_PG_MIDDLE),$(PG_VERSIONS))'; \
	phase cluster $(MAKE) --no-print-directory cluster-test; \
	collect versions; \
	finish

# phase and beside of make test-fast: one phase, its time printed after it; phase $(1) at
# normal priority and phase $(2) at nice 19 beside it, $(2)'s output printed whole after $(1)
# ends, and the recipe fails if either fails.
phase = t0=$$SECONDS; $(MAKE) --no-print-directory $(1); echo "=== phase $(1): $$((SECONDS - t0)) s"
beside = t0=$$SECONDS; out=$$(mktemp); \
	( rc=0; nice -n 19 $(MAKE) --no-print-directory $(2) || rc=$$?; \
	  echo "=== phase $(2) (beside, nice 19): $$((SECONDS - t0)) s"; exit $$rc ) >"$$out" 2>&1 & bg=$$!; \
	rc=0; $(MAKE) --no-print-directory $(1) || rc=$$?; echo "=== phase $(1): $$((SECONDS - t0)) s"; \
	bgrc=0; wait $$bg || bgrc=$$?; cat "$$out"; rm -f "$$out"; [ $$rc = 0 ] && [ $$bgrc = 0 ]

# versions-N: the version matrix on PostgreSQL N alone (make test's middle phase runs
# TEST_PG_MIDDLE's this way, as one target of its -j list).
versions-%:
	@$(MAKE) --no-print-directory versions PG_VERSIONS=$*

# The test binaries of make test's integration phases, compiled without running anything, into a
# directory deleted afterwards: Go caches the compiled packages (and the harness's `go build` of
# the relay), so the phases' own `go test` then only links its test binary (Go does not cache
# linked test binaries). it-build-stack: what the exclusive phase runs first; it-build: the rest,
# beside it. Each also works alone (a warm-up).
IT_BUILD_TAGS := integration,suite_cluster integration,suite_pg_versions
it-build-stack:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(GO) build -tags testhooks -o "$$d/outbox-relay" ./cmd/outbox-relay; \
	$(GO) test -c -o "$$d/stack.test" -tags integration ./integration/; \
	echo "it-build-stack: the relay (testhooks) and the stack suite's test binary"
it-build:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	for tags in $(IT_BUILD_TAGS); do \
		$(GO) test -c -o "$$d/suite.test" -tags "$$tags" ./integration/; \
		echo "it-build: the test binary of -tags $$tags"; \
	done; \
	$(GO) test -c -o "$$d/" -tags integration ./migrations/ ./outbox/; \
	pkgs=$$($(STACK_TEST_PKGS)); mkdir -p "$$d/pkgs"; $(GO) test -c -o "$$d/pkgs/" $$pkgs; \
	for m in $(INTEROP_MODULES); do mkdir -p "$$d/$$m"; (cd $$m && $(GO) test -c -o "$$d/$$m/" ./...); done; \
	echo "it-build: the test binaries of the stack-backed packages and of $(INTEROP_MODULES)"

# The stack suite's parallel tests and the other stack-backed packages (make test's middle phase).
integration-parallel:
	$(MAKE) --no-print-directory integration IT_SHARING=parallel

# The edit-test loop (under 5 minutes): the stack suite's parallel tests against the one broker,
# with lint and unit tests (-race) at nice 19 beside them (the suite's long tail leaves the CPU
# idle), then fuzz-short (each target for FAST_FUZZTIME, its seed corpus always whole). make test
# stays the full proof.
FAST_FUZZTIME ?= 1s
test-fast: up
	@$(call beside,integration-fast,lint unit)
	@$(call phase,fuzz-short FUZZTIME=$(FAST_FUZZTIME))

# The stack suite's parallel tests alone (make test-fast's integration part).
integration-fast: up
	eval "$$($(STACK) env)"; \
	$(IT_TEST) -tags integration -timeout $(INTEGRATION_TIMEOUT) ./integration/ -args -it.sharing=parallel

# A short, bounded run of every fuzz target of FUZZ_PKGS (seed corpora in
# <pkg>/testdata/fuzz/<Target>/). A fuzzing run takes one target, so each package's instrumented
# test binary is built once (go test -c -fuzz) and runs its targets (its -test.list) one after
# another, in the package's directory and with go test's corpus cache (GOCACHE/fuzz/<import
# path>): a go test -fuzz per target linked the binary again for each, and a go test -list more.
# Each runs a fixed number of executions, its line of FUZZ_EXECS (package, target, executions:
# what the target ran in FUZZ_CALIBRATE_TIME on an idle 2-core machine, written by make
# fuzz-calibrate), so the fuzzing work is the same on a loaded machine as on an idle one, and make test can run it at nice 19
# beside a phase (issue 49): a wall-clock budget would lose executions to the contention. A target
# without a line there (new since the calibration) runs for FUZZ_CALIBRATE_TIME, and says so.
# FUZZTIME=1s (make test-fast) or FUZZTIME=10000x gives every target that budget instead. A run
# that fails only with the fuzz coordinator's "context deadline exceeded" (a loaded machine, no
# failing input) is retried once. New interesting inputs stay in GOCACHE; copy crashers into
# testdata/fuzz.
FUZZTIME            ?=
FUZZ_EXECS          := scripts/fuzz-execs.tsv
FUZZ_CALIBRATE_TIME := 5s
# Fuzzing workers per target (go test -parallel).
FUZZ_PARALLEL       ?= 2
# A file fuzz-short appends each target's execution count to (fuzz-calibrate's).
FUZZ_RECORD         ?=
FUZZ_PKGS ?= ./replication/ ./record/ ./record/internal/jsonexpand/ ./record/internal/avrojson/ ./record/internal/pbjson/ ./internal/jsontext/ ./publisher/ ./relay/ ./checkpoint/ ./outbox/ ./internal/kafkafetch/ ./oauthbearer/ ./record/internal/wire/
fuzz-short:
	@log=$$(mktemp); bin=$$(mktemp -d); trap 'rm -rf "$$log" "$$bin"' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for pkg in $(FUZZ_PKGS); do \
		read -r path dir <<<"$$($(GO) list -f '{{.ImportPath}} {{.Dir}}' "$$pkg")"; \
		$(GO) test -c -fuzz . -o "$$bin/fuzz.test" "$$pkg"; \
		for target in $$(cd "$$dir" && "$$bin/fuzz.test" -test.list '^Fuzz' | grep '^Fuzz'); do \
			budget='$(FUZZTIME)'; \
			if [ -z "$$budget" ]; then \
				n=$$(awk -v p="$$pkg" -v t="$$target" '$$1 == p && $$2 == t { print $$3 }' $(FUZZ_EXECS)); \
				if [ -n "$$n" ]; then budget=$${n}x; else budget=$(FUZZ_CALIBRATE_TIME); \
					echo "fuzz-short: $$pkg $$target has no line in $(FUZZ_EXECS) (make fuzz-calibrate): $$budget"; fi; \
			fi; \
			for try in 1 2; do \
				echo "fuzz-short: $$pkg $$target for $$budget"; \
				if (cd "$$dir" && "$$bin/fuzz.test" -test.run '^$$' -test.fuzz "^$$target\$$" -test.fuzztime "$$budget" \
					-test.parallel $(FUZZ_PARALLEL) -test.fuzzcachedir "$$cache/$$path" -test.timeout 10m -test.v) >"$$log" 2>&1; then \
					n=$$(grep -o 'execs: [0-9]*' "$$log" | tail -n 1 | cut -d' ' -f2); \
					[ -n "$$n" ] || { cat "$$log"; echo "fuzz-short: no execution count for $$target"; exit 1; }; \
					echo "ok  	$$path	$$target: $$n executions"; \
					[ -z '$(FUZZ_RECORD)' ] || printf '%s\t%s\t%s\n' "$$pkg" "$$target" "$$n" >>'$(FUZZ_RECORD)'; \
					break; \
				fi; \
				cat "$$log"; \
				if [ "$$try" = 1 ] && grep -q 'context deadline exceeded' "$$log" && ! grep -q 'Failing input' "$$log"; then \
					echo "fuzz-short: $$target: coordinator timeout, retrying once"; continue; \
				fi; \
				echo "FAIL	$$path	$$target"; exit 1; \
			done; \
		done; \
	done

# Writes FUZZ_EXECS: how many executions each fuzz target of FUZZ_PKGS runs in
# FUZZ_CALIBRATE_TIME (fuzz-short with that budget, each run's last count, FUZZ_RECORD), on a
# machine doing nothing else. Run it after adding a fuzz target, on the CI machine's kind of
# hardware, and commit the file.
fuzz-calibrate:
	@out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	echo "# package	target	executions in $(FUZZ_CALIBRATE_TIME) (make fuzz-calibrate, $$(nproc) cores, $$(date -u +%F))" >"$$out"; \
	$(MAKE) --no-print-directory fuzz-short FUZZTIME=$(FUZZ_CALIBRATE_TIME) FUZZ_RECORD="$$out" && cp "$$out" $(FUZZ_EXECS)

# The stack is started only if PostgreSQL or Kafka does not answer at the stack's addresses
# (a stack started from another checkout answers there while `stack.sh status` of this one
# says down), the schema registry only if it does not answer.
demo: build
	@eval "$$($(STACK) env)"; b="$${OUTBOX_RELAY_KAFKA_BROKERS%%,*}"; \
	if ! { pg_isready -q -d "$$OUTBOX_RELAY_DATABASE_URL" && (exec 3<>"/dev/tcp/$${b%:*}/$${b##*:}") 2>/dev/null; }; then $(STACK) up; \
	elif ! curl -fsS -m 5 -o /dev/null "$$TEST_SCHEMA_REGISTRY_URL/subjects"; then $(STACK) registry-start; fi
	bash scripts/demo.sh

lint:
	@files=$$(gofmt -l .); \
	if [ -n "$$files" ]; then echo "gofmt -l reports unformatted files:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags integration ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd deploy && $(GO) run $(STATICCHECK) ./...
	for m in $(INTEROP_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...); done
	@$(MAKE) --no-print-directory vulncheck

# Known vulnerabilities in the code the binary and libraries reach (govulncheck: the modules and the Go
# release). Its database is fetched online: where it cannot be (this project's CI machines reach only the
# package registries) the target says so and passes; anywhere else a finding fails it (docs/security.md).
vulncheck:
	@rc=0; out=$$($(GO) run $(GOVULNCHECK) ./... 2>&1) || rc=$$?; \
	if [ $$rc -ne 0 ] && grep -q 'fetching vulnerabilities' <<< "$$out"; then \
		echo "vulncheck: skipped, the vulnerability database cannot be fetched from here: $$(grep 'fetching vulnerabilities' <<< "$$out" | tail -1 | cut -c1-160)"; \
		exit 0; \
	fi; \
	printf '%s\n' "$$out"; exit $$rc

# Benchmark against ceilings measured in the same run (docs/benchmarks.md); not part of
# `make test`. Quick run: make bench BENCH_ARGS="-n 20000 -quick". The stack is started
# only if it is down (a running stack is left as it is: other people may be using it).
bench: build
	@if ! { $(STACK) status | grep -q '^postgres: up' && $(STACK) status | grep -Eq '^kafka: +up'; }; then $(STACK) up; fi
	eval "$$($(STACK) env)"; \
	cd bench && $(GO) run ./cmd/outbox-bench -relay $(CURDIR)/$(BIN) -report $(CURDIR)/docs/benchmarks.md -png $(CURDIR)/docs/benchmarks.png $(BENCH_ARGS)

# The inbox consumer on the real stack (bench/cmd/inbox-bench): N events (default 100,000) of a
# 6-partition topic applied one at a time and batched, with a one-INSERT effect and with the
# version-guarded projection, each mode in a consumer child process of its own (CPU, peak RSS);
# rewrites the inbox-bench section of docs/benchmarks.md. Not part of `make test`. Quick run:
# make bench-inbox INBOX_BENCH_ARGS="-quick" (N = 20,000). The stack is started only if
# PostgreSQL or Kafka does not answer at the stack's addresses (a stack started from another
# checkout answers there while `stack.sh status` of this one says down).
bench-inbox:
	@eval "$$($(STACK) env)"; b="$${OUTBOX_RELAY_KAFKA_BROKERS%%,*}"; \
	if ! { pg_isready -q -d "$$OUTBOX_RELAY_DATABASE_URL" && (exec 3<>"/dev/tcp/$${b%:*}/$${b##*:}") 2>/dev/null; }; then $(STACK) up; fi
	eval "$$($(STACK) env)"; \
	cd bench && $(GO) run ./cmd/inbox-bench -report $(CURDIR)/docs/benchmarks.md -stack $(CURDIR)/$(STACK) \
		-command 'make bench-inbox$(if $(strip $(INBOX_BENCH_ARGS)), INBOX_BENCH_ARGS="$(strip $(INBOX_BENCH_ARGS))")' $(INBOX_BENCH_ARGS)

# The relay beside real Debezium (docs/debezium-interop.md); not part of `make test`: Kafka
# Connect standalone with Debezium 3.6.1's PostgreSQL connector and Outbox Event Router
# (jars fetched with Maven and cached, scripts/interop.sh) and `outbox-relay run
# --record-format debezium`, each on its own slot of one outbox table: their records are
# compared one for one (the run fails on any difference docs/debezium-interop.md does not
# explain), then both drain the same backlog and the interop section of docs/benchmarks.md
# is rewritten. About a minute (more the first time: the jars). Quick run:
# make interop INTEROP_ARGS="-n 5000 -drain-n 20000 -drain-rounds 1".
# Then the registry formats' outside check (make interop-schemas, issue 48): the relay's
# avro, protobuf and json-schema records decoded by Apache Avro's and protobuf-java's
# readers (interop/schemas/SchemaDecode.java), every field equal to the row's payload
# (TestRegistryJavaDecode, run by scripts/interop.sh schemas; about 30 s).
# The stack is started only if PostgreSQL or Kafka does not answer, the registry only if
# it does not answer.
interop: build
	scripts/interop.sh run -command 'make interop$(if $(strip $(INTEROP_ARGS)), INTEROP_ARGS="$(strip $(INTEROP_ARGS))")' $(INTEROP_ARGS)
	scripts/interop.sh schemas

interop-schemas:
	scripts/interop.sh schemas
