package schemareg

// This file holds the lookups as the publisher makes them (its Schemas
// interface): a subject's version parsed into a record.Schema with its
// references resolved, and whether a schema id is a version of a subject.
// It adds no goroutine; the caches are the client's.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/record"
)

// Bounds of a schema's references, resolved transitively: a registry's
// answers decide how many lookups one schema costs, so they are capped.
const (
	maxReferences     = 64 // distinct schemas one schema pulls in, all levels
	maxReferenceDepth = 8  // imports of imports of …
)

// parsedEntry is what Schema made of one registered schema: the parsed
// schema, or why it cannot be used (a registered id never changes, so
// neither does the answer).
type parsedEntry struct {
	schema *record.Schema
	err    error
}

// Schema returns the schema registered as ref, parsed for encoding, with
// every reference it makes (and theirs) looked up. Parsed schemas are
// cached by id, a failed parse too: an event whose schema cannot be used
// is poison, and so is the next one of that schema, without another parse.
//
// The error wraps record.ErrSchemaNotFound when the registry does not
// have the subject, the version or a referenced schema, and
// record.ErrSchemaInvalid when the schema cannot be used (an unknown
// type, text that does not parse, references past the bounds); any other
// error is the registry not answering (ErrTransient).
func (c *Client) Schema(ctx context.Context, ref record.SchemaRef) (*record.Schema, error) {
	version := Latest
	if ref.Version != "latest" {
		n, err := strconv.Atoi(ref.Version)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: subject %q version %q: a version is a number from 1, or latest", record.ErrSchemaInvalid, ref.Subject, ref.Version)
		}
		version = n
	}
	s, err := c.SubjectVersion(ctx, ref.Subject, version)
	if err != nil {
		return nil, poisonOrTransient(err)
	}
	if e, _, ok := c.parsed.get(idKey(s.ID)); ok {
		return e.schema, e.err
	}
	return c.parse(ctx, s, fmt.Sprintf("subject %q version %d", s.Subject, s.Version))
}

// Parsed returns the schema registered under id, parsed, with its
// references resolved: what a consumer needs to decode a framed value
// (record.Event.SchemaID). It shares Schema's cache of parsed schemas by
// id, so after the first lookup of an id no request is made for it, and
// a schema that cannot be used is not parsed again. The errors are
// Schema's: record.ErrSchemaNotFound for an id (or a referenced schema)
// the registry does not have (asked again next time: the id may be
// registered meanwhile), record.ErrSchemaInvalid for a schema that cannot
// be used (cached), anything else transient.
//
// Each call is one schema_by_id cache lookup for the metrics: a hit when
// the parsed schema (or SchemaByID's entry) answers it, a miss when the
// registry is asked.
func (c *Client) Parsed(ctx context.Context, id uint32) (*record.Schema, error) {
	if e, _, ok := c.parsed.get(idKey(int(id))); ok {
		c.metrics.CacheLookup("schema_by_id", true)
		return e.schema, e.err
	}
	s, err := c.SchemaByID(ctx, int(id))
	if err != nil {
		err = poisonOrTransient(err)
		if errors.Is(err, record.ErrSchemaInvalid) && id >= 1 && id <= 1<<31-1 {
			// what the registry answered for the id cannot be used, and never will
			c.parsed.put(idKey(int(id)), parsedEntry{err: err}, time.Time{})
		}
		return nil, err
	}
	return c.parse(ctx, s, fmt.Sprintf("schema id %d", id))
}

// parse resolves s's references and parses it, caching the outcome by id
// unless a reference could not be looked up for now (transient). what
// names s in errors.
func (c *Client) parse(ctx context.Context, s *Schema, what string) (*record.Schema, error) {
	refs, err := c.references(ctx, s)
	if err != nil {
		if errors.Is(err, record.ErrSchemaInvalid) {
			c.parsed.put(idKey(s.ID), parsedEntry{err: err}, time.Time{})
		}
		return nil, err
	}
	parsed, err := record.ParseSchema(ctx, uint32(s.ID), string(s.Type), s.Text, refs)
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", record.ErrSchemaInvalid, what, err)
	}
	c.parsed.put(idKey(s.ID), parsedEntry{schema: parsed, err: err}, time.Time{})
	return parsed, err
}

