package outbox_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver for database/sql

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Confirming an order with pgx: the conditional UPDATE and the
// order.confirmed event commit together, and the event's version is the
// one the UPDATE returned. The second confirmation matches no row: it gets
// ErrInvalidTransition, writes nothing and counts a conflict.
//
// It needs DATABASE_URL, an outbox table (OUTBOX_TABLE, default
// public.outbox, from "outbox-relay migrate") and a table
// orders (id text PRIMARY KEY, status text, version bigint). It prints:
//
//	confirmed, event at version 2
//	already confirmed: no event written
func ExampleWriter_Transition() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	table, err := migrations.ParseTable(cmp.Or(os.Getenv("OUTBOX_TABLE"), "public.outbox"))
	if err != nil {
		log.Fatal(err)
	}
	w := outbox.NewWriter(table) // outbox.WithMetrics(outboxprom.New(reg)) counts the conflicts

	id := "ord-" + uuid.NewString()
	if _, err := pool.Exec(ctx, `INSERT INTO orders (id, status, version) VALUES ($1, 'pending', 1)`, id); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		ev := &outbox.Event{
			AggregateType: "order",
			AggregateID:   id,
			EventType:     "order.confirmed",
			SchemaVersion: 1,
			Payload:       []byte(`{"status":"confirmed"}`),
		}
		// BeginFunc commits when the function returns nil, else rolls back.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return w.Transition(ctx, outbox.PgxTx(tx), outbox.Transition{
				SQL: `UPDATE orders SET status = 'confirmed', version = version + 1
				      WHERE id = $1 AND status = 'pending' RETURNING version`,
				Args:  []any{id},
				Event: ev,
			})
		})
		switch {
		case errors.Is(err, outbox.ErrInvalidTransition):
			fmt.Println("already confirmed: no event written")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("confirmed, event at version", ev.AggregateVersion)
		}
	}
}

// The same with database/sql (here through the pgx driver,
// github.com/jackc/pgx/v5/stdlib), with a domain error of the service's
// own for the conflict, which callers can map to e.g. HTTP 409.
//
// Same set-up as the pgx example. It prints:
//
//	confirmed, event at version 2
//	order is not pending: no event written
func ExampleWriter_Transition_databaseSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	table, err := migrations.ParseTable(cmp.Or(os.Getenv("OUTBOX_TABLE"), "public.outbox"))
	if err != nil {
		log.Fatal(err)
	}
	w := outbox.NewWriter(table)
	errNotPending := errors.New("order is not pending")

	confirm := func(id string) (version int64, err error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback() // after Commit: sql.ErrTxDone, ignored
		ev := &outbox.Event{
			AggregateType: "order",
			AggregateID:   id,
			EventType:     "order.confirmed",
			SchemaVersion: 1,
			Payload:       []byte(`{"status":"confirmed"}`),
		}
		err = w.Transition(ctx, outbox.SQLTx(tx), outbox.Transition{
			SQL: `UPDATE orders SET status = 'confirmed', version = version + 1
			      WHERE id = $1 AND status = 'pending' RETURNING version`,
			Args:    []any{id},
			Event:   ev,
			Invalid: errNotPending,
		})
		if err != nil {
			return 0, err
		}
		return ev.AggregateVersion, tx.Commit()
	}

	id := "ord-" + uuid.NewString()
	if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, status, version) VALUES ($1, 'pending', 1)`, id); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		version, err := confirm(id)
		switch {
		case errors.Is(err, errNotPending):
			fmt.Println(err.Error() + ": no event written")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("confirmed, event at version", version)
		}
	}
}
