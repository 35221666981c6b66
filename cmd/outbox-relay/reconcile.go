package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/migrations"
)

const reconcileSummary = `Compares the events committed to the outbox table in a time window with the
records in Kafka (read from the topics by timestamp) and, with --consumer, with
that consumer's inbox (processed_events). Prints counts per event type, lists
what is missing, and exits 3 when anything is missing (0 when nothing is, 1 on
errors). Memory is bounded: Kafka's event ids are streamed into a temporary
table and compared in SQL; the consumer is checked in chunks.`

// errMissing makes the command exit 3: the comparison found missing events.
var errMissing = errors.New("events are missing")

// reconcileOptions are reconcile's own flags.
type reconcileOptions struct {
	since, settle  time.Duration
	consumer       string
	consumerURL    string
	consumerSchema string
	aggregateType  string
	maxList        int
	readTimeout    time.Duration
}

func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o reconcileOptions
	cfg, rest, err := parseWith("reconcile", "", reconcileSummary, args, scopeDB|scopeKafka, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&o.since, "since", 0, "window: events committed to the outbox in the last DURATION (required), e.g. 1h")
		fs.DurationVar(&o.settle, "settle", 30*time.Second, "ignore events committed in the last DURATION: they may still be in flight")
		fs.StringVar(&o.consumer, "consumer", "", "also check this inbox consumer's processed_events")
		fs.StringVar(&o.consumerURL, "consumer-database-url", "", "the consumer's database (default: --database-url)")
		fs.StringVar(&o.consumerSchema, "consumer-schema", "public", "schema of the consumer's inbox tables")
		fs.StringVar(&o.aggregateType, "aggregate-type", "", "only events of this aggregate_type (e.g. the ones the consumer subscribes to)")
		fs.IntVar(&o.maxList, "max-list", 50, "most missing events listed per comparison (all are counted)")
		fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "give up on a partition that yields no record for this long")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, rest)
	}
	var errs []error
	if o.since <= 0 {
		errs = append(errs, errors.New("--since is required: a positive duration such as 1h"))
	}
	if o.settle < 0 || o.settle >= o.since && o.since > 0 {
		errs = append(errs, fmt.Errorf("--settle %s: use 0 or more, less than --since", o.settle))
	}
	if o.maxList < 0 || o.readTimeout <= 0 {
		errs = append(errs, errors.New("--max-list must not be negative and --read-timeout must be positive"))
	}
	if o.consumer == "" && (o.consumerURL != "") {
		errs = append(errs, errors.New("--consumer-database-url needs --consumer"))
	}
	if err := errors.Join(errs...); err != nil {
		return configError{err}
	}
	if o.consumerURL == "" {
		o.consumerURL = cfg.DatabaseURL
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	r := &reconciler{cfg: cfg, o: o, pool: pool, out: stdout}
	return r.run(ctx)
}

// reconciler holds one reconcile run.
type reconciler struct {
	cfg  *config
	o    reconcileOptions
	pool *pgxpool.Pool
	out  io.Writer

	from, to time.Time // window of created_at, from the database's clock
	records  int64     // Kafka records read
}

// typeCounts are the per event type results.
type typeCounts struct {
	committed, inKafka                   int64
	processed, deadLettered, notConsumed int64
}

