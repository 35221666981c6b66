// Command debezium-interop proves the relay's --record-format debezium
// against real Debezium: Kafka Connect standalone with Debezium's
// PostgreSQL connector and its Outbox Event Router, each on a
// replication slot of its own, beside `outbox-relay run` on another slot
// of the same outbox table. It compares the two sides' Kafka records one
// for one (topic, partition, key, value, headers, matched by event id) and
// measures both processes draining the same backlog (events/s, CPU,
// peak RSS), then rewrites the interop section of docs/benchmarks.md.
//
// scripts/interop.sh (make interop) fetches the jars and runs it; see
// docs/debezium-interop.md.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// config is the run's flags.
type config struct {
	databaseURL  string
	brokers      []string
	relay        string
	java         string
	connectLibs  string
	logDir       string
	report       string
	formatsDoc   string
	interopDoc   string
	pidFile      string
	command      string
	kafkaVersion string
	versions     string
	n            int
	drainN       int
	drainRounds  int
	phases       map[string]bool
	keep         bool
	timeout      time.Duration
	interval     time.Duration
	seed         uint64
	connectOnly  bool
	recordFormat string
	set          props
}

// setFlag collects -set key=value.
type setFlag struct{ p *props }

func (f setFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.TrimSpace(f.p.String())
}

func (f setFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	*f.p = append(*f.p, [2]string{strings.TrimSpace(k), strings.TrimSpace(val)})
	return nil
}

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "debezium-interop:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &run{cfg: cfg, out: stdout, t0: time.Now()}
	err = r.main(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "debezium-interop: FAIL:", err)
		fmt.Fprintln(stderr, "debezium-interop: logs in", cfg.logDir)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("debezium-interop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	brokers := ""
	phases := ""
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("OUTBOX_RELAY_DATABASE_URL"), "PostgreSQL URL of the stack (superuser: it creates slots, a schema and publications)")
	fs.StringVar(&brokers, "kafka-brokers", os.Getenv("OUTBOX_RELAY_KAFKA_BROKERS"), "Kafka brokers, comma-separated")
	fs.StringVar(&cfg.relay, "relay", "", "the outbox-relay binary (make build: bin/outbox-relay)")
	fs.StringVar(&cfg.java, "java", "java", "the java command (17 or later)")
	fs.StringVar(&cfg.connectLibs, "connect-libs", "", "directory of the Debezium and Kafka Connect jars (scripts/interop.sh fetch)")
	fs.StringVar(&cfg.logDir, "log-dir", "", "directory for configs and logs (default: a new temporary directory)")
	fs.StringVar(&cfg.report, "report", "", "Markdown file whose interop section the run rewrites (docs/benchmarks.md); empty: none")
	fs.StringVar(&cfg.formatsDoc, "formats-doc", "docs/formats.md", "the document whose connector configuration (a properties code block with the EventRouter) the run uses")
	fs.StringVar(&cfg.interopDoc, "interop-doc", "", "docs/debezium-interop.md: every explained difference the run finds must be documented there")
	fs.StringVar(&cfg.pidFile, "pid-file", "", "file holding the Connect JVM's pid while it runs (for the caller's clean-up)")
	fs.StringVar(&cfg.command, "command", "make interop", "the command shown in the report")
	fs.StringVar(&cfg.kafkaVersion, "kafka-version", "4.1.1", "the broker's version, for the report")
	fs.StringVar(&cfg.versions, "versions", "Debezium 3.6.1.Final, Kafka Connect 4.3.0", "the Connect side's versions, for the report")
	fs.IntVar(&cfg.n, "n", 20000, "outbox rows of the record-for-record comparison")
	fs.IntVar(&cfg.drainN, "drain-n", 100000, "outbox rows of the side-by-side drain")
	fs.IntVar(&cfg.drainRounds, "drain-rounds", 3, "drains of the backlog by each side (the report gives the medians)")
	fs.StringVar(&phases, "phases", "compare,drain", "phases to run: compare, drain")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the schema, slots, publications and topics (for a look afterwards)")
	fs.DurationVar(&cfg.timeout, "timeout", 4*time.Minute, "longest wait for one side to deliver all records")
	fs.DurationVar(&cfg.interval, "interval", 20*time.Millisecond, "sampling interval of the drain")
	fs.Uint64Var(&cfg.seed, "seed", 20, "seed of the generated rows")
	fs.StringVar(&cfg.recordFormat, "record-format", "debezium", "the relay's --record-format (native: compare the native records, to see what differs; a relay without the flag writes native)")
	fs.Var(setFlag{&cfg.set}, "set", "key=value: a connector property set on top of docs/formats.md's configuration (repeatable), e.g. -set extended.headers.enabled=true")
	fs.BoolVar(&cfg.connectOnly, "connect-only", false, "run only Connect and the router (no relay, no comparison): for a relay without --record-format")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		switch p = strings.TrimSpace(p); p {
		case "compare", "drain":
			cfg.phases[p] = true
		case "":
		default:
			return nil, fmt.Errorf("-phases: unknown phase %q (compare, drain)", p)
		}
	}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.brokers = append(cfg.brokers, b)
		}
	}
	var missing []string
	if cfg.databaseURL == "" {
		missing = append(missing, "-database-url")
	}
	if len(cfg.brokers) == 0 {
		missing = append(missing, "-kafka-brokers")
	}
	if cfg.relay == "" {
		missing = append(missing, "-relay")
	}
	if cfg.connectLibs == "" {
		missing = append(missing, "-connect-libs")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if cfg.n < 1 || cfg.drainN < 10 || cfg.drainRounds < 1 {
		return nil, errors.New("-n and -drain-rounds must be at least 1 and -drain-n at least 10")
	}
	return cfg, nil
}

