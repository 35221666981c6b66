package httpserve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServerLimits: an idle keep-alive connection is closed after
// the idle timeout, a request that never finishes its headers after the
// header timeout, and no more than Conns connections are served at once
// (issue 36, row 2: an idle connection was still open after 20 s, and
// nothing bounded their number). Wall-clock: real sockets, so the
// timeouts are short here.
func TestServerLimits(t *testing.T) {
	t.Parallel()
	serve := func(lim Limits) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv, lln := Server(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }), ln, lim)
		go srv.Serve(lln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	addr := serve(Limits{ReadHeader: 300 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: 300 * time.Millisecond, Conns: 8})

	get := func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		return res.Body.Close()
	}
	closedWithin := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || err != nil && !strings.Contains(err.Error(), "timeout")
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := get(idle); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(idle, 3*time.Second) {
		t.Error("an idle keep-alive connection was open 3 s after its response (idle timeout 300ms)")
	}

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never ends its headers
	if !closedWithin(slow, 3*time.Second) {
		t.Error("a request that never finished its headers was open after 3 s (header timeout 300ms)")
	}

	// Conns 2: two idle keep-alives hold the bound; a third connection
	// is served at once, and the older idle one is closed.
	ln := listen(t)
	addr, tr := serveOn(t, ln, Limits{ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute, Conns: 2})
	a, _ := net.Dial("tcp", addr)
	b, _ := net.Dial("tcp", addr)
	defer a.Close()
	defer b.Close()
	// The server marks a connection idle just after the client has its
	// response: wait for it, so that a is idle before b.
	if err := get(a); err != nil {
		t.Fatal(err)
	}
	tr.waitIdle(t, a)
	if err := get(b); err != nil {
		t.Fatal(err)
	}
	tr.waitIdle(t, b)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := get(c); err != nil {
		t.Errorf("a third connection while two idle ones held the bound: %v", err)
	}
	if !closedWithin(a, 3*time.Second) {
		t.Error("the oldest idle connection was still open after a third arrived")
	}
	if err := get(b); err != nil {
		t.Errorf("the newer idle connection was closed: %v", err)
	}
	if n, most := ln.counts(); n > 2 || most > 3 {
		t.Errorf("%d connections open (at most %d at once), want at most 2 (3 for the moment of an eviction)", n, most)
	}
}

// countingListener counts the connections the server holds open: the
// ones it accepted and has not closed, and the most at once.
type countingListener struct {
	net.Listener
	mu         sync.Mutex
	open, most int
}

func listen(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &countingListener{Listener: ln}
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.most = max(l.most, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) counts() (open, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.most
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// waitIdle waits until the server's end of client connection c is idle.
func (tr *tracker) waitIdle(t *testing.T, c net.Conn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		idle := false
		for sc, e := range tr.conns {
			if sc.RemoteAddr().String() == c.LocalAddr().String() {
				idle = e.state == http.StateIdle
			}
		}
		tr.mu.Unlock()
		if idle {
			return
		}
	}
	t.Fatalf("the server's end of %s is not idle after 5 s", c.LocalAddr())
}

// serveOn serves a handler of /healthz ("ok") and /endless (a response
// that never ends) on ln within lim, and returns its address and its
// connections' tracker.
func serveOn(t *testing.T, ln net.Listener, lim Limits) (string, *tracker) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	mux.HandleFunc("/endless", func(w http.ResponseWriter, _ *http.Request) {
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	srv, lln := Server(mux, ln, lim)
	go srv.Serve(lln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), lln.(*evictListener).t
}

// probe is a kubelet's HTTP probe: a new connection, GET, 1 s timeout.
func probe(addr string) error {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := hc.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if body, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(body) != "ok" {
		return fmt.Errorf("HTTP %d %q", res.StatusCode, body)
	}
	return nil
}

// TestProbeNotStarvedByIdleOrHostileClients: with the probe server's
// limits (64 connections), 64 idle keep-alives, 64 silent connections
// and a client sending its headers a byte at a time do not keep a 1 s
// probe out, and the server still holds at most 64 connections (issue 46:
// they held every slot, and the probe waited in the kernel's backlog
// until a header or idle timeout, 5 to 15 s, freed one). Wall-clock: real
// sockets; the probe's 1 s timeout is the condition.
func TestProbeNotStarvedByIdleOrHostileClients(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	addr, _ := serveOn(t, ln, Probe)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var idle []net.Conn
	for range Probe.Conns {
		c := dial()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		idle = append(idle, c)
	}
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatalf("keep-alive request: %v", err)
		} else {
			res.Body.Close()
		}
	}
	for range Probe.Conns {
		dial() // silent
	}
	slow := dial()
	io.WriteString(slow, "GET /healthz HTTP/1.1\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // slowloris: a header byte every 50 ms, never ending
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(slow, "X"); err != nil {
					return
				}
			}
		}
	}()
	for i := range 3 {
		if err := probe(addr); err != nil {
			t.Fatalf("probe %d with %d idle, %d silent and a slowloris client connected: %v", i+1, Probe.Conns, Probe.Conns, err)
		}
	}
	if n, most := ln.counts(); n > Probe.Conns || most > Probe.Conns+1 {
		t.Errorf("%d connections open (at most %d at once), want at most %d", n, most, Probe.Conns)
	}
}

// TestProbeNotStarvedBySlowReaders: when every connection is in a request
// (clients that never read an endless response, holding their handlers
// in Write until the write timeout), a probe closes the longest-running
// one and is answered within 1 s.
func TestProbeNotStarvedBySlowReaders(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	lim := Limits{ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute, Conns: 4}
	addr, _ := serveOn(t, ln, lim)
	var readers []net.Conn
	for range lim.Conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
		readers = append(readers, c)
	}
	// Each handler is running once its response starts arriving.
	for _, c := range readers {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("endless response: %v", err)
		}
	}
	if err := probe(addr); err != nil {
		t.Fatalf("probe with %d slow readers connected: %v", lim.Conns, err)
	}
	if n, most := ln.counts(); n > lim.Conns || most > lim.Conns+1 {
		t.Errorf("%d connections open (at most %d at once), want at most %d", n, most, lim.Conns)
	}
}
