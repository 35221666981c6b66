package main

import (
	"os"
	"strings"
)

// stackKafkaVersion reads KAFKA_VERSION=… from the stack script.
func stackKafkaVersion(script string) string {
	data, err := os.ReadFile(script)
	if err != nil {
		return "?"
	}
	return parseKafkaVersion(string(data))
}

func parseKafkaVersion(script string) string {
	for _, line := range strings.Split(script, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "KAFKA_VERSION="); ok {
			if i := strings.IndexAny(v, " \t#"); i >= 0 {
				v = v[:i]
			}
			if v = strings.Trim(v, `"'`); v != "" {
				return v
			}
		}
	}
	return "?"
}
