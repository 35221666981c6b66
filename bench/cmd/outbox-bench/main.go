// Command outbox-bench measures outbox-relay against ceilings taken in the
// same run on the same machine: pg_recvlogical draining the same WAL
// through a second pgoutput slot, and Kafka's own ProducerPerformance. It
// also measures commit-to-ack latency at fixed offered rates, the relay's
// peak RSS and CPU per event, prints a markdown report with PASS/FAIL
// lines for the targets, and draws a PNG.
//
//	eval "$(scripts/stack.sh env)"
//	go build -o bin/outbox-relay ./cmd/outbox-relay
//	go -C bench run ./cmd/outbox-bench -report "$PWD/docs/benchmarks.md" -png "$PWD/docs/benchmarks.png"
//
// (`make bench` does exactly that; `make bench BENCH_ARGS="-n 20000 -quick"`
// is a run of about a minute.) -delivery and -formats run every drain and
// latency measurement once per relay variant, interleaved, and compare
// them side by side; a registry format (-formats avro,protobuf) needs the
// stack's schema registry (-schema-registry-url, by default
// $TEST_SCHEMA_REGISTRY_URL). Every object the bench creates (a schema,
// slots, publications, topics, registry subjects) carries the run id and
// is removed at the end, also after an error or Ctrl-C.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

type config struct {
	N           int
	Modes       []int
	Rates       []int
	LatencyTx   []int // events per transaction of the latency windows
	Duration    time.Duration
	BigTx       int
	Parallel    int
	Quick       bool
	Phases      map[string]bool
	RelayBin    string
	PGBin       string
	Stack       string
	Report      string
	PNG         string
	DatabaseURL string
	Brokers     []string
	KafkaBatch  int
	KafkaRate   int
	Timeout     time.Duration
	Keep        bool
	Strict      bool
	CleanupOnly bool
	LogDir      string
	PProf       bool
	Warmup      bool
	Deliveries  []string // relay --delivery of each run of drain and latency, interleaved
	Formats     []string // relay --record-format of each run of drain and latency, interleaved
	RegistryURL string   // the schema registry of the registry formats (Confluent API)
	Rounds      int      // repetitions of drain and latency, variants interleaved
}