// run is one interop run: its names (all derived from id), connections
// and what it created, for the clean-up.
type run struct {
	cfg    *config
	out    io.Writer
	t0     time.Time
	id     string
	schema string
	pool   *pgxpool.Pool
	kc     *kafka.Client
	db     *pgx.ConnConfig
	feat   relayFeatures
	tmpl   connectorTemplate

	slots  []string
	pubs   []string
	topics []string
	procs  []*proc

	compares []*comparison
	drains   [][2]*drainResult // per round: the relay, Connect
	notes    []string
	host     hostInfo
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "[interop %6.1fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) main(ctx context.Context) (err error) {
	if r.cfg.logDir == "" {
		if r.cfg.logDir, err = os.MkdirTemp("", "debezium-interop-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(r.cfg.logDir, 0o755); err != nil {
		return err
	}
	r.id = newRunID()
	r.schema = "interop_" + r.id
	if r.db, err = pgx.ParseConfig(r.cfg.databaseURL); err != nil {
		return fmt.Errorf("-database-url: %w", err)
	}
	if r.pool, err = pgxpool.New(ctx, r.cfg.databaseURL); err != nil {
		return err
	}
	defer r.pool.Close()
	r.kc = kafkaClient(r.cfg.brokers)
	r.logf("run %s: logs and configs in %s", r.id, r.cfg.logDir)
	// run.id names what this run creates until its clean-up has removed
	// it: scripts/interop.sh's EXIT trap drops the leftovers of a run that
	// was killed.
	idFile := filepath.Join(r.cfg.logDir, "run.id")
	if err := os.WriteFile(idFile, []byte(r.id+"\n"), 0o644); err != nil {
		return err
	}
	if err := r.preflight(ctx); err != nil {
		return err
	}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			r.logf("clean-up: %v", cerr)
			err = errors.Join(err, cerr)
		} else if !r.cfg.keep {
			_ = os.Remove(idFile)
		}
	}()
	if _, err := r.pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{r.schema}.Sanitize()); err != nil {
		return err
	}
	if r.cfg.phases["compare"] {
		if err := r.comparePhase(ctx); err != nil {
			return fmt.Errorf("compare: %w", err)
		}
	}
	if r.cfg.phases["drain"] {
		if err := r.drainPhase(ctx); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	return r.finish()
}

func newRunID() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return "i" + string(b)
}

