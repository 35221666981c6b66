//go:build integration

// Package integration holds the end-to-end tests of outbox-relay against a real
// PostgreSQL 15 and a real Kafka (see docs/design.md, scripts/stack.sh).
//
// Run with:
//
//	eval "$(scripts/stack.sh env)"
//	go test -tags integration -count=1 -v ./integration/
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/relay"
)

var (
	// relayBin is the outbox-relay binary built once by TestMain.
	relayBin string
	// repoRoot is the module root (where go.mod lives).
	repoRoot string
	// databaseURL and kafkaBrokers come from OUTBOX_RELAY_DATABASE_URL and
	// OUTBOX_RELAY_KAFKA_BROKERS.
	databaseURL  string
	kafkaBrokers []string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	databaseURL = os.Getenv("OUTBOX_RELAY_DATABASE_URL")
	brokers := os.Getenv("OUTBOX_RELAY_KAFKA_BROKERS")
	if databaseURL == "" || brokers == "" {
		fmt.Fprintln(os.Stderr, "integration: OUTBOX_RELAY_DATABASE_URL and OUTBOX_RELAY_KAFKA_BROKERS must be set "+
			"(run `make integration`, or `eval \"$(scripts/stack.sh env)\"` after `scripts/stack.sh up`)")
		return 1
	}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			kafkaBrokers = append(kafkaBrokers, b)
		}
	}

	root, err := findRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	repoRoot = root

	tmp, err := os.MkdirTemp("", "outbox-relay-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if os.Getenv("OUTBOX_RELAY_IT_HARNESS_ONLY") == "1" {
		// Only the harness self-tests (TestHarness*) can run: no binary.
		fmt.Fprintln(os.Stderr, "integration: OUTBOX_RELAY_IT_HARNESS_ONLY=1, not building outbox-relay")
	} else if err := buildRelay(filepath.Join(tmp, "outbox-relay")); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}

	// Fail early and clearly when the stack is not up.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: cannot connect to PostgreSQL at %s: %v\n", databaseURL, err)
		return 1
	}
	conn.Close(ctx)
	if err := waitKafka(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "integration: Kafka at %v not usable: %v\n", kafkaBrokers, err)
		return 1
	}
	return m.Run()
}

// buildRelay builds ./cmd/outbox-relay into path and sets relayBin. The
// testhooks tag lets the binary read test hooks such as
// OUTBOX_RELAY_TEST_STATUS_HOLD (release builds ignore them).
func buildRelay(path string) error {
	build := exec.Command("go", "build", "-tags", "testhooks", "-o", path, "./cmd/outbox-relay")
	build.Dir = repoRoot
	build.Stdout = os.Stderr
	build.Stderr = os.Stderr
	start := time.Now()
	if err := build.Run(); err != nil {
		return fmt.Errorf("building ./cmd/outbox-relay failed: %w", err)
	}
	relayBin = path
	fmt.Fprintf(os.Stderr, "integration: built %s in %s\n", path, time.Since(start).Round(time.Millisecond))
	return nil
}

// requireRelay fails the test when the binary was not built.
func requireRelay(t testing.TB) {
	t.Helper()
	if relayBin == "" {
		t.Fatal("outbox-relay binary not built (OUTBOX_RELAY_IT_HARNESS_ONLY=1)")
	}
}

// findRepoRoot locates the module root, first via `go env GOMOD`, then via the
// location of this source file.
func findRepoRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		gomod := strings.TrimSpace(string(out))
		if gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate repository root")
	}
	return filepath.Dir(filepath.Dir(file)), nil
}

func kafkaClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(kafkaBrokers...), Timeout: 10 * time.Second}
}

