package schemareg

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
)

// Type is a schema's format, as the registry's schemaType names it.
type Type string

// The schema types of the Confluent API; a response without schemaType is
// Avro.
const (
	Avro     Type = "AVRO"
	Protobuf Type = "PROTOBUF"
	JSON     Type = "JSON"
)

// Latest asks SubjectVersion for the subject's newest version (the
// Confluent API's -1 and "latest").
const Latest = -1

// Schema is a registered schema. The client's cache shares it between
// callers: treat it as read-only.
type Schema struct {
	// ID is the registry's schema id, the one in the wire format.
	ID int
	// Subject and Version are what it was looked up as; both empty from
	// SchemaByID (one id may be registered under many subjects).
	Subject string
	Version int
	// Type is Avro, Protobuf or JSON (JSON Schema).
	Type Type
	// Text is the schema: Avro's JSON, a .proto file, a JSON Schema.
	Text string
	// References are the schemas this one imports, as the registry lists
	// them. Parsed, not resolved yet.
	References []Reference
}

// Reference is one schema reference: the name the schema imports it by,
// and the subject and version that hold it.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Metrics is told of the client's requests and cache lookups; the relay
// adapts it to its Prometheus collectors. Every method must be safe for
// concurrent use and quick.
type Metrics interface {
	// Request: one request to the registry, by operation
	// ("schema_by_id", "subject_version", "schema_versions"), its outcome ("ok",
	// "not_found", "invalid", "transient", "unauthorized") and duration.
	Request(op, outcome string, took time.Duration)
	// CacheLookup: a lookup the cache answered (hit) or passed on.
	CacheLookup(op string, hit bool)
	// StaleServed: a stale latest was served by operation, since its
	// refresh failed with ErrTransient.
	StaleServed(op string)
}

// Option configures New beyond Config: wiring, not settings.
type Option interface{ apply(*options) }

