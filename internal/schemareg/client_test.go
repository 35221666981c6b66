package schemareg

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testutil/fakeregistry"
)

const avroV1 = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}`

func newClient(t *testing.T, cfg Config, opts ...Option) *Client {
	t.Helper()
	c, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSchemaByIDTypesAndReferences(t *testing.T) {
	f := fakeregistry.New()
	avro := f.Register("a-value", fakeregistry.Schema{Text: avroV1})
	proto := f.Register("p-value", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; message M { string id = 1; }`})
	js := f.Register("j-value", fakeregistry.Schema{Type: "JSON", Text: `{"type":"object"}`})
	ref := f.Register("w-value", fakeregistry.Schema{Text: `{"type":"record","name":"W","fields":[{"name":"o","type":"Order"}]}`,
		Refs: []fakeregistry.Reference{{Name: "Order", Subject: "a-value", Version: 1}}})
	c := newClient(t, Config{URL: f.Serve(t).URL + "/"})
	ctx := t.Context()
	for _, tc := range []struct {
		id   int
		want Type
	}{{avro, Avro}, {proto, Protobuf}, {js, JSON}, {ref, Avro}} {
		s, err := c.SchemaByID(ctx, tc.id)
		if err != nil {
			t.Fatalf("id %d: %v", tc.id, err)
		}
		if s.ID != tc.id || s.Type != tc.want || s.Text == "" || s.Subject != "" || s.Version != 0 {
			t.Errorf("id %d: got %+v, want type %s", tc.id, s, tc.want)
		}
	}
	s, _ := c.SchemaByID(ctx, ref)
	if len(s.References) != 1 || s.References[0] != (Reference{Name: "Order", Subject: "a-value", Version: 1}) {
		t.Errorf("references: got %+v", s.References)
	}
}

func TestSubjectVersionAndLatest(t *testing.T) {
	f := fakeregistry.New()
	id1 := f.Register("orders/eu-value", fakeregistry.Schema{Text: avroV1})
	id2 := f.Register("orders/eu-value", fakeregistry.Schema{Text: `{"type":"record","name":"Order","fields":[]}`})
	m := newCountingMetrics()
	c := newClient(t, Config{URL: f.Serve(t).URL}, WithMetrics(m))
	ctx := t.Context()
	s, err := c.SubjectVersion(ctx, "orders/eu-value", 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != id1 || s.Version != 1 || s.Subject != "orders/eu-value" || s.Type != Avro {
		t.Errorf("version 1: got %+v", s)
	}
	s, err = c.SubjectVersion(ctx, "orders/eu-value", Latest)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != id2 || s.Version != 2 {
		t.Errorf("latest: got %+v", s)
	}
	// the subject is one path segment: its slash is escaped
	if got := f.Paths()[0]; got != "/subjects/orders%2Feu-value/versions/1" {
		t.Errorf("path: got %s", got)
	}
	// latest also told us version 2 and both ids: no more requests
	before := f.Requests()
	for _, lookup := range []func() error{
		func() error { _, err := c.SubjectVersion(ctx, "orders/eu-value", 2); return err },
		func() error { _, err := c.SchemaByID(ctx, id1); return err },
		func() error { _, err := c.SchemaByID(ctx, id2); return err },
	} {
		if err := lookup(); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Requests() - before; n != 0 {
		t.Errorf("%d requests for what the cache knew", n)
	}
	if m.count("subject_version/ok") != 2 || m.hits != 3 || m.misses != 2 {
		t.Errorf("metrics: requests %v hits %d misses %d", m.requests, m.hits, m.misses)
	}
}

func TestNotRegisteredIsErrNotFound(t *testing.T) {
	f := fakeregistry.New()
	f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		code int
		call func() (*Schema, error)
	}{
		{"id", 40403, func() (*Schema, error) { return c.SchemaByID(ctx, 99) }},
		{"subject", 40401, func() (*Schema, error) { return c.SubjectVersion(ctx, "nope-value", 1) }},
		{"version", 40402, func() (*Schema, error) { return c.SubjectVersion(ctx, "orders-value", 7) }},
		{"latest of none", 40401, func() (*Schema, error) { return c.SubjectVersion(ctx, "nope-value", Latest) }},
	} {
		_, err := tc.call()
		var e *Error
		if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrTransient) || !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: got %v, want ErrNotFound with error_code %d", tc.name, err, tc.code)
		}
	}
}

