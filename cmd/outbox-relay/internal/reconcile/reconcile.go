package reconcile

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// Deps are the connections a run uses.
type Deps struct {
	// Pool is the outbox's database; one of its connections holds the
	// temporary table of Kafka's event ids for the whole run.
	Pool *pgxpool.Pool
	// KafkaClient returns a client of the one Kafka configuration and the
	// function that closes its idle connections.
	KafkaClient func(clientID string, timeout time.Duration) (*kafka.Client, func())
	// KafkaReader returns a reader of rc over that configuration (it sets
	// rc's Brokers and Dialer).
	KafkaReader func(clientID string, rc kafka.ReaderConfig) *kafka.Reader
	// ConsumerBeforeConnect, when set, sets the credentials of each
	// connection to the consumer's database
	// (relay.DatabaseConfig.BeforeConnect): the binary passes the
	// outbox's hook when the consumer's URL is the outbox's.
	ConsumerBeforeConnect func(ctx context.Context, cfg *pgconn.Config) error
}

// clientID names reconcile's Kafka connections in the brokers' logs.
const clientID = "outbox-relay-reconcile"

// windowCond selects the window's events of the outbox (alias o); its
// arguments are windowArgs.
const windowCond = `o.created_at >= $1 AND o.created_at < $2 AND ($3 = '' OR o.aggregate_type = $3)`

// run is one reconciliation in progress.
type run struct {
	cfg  Config
	deps Deps
	conn *pgx.Conn
	rep  Report
	// counts are the per event type results, filled as they are known.
	counts map[string]*Counts
}

// Run compares the window's events with Kafka (and the consumer, with
// cfg.Consumer) and returns the report; its Err says whether anything is
// missing. An error means the comparison could not be made.
func Run(ctx context.Context, cfg Config, deps Deps) (Report, error) {
	pc, err := deps.Pool.Acquire(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pc.Release()
	r := &run{cfg: cfg, deps: deps, conn: pc.Conn(), counts: map[string]*Counts{},
		rep: Report{Table: cfg.Table, Since: cfg.Since, Settle: cfg.Settle, Consumer: cfg.Consumer}}
	if err := r.run(ctx); err != nil {
		return Report{}, err
	}
	r.rep.Types = make(map[string]Counts, len(r.counts))
	for t, c := range r.counts {
		r.rep.Types[t] = *c
	}
	return r.rep, nil
}

func (r *run) windowArgs() []any { return []any{r.rep.From, r.rep.To, r.cfg.AggregateType} }

// get returns the counts of event type et.
func (r *run) get(et string) *Counts {
	if r.counts[et] == nil {
		r.counts[et] = &Counts{}
	}
	return r.counts[et]
}

func (r *run) run(ctx context.Context) error {
	if err := r.conn.QueryRow(ctx, `SELECT now() - make_interval(secs => $1), now() - make_interval(secs => $2)`,
		r.cfg.Since.Seconds(), r.cfg.Settle.Seconds()).Scan(&r.rep.From, &r.rep.To); err != nil {
		return fmt.Errorf("read the clock: %w", err)
	}
	topics, err := r.topics(ctx)
	if err != nil {
		return err
	}
	// Kafka's event ids go into a temporary table on this connection.
	if _, err := r.conn.Exec(ctx, `CREATE TEMP TABLE reconcile_seen (event_id uuid NOT NULL)`); err != nil {
		return fmt.Errorf("create temporary table: %w", err)
	}
	// The pool keeps the connection: leave it as it was found.
	defer r.conn.Exec(context.Background(), `DROP TABLE IF EXISTS pg_temp.reconcile_seen`)
	for _, topic := range topics {
		if err := r.readTopic(ctx, topic); err != nil {
			return err
		}
	}
	if _, err := r.conn.Exec(ctx, `CREATE INDEX ON reconcile_seen (event_id); ANALYZE reconcile_seen`); err != nil {
		return fmt.Errorf("index temporary table: %w", err)
	}
	if err := r.compare(ctx); err != nil {
		return err
	}
	if r.rep.MissingKafka, err = r.listMissingKafka(ctx); err != nil {
		return err
	}
	if r.cfg.Consumer != "" {
		if r.rep.MissingConsumer, err = r.checkConsumer(ctx); err != nil {
			return err
		}
	}
	return nil
}

// topics lists, sorted, the topics the window's events went to.
func (r *run) topics(ctx context.Context) ([]string, error) {
	rows, err := r.conn.Query(ctx, `SELECT DISTINCT aggregate_type, event_type FROM `+r.cfg.Table.Quoted()+` o WHERE `+windowCond, r.windowArgs()...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (run \"outbox-relay migrate\" if it does not exist)", r.cfg.Table, err)
	}
	defer rows.Close()
	set := map[string]bool{}
	for rows.Next() {
		var at, et string
		if err := rows.Scan(&at, &et); err != nil {
			return nil, err
		}
		set[r.cfg.Template.Render(at, et)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", r.cfg.Table, err)
	}
	topics := make([]string, 0, len(set))
	for t := range set {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	return topics, nil
}

// compare counts, per event type, the window's events and those Kafka
// holds.
func (r *run) compare(ctx context.Context) error {
	rows, err := r.conn.Query(ctx, `SELECT o.event_type, count(*),
		count(*) FILTER (WHERE EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id))
		FROM `+r.cfg.Table.Quoted()+` o WHERE `+windowCond+` GROUP BY 1`, r.windowArgs()...)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var et string
		var c, k int64
		if err := rows.Scan(&et, &c, &k); err != nil {
			return err
		}
		tc := r.get(et)
		tc.Committed, tc.InKafka = c, k
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	return nil
}