// preflight checks the relay, the jars, the router configuration and the
// server's settings and headroom.
func (r *run) preflight(ctx context.Context) error {
	var err error
	if _, err := os.Stat(filepath.Join(r.cfg.connectLibs, "debezium-connector-postgres-3.6.1.Final.jar")); err != nil {
		r.logf("warning: %v (the jars of -connect-libs are used as they are)", err)
	}
	if r.feat, err = probeRelay(ctx, r.cfg.relay); err != nil {
		return err
	}
	if !r.feat.recordFormat && !r.cfg.connectOnly && r.cfg.recordFormat != "native" {
		return fmt.Errorf("%s has no --record-format flag: build a relay with the record formats, or run with -connect-only", r.cfg.relay)
	}
	doc, err := os.ReadFile(r.cfg.formatsDoc)
	if err != nil {
		return fmt.Errorf("the connector configuration: %w", err)
	}
	var ok bool
	if r.tmpl, ok = templateFromDoc(string(doc)); !ok {
		return fmt.Errorf("%s has no code block configuring %s: the run takes the connector's configuration from there", r.cfg.formatsDoc, eventRouter)
	}
	r.tmpl.from = r.cfg.formatsDoc
	if len(r.cfg.set) > 0 {
		base := append(props(nil), r.tmpl.base...)
		for _, kv := range r.cfg.set {
			base = base.withOption(kv[0], kv[1])
		}
		r.tmpl.base = base
		r.tmpl.from += " with -set " + strings.ReplaceAll(strings.TrimSpace(r.cfg.set.String()), "\n", " ")
	}
	if err := checkRouter(r.tmpl.router()); err != nil {
		return fmt.Errorf("EventRouter configuration (%s): %w", r.tmpl.from, err)
	}
	r.logf("connector configuration from %s (expansion profile: %d overrides)", r.tmpl.from, len(r.tmpl.expand))
	var walLevel string
	var maxSlots, usedSlots, maxSenders, usedSenders int
	if err := r.pool.QueryRow(ctx, `SELECT current_setting('wal_level'),
		current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)`).
		Scan(&walLevel, &maxSlots, &usedSlots, &maxSenders, &usedSenders); err != nil {
		return err
	}
	if walLevel != "logical" {
		return fmt.Errorf("wal_level is %s: Debezium and the relay need logical", walLevel)
	}
	// The comparison streams from 4 slots at once (2 without expansion);
	// the drain holds 2 per round after dropping those.
	needSlots, needSenders := max(4, 2*r.cfg.drainRounds), 4
	if maxSlots-usedSlots < needSlots || maxSenders-usedSenders < needSenders {
		return fmt.Errorf("the server has %d of %d replication slots and %d of %d WAL senders in use: the run needs %d slots "+
			"(fewer with fewer -drain-rounds) and %d WAL senders free", usedSlots, maxSlots, usedSenders, maxSenders, needSlots, needSenders)
	}
	r.logf("PostgreSQL: wal_level=logical, replication slots %d/%d used, WAL senders %d/%d used", usedSlots, maxSlots, usedSenders, maxSenders)
	r.host = readHost(ctx, r)
	return nil
}

// checkRouter refuses router options the run cannot pair with the
// relay's topic template.
func checkRouter(p props) error {
	if v, _ := p.get("route.by.field"); v != "aggregate_type" {
		return fmt.Errorf("route.by.field is %q: the relay routes by aggregate_type", v)
	}
	if v, ok := p.get("route.topic.regex"); ok && v != "(?<routedByValue>.*)" {
		return fmt.Errorf("route.topic.regex %q: the run handles the default only", v)
	}
	if v, ok := p.get("route.topic.replacement"); ok && !strings.Contains(v, "${routedByValue}") {
		return fmt.Errorf("route.topic.replacement %q has no ${routedByValue}", v)
	}
	if v, _ := p.get("table.field.event.key"); v != "aggregate_id" {
		return fmt.Errorf("table.field.event.key is %q: the relay keys by aggregate_id", v)
	}
	return nil
}

// replacement is the router's route.topic.replacement (its default when
// unset).
func (r *run) replacement() string {
	if v, ok := r.tmpl.router().get("route.topic.replacement"); ok {
		return v
	}
	return defaultReplacement
}

// rowHeadersAlias is the header the router writes the headers column to
// (table.fields.additional.placement headers:header[:alias]), or "".
func rowHeadersAlias(p props) string {
	v, _ := p.get("table.fields.additional.placement")
	for _, f := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(f), ":")
		if len(parts) >= 2 && parts[0] == "headers" && parts[1] == "header" {
			if len(parts) == 3 {
				return parts[2]
			}
			return parts[0]
		}
	}
	return ""
}