func TestRegistryFailuresAreTransient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"500", 500, `{"error_code":50001,"message":"Error in the backend data store"}`},
		{"503 from a proxy", 503, "<html>Service Unavailable</html>"},
		{"429", 429, ""},
		{"408", 408, ""},
		{"bare 404: a wrong URL, not a missing schema", 404, "<html>Not Found</html>"},
		{"200 that is not JSON", 200, "<html>login</html>"},
		{"200 without a schema", 200, `{"id":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeregistry.New()
			f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
			f.SetFail(func(*http.Request) (int, string) { return tc.status, tc.body })
			c := newClient(t, Config{URL: f.Serve(t).URL})
			_, err := c.SchemaByID(t.Context(), 1)
			if !errors.Is(err, ErrTransient) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want only ErrTransient", err)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		c := newClient(t, Config{URL: srv.URL})
		_, err := c.SubjectVersion(t.Context(), "orders-value", 1)
		if !errors.Is(err, ErrTransient) {
			t.Fatalf("got %v, want ErrTransient", err)
		}
	})
}

func TestRefusedCredentialsAreUnauthorizedAndTransient(t *testing.T) {
	for _, status := range []int{401, 403} {
		f := fakeregistry.New()
		f.SetFail(func(*http.Request) (int, string) { return status, `{"error_code":40101,"message":"Unauthorized"}` })
		c := newClient(t, Config{URL: f.Serve(t).URL, Username: "u", Password: "p4ss"})
		_, err := c.SchemaByID(t.Context(), 1)
		if !errors.Is(err, ErrUnauthorized) || !errors.Is(err, ErrTransient) || errors.Is(err, ErrNotFound) {
			t.Errorf("%d: got %v, want ErrUnauthorized and ErrTransient", status, err)
		}
	}
}

func TestInvalidLookups(t *testing.T) {
	f := fakeregistry.New()
	f.Register("x-value", fakeregistry.Schema{Type: "XML", Text: "<x/>"})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	for name, call := range map[string]func() (*Schema, error){
		"id 0":          func() (*Schema, error) { return c.SchemaByID(ctx, 0) },
		"id over int32": func() (*Schema, error) { return c.SchemaByID(ctx, 1<<31) },
		"version 0":     func() (*Schema, error) { return c.SubjectVersion(ctx, "x-value", 0) },
		"version -2":    func() (*Schema, error) { return c.SubjectVersion(ctx, "x-value", -2) },
		"empty subject": func() (*Schema, error) { return c.SubjectVersion(ctx, "", 1) },
	} {
		if _, err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if n := f.Requests(); n != 0 {
		t.Errorf("%d requests for lookups that cannot succeed", n)
	}
	if _, err := c.SchemaByID(ctx, 1); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"XML"`) {
		t.Errorf("unknown schemaType: got %v, want ErrInvalid naming it", err)
	}
	f.SetFail(func(*http.Request) (int, string) { return 422, `{"error_code":42202,"message":"invalid version"}` })
	if _, err := c.SubjectVersion(ctx, "x-value", 3); !errors.Is(err, ErrInvalid) {
		t.Errorf("422: got %v, want ErrInvalid", err)
	}
}

func TestAuthentication(t *testing.T) {
	var got []string
	var mu sync.Mutex
	f := fakeregistry.New()
	f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.User != nil {
			t.Errorf("userinfo sent in the URL: %v", r.URL.User)
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("key:secret"))
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"none", Config{URL: srv.URL}, ""},
		{"basic", Config{URL: srv.URL, Username: "key", Password: "secret"}, basic},
		{"basic from the URL", Config{URL: strings.Replace(srv.URL, "://", "://key:secret@", 1)}, basic},
		{"bearer", Config{URL: srv.URL, Token: "tok3n"}, "Bearer tok3n"},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		c := newClient(t, tc.cfg)
		if _, err := c.SchemaByID(t.Context(), 1); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: Authorization %q, want %q", tc.name, got, tc.want)
		}
		mu.Unlock()
	}
}

