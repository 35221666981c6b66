package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
)

// TestKafkaPositionAgainstCheckpoint: the position read from Kafka and the
// PostgreSQL checkpoint each apply where they know more; an older Kafka
// position never replaces a checkpoint's Partial of a later transaction
// (which would re-publish that transaction's acknowledged prefix).
func TestKafkaPositionAgainstCheckpoint(t *testing.T) {
	id := checkpoint.Identity{SystemID: "7", Timeline: 1}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pos := func(lsn pglogrepl.LSN, events int) *kafkaPosition {
		return &kafkaPosition{Version: 1, SystemID: "7", Timeline: 1, CommitLSN: lsn.String(), Events: events}
	}
	for _, c := range []struct {
		name     string
		rs       resumeState
		pos      *kafkaPosition
		skip     pglogrepl.LSN
		partial  checkpoint.Partial
		appliedK bool
	}{
		{name: "no position", rs: resumeState{skipBefore: 100}, skip: 100},
		{name: "kafka ahead", rs: resumeState{skipBefore: 100}, pos: pos(200, 3), skip: 200,
			partial: checkpoint.Partial{CommitLSN: 200, Events: 3}},
		{name: "checkpoint position ahead", rs: resumeState{skipBefore: 300}, pos: pos(200, 3), skip: 300},
		{name: "checkpoint partial of a later transaction",
			rs:  resumeState{skipBefore: 100, partial: checkpoint.Partial{CommitLSN: 300, Events: 5}},
			pos: pos(200, 2), skip: 100, partial: checkpoint.Partial{CommitLSN: 300, Events: 5}},
		{name: "same transaction: the union",
			rs:  resumeState{skipBefore: 100, partial: checkpoint.Partial{CommitLSN: 300, Events: 5}},
			pos: pos(300, 7), skip: 300, partial: checkpoint.Partial{CommitLSN: 300, Events: 7}},
		{name: "kafka position past the checkpoint partial",
			rs:  resumeState{skipBefore: 100, partial: checkpoint.Partial{CommitLSN: 300, Events: 5}},
			pos: pos(400, 1), skip: 400, partial: checkpoint.Partial{CommitLSN: 400, Events: 1}},
		{name: "another timeline: not applied", rs: resumeState{skipBefore: 100},
			pos: &kafkaPosition{SystemID: "7", Timeline: 2, CommitLSN: "0/C8", Events: 1}, skip: 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.rs.id, c.rs.walEnd = id, 1000
			got, err := c.rs.withKafkaPosition(c.pos, "k", log)
			if err != nil {
				t.Fatal(err)
			}
			if got.skipBefore != c.skip || !got.partial.Equal(c.partial) {
				t.Fatalf("skip before %s, partial %+v; want %s, %+v", got.skipBefore, got.partial, c.skip, c.partial)
			}
		})
	}
}

// TestKafkaPositionPastWALEnd: a position of this server's system and
// timeline that lies past its WAL end (a restore to a shorter WAL) stops
// the start instead of skipping the transactions committed since.
func TestKafkaPositionPastWALEnd(t *testing.T) {
	rs := resumeState{id: checkpoint.Identity{SystemID: "7", Timeline: 1}, skipBefore: 100, walEnd: 500}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := rs.withKafkaPosition(&kafkaPosition{SystemID: "7", Timeline: 1, CommitLSN: pglogrepl.LSN(600).String(), Events: 1}, "7/db/s", log)
	var ahead *PositionAheadError
	if !errors.As(err, &ahead) || ahead.LSN != 600 || ahead.WAL != 500 || ahead.Key != "7/db/s" {
		t.Fatalf("got %v", err)
	}
	if _, err := rs.withKafkaPosition(&kafkaPosition{SystemID: "7", Timeline: 1, CommitLSN: pglogrepl.LSN(500).String(), Events: 1}, "k", log); err != nil {
		t.Fatalf("a position at the WAL end: %v", err)
	}
}