// side is one producer of records in a phase: its suffix makes its topic
// names.
type side struct {
	name   string
	suffix string
}

func (r *run) topicsOf(s side) []string {
	var out []string
	for _, t := range aggregateTypes {
		out = append(out, strings.ReplaceAll(r.replacement(), "${routedByValue}", t)+s.suffix)
	}
	return out
}

// relayTemplate is the relay's --topic-template for s: the router's
// replacement with the relay's placeholder.
func (r *run) relayTemplate(s side) string {
	return strings.ReplaceAll(r.replacement(), "${routedByValue}", "{aggregate_type}") + s.suffix
}

// connectorFor is the Debezium connector of side s reading slot.
func (r *run) connectorFor(s side, table, slot, pub string, expand, tombstones bool) connector {
	return connector{
		name: r.id + "-" + s.name, slot: slot, pub: pub, table: table,
		prefix: r.id + "_" + strings.ReplaceAll(s.name, "-", "_"), suffix: s.suffix,
		tmpl: r.tmpl, expand: expand, tombstones: tombstones,
	}
}

// createSlot creates a pgoutput slot and remembers it for the clean-up.
func (r *run) createSlot(ctx context.Context, name string) error {
	if _, err := r.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		return fmt.Errorf("create slot %s: %w", name, err)
	}
	r.slots = append(r.slots, name)
	return nil
}

func (r *run) createTopics(ctx context.Context, sides ...side) error {
	var topics []string
	for _, s := range sides {
		topics = append(topics, r.topicsOf(s)...)
	}
	r.topics = append(r.topics, topics...)
	return createTopics(ctx, r.kc, topics)
}

// outboxRows reads the table's event ids and headers columns.
func (r *run) outboxRows(ctx context.Context, table string) (map[string]rowInfo, error) {
	rows, err := r.pool.Query(ctx, `SELECT event_id::text, headers::text FROM `+table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]rowInfo{}
	for rows.Next() {
		var id string
		var headers *string
		if err := rows.Scan(&id, &headers); err != nil {
			return nil, err
		}
		var info rowInfo
		if headers != nil {
			if info.headers, err = jsonMembers([]byte(*headers)); err != nil {
				return nil, fmt.Errorf("event %s: headers column: %w", id, err)
			}
		}
		out[id] = info
	}
	return out, rows.Err()
}

// sideSpecs: the router's records carry the event id in "id"; the
// relay's in "id" (debezium format) or "event_id" (native).
func dbzSpec(s side) sideSpec {
	return sideSpec{name: "router", suffix: s.suffix, idKeys: []string{"id"}}
}
func relaySpec(s side) sideSpec {
	return sideSpec{name: "relay", suffix: s.suffix, idKeys: []string{"id", "event_id"}}
}

