package cleanup

import (
	"errors"
	"fmt"
	"time"
)

// Defaults and bounds of Options.
const (
	DefaultBatchSize = 1000
	MaxBatchSize     = 10000
	DefaultPause     = 50 * time.Millisecond
	// maxPause keeps a mistyped pause (50s for 50ms) from stalling a run
	// for hours.
	maxPause = 10 * time.Second
)

// Options tune one cleanup run.
type Options struct {
	// OlderThan is the retention: only rows with created_at before
	// now() - OlderThan are candidates. Required, > 0.
	OlderThan time.Duration
	// BatchSize is the most rows one DELETE transaction removes (default
	// DefaultBatchSize, at most MaxBatchSize): it bounds the WAL and the
	// row locks of each step.
	BatchSize int
	// Pause is the sleep between batches that deleted rows (default
	// DefaultPause): time for replicas, archiving and autovacuum.
	Pause time.Duration
	// MaxDuration bounds the run (0: until done); a run stopped by it
	// reports Result.Stopped and the next run continues.
	MaxDuration time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
}

// WithDefaults fills the zero fields.
func (o Options) WithDefaults() Options {
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	return o
}

// Validate reports every invalid option, each with its fix, naming it by
// its Go path ("Options.BatchSize"): the cleanup command shows its flag
// instead.
func (o Options) Validate() error {
	var errs []error
	if o.OlderThan <= 0 {
		errs = append(errs, fmt.Errorf("Options.OlderThan %s: use a positive duration, e.g. 168h (rows younger than it are kept)", o.OlderThan))
	}
	if o.BatchSize < 1 || o.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("Options.BatchSize %d: use 1..%d (small batches keep locks and WAL bursts short)", o.BatchSize, MaxBatchSize))
	}
	if o.Pause < 0 || o.Pause > maxPause {
		errs = append(errs, fmt.Errorf("Options.Pause %s: use 0..%s", o.Pause, maxPause))
	}
	if o.MaxDuration < 0 {
		errs = append(errs, fmt.Errorf("Options.MaxDuration %s: use 0 (no bound) or a positive duration", o.MaxDuration))
	}
	return errors.Join(errs...)
}
