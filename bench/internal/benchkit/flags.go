package benchkit

import (
	"errors"
	"flag"
	"os"
	"strings"
)

// StackFlags are the flags that say where the stack's PostgreSQL and
// Kafka run, -database-url and -kafka-brokers, by default what
// `eval "$(scripts/stack.sh env)"` puts in the environment.
type StackFlags struct {
	databaseURL, brokers string
}

// NewStackFlags registers the flags on fs.
func NewStackFlags(fs *flag.FlagSet) *StackFlags {
	f := &StackFlags{}
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("OUTBOX_RELAY_DATABASE_URL"), "PostgreSQL URL (default $OUTBOX_RELAY_DATABASE_URL)")
	fs.StringVar(&f.brokers, "kafka-brokers", os.Getenv("OUTBOX_RELAY_KAFKA_BROKERS"), "Kafka brokers (default $OUTBOX_RELAY_KAFKA_BROKERS)")
	return f
}

// Values returns, once the flag set is parsed, the database URL and the
// brokers (the comma-separated list without blanks), or an error that
// says how to set them when either is missing.
func (f *StackFlags) Values() (databaseURL string, brokers []string, err error) {
	for _, b := range strings.Split(f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if f.databaseURL == "" || len(brokers) == 0 {
		return "", nil, errors.New(`set OUTBOX_RELAY_DATABASE_URL and OUTBOX_RELAY_KAFKA_BROKERS (eval "$(scripts/stack.sh env)") or -database-url and -kafka-brokers`)
	}
	return f.databaseURL, brokers, nil
}

// LogDir makes dir, the -log-dir of a run, and returns it; for dir "" it
// makes a new directory under $TMPDIR whose name starts with prefix.
func LogDir(dir, prefix string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", prefix)
	}
	return dir, os.MkdirAll(dir, 0o755)
}