type options struct {
	metrics Metrics
	rt      http.RoundTripper
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithMetrics reports requests and cache lookups to m.
func WithMetrics(m Metrics) Option { return optionFunc(func(o *options) { o.metrics = m }) }

// WithRoundTripper sends every request through rt instead of a transport
// built from Config.TLS (which is then rt's business): for a proxy or a
// test.
func WithRoundTripper(rt http.RoundTripper) Option {
	return optionFunc(func(o *options) { o.rt = rt })
}

// Client looks schemas up in a registry through a bounded cache. It is
// safe for concurrent use; concurrent lookups of one key share one
// request.
type Client struct {
	base      string // scheme://host[:port][/path], no userinfo, no trailing slash
	auth      string // the Authorization header, "" for none
	http      *http.Client
	timeout   time.Duration
	latestTTL time.Duration
	cache     *cache[*Schema]
	parsed    *cache[parsedEntry] // by idKey: what Schema made of a registered schema
	subjects  *cache[struct{}]    // by idKey+subject: the subjects Registered found an id in
	group     singleflight.Group
	metrics   Metrics
	mask      masker
	now       func() time.Time
}

// maxResponse bounds a response body the client reads.
const maxResponse = 16 << 20

// New returns a client of the registry cfg names. It does no I/O.
func New(cfg Config, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	u, _ := url.Parse(cfg.URL) // Validate parsed it
	user, pass := cfg.Username, cfg.Password
	if u.User != nil {
		user = u.User.Username()
		if p, ok := u.User.Password(); ok {
			pass = p
		}
		u.User = nil
	}
	u.RawQuery, u.Fragment = "", ""
	c := &Client{
		base: strings.TrimSuffix(u.String(), "/"), timeout: cfg.Timeout, latestTTL: cfg.LatestTTL,
		cache: newCache[*Schema](cfg.CacheSize), parsed: newCache[parsedEntry](cfg.CacheSize),
		subjects: newCache[struct{}](cfg.CacheSize), metrics: o.metrics, now: time.Now,
	}
	switch {
	case cfg.Token != "":
		c.auth = "Bearer " + cfg.Token
		c.mask = newMasker(cfg.Token)
	case user != "" || pass != "":
		basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		c.auth = "Basic " + basic
		c.mask = newMasker(pass, basic)
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	rt := o.rt
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.TLS.Clone()
		t.MaxIdleConnsPerHost = 8
		rt = t
	}
	c.http = &http.Client{Transport: rt}
	return c, nil
}

// SchemaByID returns the schema registered under id (GET
// /schemas/ids/{id}), from the cache when it is there: an id's schema
// never changes.
func (c *Client) SchemaByID(ctx context.Context, id int) (*Schema, error) {
	what := "schema id " + strconv.Itoa(id)
	if id < 1 || id > math.MaxInt32 {
		return nil, &Error{Lookup: what, Kind: ErrInvalid, Message: "a schema id is from 1 to 2147483647"}
	}
	return c.lookup(ctx, idKey(id), "schema_by_id", what, 0, func(ctx context.Context) (*Schema, error) {
		var r schemaResponse
		if err := c.get(ctx, "schema_by_id", what, "/schemas/ids/"+strconv.Itoa(id), &r); err != nil {
			return nil, err
		}
		r.ID = id
		return r.schema(c.mask, what, "", 0)
	})
}

// SubjectVersion returns version of subject (GET
// /subjects/{subject}/versions/{version}), version Latest for the newest.
// A numbered version is cached until evicted; Latest for
// Config.LatestTTL, and served stale past it while the registry cannot
// answer.
func (c *Client) SubjectVersion(ctx context.Context, subject string, version int) (*Schema, error) {
	v := "latest"
	if version != Latest {
		v = strconv.Itoa(version)
	}
	what := fmt.Sprintf("subject %q version %s", subject, v)
	switch {
	case subject == "":
		return nil, &Error{Lookup: what, Kind: ErrInvalid, Message: "the subject is empty"}
	case version != Latest && version < 1:
		return nil, &Error{Lookup: what, Kind: ErrInvalid, Message: "a version is 1 or more, or latest"}
	}
	ttl := time.Duration(0)
	if version == Latest {
		ttl = c.latestTTL
	}
	return c.lookup(ctx, versionKey(subject, v), "subject_version", what, ttl, func(ctx context.Context) (*Schema, error) {
		var r schemaResponse
		path := "/subjects/" + url.PathEscape(subject) + "/versions/" + v
		if err := c.get(ctx, "subject_version", what, path, &r); err != nil {
			return nil, err
		}
		if r.ID < 1 || r.Version < 1 {
			return nil, &Error{Lookup: what, Kind: ErrTransient, Status: http.StatusOK,
				Message: fmt.Sprintf("the response has id %d and version %d", r.ID, r.Version)}
		}
		s, err := r.schema(c.mask, what, subject, r.Version)
		if err != nil {
			return nil, err
		}
		// what it tells of the version and the id is as good as asking for them
		now := c.now()
		if version == Latest {
			c.cache.put(versionKey(subject, strconv.Itoa(s.Version)), s, now)
		}
		byID := *s
		byID.Subject, byID.Version = "", 0
		c.cache.put(idKey(s.ID), &byID, now)
		return s, nil
	})
}

func idKey(id int) string { return "id\x00" + strconv.Itoa(id) }

func versionKey(subject, version string) string { return "sv\x00" + subject + "\x00" + version }

// lookup answers key from the cache when the entry is fresh (ttl 0: always),
// otherwise fetches it, one request for all concurrent callers of key. The
// request runs under its own timeout, apart from the caller's
// cancellation, so one caller giving up does not fail the others.
func (c *Client) lookup(ctx context.Context, key, op, what string, ttl time.Duration,
	fetch func(context.Context) (*Schema, error)) (*Schema, error) {
	cached, fetched, ok := c.cache.get(key)
	if ok && (ttl == 0 || c.now().Sub(fetched) < ttl) {
		c.metrics.CacheLookup(op, true)
		return cached, nil
	}
	c.metrics.CacheLookup(op, false)
	ch := c.group.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		s, err := fetch(fctx)
		if err != nil {
			return nil, err
		}
		c.cache.put(key, s, c.now())
		return s, nil
	})
	select {
	case <-ctx.Done():
		return nil, &Error{Lookup: what, Kind: ErrTransient, Err: ctx.Err()}
	case r := <-ch:
		if r.Err != nil {
			if ok && errors.Is(r.Err, ErrTransient) {
				c.metrics.StaleServed(op)
				return cached, nil
			}
			return nil, r.Err
		}
		return r.Val.(*Schema), nil
	}
}

