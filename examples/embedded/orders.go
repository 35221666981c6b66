package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// orders is the service's HTTP API over its orders table. Every change
// appends its event to the outbox in the same transaction, so an event is
// published if and only if its change committed.
type orders struct {
	pool   *pgxpool.Pool
	table  migrations.Table // the orders table, in the outbox table's schema
	outbox *outbox.Writer
	log    *slog.Logger
}

// newOrders checks the outbox table and creates the orders table if it is
// missing.
//
// The outbox table, its publication and the slot come from `outbox-relay
// migrate`, a deployment step run once by a role allowed to create them
// (the service's role then needs only what `migrate --grant-role` grants).
// The service does not run migrations.Apply itself: that would create the
// table but not the publication and the slot the relay streams from.
func newOrders(ctx context.Context, pool *pgxpool.Pool, outboxTable migrations.Table, log *slog.Logger) (*orders, error) {
	// Validate's error says to run migrate; its Schema tells the Writer
	// how the table stores payloads and headers.
	schema, err := migrations.Validate(ctx, pool, outboxTable)
	if err != nil {
		return nil, err
	}
	o := &orders{
		pool:   pool,
		table:  migrations.Table{Schema: outboxTable.Schema, Name: "orders"},
		outbox: outbox.NewWriter(outboxTable, outbox.WithSchema(schema)),
		log:    log,
	}
	// The same table as examples/orders, so both can share a database.
	// Replicas start together, and two concurrent CREATE TABLE IF NOT
	// EXISTS can still collide: a transaction-scoped advisory lock makes
	// them take turns.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, o.table.String()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+o.table.Quoted()+` (
	id           text PRIMARY KEY,
	customer_id  text NOT NULL,
	amount_cents bigint NOT NULL,
	currency     text NOT NULL,
	status       text NOT NULL,
	version      bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now()
)`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", o.table, err)
	}
	return o, nil
}

func (o *orders) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /orders", o.create)
	mux.HandleFunc("POST /orders/{id}/confirm", o.confirm)
}

// order is an order as the API returns it and as its events carry it:
// each event's payload is the whole order after the change (schema 1).
type order struct {
	ID          string    `json:"order_id"`
	CustomerID  string    `json:"customer_id"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	Version     int64     `json:"version"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// orderColumns are the columns that fields scans, in its order.
const orderColumns = `id, customer_id, amount_cents, currency, status, version, updated_at`

func (ord *order) fields() []any {
	return []any{&ord.ID, &ord.CustomerID, &ord.AmountCents, &ord.Currency, &ord.Status, &ord.Version, &ord.UpdatedAt}
}

// reply is the response to a change: the order, and the id of the event
// the change appended (none when nothing changed).
type reply struct {
	order
	EventID string `json:"event_id,omitempty"`
}

// errExists answers a create whose id is taken: 409, so that a client can
// retry a create with its own id without creating the order twice.
var errExists = errors.New("order exists")

// create handles POST /orders {"id": optional, "customer": "...", "amount":
// cents}: a pending order at version 1, and its order.created event.
func (o *orders) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID       string `json:"id"`
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"` // in cents
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return
	}
	if req.Customer == "" || req.Amount <= 0 || !validID(req.ID) {
		writeError(w, http.StatusBadRequest, errors.New(`want {"id": optional, 1-64 of [A-Za-z0-9._-], "customer": non-empty, "amount": positive cents}`))
		return
	}
	if req.ID == "" {
		req.ID = "ord-" + uuid.NewString()
	}
	rep, err := o.change(r.Context(), "order.created", traceID(r), func(tx pgx.Tx) (ord order, changed bool, err error) {
		err = tx.QueryRow(r.Context(), `INSERT INTO `+o.table.Quoted()+` (id, customer_id, amount_cents, currency, status, version)
	VALUES ($1, $2, $3, 'EUR', 'pending', 1) ON CONFLICT (id) DO NOTHING
	RETURNING `+orderColumns, req.ID, req.Customer, req.Amount).Scan(ord.fields()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return ord, false, errExists
		}
		return ord, err == nil, err
	})
	o.respond(w, http.StatusCreated, rep, err)
}

