package checkpoint

import (
	"log/slog"
	"testing"
)

// testLogger is the one place this package's tests build a logger.
func testLogger(testing.TB) *slog.Logger { return slog.New(slog.DiscardHandler) }
