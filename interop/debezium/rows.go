package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// aggregateTypes route the events to three topics per side.
var aggregateTypes = []string{"order", "customer", "payment"}

// row is one outbox row of the comparison.
type row struct {
	aggType, aggID, eventType string
	version                   int64
	schemaVersion             int
	payload                   *string // JSON text (PostgreSQL stores it as jsonb), or NULL
	headers                   *string // JSON object text, or NULL
}

// payloadCases are JSON payloads whose jsonb text the Outbox Event
// Router expands (table.expand.json.payload=true) or keeps as a string,
// without failing: nulls and empty arrays (members the router drops),
// escapes and characters beyond the BMP (which Jackson writes as escaped
// surrogates), int32/int64 limits, fractions and exponents (re-printed
// the way Java prints a double), arrays whose elements differ in type
// (kept as a string), a repeated member, a top-level string and number.
// Payloads the router cannot convert at all stop the Connect task (an
// integer beyond int64, a top-level array of objects, array elements of
// one type whose inferred schemas conflict; docs/formats.md): a real
// deployment cannot have those either, so they are not written.
var payloadCases = []string{
	`{"a": 1, "b": null}`,
	`{}`,
	`{"a": [], "b": {}, "c": {"d": null}}`,
	`{"i": 2147483647, "l": 2147483648, "n": -9223372036854775808, "z": -0}`,
	`{"d": [1.0, 0.1, 100.5, 1e2, 1E-7, 0.001, 0.0001, 1234567.0, 12345678.5, -0.0, 0.30000000000000004]}`,
	`{"s": "a\"b\\c/\b\f\n\r\t\u0001\u001f\u007f é☃😀"}`,
	`{"a": [{"x": 1, "y": null}, {"x": 2, "z": [true, null]}]}`,
	`{"a": [[1, 2], [3]], "b": [null, "x", null]}`,
	`{"a": 1, "a": 2, "b": 3}`,
	`{"a": [null]}`,
	`{"a": [1, "x"]}`,
	`{"a": [1, 2147483648]}`,
	`{"a": [1, 1.5]}`,
	`{"a": [[]]}`,
	`"a string"`,
	`42`,
	`{"name": "Zoë Ångström", "city": "Zürich", "emoji": "🚚📦", "cjk": "配送", "rtl": "שלום"}`,
	`{"flags": [true, false, true], "tags": ["a", "b"], "nested": {"deeper": {"deepest": {"v": 1}}}}`,
}

// orderPayload is the common shape: an order with line items, money as
// fractions, a note of varying length.
func orderPayload(i int, r *rand.Rand) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"orderId": %d, "customerId": "cust-%d", "status": %q, "lineItems": [`, i, r.IntN(5000), []string{"ENTERED", "PAID", "SHIPPED", "CANCELLED"}[r.IntN(4)])
	n := 1 + r.IntN(4)
	total := 0.0
	for j := range n {
		if j > 0 {
			b.WriteString(", ")
		}
		price := float64(r.IntN(100000)) / 100
		total += price
		fmt.Fprintf(&b, `{"sku": "sku-%d", "quantity": %d, "price": %.2f}`, r.IntN(100000), 1+r.IntN(5), price)
	}
	fmt.Fprintf(&b, `], "total": %.2f, "currency": "EUR", "note": %q, "createdAt": "2026-12-04T10:%02d:%02d.%06dZ"}`,
		total, strings.Repeat("x", r.IntN(400)), r.IntN(60), r.IntN(60), r.IntN(1000000))
	return b.String()
}

// headerCases are the rows' headers column: NULL, an empty object, W3C
// trace context, values that need escaping or are not ASCII, an empty
// value.
func headerCase(i int, r *rand.Rand) *string {
	var s string
	switch i % 5 {
	case 0:
		return nil
	case 1:
		s = `{}`
	case 2:
		s = fmt.Sprintf(`{"traceparent": "00-%016x%016x-%016x-01", "tracestate": "vendor=v%d"}`, r.Uint64(), r.Uint64(), r.Uint64(), i)
	case 3:
		s = fmt.Sprintf(`{"tenant": "Zoë-%d", "quote": "a\"b\\c", "empty": ""}`, i%7)
	default:
		s = fmt.Sprintf(`{"correlation-id": "corr-%d"}`, i)
	}
	return &s
}

// aggregateIDs: mostly ASCII, some not (the key bytes are UTF-8 on both
// sides and murmur2 partitions on them).
func aggregateID(typ string, k int) string {
	if k%50 == 7 {
		return fmt.Sprintf("%s-ü-%d", typ, k)
	}
	return fmt.Sprintf("%s-%d", typ, k)
}

// nullEvery: with tombstones, every nullEvery-th row has a NULL payload.
const nullEvery = 97

// compareRows are n rows over 3 aggregate types and n/20 aggregates per
// type, versions counting up per aggregate; every 3rd payload is one of
// payloadCases, the rest orders; with tombstones, every nullEvery-th
// payload is NULL.
func compareRows(n int, seed uint64, tombstones bool) []row {
	r := rand.New(rand.NewPCG(seed, 20))
	aggs := max(1, n/20)
	versions := map[string]int64{}
	rows := make([]row, n)
	for i := range rows {
		typ := aggregateTypes[r.IntN(len(aggregateTypes))]
		id := aggregateID(typ, r.IntN(aggs))
		versions[typ+"/"+id]++
		p := orderPayload(i, r)
		if i%3 == 0 {
			p = payloadCases[(i/3)%len(payloadCases)]
		}
		rows[i] = row{
			aggType: typ, aggID: id, eventType: typ + "." + []string{"created", "updated", "closed"}[r.IntN(3)],
			version: versions[typ+"/"+id], schemaVersion: 1 + r.IntN(3),
			payload: &p, headers: headerCase(i, r),
		}
		if tombstones && i%nullEvery == nullEvery-1 {
			rows[i].payload = nil
		}
	}
	return rows
}

// insertRows commits rows in transactions of 1 to 20 rows, in order.
func insertRows(ctx context.Context, pool *pgxpool.Pool, table string, rows []row, seed uint64) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(seed, 21))
	sql := `INSERT INTO ` + table + ` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers)
VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6::jsonb, $7::jsonb)`
	for i := 0; i < len(rows); {
		n := min(1+r.IntN(20), len(rows)-i)
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		for _, x := range rows[i : i+n] {
			b.Queue(sql, x.aggType, x.aggID, x.version, x.eventType, x.schemaVersion, x.payload, x.headers)
		}
		b.Queue("COMMIT")
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("insert rows %d..%d: %w", i, i+n-1, err)
		}
		i += n
	}
	return nil
}

// drainPayloadSQL is the drain's payload for row j (a bigint SQL
// expression): the ~300-byte order of outbox-bench (bench/cmd/outbox-bench).
func drainPayloadSQL(j string) string {
	return fmt.Sprintf(`jsonb_build_object('order_id', %[1]s, 'customer_id', 'cust-' || (%[1]s %% 5000), `+
		`'amount_cents', (%[1]s * 7919) %% 100000, 'currency', 'EUR', 'status', 'confirmed', 'note', repeat('x', 175))`, j)
}

// insertBacklog commits n drain rows, one per transaction, from two
// connections, each running one server-side loop (synchronous_commit
// off: the WAL is the same, writing it is faster). Rows carry a W3C
// traceparent header; aggregate j mod 1000 of type j mod 3.
func insertBacklog(ctx context.Context, pool *pgxpool.Pool, table string, n int) error {
	const conns = 2
	g, gctx := errgroup.WithContext(ctx)
	for c := range conns {
		lo, hi := c*n/conns, (c+1)*n/conns-1
		if lo > hi {
			continue
		}
		g.Go(func() error {
			conn, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(gctx, `SET synchronous_commit = off`); err != nil {
				return err
			}
			sql := fmt.Sprintf(`DO $interop$
DECLARE j bigint;
BEGIN
  FOR j IN %d..%d LOOP
    INSERT INTO %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers)
    VALUES (gen_random_uuid(), (ARRAY['order','customer','payment'])[j %% 3 + 1], 'agg-' || (j %% 1000), j / 1000 + 1,
      'drain.created', 1, %s,
      jsonb_build_object('traceparent', '00-' || lpad(to_hex(j), 32, '0') || '-' || lpad(to_hex(j), 16, '0') || '-01'));
    COMMIT;
  END LOOP;
END
$interop$`, lo, hi, table, drainPayloadSQL("j"))
			_, err = conn.Exec(gctx, sql)
			return err
		})
	}
	return g.Wait()
}
