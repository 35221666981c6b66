package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
	"github.com/outbox-relay/outbox-relay/inbox"
)

// prefixBase starts the name of every schema, topic and consumer a run
// creates; the run id after it is the start time in base 36.
const prefixBase = "inbox_bench_"

type bench struct {
	cfg    *config
	logw   io.Writer
	pool   *pgxpool.Pool
	kafka  *kafka.Client
	id     string
	prefix string

	mu      sync.Mutex
	topics  []string
	schemas []string
	cleaned bool
}

func newBench(ctx context.Context, cfg *config, logw io.Writer) (*bench, error) {
	pool, err := benchkit.OpenPool(ctx, cfg.DatabaseURL, 2, "inbox-bench")
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(time.Now().Unix(), 36)
	return &bench{
		cfg: cfg, logw: logw, pool: pool,
		kafka:  benchkit.KafkaClient(cfg.Brokers),
		id:     id,
		prefix: prefixBase + id,
	}, nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.logw, "%s inbox-bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (b *bench) close() {
	b.cleanup()
	b.pool.Close()
}

// cleanup drops the run's schemas and topics unless -keep. Idempotent; on
// its own deadline so that it also works after the run's context ended.
func (b *bench) cleanup() {
	b.mu.Lock()
	if b.cleaned {
		b.mu.Unlock()
		return
	}
	b.cleaned = true
	topics, schemas := b.topics, b.schemas
	b.mu.Unlock()
	if b.cfg.Keep {
		b.logf("-keep: left schemas %v and topics %v", schemas, topics)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range schemas {
		b.dropSchema(ctx, s)
	}
	if err := benchkit.DeleteTopics(ctx, b.kafka, topics); err != nil {
		b.logf("cleanup: %v", err)
	}
}

func (b *bench) dropSchema(ctx context.Context, schema string) {
	if _, err := b.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		b.logf("cleanup: drop schema %s: %v", schema, err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.schemas {
		if s == schema {
			b.schemas = append(b.schemas[:i], b.schemas[i+1:]...)
			break
		}
	}
}

// results of a run.
type results struct {
	RunID    string        `json:"run_id"`
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
	Host     benchkit.Host `json:"host"`
	Command  string        `json:"command"`
	Config   string        `json:"config"`
	N        int           `json:"n"`
	Conns    int           `json:"conns"`
	Rate     int           `json:"rate"`
	Modes    []modeResult  `json:"modes"`
	Errors   []string      `json:"errors"`
}

// modeResult is one consumer run.
type modeResult struct {
	Mode     int    `json:"mode"`
	MemCheck bool   `json:"memcheck,omitempty"` // the N/4 run of the memory check
	Events   int    `json:"events"`
	Err      string `json:"error,omitempty"`
	// Produce: the first record handed to the writer to the last one
	// acknowledged. Apply: the first record handed to the writer to the
	// consumer's N-th applied event.
	ProduceSec float64 `json:"produce_s"`
	ApplySec   float64 `json:"apply_s"`
	CPU        float64 `json:"consumer_cpu_s"`
	PeakRSS    int64   `json:"consumer_peak_rss_bytes"`
	childMsg
	Check   string `json:"check"`
	Profile string `json:"cpuprofile,omitempty"`
}

// Rate is events/s from the first produced record to the last applied one.
func (r modeResult) Rate() float64 {
	if r.ApplySec <= 0 || r.Err != "" {
		return 0
	}
	return float64(r.Events) / r.ApplySec
}

func (r modeResult) label() string {
	if r.MemCheck {
		return fmt.Sprintf("%d (N/4)", r.Mode)
	}
	return strconv.Itoa(r.Mode)
}

func (b *bench) run(ctx context.Context) *results {
	c := b.cfg
	res := &results{
		RunID: b.id, Started: time.Now(), Host: b.hostInfo(ctx), Command: c.Command, N: c.N, Conns: c.Conns, Rate: c.Rate,
		Config: fmt.Sprintf("-n %d -aggregates %d -conns %d -rate %d -modes %s -memcheck=%t", c.N, c.Aggregates, c.Conns, c.Rate, benchkit.JoinInts(c.Modes), c.MemCheck),
	}
	b.logf("run %s: %s; consumer logs in %s", b.id, res.Config, c.LogDir)
	type job struct {
		mode     int
		n        int
		memcheck bool
	}
	var jobs []job
	for _, m := range c.Modes {
		jobs = append(jobs, job{m, c.N, false})
		if m == 2 && c.MemCheck {
			jobs = append(jobs, job{2, c.N / 4, true})
		}
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		r := b.runMode(ctx, *modeByNumber(j.mode), j.n, j.memcheck)
		if r.Err != "" {
			res.Errors = append(res.Errors, fmt.Sprintf("mode %s: %s", r.label(), r.Err))
		}
		b.logf("mode %s: %s events in %.2f s (%.0f events/s), age p50 %.3f s p99 %.3f s, CPU %.2f s, peak RSS %.1f MiB, batches %d, check: %s",
			r.label(), strconv.Itoa(r.Events), r.ApplySec, r.Rate(), r.AgeP50, r.AgeP99, r.CPU, benchkit.MiB(r.PeakRSS), r.Batches, r.Check)
		res.Modes = append(res.Modes, r)
	}
	res.Finished = time.Now()
	res.Host.LoadEnd = benchkit.LoadAvg()
	if data, err := json.MarshalIndent(res, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(c.LogDir, "results.json"), data, 0o644)
	}
	return res
}

// runMode runs one consumer child over n fresh records of a fresh topic,
// with a fresh schema and consumer name.
func (b *bench) runMode(ctx context.Context, m mode, n int, memcheck bool) (r modeResult) {
	r = modeResult{Mode: m.Num, MemCheck: memcheck, Events: n}
	suffix := fmt.Sprintf("_m%d", m.Num)
	if memcheck {
		suffix += "q"
	}
	name := b.prefix + suffix
	fail := func(err error) modeResult {
		r.Err = err.Error()
		if r.Check == "" {
			r.Check = "–"
		}
		return r
	}
	b.mu.Lock()
	b.schemas = append(b.schemas, name)
	b.mu.Unlock()
	if !b.cfg.Keep {
		defer b.dropSchema(context.WithoutCancel(ctx), name)
	}
	if err := inbox.Migrate(ctx, b.pool, name); err != nil {
		return fail(fmt.Errorf("migrate: %w", err))
	}
	if _, err := b.pool.Exec(ctx, m.setupSQL(name)); err != nil {
		return fail(fmt.Errorf("effect table: %w", err))
	}
	if err := b.createTopic(ctx, name); err != nil {
		return fail(err)
	}

	args := []string{consumeCmd, "-mode", strconv.Itoa(m.Num), "-n", strconv.Itoa(n), "-conns", strconv.Itoa(b.cfg.Conns),
		"-topic", name, "-schema", name, "-name", name,
		"-database-url", b.cfg.DatabaseURL, "-kafka-brokers", strings.Join(b.cfg.Brokers, ",")}
	if b.cfg.PProf {
		r.Profile = filepath.Join(b.cfg.LogDir, fmt.Sprintf("cpu-mode%s.pprof", strings.TrimPrefix(suffix, "_m")))
		args = append(args, "-cpuprofile", r.Profile)
	}
	ch, err := startChild(filepath.Join(b.cfg.LogDir, "consumer"+suffix+".log"), args)
	if err != nil {
		return fail(err)
	}
	defer ch.stop()
	if msg, err := ch.next(ctx, time.Minute); err != nil {
		return fail(err)
	} else if msg.Event != "ready" {
		return fail(fmt.Errorf("consumer: %s %s", msg.Event, msg.Error))
	}
	if err := b.waitAssigned(ctx, name, name, ch.alive); err != nil {
		return fail(fmt.Errorf("%w%s", err, ch.tail()))
	}
	b.logf("mode %s: consumer pid %d has all %d partitions; producing %d records", r.label(), ch.cmd.Process.Pid, benchkit.Partitions, n)

	p, err := b.produce(ctx, name, n, b.cfg.Rate)
	if err != nil {
		return fail(err)
	}
	r.ProduceSec = p.End.Sub(p.Start).Seconds()
	msg, err := ch.next(ctx, b.cfg.ModeTimeout-time.Since(p.Start))
	if err != nil {
		return fail(fmt.Errorf("%w%s", err, ch.tail()))
	}
	if msg.Event != "done" {
		return fail(fmt.Errorf("consumer: %s %s%s", msg.Event, msg.Error, ch.tail()))
	}
	// The child idles after "done" until it is told to stop: its CPU time
	// and VmHWM are those of the run, start-up included, shutdown not.
	r.CPU, err = benchkit.ProcCPU(ch.cmd.Process.Pid)
	if err == nil {
		r.PeakRSS, _, err = benchkit.ProcMem(ch.cmd.Process.Pid)
	}
	if err != nil {
		return fail(fmt.Errorf("reading the consumer's /proc entry: %w", err))
	}
	r.childMsg = msg
	r.ApplySec = time.Unix(0, msg.Done).Sub(p.Start).Seconds()
	ch.stop()
	r.Check = b.verify(ctx, m, name, n)
	if r.Check != "ok" {
		r.Err = "check failed: " + r.Check
	}
	return r
}

// verify counts what the consumer wrote: every event registered once and
// its effect applied once (the insert case), or every aggregate at the
// version it reached in the records (the projection).
func (b *bench) verify(ctx context.Context, m mode, schema string, n int) string {
	var processed int64
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, inbox.ProcessedTable}.Sanitize()+` WHERE consumer = $1`, schema).Scan(&processed); err != nil {
		return "count processed_events: " + err.Error()
	}
	var problems []string
	if processed != int64(n) {
		problems = append(problems, fmt.Sprintf("%d processed_events rows, want %d", processed, n))
	}
	if m.Projection {
		var rows, sum int64
		if err := b.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(version), 0) FROM `+m.table(schema)).Scan(&rows, &sum); err != nil {
			return "count state rows: " + err.Error()
		}
		if want := int64(min(n, b.cfg.Aggregates)); rows != want || sum != int64(n) {
			problems = append(problems, fmt.Sprintf("%d aggregates with versions summing to %d, want %d summing to %d", rows, sum, want, n))
		}
	} else {
		var rows int64
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+m.table(schema)).Scan(&rows); err != nil {
			return "count effect rows: " + err.Error()
		}
		if rows != int64(n) {
			problems = append(problems, fmt.Sprintf("%d effect rows, want %d", rows, n))
		}
	}
	if len(problems) == 0 {
		return "ok"
	}
	return strings.Join(problems, "; ")
}

// child is a running consumer process.
type child struct {
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	msgs    chan childMsg
	done    chan struct{}
	waitErr error
	once    sync.Once
}

func startChild(logPath string, args []string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start consumer: %w", err)
	}
	c := &child{cmd: cmd, log: logf, logPath: logPath, msgs: make(chan childMsg, 4), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m childMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				c.msgs <- m
			}
		}
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// next waits for the child's next message.
func (c *child) next(ctx context.Context, timeout time.Duration) (childMsg, error) {
	t := time.NewTimer(max(timeout, time.Second))
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.done:
		select {
		case m := <-c.msgs:
			return m, nil
		default:
		}
		return childMsg{}, fmt.Errorf("consumer exited: %v%s", c.waitErr, c.tail())
	case <-t.C:
		return childMsg{}, fmt.Errorf("consumer: no answer within %s", timeout.Round(time.Second))
	case <-ctx.Done():
		return childMsg{}, context.Cause(ctx)
	}
}

// alive is nil while the child runs.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("consumer exited: %v%s", c.waitErr, c.tail())
	default:
		return nil
	}
}

// stop sends SIGTERM (the consumer commits its offsets and exits), then
// SIGKILL after 30 s. Idempotent.
func (c *child) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		c.log.Close()
	})
}

// tail is the end of the child's log, for errors.
func (c *child) tail() string {
	data, err := os.ReadFile(c.logPath)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return fmt.Sprintf(" (log %s ends: %s)", c.logPath, strings.Join(lines[max(0, len(lines)-3):], " | "))
}

// hostInfo is the machine and versions of the run: the Kafka version the
// stack script pins, "?" for a CPU model /proc/cpuinfo does not name, and
// uncommitted changes other than to the report itself.
func (b *bench) hostInfo(ctx context.Context) benchkit.Host {
	h := benchkit.ReadHost(ctx, b.pool, stackKafkaVersion(b.cfg.Stack), b.cfg.Report)
	h.CPUModel = cmp.Or(h.CPUModel, "?")
	return h
}
