// Package fakeregistry is an in-process schema registry for tests only:
// it speaks the subset of the Confluent Schema Registry API that the
// relay's registry client and the producer-side schema check use (a
// schema by id, an id's subject versions, a subject's version), with the
// not-found codes Confluent and Apicurio answer (40401 subject, 40402
// version, 40403 schema). One fake serves internal/schemareg's own
// tests and outbox/outboxschema's, so both test against the same
// behaviour; it does not import internal/schemareg, whose internal tests
// import it.
package fakeregistry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Reference is a schema's reference to a version of another subject, as
// the registry answers it.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Schema is a registered schema. Type is the registry's schemaType
// ("AVRO", "PROTOBUF", "JSON"); "" is Avro, which Confluent answers
// without a schemaType, as it does "AVRO".
type Schema struct {
	Type, Text string
	Refs       []Reference
}

// Registry is the fake; its zero value is not usable, New makes one.
// It is an http.Handler: serve it with Serve, httptest, or an in-process
// RoundTripper (for synctest bubbles).
type Registry struct {
	mu       sync.Mutex
	subjects map[string][]int // subject -> schema ids by version-1
	schemas  map[int]Schema
	// fail, when set, answers every request instead (status, body).
	fail func(r *http.Request) (int, string)
	// down answers every request with a bare 503.
	down bool
	// block, when set, is received from before a request is answered.
	block chan struct{}
	// requests counts the requests answered; paths holds their escaped
	// paths in order.
	requests atomic.Int64
	paths    []string
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{subjects: map[string][]int{}, schemas: map[int]Schema{}}
}

// Serve starts f on a loopback socket, closed when the test ends.
func (f *Registry) Serve(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

// Register adds s as the next version of subject and returns its id.
func (f *Registry) Register(subject string, s Schema) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := len(f.schemas) + 1
	f.schemas[id] = s
	f.subjects[subject] = append(f.subjects[subject], id)
	return id
}

// AlsoRegister adds schema id as the next version of subject (a
// registry gives identical schemas one id across subjects).
func (f *Registry) AlsoRegister(subject string, id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subjects[subject] = append(f.subjects[subject], id)
}

// SetFail makes fn answer every request (its status and body) instead of
// the API; nil restores the API.
func (f *Registry) SetFail(fn func(r *http.Request) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fn
}

// SetDown makes every request answer a bare 503 while down is true.
func (f *Registry) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Block holds every request that arrives from now on until release is
// called (once), so a test can see what callers do while a request is
// out.
func (f *Registry) Block() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.block = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.block == ch {
				f.block = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// Requests is the number of requests answered so far (held ones are
// counted once released).
func (f *Registry) Requests() int {
	return int(f.requests.Load())
}

// Paths is the escaped paths of the requests answered so far, in order.
func (f *Registry) Paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

// ServeHTTP answers r as the registry would.
func (f *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	f.requests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.URL.EscapedPath())
	if f.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
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
	body := func(s Schema) map[string]any {
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