// references looks up what s references, transitively, as ParseSchema
// takes it: each schema's text by the name it is imported with. Two
// imports of one name must be one schema.
func (c *Client) references(ctx context.Context, s *Schema) (map[string]string, error) {
	if len(s.References) == 0 {
		return nil, nil
	}
	refs := make(map[string]string)
	type pending struct {
		ref   Reference
		depth int
	}
	queue := make([]pending, 0, len(s.References))
	for _, r := range s.References {
		queue = append(queue, pending{r, 1})
	}
	seen := make(map[string]string) // name -> subject and version
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		at := fmt.Sprintf("%q version %d", p.ref.Subject, p.ref.Version)
		if prev, ok := seen[p.ref.Name]; ok {
			if prev != at {
				return nil, fmt.Errorf("%w: schema %d: reference %q names both subject %s and %s", record.ErrSchemaInvalid, s.ID, p.ref.Name, prev, at)
			}
			continue
		}
		if len(seen) == maxReferences {
			return nil, fmt.Errorf("%w: schema %d references more than %d schemas", record.ErrSchemaInvalid, s.ID, maxReferences)
		}
		if p.depth > maxReferenceDepth {
			return nil, fmt.Errorf("%w: schema %d: references nest deeper than %d (at %q)", record.ErrSchemaInvalid, s.ID, maxReferenceDepth, p.ref.Name)
		}
		seen[p.ref.Name] = at
		r, err := c.SubjectVersion(ctx, p.ref.Subject, p.ref.Version)
		if err != nil {
			return nil, fmt.Errorf("schema %d: reference %q: %w", s.ID, p.ref.Name, poisonOrTransient(err))
		}
		refs[p.ref.Name] = r.Text
		for _, next := range r.References {
			queue = append(queue, pending{next, p.depth + 1})
		}
	}
	return refs, nil
}

// Registered reports whether schema id is a version of subject (GET
// /schemas/ids/{id}/versions). A yes is cached: a registered version
// stays. A no is asked again next time, since the subject may register
// that schema meanwhile. An id the registry does not have wraps
// record.ErrSchemaNotFound.
func (c *Client) Registered(ctx context.Context, subject string, id uint32) (bool, error) {
	key := idKey(int(id)) + "\x00" + subject
	if _, _, ok := c.subjects.get(key); ok {
		c.metrics.CacheLookup("schema_versions", true)
		return true, nil
	}
	c.metrics.CacheLookup("schema_versions", false)
	what := fmt.Sprintf("the versions of schema id %d", id)
	if id < 1 || id > 1<<31-1 {
		return false, fmt.Errorf("%w: %w", record.ErrSchemaNotFound, &Error{Lookup: what, Kind: ErrNotFound, Message: "a schema id is from 1 to 2147483647"})
	}
	ch := c.group.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		var versions []struct {
			Subject string `json:"subject"`
			Version int    `json:"version"`
		}
		if err := c.get(fctx, "schema_versions", what, "/schemas/ids/"+strconv.Itoa(int(id))+"/versions", &versions); err != nil {
			return false, err
		}
		for _, v := range versions {
			if v.Subject == subject {
				c.subjects.put(key, struct{}{}, time.Time{})
				return true, nil
			}
		}
		return false, nil
	})
	select {
	case <-ctx.Done():
		return false, &Error{Lookup: what, Kind: ErrTransient, Err: ctx.Err()}
	case r := <-ch:
		if r.Err != nil {
			return false, poisonOrTransient(r.Err)
		}
		return r.Val.(bool), nil
	}
}

// poisonOrTransient is a lookup's error as the publisher reads it: not
// registered is record.ErrSchemaNotFound, a lookup that can never succeed
// record.ErrSchemaInvalid (both poison the event), the rest transient.
func poisonOrTransient(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %w", record.ErrSchemaNotFound, err)
	case errors.Is(err, ErrInvalid):
		return fmt.Errorf("%w: %w", record.ErrSchemaInvalid, err)
	}
	return err
}
