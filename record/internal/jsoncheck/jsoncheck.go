// Package jsoncheck validates an outbox row's JSON payload against a
// registered JSON Schema (issue 48: the json-schema record format, whose
// record value is the payload's JSON text itself after the Confluent
// header).
//
// Schemas are compiled with github.com/santhosh-tekuri/jsonschema (drafts
// 4 to 2020-12; the draft is the schema's $schema, 2020-12 without one),
// with "format" asserted, as Confluent's validating serializer does: a
// date-time that is not one is refused. A schema's $ref resolves only
// within the schema and the references given to Compile: never to a file
// or a URL, since the text comes from a registry and the relay must not
// fetch or read what it names.
package jsoncheck

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// base is where the schema and its references are compiled, so that a
// relative $ref ("customer.json", as a registry's reference names it)
// finds the reference of that name.
const base = "mem://schemas/"

// schemaURL is the location the schema's own text is compiled under.
const schemaURL = base + "schema.json"

// Schema is a compiled JSON Schema.
type Schema struct {
	s *jsonschema.Schema
}

// Compile compiles a JSON Schema. refs are the documents its $refs name
// (a registry's schema references), by the name the $ref gives: relative
// ("customer.json") or an absolute URL.
func Compile(text string, refs map[string]string) (*Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(noLoader{})
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	for name, ref := range refs {
		url := name
		if !strings.Contains(name, ":") {
			url = base + name
		}
		d, err := jsonschema.UnmarshalJSON(strings.NewReader(ref))
		if err != nil {
			return nil, fmt.Errorf("json schema: reference %s: %w", url, err)
		}
		if err := c.AddResource(url, d); err != nil {
			return nil, fmt.Errorf("json schema: reference %s: %w", url, err)
		}
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return &Schema{s: s}, nil
}

// noLoader refuses every document a $ref names outside the schema and its
// references.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not the schema or one of its references: the relay loads nothing else", url)
}

// Error is a payload the schema refuses: Path is the offending value's
// place ("items/2/price", "" for the whole payload), Reason what is wrong
// with it.
type Error struct {
	Path   string
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return "field " + e.Path + ": " + e.Reason
}

// printer renders the library's messages in English.
var printer = message.NewPrinter(language.English)

// Check validates payload, JSON text. A refusal is an *Error naming the
// first offending value (the deepest cause of the library's account).
func (s *Schema) Check(payload []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &Error{Reason: "not JSON: " + err.Error()}
	}
	err = s.s.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return &Error{Path: strings.Join(ve.InstanceLocation, "/"), Reason: ve.ErrorKind.LocalizedString(printer)}
}
