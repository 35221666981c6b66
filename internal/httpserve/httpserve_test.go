package httpserve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
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

	// Conns 2: two open connections hold both slots; a third is not
	// served until one of them closes.
	addr = serve(Limits{ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute, Conns: 2})
	a, _ := net.Dial("tcp", addr)
	b, _ := net.Dial("tcp", addr)
	defer a.Close()
	defer b.Close()
	if err := get(a); err != nil {
		t.Fatal(err)
	}
	if err := get(b); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := c.Read(make([]byte, 1)); n > 0 {
		t.Error("a third connection was served while two held the limit")
	}
	a.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if res, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || res.StatusCode != 200 {
		t.Errorf("the third connection after one closed: %v", err)
	}
}
