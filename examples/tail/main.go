// Command tail is a tiny Kafka consumer for the outbox-relay demo. It
// reads every partition of one topic without a consumer group (so it never
// commits offsets or disturbs other consumers) and prints one line per
// record: topic, partition, offset, key, timestamp, headers and the start
// of the value.
//
// With --schema-registry-url it decodes values in the Confluent wire
// format (the relay's --record-format avro, protobuf or json-schema)
// with the schema their id names, through the registry client the relay
// and the inbox use (internal/schemareg, record.Schema.DecodeValue), and
// prints each such value whole, as JSON, after its schema_id. --since
// starts at the records of a time (or of a duration ago) rather than at
// the end, and --max-records ends the tail once it has read that many.
//
// Usage:
//
//	go run ./examples/tail --from-beginning --duration 8s
//	go run ./examples/tail --topic outbox.avro.order --since 1m --schema-registry-url http://127.0.0.1:19081/apis/ccompat/v7
//
// It exits after --duration, --max-records or SIGINT/SIGTERM, and prints how many
// records it saw (and, with a registry, how many values it decoded). The
// exit status is 1 if the topic never appeared or a framed value did not
// decode.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/record"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	brokers       []string
	topic         string
	duration      time.Duration
	fromBeginning bool
	// since, when not zero, is where reading starts: the first record of
	// each partition at or after it.
	since time.Time
	// registryURL, when set, decodes framed values (docs/schemas.md).
	registryURL string
	// maxRecords, when positive, ends the tail at that many records.
	maxRecords int
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := os.Getenv("OUTBOX_RELAY_KAFKA_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:19092"
	}
	var cfg config
	fs.StringVar(&brokers, "brokers", brokers, "comma-separated Kafka bootstrap brokers (env OUTBOX_RELAY_KAFKA_BROKERS)")
	fs.StringVar(&cfg.topic, "topic", "outbox.event.order", "topic to read")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to read before exiting")
	fs.BoolVar(&cfg.fromBeginning, "from-beginning", false, "start at the oldest record instead of only new ones")
	fs.IntVar(&cfg.maxRecords, "max-records", 0, "exit once this many records were read (0 = read until --duration)")
	since := fs.String("since", "", "start at the records of this time (RFC 3339) or of this long ago (e.g. 1m) instead of only new ones")
	fs.StringVar(&cfg.registryURL, "schema-registry-url", "",
		"decode values in the Confluent wire format (--record-format avro, protobuf, json-schema) with this registry, its Confluent-compatible API, and print them as JSON")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if *since != "" {
		t, err := parseSince(*since, time.Now())
		if err != nil {
			return config{}, err
		}
		if cfg.fromBeginning {
			return config{}, errors.New("--since and --from-beginning: use one")
		}
		cfg.since = t
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for b := range strings.SplitSeq(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.brokers = append(cfg.brokers, b)
		}
	}
	if len(cfg.brokers) == 0 {
		return config{}, errors.New("--brokers is empty")
	}
	if cfg.topic == "" {
		return config{}, errors.New("--topic is empty")
	}
	if cfg.duration <= 0 {
		return config{}, fmt.Errorf("--duration must be positive, got %s", cfg.duration)
	}
	if cfg.maxRecords < 0 {
		return config{}, fmt.Errorf("--max-records must not be negative, got %d", cfg.maxRecords)
	}
	return cfg, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "tail:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	var dec *decoder
	if cfg.registryURL != "" {
		reg, err := schemareg.New(record.RegistryConfig{URL: cfg.registryURL})
		if err != nil {
			fmt.Fprintln(stderr, "tail: --schema-registry-url:", err)
			return 2
		}
		dec = &decoder{reg: reg}
	}
	n, err := tail(ctx, cfg, dec, stdout, stderr)
	fmt.Fprintf(stdout, "tail: %d records from %s\n", n, cfg.topic)
	if dec != nil {
		fmt.Fprintf(stdout, "tail: %d values decoded with the schema registry, %d not framed, %d did not decode\n",
			dec.decoded, dec.plain, dec.failed)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tail:", err)
		return 1
	}
	if dec != nil && dec.failed > 0 {
		return 1
	}
	return 0
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since must not be negative, got %s", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time or a duration such as 1m", s)
	}
	return t, nil
}

// schemaLookup is what the tail needs of a registry client: the parsed
// schema of an id (schemareg.Client.Parsed, cached per id).
type schemaLookup interface {
	Parsed(ctx context.Context, id uint32) (*record.Schema, error)
}

// decoder decodes framed values to JSON; its counts are guarded by the
// tail's output mutex.
type decoder struct {
	reg                    schemaLookup
	decoded, plain, failed int
}

// format renders m, its value decoded when it is framed: the JSON whole
// (a record is read here to be looked at), after its schema id. A value
// that is not framed is shown as formatRecord shows it; one that does not
// decode keeps its bytes, with the reason.
func (d *decoder) format(ctx context.Context, m kafka.Message) (line string, ok, framed bool) {
	id, err := record.SchemaIDOf(m.Value)
	if err != nil {
		return formatRecord(m), true, false
	}
	s, err := d.reg.Parsed(ctx, id)
	var js []byte
	if err == nil {
		js, err = s.DecodeValue(m.Value)
	}
	if err == nil {
		var compact bytes.Buffer
		if err = json.Compact(&compact, js); err == nil {
			return fmt.Sprintf("%sschema_id=%d value=%s", recordPrefix(m), id, compact.Bytes()), true, true
		}
	}
	return fmt.Sprintf("%sschema_id=%d decode_error=%s value=%s", recordPrefix(m), id,
		strconv.Quote(err.Error()), truncate(m.Value, maxValueChars)), false, true
}

