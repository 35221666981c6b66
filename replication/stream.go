package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// HeartbeatPrefix is the pg_logical_emit_message prefix of the relay's
// heartbeats. A heartbeat that arrives while nothing is in flight lets the
// slot advance on an idle outbox in a busy database.
const HeartbeatPrefix = "outbox_relay.heartbeat"

// eagerStatus is the shortest gap between two status updates sent because
// the acknowledged position moved.
const eagerStatus = 100 * time.Millisecond

// deadlineSlack is how much later than wanted the reader may wake up
// before its socket deadline is moved: a few milliseconds late for a
// status update is harmless, a syscall per message is not.
const deadlineSlack = 5 * time.Millisecond

// StopError is a failure on one message of an intact stream: a message that
// does not decode, a relation the relay cannot map, or a sink error. The
// stream delivers (bounded by the drain time) what it read before the
// message, confirms, and returns it.
type StopError struct {
	LSN pglogrepl.LSN
	Err error
}

func (e *StopError) Error() string {
	if e.LSN == 0 { // pgoutput sends Relation messages without a position
		return e.Err.Error()
	}
	return fmt.Sprintf("at WAL %s: %v", e.LSN, e.Err)
}
func (e *StopError) Unwrap() error { return e.Err }

// WALDecodeError is a pgoutput message (the WAL data of an XLogData
// message) that is not valid pgoutput protocol version 1: a bug or a
// protocol mismatch that reconnecting cannot cure. It is the relay's side
// of decoding; a Kafka record an inbox cannot decode is a
// record.DecodeError.
type WALDecodeError struct{ Err error }

func (e *WALDecodeError) Error() string { return "decode: " + e.Err.Error() }
func (e *WALDecodeError) Unwrap() error { return e.Err }

// sinkError marks an error of the Sink, so it is not taken for a decode
// error; it never leaves the package.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }

func sinkErr(err error) error {
	if err == nil {
		return nil
	}
	return &sinkError{err}
}

// Begin describes the start of a source transaction.
type Begin struct {
	FinalLSN   pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
}

// Commit describes the end of a source transaction.
type Commit struct {
	CommitLSN pglogrepl.LSN
	// EndLSN is the TransactionEndLSN: once every event of this and all
	// earlier transactions is acknowledged, the slot may be confirmed here.
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// Sink receives decoded transactions in WAL order. Calls come from the
// stream's goroutine; an error stops the stream.
type Sink interface {
	Begin(b Begin) error
	Insert(ev *WALEvent) error
	Commit(c Commit) error
}

// Progress is what the stream needs from the acknowledgement tracker.
type Progress interface {
	// Flushed is the position to confirm to PostgreSQL.
	Flushed() pglogrepl.LSN
	// AdvanceIdle moves Flushed to lsn when nothing is in flight.
	AdvanceIdle(lsn pglogrepl.LSN) bool
	// Idle reports that no transaction is open or awaiting acknowledgement.
	Idle() bool
	// Full reports that the in-flight window is exhausted.
	Full() bool
	// Space is signalled when a full window gets room.
	Space() <-chan struct{}
}

// Config configures a Stream.
type Config struct {
	Slot        string
	Publication string
	// Namespace and Table name the outbox relation; inserts of any other
	// relation are ignored.
	Namespace, Table string
	// TableOID is the outbox table's OID, resolved when the stream starts
	// (0: unknown, then only names identify it). Publications follow the
	// OID, so a renamed outbox keeps streaming under it: knowing it is what
	// turns a rename into a stop instead of silently skipped rows.
	TableOID uint32
	// CurrentName looks up a relation's name now (nil: never; the outbox
	// under another name then always stops the stream).
	CurrentName NameLookup
	// StatusInterval is the cadence of standby status updates. It must be
	// well inside the server's wal_sender_timeout, also while Kafka blocks.
	StatusInterval time.Duration
}

// Stream reads one logical replication connection. It owns the
// connection: all reads and writes happen on the goroutine that calls Run,
// which is what makes the pgconn usage safe.
type Stream struct {
	conn     *pgconn.PgConn
	cfg      Config
	sink     Sink
	progress Progress
	log      *slog.Logger

	relations map[uint32]*relation
	// outboxIDs are the relation ids known to be the outbox on this
	// connection, others the announced ids of other tables: an Insert of
	// neither was never announced and is not skipped.
	outboxIDs map[uint32]struct{}
	others    map[uint32]struct{}
	cols      []tupleColumn
	inTx      bool
	commit    time.Time // current transaction's commit time
	txLSN     pglogrepl.LSN
	ordinal   int
	received  pglogrepl.LSN
	sent      pglogrepl.LSN // flush position last confirmed to the server
	sentAt    time.Time
	onStatus  func(flush pglogrepl.LSN)
}

// NewStream prepares a stream on conn, a connection opened with
// replication=database (see Connect). Its option is WithLogger; without it
// the stream logs nothing.
func NewStream(conn *pgconn.PgConn, cfg Config, sink Sink, progress Progress, opts ...Option) *Stream {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Second
	}
	o := newOptions(opts)
	s := &Stream{
		conn: conn, cfg: cfg, sink: sink, progress: progress, log: o.logger,
		relations: make(map[uint32]*relation),
		outboxIDs: make(map[uint32]struct{}),
		others:    make(map[uint32]struct{}),
	}
	if cfg.TableOID != 0 {
		s.outboxIDs[cfg.TableOID] = struct{}{}
	}
	return s
}

