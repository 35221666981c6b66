package schemareg

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// handlerTransport answers requests in process, without a socket (for
// synctest bubbles).
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// countingMetrics records what the client reports.
type countingMetrics struct {
	mu       sync.Mutex
	requests map[string]int // op/outcome
	hits     int
	misses   int
	stale    int
}

func newCountingMetrics() *countingMetrics { return &countingMetrics{requests: map[string]int{}} }

func (m *countingMetrics) Request(op, outcome string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[op+"/"+outcome]++
}

func (m *countingMetrics) CacheLookup(_ string, hit bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hit {
		m.hits++
	} else {
		m.misses++
	}
}

func (m *countingMetrics) StaleServed(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale++
}

func (m *countingMetrics) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[key]
}