// TestCredentialsNeverInErrors: a password or token shows in no error
// text, even when a registry or proxy echoes them back.
func TestCredentialsNeverInErrors(t *testing.T) {
	const password, token = "pa55-w0rd-XYZ", "t0ken-ABC-123"
	basic := base64.StdEncoding.EncodeToString([]byte("key:" + password))
	secrets := []string{password, token, basic}
	// a registry that echoes the Authorization header and the basic
	// credentials it decoded
	echo := func(r *http.Request) string {
		user, pass, _ := r.BasicAuth()
		return `"` + r.Header.Get("Authorization") + " " + user + ":" + pass + `"`
	}
	var texts []string
	check := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
			return
		}
		texts = append(texts, name+": "+err.Error())
	}
	for _, status := range []int{404, 401, 500, 422, 200} {
		f := fakeregistry.New()
		f.SetFail(func(r *http.Request) (int, string) {
			if status == 404 {
				return status, `{"error_code":40403,"message":` + echo(r) + `}`
			}
			if status == 200 {
				return status, `{"schema":"x","schemaType":` + echo(r) + `}`
			}
			return status, echo(r)
		})
		srv := f.Serve(t)
		for _, cfg := range []Config{
			{URL: srv.URL, Username: "key", Password: password},
			{URL: strings.Replace(srv.URL, "://", "://key:"+password+"@", 1)},
			{URL: srv.URL, Token: token},
		} {
			c := newClient(t, cfg)
			_, err := c.SchemaByID(t.Context(), 1)
			check("status "+http.StatusText(status), err)
		}
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, cfg := range []Config{
		{URL: strings.Replace(closed.URL, "://", "://key:"+password+"@", 1)},
		{URL: closed.URL, Token: token},
	} {
		_, err := newClient(t, cfg).SubjectVersion(t.Context(), "s", 1)
		check("connection refused", err)
	}
	for _, cfg := range []Config{
		{URL: "ftp://key:" + password + "@host"},
		{URL: "http://key:" + password + "@host", Password: password},
		{URL: "http://host", Token: token, Password: password},
		{URL: "http://key:" + password + "@host", Token: token},
		{URL: "http://key:" + password + "@h\x7fost"},
	} {
		_, err := New(cfg)
		check("config", err)
	}
	for _, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("a secret in %q", text)
			}
		}
	}
	if len(texts) < 20 {
		t.Fatalf("only %d error texts checked", len(texts))
	}
}

func TestCacheServesWhileRegistryDown(t *testing.T) {
	f := fakeregistry.New()
	id := f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
	srv := httptest.NewServer(f)
	c := newClient(t, Config{URL: srv.URL})
	ctx := t.Context()
	if _, err := c.SubjectVersion(ctx, "orders-value", 1); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if s, err := c.SubjectVersion(ctx, "orders-value", 1); err != nil || s.ID != id {
		t.Errorf("cached version while down: %v, %v", s, err)
	}
	if s, err := c.SchemaByID(ctx, id); err != nil || s.ID != id {
		t.Errorf("cached id while down: %v, %v", s, err)
	}
	if _, err := c.SubjectVersion(ctx, "orders-value", 2); !errors.Is(err, ErrTransient) {
		t.Errorf("uncached while down: got %v, want ErrTransient", err)
	}
}