// OnStatus registers f, called after each standby status update with the
// confirmed flush position (for metrics).
func (s *Stream) OnStatus(f func(flush pglogrepl.LSN)) { s.onStatus = f }

// ApplicationName is the application_name of the relay's replication
// connections. A new leader recognises a former relay's walsender by it.
const ApplicationName = "outbox-relay"

// Connect opens a logical replication connection to the database of dsn.
// Options add run-time parameters or a hook that sets credentials.
func Connect(ctx context.Context, dsn string, opts ...Option) (*pgconn.PgConn, error) {
	return ConnectParams(ctx, dsn, nil, opts...)
}

// ConnectParams is Connect with extra run-time parameters for the session,
// e.g. wal_sender_timeout, which bounds how long the server keeps the
// walsender of a client that went silent (and so the slot busy).
func ConnectParams(ctx context.Context, dsn string, params map[string]string, opts ...Option) (*pgconn.PgConn, error) {
	o := newOptions(opts)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = ApplicationName
	if o.beforeConnect != nil {
		// cfg is this call's own parse: the hook may change it freely.
		if err := o.beforeConnect(ctx, cfg); err != nil {
			return nil, fmt.Errorf("replication connection: before connect: %w", err)
		}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection: %w", err)
	}
	return conn, nil
}

// Start issues START_REPLICATION at start. start must not be later than the
// slot's confirmed_flush_lsn: the server would silently skip the
// transactions in between. The caller reads it from the slot.
func (s *Stream) Start(ctx context.Context, start pglogrepl.LSN) error {
	args := PluginArgs(s.cfg.Publication)
	err := pglogrepl.StartReplication(ctx, s.conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		return fmt.Errorf("START_REPLICATION slot %s at %s: %w", s.cfg.Slot, start, err)
	}
	s.received = start
	s.sent = start
	s.sentAt = time.Now()
	return nil
}

