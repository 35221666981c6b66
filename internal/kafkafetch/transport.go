package kafkafetch

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/segmentio/kafka-go"
)

// newTransport builds the reader's own kafka.Transport from d, the
// kafka.Dialer a kafka.Reader would have used: the same ClientID, dial
// function or network settings, timeout, TLS and SASL, so a reader secured
// for a SASL_SSL listener keeps working. Its metadata covers topic only,
// and its background goroutines end with ctx.
//
// Every connection it dials is tracked in conns: kafka-go's Transport
// cannot interrupt a request in flight (a long-polling fetch holds its
// connection for up to MaxWait after its caller gave up), so Close closes
// the connections themselves, and no goroutine of the reader's transport
// outlives Close.
func newTransport(ctx context.Context, d *kafka.Dialer, topic string, conns *connSet) *kafka.Transport {
	if d == nil {
		d = kafka.DefaultDialer
	}
	dial := d.DialFunc
	if dial == nil {
		nd := &net.Dialer{Timeout: d.Timeout, LocalAddr: d.LocalAddr, KeepAlive: d.KeepAlive, FallbackDelay: d.FallbackDelay}
		if !d.DualStack {
			nd.FallbackDelay = -1 // no Happy Eyeballs, as kafka.Dialer without DualStack
		}
		dial = nd.DialContext
	}
	return &kafka.Transport{
		Dial:           conns.wrap(dial),
		DialTimeout:    d.Timeout,
		ClientID:       d.ClientID,
		TLS:            d.TLS,
		SASL:           d.SASLMechanism,
		MetadataTopics: []string{topic},
		Context:        ctx,
	}
}

// errConnsClosed is what a dial returns once the reader closed.
var errConnsClosed = errors.New("kafkafetch: reader closed")

// connSet is the set of open connections of one transport.
type connSet struct {
	mu     sync.Mutex
	open   map[*trackedConn]struct{}
	closed bool
}

// wrap returns dial with every connection it makes tracked.
func (s *connSet) wrap(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: s}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			c.Close()
			return nil, errConnsClosed
		}
		if s.open == nil {
			s.open = make(map[*trackedConn]struct{})
		}
		s.open[tc] = struct{}{}
		return tc, nil
	}
}

// closeAll closes every open connection, and every later one at once.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.open, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