// TestLatestIsRefreshedAfterTTLAndServedStaleWhileDown runs on a fake
// clock (synctest) with an in-process transport.
func TestLatestIsRefreshedAfterTTLAndServedStaleWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeregistry.New()
		f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
		m := newCountingMetrics()
		c := newClient(t, Config{URL: "http://registry", LatestTTL: time.Minute}, WithRoundTripper(handlerTransport{f}), WithMetrics(m))
		ctx := t.Context()
		latest := func() *Schema {
			t.Helper()
			s, err := c.SubjectVersion(ctx, "orders-value", Latest)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		if v := latest().Version; v != 1 {
			t.Fatalf("latest %d, want 1", v)
		}
		f.Register("orders-value", fakeregistry.Schema{Text: `{"type":"record","name":"Order","fields":[]}`})
		time.Sleep(59 * time.Second) // the bubble's fake clock: just inside LatestTTL
		if v := latest().Version; v != 1 || f.Requests() != 1 {
			t.Fatalf("within the TTL: latest %d after %d requests, want 1 after 1", v, f.Requests())
		}
		time.Sleep(time.Second) // the fake clock reaches LatestTTL
		if v := latest().Version; v != 2 {
			t.Fatalf("after the TTL: latest %d, want 2", v)
		}
		f.SetFail(func(*http.Request) (int, string) { return 503, "" })
		time.Sleep(time.Minute) // the fake clock past LatestTTL again, with the registry down
		if v := latest().Version; v != 2 || m.stale != 1 {
			t.Fatalf("registry down: latest %d, stale %d, want 2 served stale once", v, m.stale)
		}
	})
}

// TestConcurrentLookupsShareOneRequest: lookups of one subject that
// arrive while its request is out wait for it instead of sending their
// own; a caller that gives up does not fail the others.
func TestConcurrentLookupsShareOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeregistry.New()
		f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
		release := f.Block()
		c := newClient(t, Config{URL: "http://registry"}, WithRoundTripper(handlerTransport{f}))
		const n = 20
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := c.SubjectVersion(t.Context(), "orders-value", 1)
				errs <- err
			}()
		}
		quitter, quit := context.WithCancel(t.Context())
		quitErr := make(chan error, 1)
		go func() {
			_, err := c.SubjectVersion(quitter, "orders-value", 1)
			quitErr <- err
		}()
		synctest.Wait() // every caller waits on the one request
		quit()
		if err := <-quitErr; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTransient) {
			t.Errorf("cancelled caller: got %v, want context.Canceled and ErrTransient", err)
		}
		release()
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if got := f.Requests(); got != 1 {
			t.Errorf("%d requests for %d concurrent lookups, want 1", got, n+1)
		}
	})
}

func TestCacheIsBounded(t *testing.T) {
	f := fakeregistry.New()
	for range 3 {
		f.Register("s", fakeregistry.Schema{Text: avroV1})
	}
	c := newClient(t, Config{URL: f.Serve(t).URL, CacheSize: 2})
	ctx := t.Context()
	for _, id := range []int{1, 2, 3, 3, 1} {
		if _, err := c.SchemaByID(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.Requests(), 4; got != want { // 1 was evicted by 3
		t.Errorf("%d requests, want %d", got, want)
	}
	if n := c.cache.len(); n != 2 {
		t.Errorf("cache holds %d, want 2", n)
	}
}

func TestConfig(t *testing.T) {
	if got, want := (Config{}).WithDefaults(), DefaultConfig(); got != want {
		t.Errorf("zero config with defaults: %+v, want %+v", got, want)
	}
	custom := Config{URL: "https://r", Timeout: time.Second, CacheSize: 5, LatestTTL: time.Hour}
	if got := custom.WithDefaults(); got != custom {
		t.Errorf("set fields changed: %+v", got)
	}
	for _, cfg := range []Config{
		{URL: "http://127.0.0.1:19081/apis/ccompat/v7"},
		{URL: "https://key:secret@registry"},
		{URL: "https://registry", Username: "key", Password: "secret"},
		{URL: "https://registry", Token: "t"},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "URL"},
		{Config{URL: "registry:8081"}, "URL"},
		{Config{URL: "http://r", Password: "p"}, "Username"},
		{Config{URL: "http://r", Username: "u", Token: "t"}, "Token"},
		{Config{URL: "http://r", Timeout: -1}, "Timeout"},
		{Config{URL: "http://r", CacheSize: -1}, "CacheSize"},
		{Config{URL: "http://r", LatestTTL: -1}, "LatestTTL"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%+v: got %v, want an error of %s", tc.cfg, err, tc.field)
		}
	}
}