// Run reads the stream until ctx is cancelled, the server ends it, or the
// sink fails. When stop is closed it stops reading, waits up to drain for
// in-flight events to be acknowledged while still answering the server,
// sends a final status update and returns nil.
func (s *Stream) Run(ctx context.Context, stop <-chan struct{}, drain time.Duration, idle func() bool) error {
	// Read deadlines go on the socket, set only when the wanted wake-up
	// moves, instead of a context with a deadline per message: that cost
	// about an eighth of the relay's CPU at live rates (a timer and a
	// context watcher per WAL message). Cancelling ctx expires the
	// deadline at once.
	nc := s.conn.Conn()
	defer func() { _ = nc.SetReadDeadline(time.Time{}) }()
	unwatch := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer unwatch()
	var armed time.Time
	for {
		select {
		case <-stop:
			return s.shutdown(ctx, drain, idle)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		next := s.sentAt.Add(s.cfg.StatusInterval)
		// Confirm soon after acknowledgements move the position, so a
		// crash redelivers less; the full interval still bounds quiet times.
		if eager := s.sentAt.Add(eagerStatus); eager.Before(next) && s.progress.Flushed() > s.sent {
			next = eager
		}
		if !time.Now().Before(next) {
			if err := s.sendStatus(false); err != nil {
				return err
			}
			continue
		}
		if s.progress.Full() {
			// Backpressure: stop reading, keep confirming.
			t := time.NewTimer(time.Until(next))
			select {
			case <-s.progress.Space():
			case <-t.C:
			case <-stop:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		// While events are in flight their acknowledgements may move the
		// position at any moment; wake up soon to confirm it, so the slot
		// follows Kafka closely instead of once per status interval.
		deadline := next
		if soon := time.Now().Add(eagerStatus); soon.Before(deadline) && !s.progress.Idle() {
			deadline = soon
		}
		if armed.IsZero() || deadline.Before(armed) || deadline.Sub(armed) > deadlineSlack {
			if err := nc.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("replication receive: %w", err)
			}
			armed = deadline
			// Checked after arming: a cancellation that came before
			// the deadline was set would otherwise wait for it.
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				armed = time.Time{}
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replication receive: %w", err)
		}
		if err := s.handle(msg); err != nil {
			var stop *StopError
			if errors.As(err, &stop) {
				// The connection is fine; what was read before the
				// failing message is delivered before stopping.
				if derr := s.shutdown(ctx, drain, idle); derr != nil {
					s.log.Warn("drain before stopping failed", slog.String("stage", "shutdown"), slog.Any("error", derr))
				}
			}
			return err
		}
	}
}

func (s *Stream) handle(msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		if len(msg.Data) == 0 {
			return errors.New("replication: empty CopyData")
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err != nil {
				return fmt.Errorf("replication keepalive: %w", err)
			}
			if pkm.ServerWALEnd > s.received {
				s.received = pkm.ServerWALEnd
			}
			// Everything before the server's send position has been sent
			// already; with nothing in flight it is all acknowledged.
			if !s.inTx {
				s.progress.AdvanceIdle(pkm.ServerWALEnd)
			}
			if pkm.ReplyRequested {
				return s.sendStatus(false)
			}
			return nil
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				return fmt.Errorf("replication XLogData: %w", err)
			}
			if xld.WALStart > s.received {
				s.received = xld.WALStart
			}
			if err := s.decode(xld.WALStart, xld.WALData); err != nil {
				var se *sinkError
				var relation *RelationError
				var row *RowError
				var renamed *RelationRenamedError
				var lookup *lookupError
				switch {
				case errors.As(err, &se):
					err = se.err
				case errors.As(err, &relation), errors.As(err, &row), errors.As(err, &renamed), errors.As(err, &lookup):
				default:
					err = &WALDecodeError{Err: err}
				}
				return &StopError{LSN: xld.WALStart, Err: err}
			}
			return nil
		default:
			return fmt.Errorf("replication: unexpected CopyData type %q", msg.Data[0])
		}
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication: %w", pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return errors.New("replication: server ended the stream")
	case *pgproto3.NoticeResponse:
		s.log.Info("server notice", slog.String("stage", "replication"), slog.String("notice", msg.Message))
		return nil
	default:
		return fmt.Errorf("replication: unexpected message %T", msg)
	}
}