func (r *reconciler) run(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Release()
	table := r.cfg.table.Quoted()
	if err := conn.QueryRow(ctx, `SELECT now() - make_interval(secs => $1), now() - make_interval(secs => $2)`,
		r.o.since.Seconds(), r.o.settle.Seconds()).Scan(&r.from, &r.to); err != nil {
		return fmt.Errorf("read the clock: %w", err)
	}
	where := `o.created_at >= $1 AND o.created_at < $2 AND ($3 = '' OR o.aggregate_type = $3)`
	wargs := []any{r.from, r.to, r.o.aggregateType}

	// Topics the window's events went to.
	rows, err := conn.Query(ctx, `SELECT DISTINCT aggregate_type, event_type FROM `+table+` o WHERE `+where, wargs...)
	if err != nil {
		return fmt.Errorf("read %s: %w (run \"outbox-relay migrate\" if it does not exist)", r.cfg.table, err)
	}
	topicSet := map[string]bool{}
	for rows.Next() {
		var at, et string
		if err := rows.Scan(&at, &et); err != nil {
			return err
		}
		topicSet[r.cfg.template.Render(at, et)] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", r.cfg.table, err)
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	sort.Strings(topics)

	// Kafka's event ids go into a temporary table on this connection.
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE reconcile_seen (event_id uuid NOT NULL)`); err != nil {
		return fmt.Errorf("create temporary table: %w", err)
	}
	for _, topic := range topics {
		if err := r.readTopic(ctx, conn.Conn(), topic); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX ON reconcile_seen (event_id); ANALYZE reconcile_seen`); err != nil {
		return fmt.Errorf("index temporary table: %w", err)
	}

	counts := map[string]*typeCounts{}
	get := func(et string) *typeCounts {
		if counts[et] == nil {
			counts[et] = &typeCounts{}
		}
		return counts[et]
	}
	rows, err = conn.Query(ctx, `SELECT o.event_type, count(*),
		count(*) FILTER (WHERE EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id))
		FROM `+table+` o WHERE `+where+` GROUP BY 1`, wargs...)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	for rows.Next() {
		var et string
		var c, k int64
		if err := rows.Scan(&et, &c, &k); err != nil {
			return err
		}
		tc := get(et)
		tc.committed, tc.inKafka = c, k
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	missingKafka, err := r.listMissingKafka(ctx, conn.Conn(), where, wargs)
	if err != nil {
		return err
	}
	var missingConsumer []string
	if r.o.consumer != "" {
		if missingConsumer, err = r.checkConsumer(ctx, conn.Conn(), where, wargs, get); err != nil {
			return err
		}
	}
	return r.report(counts, missingKafka, missingConsumer)
}

// readTopic streams the event ids of topic's records from the window's
// start to the current end of each partition into reconcile_seen.
func (r *reconciler) readTopic(ctx context.Context, conn *pgx.Conn, topic string) error {
	client, closeClient := r.cfg.kafkaClient("outbox-relay-reconcile", 10*time.Second)
	defer closeClient()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("kafka metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil {
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return nil // no topic: every event of it is missing
	}
	// Record timestamps are commit times, never before created_at; a minute
	// of slack covers clock differences between the relay and PostgreSQL.
	at := r.from.Add(-time.Minute)
	req := func(last bool) map[string][]kafka.OffsetRequest {
		rs := make([]kafka.OffsetRequest, len(parts))
		for i, p := range parts {
			if last {
				rs[i] = kafka.LastOffsetOf(p)
			} else {
				rs[i] = kafka.TimeOffsetOf(p, at)
			}
		}
		return map[string][]kafka.OffsetRequest{topic: rs}
	}
	startRes, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req(false)})
	if err != nil {
		return fmt.Errorf("kafka offsets of %s by time: %w", topic, err)
	}
	endRes, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req(true)})
	if err != nil {
		return fmt.Errorf("kafka end offsets of %s: %w", topic, err)
	}
	end := map[int]int64{}
	for _, po := range endRes.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("kafka end offset of %s/%d: %w", topic, po.Partition, po.Error)
		}
		end[po.Partition] = po.LastOffset
	}
	for _, po := range startRes.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("kafka offset of %s/%d at %s: %w", topic, po.Partition, at.Format(time.RFC3339), po.Error)
		}
		start := int64(-1)
		for off := range po.Offsets {
			if off >= 0 && (start < 0 || off < start) {
				start = off
			}
		}
		if start < 0 || start >= end[po.Partition] {
			continue // nothing written since the window's start
		}
		if err := r.readPartition(ctx, conn, topic, po.Partition, start, end[po.Partition]); err != nil {
			return err
		}
	}
	return nil
}

