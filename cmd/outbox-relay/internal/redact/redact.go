// Package redact keeps secrets (database passwords, SASL passwords) out of
// everything the relay prints. The relay never logs a secret on purpose;
// Writer is the backstop for the ones a library echoes, such as an error
// that quotes a connection string.
package redact

import (
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// MinLen is the shortest secret Writer masks: masking a one- or
// two-character secret would garble every line without hiding much.
const MinLen = 4

// Writer masks registered secrets in everything written through it. Each
// Write is masked on its own, so secrets must not be split across writes;
// zerolog writes one event per call.
type Writer struct {
	w  io.Writer
	mu sync.RWMutex
	r  *strings.Replacer
	s  []string
}

// NewWriter returns a Writer on w with no secrets yet.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Add registers secrets; empty and short ones are ignored. The forms in
// which a secret may appear are added too: URL-escaped, as in a
// connection string, and JSON-escaped, as in a log line.
func (w *Writer) Add(secrets ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		w.s = append(w.s, variants(s)...)
	}
	pairs := make([]string, 0, 2*len(w.s))
	for _, s := range w.s {
		pairs = append(pairs, s, Mask)
	}
	w.r = strings.NewReplacer(pairs...)
}

func variants(s string) []string {
	out := []string{s}
	add := func(v string) {
		for _, o := range out {
			if o == v {
				return
			}
		}
		out = append(out, v)
	}
	add(url.QueryEscape(s))
	add(url.PathEscape(s))
	add(url.UserPassword("u", s).String()[2:])
	if b, err := json.Marshal(s); err == nil {
		add(string(b[1 : len(b)-1]))
	}
	return out
}

// String masks the registered secrets in s.
func (w *Writer) String(s string) string {
	w.mu.RLock()
	r := w.r
	w.mu.RUnlock()
	if r == nil {
		return s
	}
	return r.Replace(s)
}

// Write masks p and writes it. It reports len(p) on success, as callers
// expect, although the masked text may be shorter or longer.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.RLock()
	r := w.r
	w.mu.RUnlock()
	if r == nil {
		return w.w.Write(p)
	}
	if _, err := io.WriteString(w.w, r.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// DSNSecrets returns the passwords in a PostgreSQL connection string (URL
// or key=value form): the user's password and sslpassword.
func DSNSecrets(dsn string) []string {
	var out []string
	add := func(v string) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if u, ok := parseURL(dsn); ok {
		add(u.password)
		add(u.query["password"])
		add(u.query["sslpassword"])
		// Where net/url reads a malformed URL otherwise, mask its
		// reading too: the operator may have meant either.
		if nu, err := url.Parse(dsn); err == nil {
			p, _ := nu.User.Password()
			add(p)
			add(nu.Query().Get("password"))
			add(nu.Query().Get("sslpassword"))
		}
		return out
	}
	for k, v := range keyValues(dsn) {
		if (k == "password" || k == "sslpassword") && v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Password returns the login password a PostgreSQL connection string
// carries itself (a URL's user information or its password parameter, or
// the key=value form's password), empty when it has none; unlike pgx's
// parse, without PGPASSWORD or a .pgpass file's.
func Password(dsn string) string {
	if u, ok := parseURL(dsn); ok && u.password != "" {
		return u.password
	}
	return Param(dsn, "password")
}

// Param returns the value of key (such as sslmode or host) in a
// PostgreSQL connection string of either form. A URL's host is its host
// names, comma-separated when it names several (postgres://a:1,b:2/db),
// as in the key=value form (host=a,b). Empty when unset or unparsable.
func Param(dsn, key string) string {
	if u, ok := parseURL(dsn); ok {
		if v := u.query[key]; v != "" || key != "host" {
			return v
		}
		return strings.Join(u.hosts, ",")
	}
	for k, v := range keyValues(dsn) {
		if k == key {
			return v
		}
	}
	return ""
}

// pgURL is what DSNSecrets and Param need of a postgres:// URL.
type pgURL struct {
	password string
	hosts    []string
	query    map[string]string
}

// parseURL splits a postgres:// (or postgresql://) URL the way libpq and
// pgx do, not as RFC 3986: libpq's several hosts (postgres://u:pw@a:1,b:2/db)
// are no valid URL authority, and net/url misreads them (a host "a:1,b")
// or rejects them (IPv6 literals), which must not let a password through
// unmasked. Percent-escapes are decoded; '+' is not a space. ok is false
// for the key=value form.
func parseURL(dsn string) (u pgURL, ok bool) {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		if rest, ok = strings.CutPrefix(dsn, "postgres://"); !ok {
			return u, false
		}
	}
	// As in libpq, only a '/' ends the search for the user information.
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		if _, pw, found := strings.Cut(rest[:i], ":"); found {
			u.password = unescape(pw)
		}
		rest = rest[i+1:]
	}
	netloc, query := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		netloc = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query = rest[i+1:]
	}
	for _, hp := range strings.Split(netloc, ",") {
		if h, found := strings.CutPrefix(hp, "["); found { // [IPv6]:port
			h, _, _ = strings.Cut(h, "]")
			u.hosts = append(u.hosts, unescape(h))
			continue
		}
		h, _, _ := strings.Cut(hp, ":")
		u.hosts = append(u.hosts, unescape(h))
	}
	u.query = map[string]string{}
	for _, kv := range strings.Split(query, "&") {
		if k, v, found := strings.Cut(kv, "="); found {
			u.query[unescape(k)] = unescape(v)
		}
	}
	return u, true
}

// unescape decodes percent-escapes; an invalid one leaves s as it is (a
// secret is better masked verbatim than not at all).
func unescape(s string) string {
	if v, err := url.PathUnescape(s); err == nil {
		return v
	}
	return s
}

// keyValues parses the key=value connection string form: values may be
// single-quoted, with \' and \\ escapes.
func keyValues(s string) func(yield func(k, v string) bool) {
	return func(yield func(k, v string) bool) {
		for {
			s = strings.TrimLeft(s, " \t\n")
			eq := strings.IndexByte(s, '=')
			if eq < 0 {
				return
			}
			k := strings.TrimSpace(s[:eq])
			s = strings.TrimLeft(s[eq+1:], " ")
			var v strings.Builder
			if strings.HasPrefix(s, "'") {
				i := 1
				for ; i < len(s) && s[i] != '\''; i++ {
					if s[i] == '\\' && i+1 < len(s) {
						i++
					}
					v.WriteByte(s[i])
				}
				s = s[min(i+1, len(s)):]
			} else {
				end := strings.IndexAny(s, " \t\n")
				if end < 0 {
					end = len(s)
				}
				v.WriteString(s[:end])
				s = s[end:]
			}
			if !yield(k, v.String()) {
				return
			}
		}
	}
}