// decode handles one pgoutput message at WAL position lsn.
func (s *Stream) decode(lsn pglogrepl.LSN, data []byte) error {
	if len(data) == 0 {
		return errors.New("pgoutput: empty message")
	}
	body := data[1:]
	switch data[0] {
	case msgBegin:
		m, err := parseBegin(body)
		if err != nil {
			return err
		}
		if s.inTx {
			return fmt.Errorf("pgoutput: Begin at %s inside a transaction", lsn)
		}
		s.inTx = true
		s.commit = m.CommitTime
		s.txLSN = m.FinalLSN
		s.ordinal = 0
		return sinkErr(s.sink.Begin(m))
	case msgCommit:
		m, err := parseCommit(body)
		if err != nil {
			return err
		}
		if !s.inTx {
			return fmt.Errorf("pgoutput: Commit at %s outside a transaction", lsn)
		}
		s.inTx = false
		return sinkErr(s.sink.Commit(m))
	case msgRelation:
		m, err := parseRelation(body)
		if err != nil {
			return err
		}
		outbox, err := s.classifyRelation(m)
		if err != nil {
			delete(s.relations, m.ID) // its shape under the old name is void
			return err
		}
		if !outbox {
			delete(s.relations, m.ID)
			s.others[m.ID] = struct{}{}
			return nil
		}
		delete(s.others, m.ID)
		rel, err := newRelation(m)
		if err != nil {
			return err
		}
		s.relations[m.ID] = rel
		s.log.Debug("relation", slog.String("stage", "replication"), slog.Int64("relation_id", int64(m.ID)), slog.String("table", m.Namespace+"."+m.Name), slog.Int("columns", len(m.Columns)))
		return nil
	case msgInsert:
		if !s.inTx {
			return fmt.Errorf("pgoutput: Insert at %s outside a transaction", lsn)
		}
		m, err := parseInsert(body, s.cols)
		s.cols = m.Columns
		if err != nil {
			return err
		}
		rel := s.relations[m.RelationID]
		if rel == nil {
			// Not the outbox (the publication may hold more tables), or
			// a relation never announced, which may be.
			return s.unannounced(m.RelationID)
		}
		ev, err := decodeEvent(rel, m.Columns, lsn, s.commit)
		if err != nil {
			return err
		}
		ev.TxLSN, ev.Ordinal = s.txLSN, s.ordinal
		s.ordinal++
		return sinkErr(s.sink.Insert(ev))
	case msgMessage:
		m, err := parseLogicalMessage(body)
		if err != nil {
			return err
		}
		if !m.Transactional && !s.inTx {
			s.progress.AdvanceIdle(m.LSN)
		}
		return nil
	case msgUpdate, msgDelete, msgTruncate, msgType, msgOrigin:
		// Not ours to relay: the publication publishes inserts only, and
		// these must never stop the stream.
		return nil
	default:
		return fmt.Errorf("pgoutput: unknown message type %q at %s", data[0], lsn)
	}
}

func (s *Stream) isOutbox(namespace, name string) bool {
	return namespace == s.cfg.Namespace && name == s.cfg.Table
}

// sendStatus confirms the acknowledged position. All three positions are
// set explicitly: pglogrepl replaces a zero flush with the write position,
// which would confirm WAL Kafka never acknowledged.
func (s *Stream) sendStatus(reply bool) error {
	flush := s.progress.Flushed()
	if flush < s.sent {
		flush = s.sent // never move backwards
	}
	write := s.received
	if write < flush {
		write = flush
	}
	if flush == 0 {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: write,
		WALFlushPosition: flush,
		WALApplyPosition: flush,
		ClientTime:       time.Now(),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	s.sent = flush
	s.sentAt = time.Now()
	if s.onStatus != nil {
		s.onStatus(flush)
	}
	return nil
}

// shutdown stops reading and waits, bounded, for the in-flight events to be
// acknowledged, answering nothing but sending status updates meanwhile.
func (s *Stream) shutdown(ctx context.Context, drain time.Duration, idle func() bool) error {
	deadline := time.Now().Add(drain)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !idle() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Since(s.sentAt) >= s.cfg.StatusInterval {
			if err := s.sendStatus(false); err != nil {
				return err
			}
		}
	}
	if !idle() {
		s.log.Warn("in-flight events not acknowledged before the shutdown timeout; they will be redelivered", slog.String("stage", "shutdown"), slog.Duration("waited", drain))
	}
	return s.sendStatus(false)
}

// Received is the last WAL position read from the server.
func (s *Stream) Received() pglogrepl.LSN { return s.received }