// waitKafka waits until the broker answers a metadata request.
func waitKafka(ctx context.Context) error {
	var last error
	for {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := kafkaClient().Metadata(mctx, &kafka.MetadataRequest{})
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// randSuffix returns 10 lowercase hex characters, usable in SQL identifiers,
// slot names and topic names.
func randSuffix() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// Ports handed out by freePort: 20000-28999, below the kernel's ephemeral
// range (32768-60999), so a port given to a relay is never taken meanwhile by
// a listener on port 0 (the proxies, the tests' own servers) of a parallel
// test; and clear of the stack's fixed ports (19092, 29192-29393, 55432...).
// Each test process starts at a random place in the range and hands out every
// port once before it wraps, so neither two tests of one process nor, almost
// always, two processes of make test's concurrent suites pick the same port.
const (
	freePortBase  = 20000
	freePortRange = 9000
)

var freePorts struct {
	sync.Mutex
	started bool
	next    int // offset in the range
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago and that
// no other test of this process was given.
func freePort(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	if !freePorts.started {
		var b [2]byte
		_, _ = rand.Read(b[:])
		freePorts.next, freePorts.started = int(b[0])<<8|int(b[1]), true
	}
	for range freePortRange {
		port := freePortBase + freePorts.next%freePortRange
		freePorts.next++
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		l.Close()
		return port
	}
	t.Fatalf("free port: none free in %d-%d", freePortBase, freePortBase+freePortRange-1)
	return 0
}

// Env is one test's isolated world: its own outbox table, publication, slot
// and topic.
type Env struct {
	t             testing.TB
	Sfx           string
	Table         string // schema-qualified: public.outbox_<sfx>
	TableName     string // outbox_<sfx>
	Slot          string // it_<sfx>
	Publication   string // it_<sfx>
	TopicTemplate string // it.<sfx>.{aggregate_type}
	AggType       string
	Topic         string // it.<sfx>.<AggType>
	Partitions    int
	DatabaseURL   string
	Brokers       []string
	DB            *DB
}

// EnvOptions tune NewEnv.
type EnvOptions struct {
	AggType    string // default "order"
	Partitions int    // default 6
	NoMigrate  bool   // don't run `outbox-relay migrate`
	NoTopic    bool   // don't pre-create the topic
}

// NewEnv creates the per-test world and registers its cleanup.
func NewEnv(t testing.TB, opts EnvOptions) *Env {
	t.Helper()
	if opts.AggType == "" {
		opts.AggType = "order"
	}
	if opts.Partitions == 0 {
		opts.Partitions = 6
	}
	sfx := randSuffix()
	e := &Env{
		t:             t,
		Sfx:           sfx,
		TableName:     "outbox_" + sfx,
		Table:         "public.outbox_" + sfx,
		Slot:          "it_" + sfx,
		Publication:   "it_" + sfx,
		TopicTemplate: "it." + sfx + ".{aggregate_type}",
		AggType:       opts.AggType,
		Topic:         "it." + sfx + "." + opts.AggType,
		Partitions:    opts.Partitions,
		DatabaseURL:   databaseURL,
		Brokers:       kafkaBrokers,
	}
	t.Logf("env: table=%s slot=%s publication=%s topic=%s", e.Table, e.Slot, e.Publication, e.Topic)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := OpenDB(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect %s: %v", databaseURL, err)
	}
	e.DB = pool
	// Registered first, so it runs last (after the relays are stopped).
	t.Cleanup(e.cleanup)

	if !opts.NoTopic {
		e.CreateTopic(ctx, e.Topic, e.Partitions)
	}
	if !opts.NoMigrate {
		e.Migrate()
	}
	return e
}

// CreateTopic creates a topic with the given partition count and the
// brokers' default replication factor and min.insync.replicas (1 and 1
// on the stack's broker, 3 and 2 on scripts/kafkacluster.sh's cluster),
// and waits until every partition has a leader.
func (e *Env) CreateTopic(ctx context.Context, topic string, partitions int) {
	e.t.Helper()
	res, err := kafkaClient().CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: -1}},
	})
	if err != nil {
		e.t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := res.Errors[topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		e.t.Fatalf("create topic %s: %v", topic, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := topicPartitions(ctx, topic)
		if err == nil && n == partitions {
			// On a cluster each broker applies the creation from the
			// metadata log on its own; requests that land on a lagging
			// one (DescribeConfigs, a consumer's first fetch) would
			// answer UNKNOWN_TOPIC_OR_PARTITION.
			if err = topicOnEveryBroker(topic, partitions); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("topic %s: want %d partitions with leaders, got %d (err %v)", topic, partitions, n, err)
		}
		// wall-clock: poll interval of a wait on the topic with a deadline
		time.Sleep(100 * time.Millisecond)
	}
}

// topicPartitions returns the number of partitions of topic that have a leader.
func topicPartitions(ctx context.Context, topic string) (int, error) {
	md, err := kafkaClient().Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, tp := range md.Topics {
		if tp.Name != topic {
			continue
		}
		if tp.Error != nil {
			return 0, tp.Error
		}
		n := 0
		for _, p := range tp.Partitions {
			if p.Error == nil && p.Leader.Host != "" {
				n++
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("topic %s not in metadata", topic)
}

// BaseEnv returns the environment (besides os.Environ without OUTBOX_RELAY_*)
// for any outbox-relay subcommand in this Env.
func (e *Env) BaseEnv() []string {
	return []string{
		"OUTBOX_RELAY_DATABASE_URL=" + e.DatabaseURL,
		"OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(e.Brokers, ","),
		"OUTBOX_RELAY_TABLE=" + e.Table,
		"OUTBOX_RELAY_PUBLICATION=" + e.Publication,
		"OUTBOX_RELAY_SLOT=" + e.Slot,
		"OUTBOX_RELAY_TOPIC_TEMPLATE=" + e.TopicTemplate,
		"OUTBOX_RELAY_LOG_LEVEL=debug",
	}
}

// processEnv merges env over os.Environ() minus any inherited OUTBOX_RELAY_*;
// later entries win.
func processEnv(env ...[]string) []string {
	m := map[string]string{}
	var order []string
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := m[k]; !ok {
			order = append(order, k)
		}
		m[k] = kv
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_RELAY_") {
			continue
		}
		add(kv)
	}
	for _, list := range env {
		for _, kv := range list {
			add(kv)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, m[k])
	}
	return out
}

// CLIResult is the outcome of a short-lived outbox-relay subcommand.
type CLIResult struct {
	Code   int
	Stdout string
	Stderr string
}

// RunCLI runs `outbox-relay args...` with the Env's environment plus extra and
// returns its exit code and output. It fails the test on timeout.
func (e *Env) RunCLI(timeout time.Duration, extra []string, args ...string) CLIResult {
	e.t.Helper()
	return runCLI(e.t, timeout, processEnv(e.BaseEnv(), extra), args...)
}

func runCLI(t testing.TB, timeout time.Duration, env []string, args ...string) CLIResult {
	t.Helper()
	requireRelay(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, relayBin, args...)
	cmd.Env = env
	cmd.Dir = repoRoot
	var stdout, stderr strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	res := CLIResult{Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("outbox-relay %s: timed out after %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, res.Stdout, tail(res.Stderr, 40))
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	default:
		t.Fatalf("outbox-relay %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// Migrate runs `outbox-relay migrate` and fails the test on a non-zero exit.
func (e *Env) Migrate() {
	e.t.Helper()
	res := e.RunCLI(60*time.Second, nil, "migrate")
	if res.Code != 0 {
		e.t.Fatalf("outbox-relay migrate: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 40))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var exists bool
	if err := e.DB.QueryRow(ctx, `select to_regclass($1) is not null`, e.Table).Scan(&exists); err != nil {
		e.t.Fatalf("check table: %v", err)
	}
	if !exists {
		e.t.Fatalf("outbox-relay migrate exited 0 but %s does not exist\nstderr:\n%s", e.Table, tail(res.Stderr, 40))
	}
}

// StartRelay starts `outbox-relay run` for this Env; extra env entries
// override the defaults.
func (e *Env) StartRelay(extra ...string) *Relay {
	e.t.Helper()
	return StartRelay(e.t, processEnv(e.BaseEnv(), []string{
		"OUTBOX_RELAY_HEARTBEAT_INTERVAL=1s",
		fmt.Sprintf("OUTBOX_RELAY_METRICS_ADDR=127.0.0.1:%d", freePort(e.t)),
	}, extra))
}

func (e *Env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t := e.t
	// Slot: wait for it to become inactive, then drop it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var active *bool
		var pid *int32
		err := e.DB.QueryRow(ctx, `select active, active_pid from pg_replication_slots where slot_name = $1`, e.Slot).Scan(&active, &pid)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			t.Logf("cleanup: query slot %s: %v", e.Slot, err)
			break
		}
		if active != nil && *active {
			if time.Now().After(deadline) && pid != nil {
				t.Logf("cleanup: slot %s still active (pid %d), terminating backend", e.Slot, *pid)
				_, _ = e.DB.Exec(ctx, `select pg_terminate_backend($1)`, *pid)
			}
			// wall-clock: poll interval of a wait for the slot to go inactive (deadline)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if _, err := e.DB.Exec(ctx, `select pg_drop_replication_slot($1)`, e.Slot); err != nil {
			t.Logf("cleanup: drop slot %s: %v", e.Slot, err)
			// wall-clock: retry interval of the slot drop (deadline)
			time.Sleep(200 * time.Millisecond)
			if time.Now().After(deadline.Add(10 * time.Second)) {
				break
			}
			continue
		}
		break
	}
	for _, stmt := range []string{
		`drop publication if exists ` + pgx.Identifier{e.Publication}.Sanitize(),
		`drop table if exists ` + pgx.Identifier{"public", e.TableName}.Sanitize(),
		`drop table if exists ` + pgx.Identifier{"public", "it_other_" + e.Sfx}.Sanitize(),
	} {
		if _, err := e.DB.Exec(ctx, stmt); err != nil {
			t.Logf("cleanup: %s: %v", stmt, err)
		}
	}
	// migrate's bookkeeping rows for this table (best effort; the layout
	// belongs to the migrations package).
	var hasLedger bool
	if err := e.DB.QueryRow(ctx, `select to_regclass('public.outbox_relay_schema_migrations') is not null`).Scan(&hasLedger); err == nil && hasLedger {
		if _, err := e.DB.Exec(ctx, `delete from public.outbox_relay_schema_migrations where table_name in ($1, $2)`, e.TableName, e.Table); err != nil {
			t.Logf("cleanup: schema migrations rows: %v", err)
		}
	}
	e.DB.Close()
	// Delete every topic of this env (the relay may have created others).
	if md, err := kafkaClient().Metadata(ctx, &kafka.MetadataRequest{}); err == nil {
		var topics []string
		for _, tp := range md.Topics {
			if strings.HasPrefix(tp.Name, "it."+e.Sfx+".") {
				topics = append(topics, tp.Name)
			}
		}
		if len(topics) > 0 {
			if _, err := kafkaClient().DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics}); err != nil {
				t.Logf("cleanup: delete topics %v: %v", topics, err)
			}
		}
	} else {
		t.Logf("cleanup: kafka metadata: %v", err)
	}
}

// Exec runs a statement on the test database and fails the test on error.
func (e *Env) Exec(sql string, args ...any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.DB.Exec(ctx, sql, args...); err != nil {
		e.t.Fatalf("exec %q: %v", sql, err)
	}
}

// Source is the relay's source on the test database: the system
// identifier, the database and the slot (relay.Source).
func (e *Env) Source() relay.Source {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := relay.Source{Slot: e.Slot}
	if err := e.DB.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database()`).
		Scan(&src.SystemID, &src.Database); err != nil {
		e.t.Fatalf("read the source: %v", err)
	}
	return src
}

// TransactionalID is the relay's default transactional id on the test
// database (relay.Config.TransactionalID).
func (e *Env) TransactionalID() string {
	return relay.Config{}.TransactionalID(e.Source())
}

// QuotedTable is the sanitized identifier of the outbox table.
func (e *Env) QuotedTable() string {
	return pgx.Identifier{"public", e.TableName}.Sanitize()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// StackCtl runs `scripts/stack.sh verb` from the repository root.
func StackCtl(t testing.TB, verb string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "scripts", "stack.sh"), verb)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/stack.sh %s: %v\n%s", verb, err, out)
	}
	t.Logf("scripts/stack.sh %s: ok (%s)", verb, strings.TrimSpace(tail(string(out), 3)))
}

// within polls cond every interval until it returns true or d passes.
func within(d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		// wall-clock: poll interval of a wait on a condition with a deadline
		time.Sleep(interval)
	}
}
