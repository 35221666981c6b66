package flagtext

import (
	"slices"
	"strings"
	"testing"
)

var testFlags = map[string]string{"Publish.MaxBatch": "--max-batch", "Publish.MaxBatchBytes": "--max-batch-bytes",
	"Kafka.TLS": "--kafka-tls", "Kafka.TLS.RootCAs": "--kafka-tls-ca-file", "Leader": "--leader-timeout"}

func TestTableFind(t *testing.T) {
	tab := NewTable(testFlags)
	for text, want := range map[string]string{
		"exceeds Publish.MaxBatchBytes 1":            "Publish.MaxBatchBytes=--max-batch-bytes",
		"see Publish.MaxBatch, and Kafka.TLS.":       "Kafka.TLS=--kafka-tls Publish.MaxBatch=--max-batch",
		"set Kafka.TLS.RootCAs (Kafka.TLS)":          "Kafka.TLS.RootCAs=--kafka-tls-ca-file Kafka.TLS=--kafka-tls",
		"Leaders and XPublish.MaxBatch stay":         "",
		"Leader: use a larger Leader timeout":        "Leader=--leader-timeout",
		"nothing here, not even Publish.MaxBatchBit": "",
	} {
		var got []string
		for f, flag := range tab.Find(text) {
			got = append(got, f+"="+flag)
		}
		slices.Sort(got)
		if strings.Join(got, " ") != want {
			t.Errorf("%q: %v, want %s", text, got, want)
		}
	}
}

// TestTableReplace: the same fields Find reports are renamed, and only
// those.
func TestTableReplace(t *testing.T) {
	tab := NewTable(testFlags)
	for text, want := range map[string]string{
		"exceeds Publish.MaxBatchBytes 1":      "exceeds --max-batch-bytes 1",
		"see Publish.MaxBatch, and Kafka.TLS.": "see --max-batch, and --kafka-tls.",
		"set Kafka.TLS.RootCAs (Kafka.TLS)":    "set --kafka-tls-ca-file (--kafka-tls)",
		"Leaders and XPublish.MaxBatch stay":   "Leaders and XPublish.MaxBatch stay",
		"Leader: use a larger Leader timeout":  "--leader-timeout: use a larger --leader-timeout timeout",
		"":                                     "",
	} {
		if got := tab.Replace(text); got != want {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
}
