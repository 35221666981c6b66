//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// Kafka's PROXIED listener (docs/design.md, scripts/kafka/server.properties.tmpl):
// the broker listens on 19094 and advertises 127.0.0.1:19095, so a client that
// bootstraps through a proxy on 19095 -> 19094 keeps all its traffic on the proxy.
const (
	kafkaProxiedListener   = "127.0.0.1:19094"
	kafkaProxiedAdvertised = "127.0.0.1:19095"
)

// ProxyMode is what a Proxy does with traffic.
type ProxyMode int32

const (
	// ProxyPass forwards both directions.
	ProxyPass ProxyMode = iota
	// ProxyCut has closed every live connection; new ones are accepted and
	// reset at once (the client sees ECONNRESET/EOF, like a refused connect).
	ProxyCut
	// ProxyBlackhole keeps connections open but forwards nothing: bytes read
	// are held until Restore (a hung network, no RST, no FIN). New connections
	// are accepted and held without dialing the target.
	ProxyBlackhole
)

func (m ProxyMode) String() string {
	switch m {
	case ProxyPass:
		return "pass"
	case ProxyCut:
		return "cut"
	case ProxyBlackhole:
		return "blackhole"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Proxy is a TCP forwarder on 127.0.0.1 with fault switches. Safe for
// concurrent use; every goroutine it starts ends on Close.
type Proxy struct {
	t      testing.TB
	Name   string
	Addr   string // listen address, host:port
	Target string

	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	mode   ProxyMode
	gate   chan struct{} // closed while not blackholed; pipes wait on it
	conns  map[*proxyConn]struct{}
	closed bool
	timer  *time.Timer // bounds a blackhole

	accepted atomic.Int64
	reset    atomic.Int64 // connections refused while cut
	cutConns atomic.Int64 // live connections closed by Cut
	bytes    atomic.Int64
}

type proxyConn struct {
	client   net.Conn
	upstream net.Conn // nil until dialed
	once     sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		if tc, ok := c.client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, as a broken network path would look
		}
		_ = c.client.Close()
		if c.upstream != nil {
			_ = c.upstream.Close()
		}
	})
}

// StartProxy listens on listen ("127.0.0.1:0" for a free port) and forwards
// every connection to target. A test cleanup closes it.
func StartProxy(t testing.TB, name, listen, target string) *Proxy {
	t.Helper()
	var ln net.Listener
	var err error
	// The fixed Kafka port may still be in TIME_WAIT/closing from an earlier test.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", listen); err == nil {
			break
		}
		// wall-clock: retry interval while the port is still closing (50 tries)
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy %s: listen %s: %v", name, listen, err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{t: t, Name: name, Addr: ln.Addr().String(), Target: target, ln: ln, gate: gate, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	t.Logf("proxy %s: %s -> %s", name, p.Addr, target)
	return p
}

// Port is the listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Mode is the current mode.
func (p *Proxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats is a one-line summary of the proxy's counters.
func (p *Proxy) Stats() string {
	if p == nil {
		return "none"
	}
	p.mu.Lock()
	live := len(p.conns)
	p.mu.Unlock()
	return fmt.Sprintf("accepted=%d live=%d cut=%d refused=%d bytes=%d",
		p.accepted.Load(), live, p.cutConns.Load(), p.reset.Load(), p.bytes.Load())
}

// Cut closes every live connection and refuses new ones until Restore. It
// returns the number of connections it closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	p.setModeLocked(ProxyCut)
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
	p.cutConns.Add(int64(len(conns)))
	p.t.Logf("proxy %s: cut (%d live connections closed)", p.Name, len(conns))
	return len(conns)
}

// Blackhole stops forwarding without closing anything, for at most max
// (then it restores by itself, so a failing test cannot leave it hung).
func (p *Proxy) Blackhole(max time.Duration) {
	p.mu.Lock()
	p.setModeLocked(ProxyBlackhole)
	p.timer = time.AfterFunc(max, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.mode == ProxyBlackhole && !p.closed {
			p.setModeLocked(ProxyPass)
		}
	})
	n := len(p.conns)
	p.mu.Unlock()
	p.t.Logf("proxy %s: blackhole (%d live connections frozen, bound %s)", p.Name, n, max)
}

