package kafkaconn

import (
	"context"
	"sync"
	"time"

	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/oauthbearer"
)

// Rotation timing: a Transport recycles its connections when rotateAt of
// the shortest session (authenticated so far and not yet recycled) has
// passed, leaving the rest for requests in flight to finish, but never
// sooner than minRotate after that session began (a token about to
// expire must not make the Transport recycle in a loop).
const (
	rotateAt  = 0.8
	minRotate = time.Second
)

// rotator is the SASL mechanism of one kafka.Transport. It notes when
// each connection's session ends - lifetime after its handshake, or the
// expiry of the token it sent (oauthbearer.Expirer), whichever is first -
// and before the earliest of these calls closeIdle
// (kafka.Transport.CloseIdleConnections). kafka-go then closes the idle
// connections at once and the busy ones when their request completes, so
// no request meets an expired session, and the next request dials and
// authenticates anew (calling the mechanism, hence the token provider).
// That is kafka-go's substitute for KIP-368 re-authentication, which it
// lacks. Pools closed this way start with a metadata request, as after the
// publisher's forced metadata refresh.
//
// One timer at most is pending: a session that ends after it is recycled
// by it too, early. An abandoned Transport leaves at most that one timer,
// whose CloseIdleConnections is then harmless.
type rotator struct {
	mech      sasl.Mechanism
	lifetime  time.Duration
	closeIdle func()
	recycled  func(sessionEnd time.Time)
	now       func() time.Time
	afterFunc func(time.Duration, func()) stopper

	mu    sync.Mutex
	timer stopper
	due   time.Time
	end   time.Time // the session end the pending timer serves
	seq   int       // of the pending timer, so a stopped timer that fired anyway clears nothing
}

type stopper interface{ Stop() bool }

func newRotator(m sasl.Mechanism, lifetime time.Duration, closeIdle func(), recycled func(time.Time)) *rotator {
	return &rotator{mech: m, lifetime: lifetime, closeIdle: closeIdle, recycled: recycled, now: time.Now,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }}
}

func (r *rotator) Name() string { return r.mech.Name() }

func (r *rotator) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	sm, ir, err := r.mech.Start(ctx)
	if err != nil {
		return sm, ir, err
	}
	now := r.now()
	var end time.Time
	if r.lifetime > 0 {
		end = now.Add(r.lifetime)
	}
	if e, ok := sm.(oauthbearer.Expirer); ok {
		if exp := e.SessionExpiry(); !exp.IsZero() && (end.IsZero() || exp.Before(end)) {
			end = exp
		}
	}
	if !end.IsZero() {
		r.schedule(now, end)
	}
	return sm, ir, nil
}

// schedule arranges a recycle before a session that began at now ends at
// end.
func (r *rotator) schedule(now, end time.Time) {
	d := time.Duration(float64(end.Sub(now)) * rotateAt)
	if d < minRotate {
		d = minRotate
	}
	due := now.Add(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		if !r.due.After(due) {
			return // the pending recycle comes first and closes this connection too
		}
		r.timer.Stop()
	}
	r.seq++
	seq := r.seq
	r.due, r.end = due, end
	r.timer = r.afterFunc(d, func() { r.fire(seq) })
}

func (r *rotator) fire(seq int) {
	r.mu.Lock()
	end := r.end
	if seq == r.seq {
		r.timer = nil
	}
	r.mu.Unlock()
	r.closeIdle()
	if r.recycled != nil {
		r.recycled(end)
	}
}
