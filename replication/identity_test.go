package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func outboxInsert(id uint32) []byte {
	return insertBytes(id, s("id"), s("t"), s("a"), s("1"), s("e"), s("1"), s("{}"), nil, s("now"))
}

// streamWithOID is a test stream whose outbox public.outbox has oid 16384.
func streamWithOID(sink Sink, lookup NameLookup) *Stream {
	return NewStream(nil, Config{Namespace: "public", Table: "outbox", TableOID: 16384, CurrentName: lookup}, sink, nil)
}

func TestRenamedOutboxStops(t *testing.T) {
	for _, c := range []struct {
		name     string
		oid      uint32 // Config.TableOID
		announce bool   // announced under its configured name first
		ns, rel  string
	}{
		{"RenameWhileStreaming", 16384, true, "public", "outbox_v2"},
		{"SetSchemaWhileStreaming", 16384, true, "archive", "outbox"},
		// After a reconnect the first Relation already has the new name:
		// only the OID resolved at stream start recognises it.
		{"RenamedBeforeReconnect", 16384, false, "public", "outbox_v2"},
		// No OID known: the id cached under the configured name does.
		{"CachedIDWithoutOID", 0, true, "public", "outbox_v2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &recSink{}
			st := NewStream(nil, Config{Namespace: "public", Table: "outbox", TableOID: c.oid}, sink, nil)
			if c.announce {
				must(t, st.decode(1, relationBytes(16384, "public", "outbox", outboxCols)))
				must(t, st.decode(2, beginBytes(10, 1)))
				must(t, st.decode(3, outboxInsert(16384)))
				must(t, st.decode(4, commitBytes(9, 10)))
			}
			must(t, st.decode(5, beginBytes(20, 2)))
			err := st.decode(6, relationBytes(16384, c.ns, c.rel, outboxCols))
			var re *RelationRenamedError
			if !errors.As(err, &re) {
				t.Fatalf("Relation of the outbox as %s.%s: got %v, want a RelationRenamedError", c.ns, c.rel, err)
			}
			if re.OID != 16384 || re.Old != "public.outbox" || re.New != c.ns+"."+c.rel {
				t.Fatalf("error fields %+v", re)
			}
			for _, want := range []string{"public.outbox", c.ns + "." + c.rel, "rename it back", "Database.Table " + c.ns + "." + c.rel, "publication"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message lacks %q: %s", want, err)
				}
			}
			// Its inserts are never skipped either.
			if err := st.decode(7, outboxInsert(16384)); err == nil {
				t.Fatal("insert of the renamed outbox skipped without error")
			}
		})
	}
}

func TestRenamedOutboxStopsThroughHandle(t *testing.T) {
	// The stream passes the error on as itself (permanent in run.go), not
	// as a WALDecodeError.
	st := streamWithOID(&recSink{}, nil)
	err := st.decode(1, relationBytes(16384, "public", "outbox_v2", outboxCols))
	var re *RelationRenamedError
	var de *WALDecodeError
	if !errors.As(err, &re) || errors.As(err, &de) {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestRenamedBackIsRelayed(t *testing.T) {
	// Replayed after the table was renamed back: the WAL still carries the
	// name of that time, the catalog says it is the outbox again.
	var asked []uint32
	lookup := func(_ context.Context, oid uint32) (string, string, bool, error) {
		asked = append(asked, oid)
		return "public", "outbox", true, nil
	}
	sink := &recSink{}
	st := streamWithOID(sink, lookup)
	must(t, st.decode(1, beginBytes(10, 1)))
	must(t, st.decode(2, relationBytes(16384, "public", "outbox_v2", outboxCols)))
	must(t, st.decode(3, outboxInsert(16384)))
	must(t, st.decode(4, relationBytes(16384, "public", "outbox", outboxCols)))
	must(t, st.decode(5, outboxInsert(16384)))
	must(t, st.decode(6, commitBytes(9, 10)))
	if len(sink.events) != 2 || len(asked) != 1 || asked[0] != 16384 {
		t.Fatalf("events %d, lookups %v", len(sink.events), asked)
	}
}

func TestRenamedAndStillRenamedNamesTheCurrentName(t *testing.T) {
	lookup := func(context.Context, uint32) (string, string, bool, error) { return "archive", "outbox_old", true, nil }
	st := streamWithOID(&recSink{}, lookup)
	err := st.decode(1, relationBytes(16384, "public", "outbox_v2", outboxCols))
	var re *RelationRenamedError
	if !errors.As(err, &re) || re.Current != "archive.outbox_old" || !strings.Contains(err.Error(), "Database.Table archive.outbox_old") {
		t.Fatalf("got %v", err)
	}
}

func TestRenameLookupFailureIsNotADecodeError(t *testing.T) {
	lookup := func(context.Context, uint32) (string, string, bool, error) {
		return "", "", false, errors.New("connection refused")
	}
	st := streamWithOID(&recSink{}, lookup)
	err := st.decode(1, relationBytes(16384, "public", "outbox_v2", outboxCols))
	var le *lookupError
	var re *RelationRenamedError
	if !errors.As(err, &le) || errors.As(err, &re) {
		t.Fatalf("got %v", err)
	}
}

func TestUnannouncedInsertIsNotSkipped(t *testing.T) {
	sink := &recSink{}
	st := streamWithOID(sink, nil)
	must(t, st.decode(1, relationBytes(2, "public", "orders", []testCol{{"id", oidText}})))
	must(t, st.decode(2, beginBytes(10, 1)))
	must(t, st.decode(3, insertBytes(2, s("x")))) // announced, another table
	if err := st.decode(4, outboxInsert(16384)); err == nil || !strings.Contains(err.Error(), "outbox") {
		t.Fatalf("insert into the outbox's oid without a Relation: %v", err)
	}
	if err := st.decode(5, outboxInsert(99)); err == nil || !strings.Contains(err.Error(), "never announced") {
		t.Fatalf("insert into a never announced relation: %v", err)
	}
	if len(sink.events) != 0 {
		t.Fatalf("decoded %d events", len(sink.events))
	}
}

func TestOtherTableWithOutboxOIDUnknownIsIgnored(t *testing.T) {
	// A table of the publication that was never the outbox keeps being
	// ignored, renamed or not.
	st := streamWithOID(&recSink{}, nil)
	must(t, st.decode(1, relationBytes(2, "public", "orders", []testCol{{"id", oidText}})))
	must(t, st.decode(2, relationBytes(2, "public", "orders_v2", []testCol{{"id", oidText}})))
	must(t, st.decode(3, beginBytes(10, 1)))
	must(t, st.decode(4, insertBytes(2, s("x"))))
}
