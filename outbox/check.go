package outbox

import "context"

// EventChecker checks an event before a Writer inserts it: a rule the
// Writer's own Validate cannot know, such as whether the relay will be
// able to encode the payload with its registered schema (package
// outboxschema). It runs inside the caller's transaction, before any SQL,
// so a refusal fails the business change instead of committing an event
// the relay would dead-letter after commit.
//
// The interface lives here, where it is used, and the checks elsewhere,
// so that package outbox, which every producer links, stays free of what
// a check needs (a registry client, schema parsers, the relay's record
// encoders) unless the producer imports the check's package.
//
// Check must not change e and must be safe for concurrent use when the
// Writer is shared. Its error is returned by Append and Transition
// unchanged (AppendBatch wraps it with the index of the event), so the
// caller matches the check's own error types with errors.As.
type EventChecker interface {
	Check(ctx context.Context, e *Event) error
}

// WithEventCheck makes Append, AppendBatch and Transition check each
// event with c after validation and back-pressure (which cost no I/O)
// and before any SQL: an event c refuses is not inserted, is left
// unchanged (no EventID assigned), and c's error is returned as it is;
// Transition checks before its change. In a batch every event is checked
// before the first INSERT, and a refusal writes none. Writer.Validate
// leaves the check out, since a check may do I/O. Without this option, or
// with a nil c, nothing is checked; given twice, the last counts. A
// Writer option.
//
// outboxschema.New builds the schema check:
//
//	check, err := outboxschema.New(outboxschema.Config{Record: relayCfg.Publish.Record})
//	w := outbox.NewWriter(table, outbox.WithEventCheck(check))
func WithEventCheck(c EventChecker) Option {
	return optionFunc(func(o *options) { o.check = c })
}

// check is the event check of one event (WithEventCheck): nil without
// one.
func (w *Writer) check(ctx context.Context, e *Event) error {
	if w.checker == nil {
		return nil
	}
	return w.checker.Check(ctx, e)
}
