// Package httpserve serves HTTP endpoints within limits: timeouts for
// reading and writing a request and for idle keep-alive connections, and
// a bound on open connections. The relay's probe, metrics and pprof
// servers use it; a port that Kubernetes, Prometheus or anyone on the
// network reaches must not let a client hold it open for ever.
package httpserve

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what a client of a server can hold.
type Limits struct {
	// ReadHeader and Read bound reading a request (a slow client that
	// never finishes its headers or body).
	ReadHeader, Read time.Duration
	// Write bounds writing a response (0: none, for profiles, which
	// stream for as long as they were asked to).
	Write time.Duration
	// Idle closes a keep-alive connection that sent nothing for this
	// long; scrapers reconnect at their next scrape.
	Idle time.Duration
	// Conns is how many connections are served at once; more wait in
	// the kernel's backlog until one closes.
	Conns int
}

// Probe are the limits of a probe and metrics server.
var Probe = Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second,
	Idle: 15 * time.Second, Conns: 64}

// Profiles are the limits of a pprof server, on loopback: no write
// timeout (Go's profile handler refuses a profile as long as it), a few
// connections.
var Profiles = Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Idle: 15 * time.Second, Conns: 4}

// Server is the server of h on ln within lim, and the listener to serve
// (ln, limited to lim.Conns connections).
func Server(h http.Handler, ln net.Listener, lim Limits) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeader, ReadTimeout: lim.Read,
		WriteTimeout: lim.Write, IdleTimeout: lim.Idle}
	return srv, &limitListener{Listener: ln, sem: make(chan struct{}, lim.Conns)}
}

// limitListener accepts a connection only while fewer than cap(sem) are
// open (golang.org/x/net/netutil.LimitListener, which this module does
// not otherwise need).
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