// TestPositionScan: the position read decides transactions by their
// markers, past any other producer's open transaction, and takes only
// the source's own records.
func TestPositionScan(t *testing.T) {
	src := Source{SystemID: "7", Database: "db", Slot: "s"}
	key, legacy := []byte(src.PositionKey()), []byte(src.legacyPositionKey())
	pos := func(sys string, lsn pglogrepl.LSN) []byte {
		v, _ := json.Marshal(kafkaPosition{Version: 1, Slot: "s", SystemID: sys, Timeline: 1, CommitLSN: lsn.String(), Events: 1})
		return v
	}
	var off int64
	data := func(pid int64, txn bool, k, v []byte) kafkafetch.Record {
		off++
		return kafkafetch.Record{Message: kafka.Message{Offset: off, Key: k, Value: v}, ProducerID: pid, Transactional: txn}
	}
	marker := func(pid int64, m kafkafetch.Marker) kafkafetch.Record {
		off++
		return kafkafetch.Record{Message: kafka.Message{Offset: off}, ProducerID: pid, Transactional: true, Marker: m}
	}
	for _, c := range []struct {
		name    string
		records []kafkafetch.Record
		want    pglogrepl.LSN // 0: none
		found   bool
	}{
		{name: "committed past another producer's open transaction", found: true, want: 300, records: []kafkafetch.Record{
			data(1, true, key, pos("7", 100)), marker(1, kafkafetch.MarkerCommit),
			data(9, true, []byte("other"), []byte("x")), // open until the end: it pins the last stable offset
			data(1, true, key, pos("7", 200)), marker(1, kafkafetch.MarkerCommit),
			data(1, true, key, pos("7", 300)), marker(1, kafkafetch.MarkerCommit),
		}},
		{name: "aborted and undecided records do not count", found: true, want: 100, records: []kafkafetch.Record{
			data(1, true, key, pos("7", 100)), marker(1, kafkafetch.MarkerCommit),
			data(1, true, key, pos("7", 200)), marker(1, kafkafetch.MarkerAbort),
			data(2, true, key, pos("7", 300)), // a producer of the same key, undecided
		}},
		{name: "the marker of another producer decides nothing", found: false, records: []kafkafetch.Record{
			data(1, true, key, pos("7", 100)), marker(2, kafkafetch.MarkerCommit),
		}},
		{name: "legacy key: only records of the same system", found: true, want: 100, records: []kafkafetch.Record{
			data(1, true, legacy, pos("7", 100)), marker(1, kafkafetch.MarkerCommit),
			data(3, true, legacy, pos("8", 900)), marker(3, kafkafetch.MarkerCommit),
		}},
		{name: "the newest of both keys", found: true, want: 200, records: []kafkafetch.Record{
			data(1, true, legacy, pos("7", 100)), marker(1, kafkafetch.MarkerCommit),
			data(2, true, key, pos("7", 200)), marker(2, kafkafetch.MarkerCommit),
		}},
		{name: "a tombstone: no position", found: true, records: []kafkafetch.Record{
			data(1, true, key, pos("7", 100)), marker(1, kafkafetch.MarkerCommit),
			data(-1, false, key, nil),
		}},
		{name: "a plain record counts as written", found: true, want: 100, records: []kafkafetch.Record{
			data(-1, false, key, pos("7", 100)),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := positionScan{keys: [][]byte{key, legacy}, systemID: "7", slot: "s"}
			for _, r := range c.records {
				if err := s.add(r); err != nil {
					t.Fatal(err)
				}
			}
			var got pglogrepl.LSN
			if s.last != nil {
				got, _ = s.last.lsn()
			}
			if s.found != c.found || got != c.want {
				t.Fatalf("found %v, position %s; want %v, %s", s.found, got, c.found, c.want)
			}
		})
	}
}

// TestPositionScanUnreadable: a record under one of the source's keys
// that is not a position (the legacy key is the bare slot name, often the
// default, which anything may write under) is skipped, counted and
// logged with its partition and offset, never its value: it is never
// taken as the newest position nor as a tombstone, and the scan keeps the
// newest readable one before it. Before, it failed the read, and the
// relay reconnected for ever.
func TestPositionScanUnreadable(t *testing.T) {
	src := Source{SystemID: "7", Database: "db", Slot: "outbox_relay"}
	key, legacy := []byte(src.PositionKey()), []byte(src.legacyPositionKey())
	pos := func(lsn string) []byte {
		v, _ := json.Marshal(kafkaPosition{Version: 1, Slot: src.Slot, SystemID: "7", Timeline: 1, CommitLSN: lsn, Events: 1})
		return v
	}
	rec := func(off int64, k, v []byte) kafkafetch.Record {
		return kafkafetch.Record{Message: kafka.Message{Offset: off, Key: k, Value: v}, ProducerID: -1}
	}
	commit := func(off, pid int64) kafkafetch.Record {
		return kafkafetch.Record{Message: kafka.Message{Offset: off}, ProducerID: pid, Transactional: true, Marker: kafkafetch.MarkerCommit}
	}
	txn := func(off, pid int64, k, v []byte) kafkafetch.Record {
		r := rec(off, k, v)
		r.ProducerID, r.Transactional = pid, true
		return r
	}
	for _, c := range []struct {
		name    string
		records []kafkafetch.Record
		want    pglogrepl.LSN // 0: none
		found   bool
		bad     int
	}{
		{name: "another application's record under the legacy key", found: true, want: 0x100, bad: 2, records: []kafkafetch.Record{
			txn(10, 1, key, pos("0/100")), commit(11, 1),
			rec(12, legacy, []byte("secret-token-42")),
			rec(13, legacy, []byte(`[1,2]`)),
		}},
		{name: "a garbled record of the source's own key, committed", found: true, want: 0x100, bad: 1, records: []kafkafetch.Record{
			txn(10, 1, key, pos("0/100")), commit(11, 1),
			txn(12, 1, key, []byte(`{"v":1,"slot":"outbox_relay","system_id":"7","commit_lsn":`)), commit(13, 1),
		}},
		{name: "a position of the source with an unreadable LSN", found: true, want: 0x100, bad: 1, records: []kafkafetch.Record{
			txn(10, 1, key, pos("0/100")), commit(11, 1),
			txn(12, 1, key, pos("nowhere")), commit(13, 1),
		}},
		{name: "only unreadable records: none found", bad: 1, records: []kafkafetch.Record{
			rec(12, legacy, []byte("x")),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := positionScan{keys: [][]byte{key, legacy}, systemID: "7", slot: src.Slot}
			for _, r := range c.records {
				if err := s.add(r); err != nil {
					t.Fatalf("offset %d: %v", r.Offset, err)
				}
			}
			var got pglogrepl.LSN
			if s.last != nil {
				got, _ = s.last.lsn()
			}
			if s.found != c.found || got != c.want || s.unreadable.count != c.bad {
				t.Fatalf("found %v, position %s, %d unreadable; want %v, %s, %d", s.found, got, s.unreadable.count, c.found, c.want, c.bad)
			}
			var out bytes.Buffer
			s.unreadable.log(slog.New(slog.NewTextHandler(&out, nil)), "positions", 3)
			line := out.String()
			if !strings.Contains(line, "partition=3") || !strings.Contains(line, fmt.Sprintf("records=%d", c.bad)) ||
				!strings.Contains(line, "last_offset=") || strings.Contains(line, "secret-token") {
				t.Fatalf("log: %s", line)
			}
		})
	}
	var out bytes.Buffer
	var none unreadableRecords
	none.log(slog.New(slog.NewTextHandler(&out, nil)), "positions", 0)
	if out.Len() != 0 {
		t.Fatalf("logged without an unreadable record: %s", out.String())
	}
}