// comparePhase: N rows of varied payloads and headers (and NULL payloads,
// when the relay has tombstones), read by the router configured as
// docs/formats.md says, by the relay with --record-format debezium, and,
// when both have payload expansion, by a second router with the doc's
// expansion settings beside the relay with its expansion flag, each on
// its own slot; then each pair is compared record for record.
func (r *run) comparePhase(ctx context.Context) error {
	dir := filepath.Join(r.cfg.logDir, "compare")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	table := r.schema + ".outbox_cmp"
	pub := r.id + "_cmp"
	expand := r.feat.expandFlag != "" && len(r.tmpl.expand) > 0 && !r.cfg.connectOnly
	tombstones := r.feat.tombstones && !r.cfg.connectOnly
	dbzPlain, relPlain := side{"debezium", "." + r.id + "-dbz"}, side{"relay", "." + r.id + "-relay"}
	dbzExp, relExp := side{"debezium-expand", "." + r.id + "-dbz-x"}, side{"relay-expand", "." + r.id + "-relay-x"}
	if !expand && !r.cfg.connectOnly {
		r.note("The relay has no payload expansion flag, or the formats doc no expansion settings: the expansion profile (table.expand.json.payload=true) was not compared.")
	}
	if !tombstones && !r.cfg.connectOnly {
		r.note("The relay has no --tombstone-on-null-payload: the comparison has no NULL payloads.")
	}

	relaySlot, dbzSlot := r.id+"_cmp_relay", r.id+"_cmp_dbz"
	if err := r.migrate(ctx, table, relaySlot, pub, tombstones); err != nil {
		return err
	}
	r.slots = append(r.slots, relaySlot)
	r.pubs = append(r.pubs, pub)
	if err := r.createSlot(ctx, dbzSlot); err != nil {
		return err
	}
	sides := []side{dbzPlain, relPlain}
	if expand {
		sides = append(sides, dbzExp, relExp)
		if err := errors.Join(r.createSlot(ctx, dbzSlot+"_x"), r.createSlot(ctx, relaySlot+"_x")); err != nil {
			return err
		}
	}
	if err := r.createTopics(ctx, sides...); err != nil {
		return err
	}
	rows := compareRows(r.cfg.n, r.cfg.seed, tombstones)
	t := time.Now()
	if err := insertRows(ctx, r.pool, table, rows, r.cfg.seed); err != nil {
		return err
	}
	r.logf("compare: %d rows committed to %s in %.1f s", len(rows), table, time.Since(t).Seconds())
	ids, err := r.outboxRows(ctx, table)
	if err != nil {
		return err
	}

	conns := []connector{r.connectorFor(dbzPlain, table, dbzSlot, pub, false, tombstones)}
	if expand {
		conns = append(conns, r.connectorFor(dbzExp, table, dbzSlot+"_x", pub, true, tombstones))
	}
	cp, err := r.startConnect(filepath.Join(dir, "connect"), conns)
	if err != nil {
		return err
	}
	r.procs = append(r.procs, cp.proc)
	r.logf("compare: Kafka Connect started (pid %d, %d connectors)", cp.pid(), len(conns))
	var relays []*proc
	if !r.cfg.connectOnly {
		var extra []string
		if tombstones {
			extra = append(extra, "--tombstone-on-null-payload")
		}
		rs := []relaySide{{name: "relay", table: table, slot: relaySlot, pub: pub, template: r.relayTemplate(relPlain), format: r.relayFormat(), extra: extra}}
		if expand {
			rs = append(rs, relaySide{name: "relay-expand", table: table, slot: relaySlot + "_x", pub: pub,
				template: r.relayTemplate(relExp), format: r.relayFormat(), extra: append([]string{r.feat.expandFlag}, extra...)})
		}
		for _, s := range rs {
			p, err := r.startRelay(dir, s)
			if err != nil {
				return err
			}
			r.procs = append(r.procs, p)
			relays = append(relays, p)
		}
		r.logf("compare: %d relays started", len(relays))
	}
	waitSides := sides
	if r.cfg.connectOnly {
		waitSides = []side{dbzPlain}
	}
	if err := r.waitAll(ctx, waitSides, int64(len(rows)), cp, relays); err != nil {
		return err
	}
	for _, p := range relays {
		r.stopped(p, 40*time.Second)
	}
	r.stopped(cp.proc, 60*time.Second)
	r.logf("compare: Connect and relays stopped")

	pairs := [][2]side{{dbzPlain, relPlain}}
	profiles := []string{"payload as stored"}
	if expand {
		pairs = append(pairs, [2]side{dbzExp, relExp})
		profiles = append(profiles, "payload expanded (table.expand.json.payload)")
	}
	if r.cfg.connectOnly {
		recs, err := readAll(ctx, r.kc, r.topicsOf(dbzPlain))
		if err != nil {
			return err
		}
		r.printConnectOnly(recs)
		return r.dropSlots(ctx)
	}
	for i, p := range pairs {
		c, err := r.compareSides(ctx, profiles[i], p[0], p[1], ids)
		if err != nil {
			return err
		}
		r.compares = append(r.compares, c)
	}
	return r.dropSlots(ctx)
}

