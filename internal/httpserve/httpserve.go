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
	// Conns is how many connections are open at once (at least one). A
	// connection beyond it is served, and the oldest other one is closed:
	// see evictListener.
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
// (ln, holding at most lim.Conns connections).
func Server(h http.Handler, ln net.Listener, lim Limits) (*http.Server, net.Listener) {
	t := &tracker{max: max(lim.Conns, 1), conns: map[net.Conn]*tracked{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeader, ReadTimeout: lim.Read,
		WriteTimeout: lim.Write, IdleTimeout: lim.Idle, ConnState: t.state}
	return srv, &evictListener{Listener: ln, t: t}
}

// evictListener bounds the open connections by closing the oldest one
// when a new one would exceed the bound, rather than by leaving the new
// one in the kernel's backlog until one closes (issue 46): there, anyone
// who reaches the port could hold every slot with silent connections,
// headers sent a byte at a time or idle keep-alives, each for its
// timeout, reconnect as each was closed, and keep a kubelet's 1 s
// liveness probe waiting until Kubernetes restarted the pod. Now a client
// keeps a connection only until enough others arrive, and the probe,
// the newest, is the last to go. Per-client limits would not do: the
// kubelet and an attacker on the pod network may share an address (a
// node's, behind SNAT), and an attacker may have many.
//
// The victim is the connection that has waited longest without a
// request in progress (new or idle, per http.Server's ConnState: a
// silent client, a slow sender of headers, an idle keep-alive); when
// every one is in a request, the longest-running one (a client reading
// its response slowly, holding its handler in Write). Only a flood of
// new connections, more than the bound within the moment a probe takes,
// could close a probe's; that is for the network policy.
type evictListener struct {
	net.Listener
	t *tracker
}

func (l *evictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if victim := l.t.add(c); victim != nil {
		// Its goroutine sees the error and ends (StateClosed).
		_ = victim.Close()
	}
	return c, nil
}

// tracker knows each open connection's state and when it entered it
// (an order, not a clock: only which is oldest matters).
type tracker struct {
	max int

	mu    sync.Mutex
	seq   uint64
	conns map[net.Conn]*tracked
}

type tracked struct {
	state http.ConnState
	since uint64
}

// add tracks c, a new connection, and returns the connection to close
// if c exceeds the bound (no longer tracked), else nil.
func (t *tracker) add(c net.Conn) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	t.conns[c] = &tracked{state: http.StateNew, since: t.seq}
	if len(t.conns) <= t.max {
		return nil
	}
	var victim net.Conn
	var vt *tracked
	for oc, ot := range t.conns {
		if oc == c {
			continue
		}
		if vt == nil || older(ot, vt) {
			victim, vt = oc, ot
		}
	}
	delete(t.conns, victim)
	return victim
}

// older reports whether a is to be closed before b: a connection
// without a request in progress before one with, then the one longest
// in its state.
func older(a, b *tracked) bool {
	if aw, bw := a.state != http.StateActive, b.state != http.StateActive; aw != bw {
		return aw
	}
	return a.since < b.since
}

// state is the server's ConnState hook. A connection closed by add is
// no longer tracked, and stays so.
func (t *tracker) state(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.conns[c]
	switch {
	case !ok:
	case s == http.StateClosed || s == http.StateHijacked:
		delete(t.conns, c)
	case s != e.state:
		t.seq++
		e.state, e.since = s, t.seq
	}
}
