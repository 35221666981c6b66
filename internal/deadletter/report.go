package deadletter

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"unicode/utf8"
)

// document is e as the JSON object dlq show prints (and dlq list --json,
// without the payload). A payload that is not UTF-8 text is given in
// base64 as payload_base64.
func (e Entry) document() map[string]any {
	m := map[string]any{
		"event_id": e.EventID, "aggregate_type": e.Aggregate.Type, "aggregate_id": e.Aggregate.ID,
		"aggregate_version": e.AggregateVersion, "event_type": e.EventType, "schema_version": e.SchemaVersion,
		"headers": e.Headers, "topic": e.Topic, "tx_lsn": e.Pos.TxLSN.String(), "tx_ordinal": e.Pos.Ordinal,
		"commit_time": e.CommitTime, "status": e.Status, "reason": e.Reason, "class": e.Class,
		"attempts": e.Attempts, "first_failed_at": e.FirstFailedAt, "last_failed_at": e.LastFailedAt,
		"resolved_at": e.ResolvedAt, "resolution": e.Resolution, "payload_bytes": len(e.Payload),
	}
	if utf8.Valid(e.Payload) {
		m["payload"] = string(e.Payload)
	} else {
		m["payload_base64"] = e.Payload
	}
	return m
}

// WriteEntry prints one entry, with its payload, as indented JSON.
func WriteEntry(w io.Writer, e Entry) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(e.document())
}

// maxReason bounds the reason column of WriteEntries' table.
const maxReason = 80

// WriteEntries prints entries as a table, or as JSON lines without their
// payloads (asJSON): a listing is for finding entries, dlq show for
// reading one.
func WriteEntries(w io.Writer, entries []Entry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, e := range entries {
			m := e.document()
			delete(m, "payload")
			delete(m, "payload_base64")
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT_ID\tAGGREGATE\tVERSION\tEVENT_TYPE\tSTATUS\tATTEMPTS\tLAST_FAILED\tREASON")
	for _, e := range entries {
		v := "-"
		if e.AggregateVersion != nil {
			v = fmt.Sprint(*e.AggregateVersion)
		}
		reason := e.Reason
		if len(reason) > maxReason {
			reason = reason[:maxReason-3] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.EventID, e.Aggregate, v, e.EventType, e.Status,
			e.Attempts, e.LastFailedAt.Format("2006-01-02 15:04:05"), reason)
	}
	return tw.Flush()
}

// Write prints what a retry or discard did: one line per event, then
// whether the quarantine was lifted.
func (r Result) Write(w io.Writer) {
	for _, o := range r.Outcomes {
		if o.Error != "" {
			fmt.Fprintf(w, "%s\tstill failing: %s\n", o.EventID, o.Error)
		} else {
			fmt.Fprintf(w, "%s\t%s\n", o.EventID, o.Status)
		}
	}
	if !r.Failed() {
		fmt.Fprintf(w, "aggregate %s: quarantine lifted (%d events re-published)\n", r.Aggregate, len(r.Outcomes))
	}
}

// Err is nil when the quarantine was lifted, and says the aggregate stays
// quarantined when an event still fails (the operator's command fails).
func (r Result) Err() error {
	if r.Failed() {
		return fmt.Errorf("aggregate %s stays quarantined: an event still fails", r.Aggregate)
	}
	return nil
}