// compareSides reads both sides' topics and compares them.
func (r *run) compareSides(ctx context.Context, profile string, d, rel side, ids map[string]rowInfo) (*comparison, error) {
	t := time.Now()
	drecs, err := retry(ctx, func() ([]rawRecord, error) { return readAll(ctx, r.kc, r.topicsOf(d)) })
	if err != nil {
		return nil, err
	}
	rrecs, err := retry(ctx, func() ([]rawRecord, error) { return readAll(ctx, r.kc, r.topicsOf(rel)) })
	if err != nil {
		return nil, err
	}
	c := compareRecords(profile, drecs, rrecs, dbzSpec(d), relaySpec(rel), rowHeadersAlias(r.tmpl.router()), ids)
	r.logf("%s: read %d + %d records in %.1f s", profile, len(drecs), len(rrecs), time.Since(t).Seconds())
	r.printComparison(c)
	if err := r.writeDiffs(c); err != nil {
		return nil, err
	}
	return c, nil
}

// waitAll waits until every side's topics hold want records, failing
// early when a process dies or a connector fails.
func (r *run) waitAll(ctx context.Context, sides []side, want int64, cp *connectProc, relays []*proc) error {
	deadline := time.Now().Add(r.cfg.timeout)
	for {
		done := true
		var counts []string
		for _, s := range sides {
			n, err := countRecords(ctx, r.kc, r.topicsOf(s))
			if err != nil {
				// The shared broker may be restarting (other tests stop
				// it): keep asking until the deadline.
				counts = append(counts, fmt.Sprintf("%s ? (%v)", s.name, err))
				done = false
				continue
			}
			counts = append(counts, fmt.Sprintf("%s %d", s.name, n))
			if n < want {
				done = false
			}
			if n > want {
				return fmt.Errorf("%s wrote %d records for %d rows", s.name, n, want)
			}
		}
		if done {
			r.logf("compare: all sides delivered %d records", want)
			return nil
		}
		if err := cp.failed(ctx); err != nil {
			return err
		}
		for _, p := range relays {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not all records after %s: %s", r.cfg.timeout, strings.Join(counts, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// drainPhase: a backlog of drainN rows (one per transaction) held by
// two slots per round, all created before it is written. In each round
// the relay drains one slot and Connect with the router another, each
// alone on the machine, measured from its process start; the order
// alternates from round to round. Then the first round's records of both
// are compared like the comparison's.
func (r *run) drainPhase(ctx context.Context) error {
	if r.cfg.connectOnly {
		return errors.New("-connect-only runs the compare phase only")
	}
	dir := filepath.Join(r.cfg.logDir, "drain")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	table := r.schema + ".outbox_drain"
	pub := r.id + "_drain"
	type round struct {
		dbz, rel           side
		dbzSlot, relaySlot string
	}
	rounds := make([]round, r.cfg.drainRounds)
	for i := range rounds {
		n := strconv.Itoa(i + 1)
		rounds[i] = round{
			dbz:     side{"debezium-drain-" + n, "." + r.id + "-drain" + n + "-dbz"},
			rel:     side{"relay-drain-" + n, "." + r.id + "-drain" + n + "-relay"},
			dbzSlot: r.id + "_drain" + n + "_dbz", relaySlot: r.id + "_drain" + n + "_relay",
		}
	}
	if err := r.migrate(ctx, table, rounds[0].relaySlot, pub, false); err != nil {
		return err
	}
	r.slots = append(r.slots, rounds[0].relaySlot)
	r.pubs = append(r.pubs, pub)
	for i, rd := range rounds {
		if err := r.createSlot(ctx, rd.dbzSlot); err != nil {
			return err
		}
		if i > 0 {
			if err := r.createSlot(ctx, rd.relaySlot); err != nil {
				return err
			}
		}
		if err := r.createTopics(ctx, rd.dbz, rd.rel); err != nil {
			return err
		}
	}
	t := time.Now()
	if err := insertBacklog(ctx, r.pool, table, r.cfg.drainN); err != nil {
		return err
	}
	r.logf("drain: backlog of %d rows (one per transaction) committed in %.1f s; %d rounds", r.cfg.drainN, time.Since(t).Seconds(), len(rounds))
	want := int64(r.cfg.drainN)

	for i, rd := range rounds {
		relayFirst := i%2 == 0
		var relay, connect *drainResult
		for k := range 2 {
			var err error
			if (k == 0) == relayFirst {
				relay, err = r.drainRelay(ctx, dir, i+1, table, pub, rd.relaySlot, rd.rel, want)
			} else {
				connect, err = r.drainConnect(ctx, dir, i+1, table, pub, rd.dbzSlot, rd.dbz, want)
			}
			if err != nil {
				return err
			}
		}
		r.drains = append(r.drains, [2]*drainResult{relay, connect})
		if err := r.exactly(ctx, want, rd.dbz, rd.rel); err != nil {
			return err
		}
	}
	r.printDrain()

	ids, err := r.outboxRows(ctx, table)
	if err != nil {
		return err
	}
	c, err := r.compareSides(ctx, "drain backlog, payload as stored", rounds[0].dbz, rounds[0].rel, ids)
	if err != nil {
		return err
	}
	r.compares = append(r.compares, c)
	return r.dropSlots(ctx)
}

// drainRelay measures the relay draining slot.
func (r *run) drainRelay(ctx context.Context, dir string, round int, table, pub, slot string, s side, want int64) (*drainResult, error) {
	name := fmt.Sprintf("relay-%d", round)
	rp, err := r.startRelay(dir, relaySide{name: name, table: table, slot: slot, pub: pub, template: r.relayTemplate(s), format: r.relayFormat()})
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, rp)
	samples, misses, err := sampleDrain(ctx, r.kc, rp, rp.started, r.topicsOf(s), want, r.cfg.interval, r.cfg.timeout, nil)
	if err != nil {
		return nil, fmt.Errorf("relay, round %d: %w", round, err)
	}
	r.brokerMisses(name, misses)
	d := &drainResult{Name: "outbox-relay", Events: want, Samples: samples}
	r.stopped(rp, 40*time.Second)
	r.logf("drain round %d: relay done in %.2f s", round, d.stats().AllEvents.Seconds())
	return d, nil
}

// drainConnect measures Connect with the router draining slot.
func (r *run) drainConnect(ctx context.Context, dir string, round int, table, pub, slot string, s side, want int64) (*drainResult, error) {
	cp, err := r.startConnect(filepath.Join(dir, fmt.Sprintf("connect-%d", round)), []connector{r.connectorFor(s, table, slot, pub, false, false)})
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, cp.proc)
	samples, misses, err := sampleDrain(ctx, r.kc, cp, cp.started, r.topicsOf(s), want, r.cfg.interval, r.cfg.timeout, cp.failed)
	if err != nil {
		return nil, fmt.Errorf("the Connect worker, round %d: %w", round, err)
	}
	r.brokerMisses(fmt.Sprintf("Kafka Connect %d", round), misses)
	d := &drainResult{Name: "Debezium (Kafka Connect)", Events: want, Samples: samples}
	r.stopped(cp.proc, 60*time.Second)
	r.logf("drain round %d: Kafka Connect done in %.2f s", round, d.stats().AllEvents.Seconds())
	return d, nil
}

// exactly checks that each side's topics hold want records, no more (a
// drain stops counting at want).
func (r *run) exactly(ctx context.Context, want int64, sides ...side) error {
	for _, s := range sides {
		n, err := retry(ctx, func() (int64, error) { return countRecords(ctx, r.kc, r.topicsOf(s)) })
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%s wrote %d records for %d rows", s.name, n, want)
		}
	}
	return nil
}

