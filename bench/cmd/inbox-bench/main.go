// Command inbox-bench measures the inbox consumer (package inbox) on the
// real stack: one consumer instance applies N events of a 6-partition topic
// into PostgreSQL, once per mode, and the run reports events/s, the age of
// each event when its effect was applied, the consumer's CPU time and peak
// RSS:
//
//	mode 1  one INSERT per event, one transaction per event (BatchSize 1, Concurrency 1: the path before batching)
//	mode 2  the same Handler, batched (the defaults: BatchSize 500, BatchLinger 5ms, Concurrency = pool size)
//	mode 3  a BatchHandler: one INSERT … SELECT FROM unnest(…) per batch
//	mode 4  the seed's projection: a version-guarded UPDATE per event, one transaction per event
//	mode 5  the same Handler, batched
//	mode 6  a BatchHandler: one INSERT and one UPDATE … FROM unnest(…) per batch
//
// and mode 2 once more on N/4 events: its peak RSS must not grow with N.
//
// The consumer runs in a child process (this binary's hidden "consume"
// subcommand), so the CPU time (utime+stime from /proc/PID/stat) and the
// peak RSS (VmHWM from /proc/PID/status) are the consumer's alone. The
// parent starts the child, waits until the consumer group has assigned all
// six partitions to it, and only then produces the N records (kafka-go,
// Murmur2Balancer, acks=all), so the record timestamps are production
// times and "age at apply" is what a live consumer would see.
//
//	eval "$(scripts/stack.sh env)"
//	go -C bench run ./cmd/inbox-bench -report "$PWD/docs/benchmarks.md"
//
// (`make bench-inbox` does that; `make bench-inbox INBOX_BENCH_ARGS="-quick"`
// is a run of N = 20,000.) The report rewrites the section of
// docs/benchmarks.md between <!-- inbox-bench:start --> and
// <!-- inbox-bench:end -->. Every schema and topic the run creates is named
// inbox_bench_<run id>_… and removed at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == consumeCmd {
		os.Exit(consumeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parent's configuration.
type config struct {
	N           int
	Aggregates  int
	Modes       []int
	MemCheck    bool
	Conns       int
	Rate        int
	Quick       bool
	Report      string
	Command     string
	Args        []string
	DatabaseURL string
	Brokers     []string
	Stack       string
	LogDir      string
	PProf       bool
	Keep        bool
	Timeout     time.Duration
	ModeTimeout time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "inbox-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "inbox-bench:", err)
		return 1
	}
	defer b.close()
	res := b.run(ctx)
	b.cleanup()

	fmt.Fprint(stdout, renderTable(res))
	if cfg.Report != "" {
		if err := spliceSection(cfg.Report, renderMarkdown(res)); err != nil {
			fmt.Fprintln(stderr, "inbox-bench: report:", err)
			return 1
		}
		b.logf("report written to %s", cfg.Report)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "inbox-bench: stopped early:", context.Cause(ctx))
		return 1
	}
	if len(res.Errors) > 0 {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("inbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	var modes string
	fs.IntVar(&cfg.N, "n", 100000, "events per mode")
	fs.IntVar(&cfg.Aggregates, "aggregates", 10000, "aggregates the events belong to (event i: aggregate i mod A, version i/A + 1)")
	fs.StringVar(&modes, "modes", "1,2,3,4,5,6", "modes to run, comma-separated (see the package documentation)")
	fs.BoolVar(&cfg.MemCheck, "memcheck", true, "also run mode 2 on N/4 events (peak RSS must not grow with N)")
	fs.IntVar(&cfg.Conns, "conns", 8, "the consumer's pool size (pgxpool MaxConns; the batched modes' default Concurrency)")
	fs.IntVar(&cfg.Rate, "rate", 0, "records/s the producer offers; 0: as fast as it can (a backlog builds up behind slow modes)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke run: -n 20000 unless -n is given")
	fs.StringVar(&cfg.Report, "report", "", "markdown file whose inbox-bench section (between its markers) is rewritten; empty: stdout only")
	fs.StringVar(&cfg.Command, "command", "", "how the run was started, quoted in the report (make bench-inbox sets it); default: inbox-bench and its arguments")
	stack := benchkit.NewStackFlags(fs)
	fs.StringVar(&cfg.Stack, "stack", "../scripts/stack.sh", "stack script, read for the Kafka version")
	fs.StringVar(&cfg.LogDir, "log-dir", "", "directory for the consumers' logs and profiles (default: a new one under $TMPDIR)")
	fs.BoolVar(&cfg.PProf, "pprof", false, "CPU profile of each consumer child from its start to its last applied event (cpu-<mode>.pprof in the log directory)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the schemas and topics (debugging)")
	fs.DurationVar(&cfg.Timeout, "timeout", 60*time.Minute, "bound on the whole run")
	fs.DurationVar(&cfg.ModeTimeout, "mode-timeout", 0, "bound on one mode from the first produced record to the last applied one (default 5 min + 10 ms per event)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Quick && !set["n"] {
		cfg.N = 20000
	}
	if cfg.ModeTimeout == 0 {
		cfg.ModeTimeout = 5*time.Minute + time.Duration(cfg.N)*10*time.Millisecond
	}
	var err error
	if cfg.Modes, err = parseModes(modes); err != nil {
		return nil, fmt.Errorf("-modes: %w", err)
	}
	if cfg.DatabaseURL, cfg.Brokers, err = stack.Values(); err != nil {
		return nil, err
	}
	if cfg.N < 4 || cfg.Aggregates < 1 || cfg.Conns < 1 || cfg.Rate < 0 {
		return nil, errors.New("-n must be at least 4, -aggregates and -conns positive, -rate not negative")
	}
	cfg.Args = args
	if cfg.Command == "" {
		cfg.Command = "inbox-bench " + shellJoin(args)
	}
	if cfg.LogDir, err = benchkit.LogDir(cfg.LogDir, "inbox-bench-"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseModes reads a comma-separated list of modes 1-6, in the given order
// without repeats.
func parseModes(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || modeByNumber(v) == nil {
			return nil, fmt.Errorf("%q is not a mode (1-6)", f)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// shellJoin quotes args for a shell where needed, for the report.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.TrimSpace(strings.Join(q, " "))
}