// confirm handles POST /orders/{id}/confirm. The UPDATE is conditional:
// only a pending order changes, so a repeated confirm writes no second
// event (it answers 200 with the order and no event_id), and an order's
// events carry consecutive versions.
func (o *orders) confirm(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rep, err := o.change(r.Context(), "order.confirmed", traceID(r), func(tx pgx.Tx) (ord order, changed bool, err error) {
		err = tx.QueryRow(r.Context(), `UPDATE `+o.table.Quoted()+`
	SET status = 'confirmed', version = version + 1, updated_at = now()
	WHERE id = $1 AND status = 'pending'
	RETURNING `+orderColumns, id).Scan(ord.fields()...)
		if errors.Is(err, pgx.ErrNoRows) {
			// Not pending: nothing to announce. Report the order as it
			// is (pgx.ErrNoRows again when there is none: 404).
			err = tx.QueryRow(r.Context(), `SELECT `+orderColumns+` FROM `+o.table.Quoted()+` WHERE id = $1`, id).Scan(ord.fields()...)
			return ord, false, err
		}
		return ord, err == nil, err
	})
	o.respond(w, http.StatusOK, rep, err)
}

// change runs apply in a transaction and, when it changed the order,
// appends eventType with the order as payload before committing: the row
// and the event commit together or not at all.
func (o *orders) change(ctx context.Context, eventType, traceID string, apply func(pgx.Tx) (order, bool, error)) (reply, error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return reply{}, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	ord, changed, err := apply(tx)
	if err != nil || !changed {
		return reply{order: ord}, err
	}
	payload, err := json.Marshal(ord)
	if err != nil {
		return reply{}, fmt.Errorf("encode payload: %w", err)
	}
	ev := &outbox.Event{
		AggregateType:    "order", // the topic: outbox.event.order by default
		AggregateID:      ord.ID,  // the key: one order's events stay in order
		AggregateVersion: ord.Version,
		EventType:        eventType,
		SchemaVersion:    1,
		Payload:          payload,
		Headers:          map[string]string{"trace_id": traceID, "source": "examples/embedded"},
	}
	if err := o.outbox.Append(ctx, outbox.PgxTx(tx), ev); err != nil {
		return reply{}, err
	}
	// A failed commit may still have committed (the connection broke on
	// the way back): the client sees a 500 and may retry; a create with
	// its own id then gets 409, a confirm 200 without an event.
	if err := tx.Commit(ctx); err != nil {
		return reply{}, fmt.Errorf("commit: %w", err)
	}
	return reply{order: ord, EventID: ev.EventID.String()}, nil
}

func (o *orders) respond(w http.ResponseWriter, code int, rep reply, err error) {
	switch {
	case errors.Is(err, errExists):
		writeError(w, http.StatusConflict, err)
	case errors.Is(err, pgx.ErrNoRows):
		writeError(w, http.StatusNotFound, errors.New("no such order"))
	case err != nil:
		o.log.Error("request failed", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, errors.New("internal error"))
	case rep.EventID == "":
		writeJSON(w, http.StatusOK, rep) // nothing changed
	default:
		writeJSON(w, code, rep)
	}
}

// validID accepts an empty id (the service picks one) or 1-64 URL-safe
// characters, since the id is part of the confirm URL.
func validID(id string) bool {
	return len(id) <= 64 && !strings.ContainsFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')
	})
}

// traceID continues the caller's W3C trace (the traceparent header
// "00-<trace id>-<parent id>-<flags>") or starts one. Consumers get it as
// the record's trace_id header.
func traceID(r *http.Request) string {
	if p := strings.Split(r.Header.Get("traceparent"), "-"); len(p) == 4 && len(p[1]) == 32 {
		if _, err := hex.DecodeString(p[1]); err == nil {
			return p[1]
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
