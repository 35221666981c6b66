package doctor

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Querier reads the outbox for topic discovery (a pgx pool or connection).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SplitTopics returns the topics of a comma-separated list, without
// blanks.
func SplitTopics(list string) []string {
	var names []string
	for _, t := range strings.Split(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	return names
}

// OutboxTopics names the topics the relay publishes to: render applied to
// the event types of a bounded sample of the outbox (at most 100 of its
// first 10,000 rows), so a large table is not scanned. A table it cannot
// read gives none; the PostgreSQL checks say why.
func OutboxTopics(ctx context.Context, db Querier, table migrations.Table, render func(aggregateType, eventType string) string) []string {
	rows, err := db.Query(ctx, `SELECT DISTINCT aggregate_type, event_type FROM (SELECT aggregate_type, event_type FROM `+
		table.Quoted()+` LIMIT 10000) s LIMIT 100`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var names []string
	seen := map[string]bool{}
	for rows.Next() {
		var at, et string
		if rows.Scan(&at, &et) == nil {
			if n := render(at, et); !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}
