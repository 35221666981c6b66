package main

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a strings.Builder safe for the signal goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecondSignalExitsAtOnce: the first SIGINT starts the graceful
// shutdown (ctx ends); a second one exits at once with exitInterrupted,
// saying so.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	var out syncBuffer
	exited := make(chan int, 1)
	ctx, stop := interruptible(&out, func(code int) { exited <- code })
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
	case <-time.After(100 * time.Millisecond):
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != exitInterrupted || !strings.Contains(out.String(), "second interrupt during shutdown: exiting now") {
			t.Fatalf("exit %d, stderr %q", code, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second SIGINT did not exit")
	}
}
