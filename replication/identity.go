package replication

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// RelationRenamedError is the outbox table arriving in a Relation message
// under another name than --table: it was renamed (ALTER TABLE … RENAME)
// or moved (… SET SCHEMA) while the relay streamed. Publications follow a
// table's OID, not its name, so its inserts keep coming; the relay stops
// on them, slot position held, rather than skip them or relay a table its
// configuration does not name.
type RelationRenamedError struct {
	// OID is the table's OID (pgoutput's relation id).
	OID uint32
	// Old is the configured name (--table), schema-qualified.
	Old string
	// New is the name the Relation message carries: the table's name at
	// that WAL position.
	New string
	// Current is the table's name now; empty when it no longer exists or
	// could not be looked up.
	Current string
}

func (e *RelationRenamedError) Error() string {
	now := ""
	if e.Current != "" && e.Current != e.New {
		now = fmt.Sprintf(", now %s", e.Current)
	}
	return fmt.Sprintf("outbox table %s (oid %d) was renamed or moved to %s%s: the relay stops with the slot position held "+
		"rather than skip its rows; fix: rename it back (ALTER TABLE … RENAME TO / SET SCHEMA) and restart, "+
		"or check that the publication still includes it (publications follow the table, not its name) and restart with Database.Table %s",
		e.Old, e.OID, e.New, now, e.newest())
}

func (e *RelationRenamedError) newest() string {
	if e.Current != "" {
		return e.Current
	}
	return e.New
}

// NameLookup returns the schema and name relation oid has now, ok false
// when no relation has that OID any more.
type NameLookup func(ctx context.Context, oid uint32) (namespace, name string, ok bool, err error)

// lookupError is a failed NameLookup: the database is unreachable, say.
// It is not a decode error; the relay reconnects and decodes again.
type lookupError struct{ err error }

func (e *lookupError) Error() string {
	return "look up the outbox table's current name: " + e.err.Error()
}
func (e *lookupError) Unwrap() error { return e.err }

// classifyRelation decides what a Relation message is: the outbox (true),
// another table of the publication (false), or the outbox under another
// name (an error). It runs once per Relation message, never per row.
//
// A relation is the outbox when it carries the configured name, or when
// its id is the outbox's: Config.TableOID, or an id announced under the
// configured name earlier on this connection. Names are those at the
// message's WAL position (pgoutput decodes with the catalog of that time),
// so a replay after the table was renamed back to --table still meets the
// other name: the outbox under another name is accepted only while the
// table is named --table now, which is what "rename it back" fixes.
func (s *Stream) classifyRelation(m relationMsg) (bool, error) {
	if s.isOutbox(m.Namespace, m.Name) {
		s.outboxIDs[m.ID] = struct{}{}
		return true, nil
	}
	if _, ok := s.outboxIDs[m.ID]; !ok {
		return false, nil
	}
	renamed := &RelationRenamedError{OID: m.ID, Old: s.cfg.Namespace + "." + s.cfg.Table, New: m.Namespace + "." + m.Name}
	if s.cfg.CurrentName == nil {
		return false, renamed
	}
	// Bounded: a stalled lookup must not keep the walsender unanswered
	// past wal_sender_timeout.
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ns, name, ok, err := s.cfg.CurrentName(ctx, m.ID)
	if err != nil {
		return false, &lookupError{err}
	}
	if ok && s.isOutbox(ns, name) {
		// Renamed and renamed back: the rows in between are the outbox's.
		s.log.Info("outbox table had another name at this WAL position; it has the configured name now, relaying", slog.String("stage", "replication"), slog.Int64("relation_id", int64(m.ID)), slog.String("table", renamed.New), slog.String("configured", renamed.Old))
		return true, nil
	}
	if ok {
		renamed.Current = ns + "." + name
	}
	return false, renamed
}

// lookupTimeout bounds NameLookup.
const lookupTimeout = 10 * time.Second

// unannounced is an Insert whose relation was never announced on this
// connection: pgoutput always sends a Relation message first, so this is a
// protocol violation. It could be the outbox, so it is never skipped.
func (s *Stream) unannounced(id uint32) error {
	if _, ok := s.others[id]; ok {
		return nil // another table of the publication
	}
	if _, ok := s.outboxIDs[id]; ok {
		return fmt.Errorf("pgoutput: insert into the outbox (relation %d) without its relation", id)
	}
	return fmt.Errorf("pgoutput: insert into relation %d, which was never announced (it may be the outbox)", id)
}