// relayFormat is the relay's --record-format value ("" leaves the flag
// out: a relay without it writes native records).
func (r *run) relayFormat() string {
	if !r.feat.recordFormat {
		return ""
	}
	return r.cfg.recordFormat
}

// stopped stops p (SIGTERM, SIGKILL after grace). A process that had
// to be killed is noted, not fatal: what it was measured for is done, and
// on the shared stack a broker restarted by other tests can hold up
// Connect's producer on its way out.
func (r *run) stopped(p *proc, grace time.Duration) {
	if err := p.stop(grace); err != nil {
		r.note(fmt.Sprintf("Warning: %v (log: %s).", err, p.logPath))
	}
}

// brokerMisses notes a drain during which the broker did not answer
// (another test restarted it): its numbers include that outage.
func (r *run) brokerMisses(who string, misses int) {
	if misses > 0 {
		r.note(fmt.Sprintf("The broker did not answer %d of the %s drain's offset readings (restarted by other work on the shared stack?): that drain's numbers include the outage.", misses, who))
	}
}

func (r *run) note(s string) {
	r.notes = append(r.notes, s)
	r.logf("note: %s", s)
}

// finish fails the run on an unexplained difference or an undocumented
// explained one, and writes the report.
func (r *run) finish() error {
	var errs []error
	for _, c := range r.compares {
		if !c.ok() {
			errs = append(errs, fmt.Errorf("%s: %d unexplained differences in %d compared records", c.Profile, len(c.Unexplained), c.Matched))
		}
	}
	if r.cfg.interopDoc != "" && len(r.compares) > 0 {
		doc, err := os.ReadFile(r.cfg.interopDoc)
		if err != nil {
			errs = append(errs, err)
		} else {
			for _, c := range r.compares {
				for _, e := range c.explainedKinds() {
					if !strings.Contains(string(doc), e.Kind) {
						errs = append(errs, fmt.Errorf("%s: explained difference %q is not documented in %s", c.Profile, e.Kind, r.cfg.interopDoc))
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.host.loadEnd = loadAvg()
	if r.cfg.report != "" && len(r.drains) > 0 && len(r.compares) > 0 {
		if err := updateReport(r.cfg.report, r.section()); err != nil {
			return err
		}
		r.logf("wrote the interop section of %s", r.cfg.report)
	}
	r.logf("PASS")
	return nil
}

// dropSlots drops the slots of the phase (their processes have stopped).
func (r *run) dropSlots(ctx context.Context) error {
	if r.cfg.keep {
		return nil
	}
	var errs []error
	for _, s := range r.slots {
		errs = append(errs, dropSlot(ctx, r.pool, s))
	}
	r.slots = nil
	return errors.Join(errs...)
}

// dropSlot drops a slot, waiting up to 10 s for its walsender to end.
func dropSlot(ctx context.Context, pool *pgxpool.Pool, name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("drop slot %s: %w", name, err)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cleanup stops what still runs and, unless -keep, drops the slots,
// publications and schema and deletes the topics.
func (r *run) cleanup() error {
	var errs []error
	for _, p := range r.procs {
		if err := p.stop(60 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r.cfg.keep {
		r.logf("kept: schema %s, slots %v, publications %v, topics %v", r.schema, r.slots, r.pubs, r.topics)
		return errors.Join(errs...)
	}
	errs = append(errs, r.dropSlots(ctx))
	for _, p := range r.pubs {
		if _, err := r.pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{p}.Sanitize()); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := r.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{r.schema}.Sanitize()+` CASCADE`); err != nil {
		errs = append(errs, err)
	}
	_, err := retry(ctx, func() (struct{}, error) { return struct{}{}, deleteTopics(ctx, r.kc, r.topics) })
	errs = append(errs, err)
	return errors.Join(errs...)
}

// retry calls f up to 5 times, 3 s apart, while it fails: the shared
// broker may be restarting (other tests stop and start it).
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var v T
	var err error
	for i := range 5 {
		if v, err = f(); err == nil {
			return v, nil
		}
		if i < 4 {
			select {
			case <-ctx.Done():
				return v, ctx.Err()
			case <-time.After(3 * time.Second):
			}
		}
	}
	return v, err
}

// hostInfo is the machine and versions the report states.
type hostInfo struct {
	cpus      int
	model     string
	loadStart string
	loadEnd   string
	postgres  string
	java      string
	relay     string
	commit    string
	goVersion string
}

func readHost(ctx context.Context, r *run) hostInfo {
	h := hostInfo{cpus: numCPU(), model: cpuModel(), loadStart: loadAvg(), goVersion: goVersion()}
	_ = r.pool.QueryRow(ctx, `SHOW server_version`).Scan(&h.postgres)
	if out, err := exec.CommandContext(ctx, r.cfg.java, "-version").CombinedOutput(); err == nil {
		h.java = firstLine(string(out))
	}
	if out, err := exec.CommandContext(ctx, r.cfg.relay, "version").CombinedOutput(); err == nil {
		// "outbox-relay v1.2.3 (revision …)": the version.
		if f := strings.Fields(firstLine(string(out))); len(f) >= 2 {
			h.relay = f[1]
		}
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		h.commit = strings.TrimSpace(string(out))
	}
	return h
}