// readPartition copies the event ids of [start, end) into reconcile_seen in
// chunks, so memory does not depend on the window's size.
func (r *reconciler) readPartition(ctx context.Context, conn *pgx.Conn, topic string, partition int, start, end int64) error {
	rd := r.cfg.kafkaReader("outbox-relay-reconcile", kafka.ReaderConfig{
		Topic: topic, Partition: partition,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 250 * time.Millisecond, QueueCapacity: 100,
	})
	defer rd.Close()
	if err := rd.SetOffset(start); err != nil {
		return fmt.Errorf("kafka %s/%d: %w", topic, partition, err)
	}
	const chunk = 10000
	batch := make([][]any, 0, chunk)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"reconcile_seen"}, []string{"event_id"}, pgx.CopyFromRows(batch)); err != nil {
			return fmt.Errorf("store event ids: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, r.o.readTimeout)
		m, err := rd.ReadMessage(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("kafka %s/%d: reading offset %d of [%d, %d): %w", topic, partition, rd.Offset(), start, end, err)
		}
		r.records++
		for _, h := range m.Headers {
			if h.Key == "event_id" {
				if id, err := uuid.ParseBytes(h.Value); err == nil {
					batch = append(batch, []any{id})
				}
				break
			}
		}
		if len(batch) == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
		if m.Offset >= end-1 {
			return flush()
		}
	}
}

// listMissingKafka returns up to maxList lines describing events of the
// window that no Kafka record carries, with the relay's dead-letter status
// when it has one.
func (r *reconciler) listMissingKafka(ctx context.Context, conn *pgx.Conn, where string, wargs []any) ([]string, error) {
	dl := migrations.DeadLetterTable(r.cfg.table)
	var hasDL bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, dl.Quoted()).Scan(&hasDL); err != nil {
		return nil, err
	}
	status := `''`
	args := append(append([]any(nil), wargs...), r.o.maxList)
	if hasDL {
		args = append(args, r.cfg.table.String())
		status = `coalesce((SELECT d.status FROM ` + dl.Quoted() + ` d WHERE d.outbox_table = $5 AND d.event_id = o.event_id::text), '')`
	}
	rows, err := conn.Query(ctx, `SELECT o.event_id::text, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.event_type, o.created_at, `+status+`
		FROM `+r.cfg.table.Quoted()+` o WHERE `+where+` AND NOT EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id)
		ORDER BY o.created_at, o.event_id LIMIT $4`, args...)
	if err != nil {
		return nil, fmt.Errorf("list missing: %w", err)
	}
	var out []string
	for rows.Next() {
		var id, at, aid, et, st string
		var v int64
		var created time.Time
		if err := rows.Scan(&id, &at, &aid, &v, &et, &created, &st); err != nil {
			return nil, err
		}
		line := fmt.Sprintf("%s  %s %s v%d  %s  committed %s", id, at, aid, v, et, created.UTC().Format(time.RFC3339))
		if st != "" {
			line += "  (relay dead-letter: " + st + ")"
		}
		out = append(out, line)
	}
	return out, rows.Err()
}