// Restore goes back to forwarding. Frozen (blackholed) connections resume
// with whatever they had buffered, like a healed network path.
func (p *Proxy) Restore() {
	p.mu.Lock()
	prev := p.mode
	p.setModeLocked(ProxyPass)
	p.mu.Unlock()
	p.t.Logf("proxy %s: restored (was %s)", p.Name, prev)
}

// setModeLocked switches mode and the blackhole gate; p.mu is held.
func (p *Proxy) setModeLocked(m ProxyMode) {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	wasBlack := p.mode == ProxyBlackhole
	p.mode = m
	switch {
	case m == ProxyBlackhole && !wasBlack:
		p.gate = make(chan struct{})
	case m != ProxyBlackhole && wasBlack:
		close(p.gate)
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines (idempotent).
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.setModeLocked(ProxyPass) // opens the gate so frozen pipes can exit
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		c.close()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.t.Logf("proxy %s: goroutines still running 10s after Close", p.Name)
	}
	p.t.Logf("proxy %s: closed (%s)", p.Name, p.Stats())
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// wall-clock: backoff after an accept error before the next Accept
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		pc := &proxyConn{client: c}
		p.mu.Lock()
		if p.closed || p.mode == ProxyCut {
			p.mu.Unlock()
			p.reset.Add(1)
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(pc)
	}
}

// waitGate blocks while the proxy is blackholed. It returns false when the
// connection should be dropped (cut or closed meanwhile).
func (p *Proxy) waitGate(pc *proxyConn) bool {
	for {
		p.mu.Lock()
		gate, mode, closed := p.gate, p.mode, p.closed
		_, live := p.conns[pc]
		p.mu.Unlock()
		if closed || !live || mode == ProxyCut {
			return false
		}
		if mode != ProxyBlackhole {
			return true
		}
		<-gate
	}
}

func (p *Proxy) serve(pc *proxyConn) {
	defer p.wg.Done()
	defer p.drop(pc)
	if !p.waitGate(pc) {
		return
	}
	up, err := net.DialTimeout("tcp", p.Target, 5*time.Second)
	if err != nil {
		return // the target is down: the client sees its connection closed
	}
	p.mu.Lock()
	_, live := p.conns[pc]
	if live {
		pc.upstream = up
	}
	p.mu.Unlock()
	if !live { // cut while dialing
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(pc, up, pc.client); done <- struct{}{} }()
	go func() { p.pipe(pc, pc.client, up); done <- struct{}{} }()
	<-done // either direction ending ends the connection
	pc.close()
	<-done
}

// pipe copies src to dst, holding data while blackholed.
func (p *Proxy) pipe(pc *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitGate(pc) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.bytes.Add(int64(n))
		}
		if err != nil { // EOF, reset by peer, closed by Cut: the connection ends
			return
		}
	}
}

func (p *Proxy) drop(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.close()
}

// StartPGProxy proxies a free local port to the PostgreSQL of databaseURL and
// returns the proxy and the same URL pointing at it.
func StartPGProxy(t testing.TB) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := StartProxy(t, "postgres", "127.0.0.1:0", target)
	u.Host = p.Addr
	return p, u.String()
}

// StartKafkaProxy proxies 127.0.0.1:19095 to the broker's PROXIED listener
// (19094); a client bootstrapped with brokers=127.0.0.1:19095 stays on it.
func StartKafkaProxy(t testing.TB) *Proxy {
	t.Helper()
	c, err := net.DialTimeout("tcp", kafkaProxiedListener, 2*time.Second)
	if err != nil {
		t.Fatalf("Kafka PROXIED listener %s not reachable (%v): restart the stack with "+
			"`scripts/stack.sh up` so the broker picks up scripts/kafka/server.properties.tmpl", kafkaProxiedListener, err)
	}
	_ = c.Close()
	return StartProxy(t, "kafka", kafkaProxiedAdvertised, kafkaProxiedListener)
}