// partitions looks the topic up, retrying until it exists: in the demo the
// relay may create it only after tail has started.
func partitions(ctx context.Context, cfg config, stderr io.Writer) ([]int, error) {
	client := &kafka.Client{Addr: kafka.TCP(cfg.brokers...), Timeout: 5 * time.Second}
	var lastErr error
	for attempt := 0; ; attempt++ {
		ids, err := lookup(ctx, client, cfg.topic)
		if err == nil && len(ids) > 0 {
			return ids, nil
		}
		if err == nil {
			err = errors.New("no partitions")
		}
		if attempt == 0 || err.Error() != lastErr.Error() {
			fmt.Fprintf(stderr, "tail: topic %s not readable yet (%v); retrying\n", cfg.topic, err)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topic %s: %w", cfg.topic, lastErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func lookup(ctx context.Context, client *kafka.Client, topic string) ([]int, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, t.Error
		}
		ids := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		return ids, nil
	}
	return nil, kafka.UnknownTopicOrPartition
}

// tail reads every partition until ctx ends and returns the record
// count; dec, if not nil, decodes the framed values.
func tail(ctx context.Context, cfg config, dec *decoder, stdout, stderr io.Writer) (int, error) {
	ids, err := partitions(ctx, cfg, stderr)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stdout, "tail: reading %s partitions %v from %s\n", cfg.topic, ids, startName(cfg))
	// enough ends the readers once maxRecords were printed.
	ctx, enough := context.WithCancel(ctx)
	defer enough()

	var (
		mu    sync.Mutex // serialises output lines and count
		count int
		wg    sync.WaitGroup
	)
	for _, id := range ids {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:   cfg.brokers,
			Topic:     cfg.topic,
			Partition: id,
			MinBytes:  1,
			MaxBytes:  10 << 20,
			MaxWait:   250 * time.Millisecond,
		})
		var err error
		switch {
		case !cfg.since.IsZero():
			err = r.SetOffsetAt(ctx, cfg.since)
		case !cfg.fromBeginning:
			err = r.SetOffset(kafka.LastOffset)
		}
		if err != nil {
			_ = r.Close()
			return count, fmt.Errorf("partition %d: %w", id, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintf(stderr, "tail: partition %d: %v\n", id, err)
					}
					return
				}
				var line string
				ok, framed := true, false
				if dec != nil {
					line, ok, framed = dec.format(ctx, m)
				} else {
					line = formatRecord(m)
				}
				mu.Lock()
				if cfg.maxRecords > 0 && count >= cfg.maxRecords {
					mu.Unlock()
					return
				}
				if dec != nil {
					switch {
					case !framed:
						dec.plain++
					case ok:
						dec.decoded++
					default:
						dec.failed++
					}
				}
				count++
				fmt.Fprintln(stdout, line)
				if count == cfg.maxRecords {
					enough()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return count, nil
}

func startName(cfg config) string {
	switch {
	case !cfg.since.IsZero():
		return cfg.since.UTC().Format(time.RFC3339Nano)
	case cfg.fromBeginning:
		return "the beginning"
	}
	return "the end"
}

// maxValueChars bounds how much of each value is printed; payloads are for
// recognising records, not for reading.
const maxValueChars = 60

// formatRecord renders one record on one line.
func formatRecord(m kafka.Message) string {
	return recordPrefix(m) + "value=" + truncate(m.Value, maxValueChars)
}

// recordPrefix is the line of m up to its value: where it is, its key,
// time and headers, and a space.
func recordPrefix(m kafka.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s p=%d off=%d key=%s ts=%s headers=[", m.Topic, m.Partition, m.Offset,
		printable(m.Key), m.Time.UTC().Format("2006-01-02T15:04:05.000Z"))
	for i, h := range m.Headers {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(printable([]byte(h.Key)))
		b.WriteByte('=')
		b.WriteString(printable(h.Value))
	}
	b.WriteString("] ")
	return b.String()
}

// printable returns s as is when it is a plain token, and Go-quoted when it
// contains spaces, control characters or invalid UTF-8, so that one record
// always stays on one line and fields stay separable.
func printable(s []byte) string {
	if len(s) == 0 {
		return `""`
	}
	if !utf8.Valid(s) || strings.IndexFunc(string(s), func(r rune) bool {
		return unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) >= 0 {
		return strconv.Quote(string(s))
	}
	return string(s)
}

// truncate shortens v to at most n characters (runes for text, bytes for
// binary), marking the cut with "…". Newlines are escaped.
func truncate(v []byte, n int) string {
	if !utf8.Valid(v) {
		if len(v) > n {
			return strconv.Quote(string(v[:n])) + "…"
		}
		return strconv.Quote(string(v))
	}
	s := string(v)
	cut := false
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n])
		cut = true
	}
	s = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
	if cut {
		s += "…"
	}
	return s
}
