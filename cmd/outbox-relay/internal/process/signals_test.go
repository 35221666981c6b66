package process

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// lines is a writer handing each write to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// TestSecondSignalExitsAtOnce: the first SIGINT starts the graceful
// shutdown (ctx ends); a second one exits at once with its code,
// saying so.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	out := make(lines, 1)
	exited := make(chan int, 1)
	ctx, stop := Interruptible(out, func(code int) { exited <- code }, 130)
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first SIGINT did not end the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("exit %d after the first signal", code)
	// wall-clock: a wrong exit gets 100 ms to happen; signals come from os/signal's process-wide goroutine, outside any bubble.
	case <-time.After(100 * time.Millisecond):
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if msg := <-out; code != 130 || !strings.Contains(msg, "second interrupt during shutdown: exiting now") {
			t.Fatalf("exit %d, stderr %q", code, msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second SIGINT did not exit")
	}
}