// TestHarnessProxy checks the proxy's modes against an echo server, that
// PostgreSQL works through it, and that a Kafka client bootstrapped through
// 19095 is told about 127.0.0.1:19095 (the PROXIED listener) and produces
// through the proxy.
func TestHarnessProxy(t *testing.T) {
	inSuites(t, parallel, stack)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p := StartProxy(t, "echo", "127.0.0.1:0", echo.Addr().String())
	roundTrip := func(c net.Conn, msg string, timeout time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			return fmt.Errorf("echo %q, want %q", buf, msg)
		}
		return nil
	}
	c1, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := roundTrip(c1, "hello", 2*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}

	// Blackhole: nothing comes back, the connection stays open; after Restore
	// the held bytes are delivered.
	p.Blackhole(10 * time.Second)
	if err := roundTrip(c1, "held", 500*time.Millisecond); err == nil {
		t.Fatalf("blackhole: data went through")
	}
	p.Restore()
	buf := make([]byte, 4)
	_ = c1.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c1, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after blackhole restore: %q, %v", buf, err)
	}
	// Blackhole bound: it restores itself.
	p.Blackhole(300 * time.Millisecond)
	if err := roundTrip(c1, "bound", 3*time.Second); err != nil {
		t.Fatalf("blackhole did not end by itself: %v", err)
	}

	// Cut: the live connection dies, new ones are refused until Restore.
	if n := p.Cut(); n != 1 {
		t.Errorf("cut closed %d connections, want 1", n)
	}
	if err := roundTrip(c1, "dead", time.Second); err == nil {
		t.Fatalf("cut: old connection still works")
	}
	if c2, err := net.Dial("tcp", p.Addr); err == nil {
		if err := roundTrip(c2, "new", time.Second); err == nil {
			t.Fatalf("cut: new connection works")
		}
		c2.Close()
	}
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3, "again", 2*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}

	// PostgreSQL through a proxy.
	pgp, pgURL := StartPGProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := OpenDB(ctx, pgURL)
	if err != nil {
		t.Fatalf("postgres via proxy: %v", err)
	}
	defer db.Close()
	var one int
	if err := db.QueryRow(ctx, `select 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1 via proxy: %v", err)
	}
	pgp.Cut()
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	if err := db.QueryRow(qctx, `select 1`).Scan(&one); err == nil {
		t.Fatalf("select 1 worked through a cut proxy")
	}
	qcancel()
	pgp.Restore()
	if err := db.QueryRow(ctx, `select 1`).Scan(&one); err != nil {
		t.Fatalf("select 1 after restore: %v", err)
	}

	// Kafka through 19095: metadata names the proxy, produce goes through it.
	kp := StartKafkaProxy(t)
	env := NewEnv(t, EnvOptions{NoMigrate: true})
	// Own transport: kafka.DefaultTransport caches metadata across clients.
	tr := &kafka.Transport{MetadataTTL: time.Second}
	defer tr.CloseIdleConnections()
	md, err := (&kafka.Client{Addr: kafka.TCP(kp.Addr), Timeout: 10 * time.Second, Transport: tr}).Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("metadata via kafka proxy: %v", err)
	}
	for _, b := range md.Brokers {
		if addr := net.JoinHostPort(b.Host, strconv.Itoa(b.Port)); addr != kafkaProxiedAdvertised {
			t.Fatalf("broker advertised as %s through the PROXIED listener, want %s", addr, kafkaProxiedAdvertised)
		}
	}
	before := kp.bytes.Load()
	w := &kafka.Writer{Addr: kafka.TCP(kp.Addr), Topic: env.Topic, RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond, Transport: tr}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("produce via kafka proxy: %v", err)
	}
	if kp.bytes.Load() == before {
		t.Fatalf("produce did not go through the proxy")
	}
	t.Logf("kafka proxy: %s", kp.Stats())
}
