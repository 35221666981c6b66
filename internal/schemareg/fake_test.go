package schemareg

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fakeRegistry is an in-process registry speaking the subset of the
// Confluent API the client uses, with the error codes Confluent and
// Apicurio answer (40401 subject, 40402 version, 40403 schema).
type fakeRegistry struct {
	mu       sync.Mutex
	subjects map[string][]int // subject -> schema ids by version-1
	schemas  map[int]fakeSchema
	// fail, when set, answers every request instead (status, body).
	fail func(r *http.Request) (int, string)
	// block, when set, is received from before answering.
	block chan struct{}
	// requests counts the requests answered, by path.
	requests atomic.Int64
	paths    []string
}

type fakeSchema struct {
	Type, Text string
	Refs       []Reference
}

func newFake() *fakeRegistry {
	return &fakeRegistry{subjects: map[string][]int{}, schemas: map[int]fakeSchema{}}
}

// alsoRegister adds schema id as the next version of subject (a
// registry gives identical schemas one id across subjects).
func (f *fakeRegistry) alsoRegister(subject string, id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subjects[subject] = append(f.subjects[subject], id)
}

// register adds a version of subject and returns its id.
func (f *fakeRegistry) register(subject string, s fakeSchema) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := len(f.schemas) + 1
	f.schemas[id] = s
	f.subjects[subject] = append(f.subjects[subject], id)
	return id
}

func (f *fakeRegistry) setFail(fn func(r *http.Request) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fn
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.block != nil {
		<-f.block
	}
	f.requests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.URL.EscapedPath())
	if f.fail != nil {
		status, body := f.fail(r)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		return
	}
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	notFound := func(code int, msg string) {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error_code": code, "message": msg})
	}
	body := func(s fakeSchema) map[string]any {
		m := map[string]any{"schema": s.Text}
		if s.Type != "" && s.Type != "AVRO" { // Confluent leaves schemaType out for Avro
			m["schemaType"] = s.Type
		}
		if s.Refs != nil {
			m["references"] = s.Refs
		}
		return m
	}
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/schemas/ids/") && strings.HasSuffix(p, "/versions"):
		id, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "/schemas/ids/"), "/versions"))
		if _, ok := f.schemas[id]; !ok {
			notFound(40403, fmt.Sprintf("Schema %d not found.", id))
			return
		}
		type sv struct {
			Subject string `json:"subject"`
			Version int    `json:"version"`
		}
		out := []sv{}
		for subject, ids := range f.subjects {
			for i, x := range ids {
				if x == id {
					out = append(out, sv{subject, i + 1})
				}
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case strings.HasPrefix(p, "/schemas/ids/"):
		id, _ := strconv.Atoi(strings.TrimPrefix(p, "/schemas/ids/"))
		s, ok := f.schemas[id]
		if !ok {
			notFound(40403, fmt.Sprintf("Schema %d not found.", id))
			return
		}
		_ = json.NewEncoder(w).Encode(body(s))
	case strings.HasPrefix(p, "/subjects/"):
		rest := strings.TrimPrefix(p, "/subjects/")
		i := strings.LastIndex(rest, "/versions/")
		if i < 0 {
			w.WriteHeader(http.StatusNotFound) // a bare 404: not the API's
			return
		}
		subject, v := rest[:i], rest[i+len("/versions/"):]
		ids, ok := f.subjects[subject]
		if !ok {
			notFound(40401, fmt.Sprintf("Subject '%s' not found.", subject))
			return
		}
		n := len(ids)
		if v != "latest" && v != "-1" {
			n, _ = strconv.Atoi(v)
		}
		if n < 1 || n > len(ids) {
			notFound(40402, fmt.Sprintf("Version %s not found.", v))
			return
		}
		m := body(f.schemas[ids[n-1]])
		m["subject"], m["version"], m["id"] = subject, n, ids[n-1]
		_ = json.NewEncoder(w).Encode(m)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

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