// TestSourceNames: the defaults that reach Kafka carry the source, so
// two services on the default slot name never share them.
func TestSourceNames(t *testing.T) {
	a := Source{SystemID: "7", Database: "orders", Slot: "outbox_relay"}
	b := Source{SystemID: "8", Database: "orders", Slot: "outbox_relay"}
	c := Source{SystemID: "7", Database: "billing", Slot: "outbox_relay"}
	var cfg Config
	if cfg.TransactionalID(a) == cfg.TransactionalID(b) || cfg.TransactionalID(a) == cfg.TransactionalID(c) ||
		a.PositionKey() == b.PositionKey() || a.PositionKey() == c.PositionKey() {
		t.Fatalf("names collide: %q %q %q, %q %q %q", cfg.TransactionalID(a), cfg.TransactionalID(b), cfg.TransactionalID(c),
			a.PositionKey(), b.PositionKey(), c.PositionKey())
	}
	if got := cfg.TransactionalID(a); got != "outbox-relay-7-orders-outbox_relay" {
		t.Fatalf("transactional id %q", got)
	}
	cfg.Publish.TransactionalID = "mine"
	if cfg.TransactionalID(a) != "mine" {
		t.Fatal("an explicit transactional id is not kept")
	}
}

// TestMovedPositionBySourcePosition: after partitions were added to the
// positions topic, the search through the other partitions takes the
// record furthest in the source's stream, not the one with the latest
// CommittedAt: that is the writing relay's clock, and a leader whose
// clock ran ahead wrote the older record.
func TestMovedPositionBySourcePosition(t *testing.T) {
	at := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	pos := func(tl int32, lsn pglogrepl.LSN, events int, skew time.Duration) *kafkaPosition {
		return &kafkaPosition{Version: 1, Slot: "s", SystemID: "7", Timeline: tl, CommitLSN: lsn.String(), Events: events,
			CommittedAt: at.Add(skew)}
	}
	for _, c := range []struct {
		name  string
		part  int
		have  *kafkaPosition
		parts map[int]*kafkaPosition
		want  *kafkaPosition // nil: have stays
	}{
		{name: "the older record was written by a leader whose clock ran ahead", part: 2, parts: map[int]*kafkaPosition{
			0: pos(1, 0x100, 1, time.Minute), 1: pos(1, 0x200, 1, 0)}, want: pos(1, 0x200, 1, 0)},
		{name: "the key's own partition holds the newest, with an earlier clock", part: 0, have: pos(1, 0x300, 1, 0),
			parts: map[int]*kafkaPosition{1: pos(1, 0x200, 1, time.Minute)}},
		{name: "the same transaction: more of its events", part: 2, parts: map[int]*kafkaPosition{
			0: pos(1, 0x200, 9, time.Minute), 1: pos(1, 0x200, 10, 0)}, want: pos(1, 0x200, 10, 0)},
		{name: "a later timeline continues the earlier", part: 2, parts: map[int]*kafkaPosition{
			0: pos(1, 0x500, 1, time.Minute), 1: pos(2, 0x400, 1, 0)}, want: pos(2, 0x400, 1, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Relay{log: slog.New(slog.DiscardHandler)}
			read := func(_ context.Context, p int) (*kafkaPosition, error) { return c.parts[p], nil }
			got, err := r.movedPosition(context.Background(), 3, c.part, c.have, "7/db/s", read)
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (c.want == nil) || got != nil && (got.CommitLSN != c.want.CommitLSN || got.Events != c.want.Events ||
				got.Timeline != c.want.Timeline) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
