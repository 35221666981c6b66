package reconcile

import (
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// Config is one reconciliation. Its errors name the binary's reconcile
// flags: that command is the only caller.
type Config struct {
	// Table is the outbox table; Template renders the topic of each of its
	// events, as the relay did when it published them.
	Table    migrations.Table
	Template publisher.TopicTemplate
	// Since is the window: events committed in the last Since. Settle
	// leaves out the newest of them, which may still be in flight.
	Since, Settle time.Duration
	// AggregateType, when set, keeps only that aggregate type's events
	// (the ones a consumer subscribes to).
	AggregateType string
	// Consumer, when set, also checks that inbox consumer: its
	// processed_events and inbox_dead_letter in ConsumerSchema of the
	// database at ConsumerURL.
	Consumer, ConsumerURL, ConsumerSchema string
	// MaxList bounds the missing events listed per comparison; all are
	// counted.
	MaxList int
	// ReadTimeout gives up on a partition that yields no record this long.
	ReadTimeout time.Duration
}

// Validate checks the values before any connection is made.
func (c Config) Validate() error {
	var errs []error
	if c.Since <= 0 {
		errs = append(errs, errors.New("--since is required: a positive duration such as 1h"))
	}
	if c.Settle < 0 || c.Settle >= c.Since && c.Since > 0 {
		errs = append(errs, fmt.Errorf("--settle %s: use 0 or more, less than --since", c.Settle))
	}
	if c.MaxList < 0 || c.ReadTimeout <= 0 {
		errs = append(errs, errors.New("--max-list must not be negative and --read-timeout must be positive"))
	}
	if c.Consumer == "" && c.ConsumerURL != "" {
		errs = append(errs, errors.New("--consumer-database-url needs --consumer"))
	}
	return errors.Join(errs...)
}