// schemaResponse is the body of both lookups (by id it has no subject,
// version or id).
type schemaResponse struct {
	Subject    string      `json:"subject"`
	Version    int         `json:"version"`
	ID         int         `json:"id"`
	SchemaType string      `json:"schemaType"`
	Schema     string      `json:"schema"`
	References []Reference `json:"references"`
}

func (r *schemaResponse) schema(m masker, what, subject string, version int) (*Schema, error) {
	if r.Schema == "" {
		return nil, &Error{Lookup: what, Kind: ErrTransient, Status: http.StatusOK, Message: "the response has no schema"}
	}
	var t Type
	switch strings.ToUpper(r.SchemaType) {
	case "", string(Avro):
		t = Avro
	case string(Protobuf):
		t = Protobuf
	case string(JSON):
		t = JSON
	default:
		return nil, &Error{Lookup: what, Kind: ErrInvalid, Status: http.StatusOK,
			Message: fmt.Sprintf("schemaType %q is none of AVRO, PROTOBUF, JSON", shorten(m.mask(r.SchemaType)))}
	}
	return &Schema{ID: r.ID, Subject: subject, Version: version, Type: t, Text: r.Schema, References: r.References}, nil
}

// get fetches path and decodes a 200's JSON body into out; any other
// outcome is an *Error of its class.
func (c *Client) get(ctx context.Context, op, what, path string, out any) (err error) {
	start := time.Now()
	outcome := "ok"
	defer func() {
		if err != nil {
			outcome = outcomeOf(err)
		}
		c.metrics.Request(op, outcome, time.Since(start))
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return &Error{Lookup: what, Kind: ErrInvalid, Err: c.mask.wrap(err)}
	}
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json; qs=0.9, application/json; qs=0.5")
	req.Header.Set("User-Agent", "outbox-relay")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Lookup: what, Kind: ErrTransient, Err: c.mask.wrap(err)}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return &Error{Lookup: what, Kind: ErrTransient, Status: resp.StatusCode, Err: c.mask.wrap(err)}
	}
	if len(body) > maxResponse {
		return &Error{Lookup: what, Kind: ErrTransient, Status: resp.StatusCode,
			Message: fmt.Sprintf("the response is over %d bytes", maxResponse)}
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			return &Error{Lookup: what, Kind: ErrTransient, Status: resp.StatusCode,
				Err: fmt.Errorf("decoding the response: %w", err)}
		}
		return nil
	}
	var e struct {
		Code    int    `json:"error_code"`
		Message string `json:"message"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && (e.Code != 0 || e.Message != "") {
		msg = e.Message
	} else {
		e.Code = 0
		msg = string(body) // not the Confluent API's error: show its start
	}
	return &Error{Lookup: what, Kind: classify(resp.StatusCode, e.Code), Status: resp.StatusCode, Code: e.Code,
		Message: shorten(c.mask.mask(msg))}
}

// classify maps a non-200 answer to its class. Only a 404 with a
// Confluent "not found" code (404xx) means not registered: a bare 404 is a
// wrong URL or a proxy, and must not turn events into poison.
func classify(status, code int) error {
	switch {
	case status == http.StatusNotFound && code/100 == 404:
		return ErrNotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ErrUnauthorized
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests:
		return ErrTransient
	case status == http.StatusNotFound:
		return ErrTransient
	case status >= 400 && status < 500:
		return ErrInvalid
	default:
		return ErrTransient
	}
}

func outcomeOf(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return "transient"
	}
	switch e.Kind {
	case ErrNotFound:
		return "not_found"
	case ErrInvalid:
		return "invalid"
	case ErrUnauthorized:
		return "unauthorized"
	default:
		return "transient"
	}
}

// shorten keeps messages to one short line: a registry's message, or the
// start of a page that is not the API's.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 200
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

type noMetrics struct{}

func (noMetrics) Request(string, string, time.Duration) {}
func (noMetrics) CacheLookup(string, bool)              {}
func (noMetrics) StaleServed(string)                    {}
