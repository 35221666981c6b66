package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// consumeCmd is the hidden subcommand that runs one consumer: the parent
// re-executes its own binary with it, so the consumer's CPU time and RSS
// are a process's own.
const consumeCmd = "consume"

// childMsg is one JSON line the child writes to stdout: "ready" once Run
// started, "done" when N events are applied, "error" if Run failed.
type childMsg struct {
	Event        string  `json:"event"`
	Error        string  `json:"error,omitempty"`
	Applied      int64   `json:"applied"`
	Duplicates   int64   `json:"duplicates"`
	Retries      int64   `json:"retries"`
	DeadLettered int64   `json:"dead_lettered"`
	Parked       int64   `json:"parked"`
	Batches      int64   `json:"batches"`
	FirstApply   int64   `json:"first_apply_unix_ns"`
	Done         int64   `json:"done_unix_ns"`
	AgeSamples   int64   `json:"age_samples"`
	AgeP50       float64 `json:"age_p50_s"`
	AgeP99       float64 `json:"age_p99_s"`
	AgeMax       float64 `json:"age_max_s"`
}

func consumeMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inbox-bench "+consumeCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		modeNum                                         int
		n                                               int64
		conns                                           int
		topic, schema, name, dbURL, brokers, cpuProfile string
	)
	fs.IntVar(&modeNum, "mode", 1, "mode 1-6")
	fs.Int64Var(&n, "n", 0, "events to apply before reporting done")
	fs.IntVar(&conns, "conns", 8, "pool size")
	fs.StringVar(&topic, "topic", "", "topic")
	fs.StringVar(&schema, "schema", "", "schema of the inbox and effect tables")
	fs.StringVar(&name, "name", "", "consumer name and group")
	fs.StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	fs.StringVar(&brokers, "kafka-brokers", "", "Kafka brokers")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile from the start to the N-th applied event")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	m := modeByNumber(modeNum)
	if m == nil || n <= 0 || topic == "" || schema == "" || name == "" || dbURL == "" || brokers == "" {
		fmt.Fprintln(stderr, "inbox-bench consume: -mode, -n, -topic, -schema, -name, -database-url and -kafka-brokers are required")
		return 2
	}
	out := json.NewEncoder(stdout)
	fail := func(err error) int {
		_ = out.Encode(childMsg{Event: "error", Error: err.Error()})
		fmt.Fprintln(stderr, "inbox-bench consume:", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile() // a no-op after the stop at "done"
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return fail(err)
	}
	pc.MaxConns = int32(conns)
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()

	var ages ageHist
	var first atomic.Int64
	observe := func(now time.Time, t time.Time) {
		first.CompareAndSwap(0, now.UnixNano())
		ages.observe(now.Sub(t).Seconds())
	}
	h, bh := m.handlers(schema)
	// Age at apply is taken in the handler, after its statement, just
	// before the consumer commits the transaction.
	if h != nil {
		inner := h
		h = func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
			if err := inner(ctx, tx, ev); err != nil {
				return err
			}
			observe(time.Now(), ev.Time)
			return nil
		}
	}
	if bh != nil {
		inner := bh
		bh = func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
			if err := inner(ctx, tx, evs); err != nil {
				return err
			}
			now := time.Now()
			for _, ev := range evs {
				observe(now, ev.Time)
			}
			return nil
		}
	}
	cfg := inbox.Config{
		Name: name, Brokers: strings.Split(brokers, ","), Topics: []string{topic},
		Pool: pool, Schema: schema, Handler: h, BatchHandler: bh,
	}
	if !m.Batched {
		cfg.BatchSize, cfg.Concurrency = 1, 1
	}
	c, err := inbox.New(cfg, inbox.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return fail(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()
	_ = out.Encode(childMsg{Event: "ready"})

	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.Stats().Applied < n {
		select {
		case err := <-runErr:
			if err == nil {
				err = errors.New("inbox.Consumer.Run returned before all events were applied")
			}
			return fail(err)
		case <-ctx.Done():
			stopRun()
			<-runErr
			return fail(fmt.Errorf("stopped after %d of %d events", c.Stats().Applied, n))
		case <-tick.C:
		}
	}
	done := time.Now()
	pprof.StopCPUProfile()
	st := c.Stats()
	msg := childMsg{
		Event: "done", Applied: st.Applied, Duplicates: st.Duplicates, Retries: st.Retries, DeadLettered: st.DeadLettered,
		Parked: st.Parked, Batches: st.Batches, FirstApply: first.Load(), Done: done.UnixNano(),
		AgeSamples: ages.count(), AgeP50: ages.quantile(0.50), AgeP99: ages.quantile(0.99), AgeMax: ages.maxSeen(),
	}
	_ = out.Encode(msg)
	// The parent reads /proc/<pid> now, then sends SIGTERM.
	select {
	case <-ctx.Done():
	case err := <-runErr:
		if err != nil {
			return fail(err)
		}
		return 0
	}
	stopRun()
	if err := <-runErr; err != nil {
		fmt.Fprintln(stderr, "inbox-bench consume: Run:", err)
	}
	return 0
}