var allPhases = []string{"drain", "kafka", "latency", "bigtx"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "outbox-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outbox-bench:", err)
		return 1
	}
	defer b.close()
	if cfg.CleanupOnly {
		b.dropStale(ctx, 0)
		return 0
	}
	b.dropStale(ctx, cfg.Timeout+5*time.Minute)

	if cfg.PProf {
		// The bench's own CPU (writers, consumers) shares the machine
		// with what it measures; its profile shows what it costs.
		if f, err := os.Create(filepath.Join(cfg.LogDir, "cpu-bench.pprof")); err == nil {
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err == nil {
				defer pprof.StopCPUProfile() // runs before f.Close
			}
		}
	}
	res := b.run(ctx)
	b.cleanup()

	if cfg.PNG != "" {
		if err := drawPNG(res, cfg.PNG); err != nil {
			res.Notes = append(res.Notes, "plot: "+err.Error())
			b.logf("plot: %v", err)
		} else {
			res.PNGPath = cfg.PNG
		}
	}
	md := renderMarkdown(res, cfg)
	fmt.Fprint(stdout, md)
	if cfg.Report != "" {
		if err := spliceReport(cfg.Report, md, res); err != nil {
			fmt.Fprintln(stderr, "outbox-bench: report:", err)
			return 1
		}
		b.logf("report written to %s", cfg.Report)
	}
	if err := writeJSON(filepath.Join(cfg.LogDir, "results.json"), res); err == nil {
		b.logf("raw results and logs in %s", cfg.LogDir)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "outbox-bench: stopped early:", context.Cause(ctx))
		return 1
	}
	if cfg.Strict && !res.allPass() {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("outbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	var modes, rates, latencyTx, phases, delivery, formats string
	fs.IntVar(&cfg.N, "n", 200000, "events preloaded per drain mode")
	fs.StringVar(&modes, "modes", "1,10", "events per transaction of the drain modes, comma-separated")
	fs.StringVar(&rates, "rates", "1000,5000,20000", "offered rates (events/s) of the latency phase")
	fs.StringVar(&latencyTx, "latency-tx", "1,10", "events per transaction of the latency windows, comma-separated (every rate runs once per size)")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "length of each latency window")
	fs.IntVar(&cfg.BigTx, "bigtx", 1000000, "rows of the single large transaction of the memory phase")
	fs.IntVar(&cfg.Parallel, "preload-conns", 2, "connections preloading the backlog")
	fs.BoolVar(&cfg.Quick, "quick", false, "short run: 5 s windows at 1000 and 5000 events/s, a 100,000-row large transaction")
	fs.StringVar(&phases, "phases", strings.Join(allPhases, ","), "phases to run: "+strings.Join(allPhases, ","))
	fs.StringVar(&cfg.RelayBin, "relay", "bin/outbox-relay", "outbox-relay binary (go build -o bin/outbox-relay ./cmd/outbox-relay)")
	fs.StringVar(&cfg.PGBin, "pg-bin", "/usr/lib/postgresql/15/bin", "directory of pg_recvlogical")
	fs.StringVar(&cfg.Stack, "stack", "scripts/stack.sh", "stack script (runs Kafka's ProducerPerformance via kafka-class)")
	fs.StringVar(&cfg.Report, "report", "", "markdown file whose generated section (between the markers) is replaced")
	fs.StringVar(&cfg.PNG, "png", "", "PNG plot to write")
	stack := benchkit.NewStackFlags(fs)
	fs.IntVar(&cfg.KafkaBatch, "kafka-batch-size", 921600, "ProducerPerformance batch.size (the relay's --max-batch-bytes default)")
	fs.IntVar(&cfg.KafkaRate, "kafka-rate", 5000, "fixed rate of the second ProducerPerformance run (latency ceiling); 0 skips it")
	fs.DurationVar(&cfg.Timeout, "timeout", 40*time.Minute, "bound on the whole run")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the schema, slots, publications and topics (debugging; the ceiling slot is always dropped)")
	fs.BoolVar(&cfg.Strict, "strict", false, "exit 1 when a target FAILs")
	fs.BoolVar(&cfg.CleanupOnly, "cleanup", false, "only drop leftovers of earlier runs (outbox_bench_* slots, publications, schemas, topics) and exit")
	fs.BoolVar(&cfg.Warmup, "warmup", true, "warm the broker up with ProducerPerformance before the drains when -phases has no kafka phase (which warms it)")
	fs.BoolVar(&cfg.PProf, "pprof", false, "save CPU profiles of the relay during each drain (cpu-drain-m<mode>.pprof) and CPU and allocation profiles for each latency window (cpu-<rate>-tx<size>.pprof, allocs-<rate>-tx<size>.pprof) in the log directory")
	fs.StringVar(&delivery, "delivery", deliveryALO, "the relay's --delivery: at-least-once, exactly-once, or both (each drain and latency run once per delivery, interleaved, and a side-by-side table)")
	fs.StringVar(&formats, "formats", formatNative, "the relay's --record-format, comma-separated: "+strings.Join(allFormats, ",")+
		" (each drain and latency run once per format, interleaved, and a side-by-side table; a registry format's relay encodes with a schema the bench registers under <topic>-value, version 1)")
	fs.StringVar(&cfg.RegistryURL, "schema-registry-url", cmp.Or(os.Getenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL"), os.Getenv("TEST_SCHEMA_REGISTRY_URL")),
		"Confluent-compatible schema registry API of the registry formats (default $OUTBOX_RELAY_SCHEMA_REGISTRY_URL, else $TEST_SCHEMA_REGISTRY_URL)")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "repeat the drain and latency phases this many times (deliveries and formats interleaved in each round: A, B, A, B …)")
	fs.StringVar(&cfg.LogDir, "log-dir", "", "directory for relay logs and raw results (default: a new one under $TMPDIR)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Quick {
		if !set["rates"] {
			rates = "1000,5000"
		}
		if !set["duration"] {
			cfg.Duration = 5 * time.Second
		}
		if !set["bigtx"] {
			cfg.BigTx = 100000
		}
		if !set["timeout"] {
			cfg.Timeout = 10 * time.Minute
		}
	}
	var err error
	if cfg.Modes, err = intList(modes); err != nil {
		return nil, fmt.Errorf("-modes: %w", err)
	}
	if cfg.Rates, err = intList(rates); err != nil {
		return nil, fmt.Errorf("-rates: %w", err)
	}
	if cfg.LatencyTx, err = intList(latencyTx); err != nil {
		return nil, fmt.Errorf("-latency-tx: %w", err)
	}
	cfg.Phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !contains(allPhases, p) {
			return nil, fmt.Errorf("-phases: unknown phase %q (want %s)", p, strings.Join(allPhases, ","))
		}
		cfg.Phases[p] = true
	}
	if cfg.DatabaseURL, cfg.Brokers, err = stack.Values(); err != nil {
		return nil, err
	}
	switch {
	case cfg.N <= 0 || cfg.BigTx < 0 || cfg.Parallel <= 0:
		return nil, errors.New("-n and -preload-conns must be positive, -bigtx not negative")
	case cfg.Rounds < 1:
		return nil, errors.New("-rounds must be at least 1")
	case cfg.Duration < time.Second:
		return nil, errors.New("-duration must be at least 1s")
	}
	switch delivery {
	case deliveryALO, deliveryEOS:
		cfg.Deliveries = []string{delivery}
	case "both":
		cfg.Deliveries = []string{deliveryALO, deliveryEOS}
	default:
		return nil, fmt.Errorf("-delivery: %q is not at-least-once, exactly-once or both", delivery)
	}
	if cfg.Formats, err = parseFormats(formats); err != nil {
		return nil, fmt.Errorf("-formats: %w", err)
	}
	if len(cfg.registryFormats()) > 0 && cfg.RegistryURL == "" {
		return nil, errors.New(`-formats ` + strings.Join(cfg.registryFormats(), ",") + ` needs -schema-registry-url (or TEST_SCHEMA_REGISTRY_URL: eval "$(scripts/stack.sh env)")`)
	}
	if cfg.LogDir, err = benchkit.LogDir(cfg.LogDir, "outbox-bench-"); err != nil {
		return nil, err
	}
	return cfg, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
