// Command tail is a tiny Kafka consumer for the outbox-relay demo. It
// reads every partition of one topic without a consumer group (so it never
// commits offsets or disturbs other consumers) and prints one line per
// record: topic, partition, offset, key, timestamp, headers and the start
// of the value.
//
// Usage:
//
//	go run ./examples/tail --from-beginning --duration 8s
//
// It exits after --duration (or on SIGINT/SIGTERM) and prints how many
// records it saw. The exit status is 1 if the topic never appeared.
package main

import (
	"context"
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
	if err := fs.Parse(args); err != nil {
		return config{}, err
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

	n, err := tail(ctx, cfg, stdout, stderr)
	fmt.Fprintf(stdout, "tail: %d records from %s\n", n, cfg.topic)
	if err != nil {
		fmt.Fprintln(stderr, "tail:", err)
		return 1
	}
	return 0
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

// tail reads every partition until ctx ends and returns the record count.
func tail(ctx context.Context, cfg config, stdout, stderr io.Writer) (int, error) {
	ids, err := partitions(ctx, cfg, stderr)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stdout, "tail: reading %s partitions %v from %s\n", cfg.topic, ids, startName(cfg.fromBeginning))

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
		if !cfg.fromBeginning {
			if err := r.SetOffset(kafka.LastOffset); err != nil {
				_ = r.Close()
				return count, fmt.Errorf("partition %d: %w", id, err)
			}
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
				line := formatRecord(m)
				mu.Lock()
				count++
				fmt.Fprintln(stdout, line)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return count, nil
}

func startName(fromBeginning bool) string {
	if fromBeginning {
		return "the beginning"
	}
	return "the end"
}

// maxValueChars bounds how much of each value is printed; payloads are for
// recognising records, not for reading.
const maxValueChars = 60

// formatRecord renders one record on one line.
func formatRecord(m kafka.Message) string {
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
	b.WriteString("] value=")
	b.WriteString(truncate(m.Value, maxValueChars))
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
