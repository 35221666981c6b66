// Package process is the binary's process set-up: the shutdown on
// SIGINT and SIGTERM, and GOMAXPROCS.
package process

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Interruptible returns a context that ends on the first SIGINT or
// SIGTERM, starting the graceful shutdown (the drain of in-flight events
// can take up to --shutdown-timeout). A second signal means the operator
// does not want to wait: it says so on stderr and calls exit with
// code at once. stop releases the signals.
func Interruptible(stderr io.Writer, exit func(int), code int) (ctx context.Context, stop func()) {
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
			fmt.Fprintf(stderr, "outbox-relay: second %v during shutdown: exiting now (exit code %d) without waiting for in-flight events; they are sent again on the next start\n", s, code)
			exit(code)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
