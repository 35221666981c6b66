package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// interruptible returns a context that ends on the first SIGINT or
// SIGTERM, starting the graceful shutdown (the drain of in-flight events
// can take up to --shutdown-timeout). A second signal means the operator
// does not want to wait: it says so on stderr and calls exit with
// exitInterrupted at once. stop releases the signals.
func interruptible(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "outbox-relay: second %v during shutdown: exiting now (exit code %d) without waiting for in-flight events; they are sent again on the next start\n", s, exitInterrupted)
			exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
