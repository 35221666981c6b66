package main

import (
	"os"
	"strings"
)

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			return strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
		}
	}
	return "?"
}

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