// checkConsumer streams the window's events that reached Kafka and looks
// them up in the consumer's inbox in chunks.
func (r *reconciler) checkConsumer(ctx context.Context, conn *pgx.Conn, where string, wargs []any, get func(string) *typeCounts) ([]string, error) {
	cpool, err := pgxpool.New(ctx, r.o.consumerURL)
	if err != nil {
		return nil, configError{fmt.Errorf("--consumer-database-url: %w", err)}
	}
	defer cpool.Close()
	processed := pgx.Identifier{r.o.consumerSchema, inbox.ProcessedTable}.Sanitize()
	dead := pgx.Identifier{r.o.consumerSchema, inbox.DeadLetterTable}.Sanitize()
	var ok bool
	if err := cpool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, processed, dead).Scan(&ok); err != nil {
		return nil, fmt.Errorf("consumer database: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("consumer database has no %s or %s (wrong --consumer-schema or --consumer-database-url?)", processed, dead)
	}
	rows, err := conn.Query(ctx, `SELECT o.event_id::text, o.event_type, o.aggregate_id, o.aggregate_version FROM `+r.cfg.table.Quoted()+` o
		WHERE `+where+` AND EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id)`, wargs...)
	if err != nil {
		return nil, fmt.Errorf("compare with consumer: %w", err)
	}
	defer rows.Close()
	type ev struct {
		id, et, agg string
		v           int64
	}
	const chunk = 5000
	var (
		buf     []ev
		missing []string
	)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		ids := make([]string, len(buf))
		for i, e := range buf {
			ids[i] = e.id
		}
		state := map[string]string{}
		q := `SELECT event_id::text, 'processed' FROM ` + processed + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])
			UNION ALL SELECT event_id::text, status FROM ` + dead + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])`
		crows, err := cpool.Query(ctx, q, r.o.consumer, ids)
		if err != nil {
			return fmt.Errorf("consumer lookup: %w", err)
		}
		for crows.Next() {
			var id, st string
			if err := crows.Scan(&id, &st); err != nil {
				return err
			}
			if state[id] != "processed" {
				state[id] = st
			}
		}
		if err := crows.Err(); err != nil {
			return fmt.Errorf("consumer lookup: %w", err)
		}
		for _, e := range buf {
			tc := get(e.et)
			switch state[e.id] {
			case "processed", "applied":
				tc.processed++
			case "dead", "parked", "discarded":
				tc.deadLettered++
			default:
				tc.notConsumed++
				if len(missing) < r.o.maxList {
					missing = append(missing, fmt.Sprintf("%s  %s v%d  %s", e.id, e.agg, e.v, e.et))
				}
			}
		}
		buf = buf[:0]
		return nil
	}
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.id, &e.et, &e.agg, &e.v); err != nil {
			return nil, err
		}
		buf = append(buf, e)
		if len(buf) == chunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("compare with consumer: %w", err)
	}
	return missing, flush()
}

func (r *reconciler) report(counts map[string]*typeCounts, missingKafka, missingConsumer []string) error {
	fmt.Fprintf(r.out, "reconcile: %s, events committed %s .. %s (--since %s, --settle %s), %d Kafka records read\n",
		r.cfg.table, r.from.UTC().Format(time.RFC3339), r.to.UTC().Format(time.RFC3339), r.o.since, r.o.settle, r.records)
	types := make([]string, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sort.Strings(types)
	tw := tabwriter.NewWriter(r.out, 2, 4, 2, ' ', 0)
	head := "event_type\tcommitted\tin_kafka\tmissing_kafka"
	if r.o.consumer != "" {
		head += "\tprocessed\tdead_lettered\tnot_consumed"
	}
	fmt.Fprintln(tw, head)
	var total typeCounts
	line := func(name string, c *typeCounts) {
		s := fmt.Sprintf("%s\t%d\t%d\t%d", name, c.committed, c.inKafka, c.committed-c.inKafka)
		if r.o.consumer != "" {
			s += fmt.Sprintf("\t%d\t%d\t%d", c.processed, c.deadLettered, c.notConsumed)
		}
		fmt.Fprintln(tw, s)
	}
	for _, t := range types {
		c := counts[t]
		line(t, c)
		total.committed += c.committed
		total.inKafka += c.inKafka
		total.processed += c.processed
		total.deadLettered += c.deadLettered
		total.notConsumed += c.notConsumed
	}
	line("TOTAL", &total)
	tw.Flush()
	lost := total.committed - total.inKafka
	if lost > 0 {
		fmt.Fprintf(r.out, "\nmissing from Kafka: %d (listing %d)\n", lost, len(missingKafka))
		for _, l := range missingKafka {
			fmt.Fprintln(r.out, "  "+l)
		}
	}
	if total.notConsumed > 0 {
		fmt.Fprintf(r.out, "\nin Kafka but not processed by consumer %q: %d (listing %d)\n", r.o.consumer, total.notConsumed, len(missingConsumer))
		for _, l := range missingConsumer {
			fmt.Fprintln(r.out, "  "+l)
		}
	}
	if total.deadLettered > 0 {
		fmt.Fprintf(r.out, "\nconsumer %q dead-lettered %d events (see its inbox_dead_letter table)\n", r.o.consumer, total.deadLettered)
	}
	if lost > 0 || total.notConsumed > 0 {
		return fmt.Errorf("%w: %d not in Kafka, %d not processed by the consumer", errMissing, lost, total.notConsumed)
	}
	fmt.Fprintln(r.out, "\nreconcile: nothing missing")
	return nil
}
