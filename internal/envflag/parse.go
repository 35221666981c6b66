package envflag

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// ValueError is a malformed flag value, from the command line (Source
// "--max-inflight-bytes ") or the environment (Source
// "OUTBOX_RELAY_MAX_INFLIGHT_BYTES="): both read the same after the
// value, so the fix is the same wherever the value was set.
type ValueError struct {
	Source, Value string
	Err           error
	// Secret hides Value: a malformed secret is refused before it is
	// registered for redaction.
	Secret bool
}

// maxShown is the most of a refused value an error quotes.
const maxShown = 64

func (e *ValueError) Error() string {
	switch {
	case e.Secret:
		return fmt.Sprintf("%s(value hidden): %v", e.Source, e.Err)
	case len(e.Value) > maxShown:
		return fmt.Sprintf("%s%q… (%d bytes): %v", e.Source, strings.ToValidUTF8(e.Value[:maxShown], ""), len(e.Value), e.Err)
	}
	return fmt.Sprintf("%s%q: %v", e.Source, e.Value, e.Err)
}
func (e *ValueError) Unwrap() error { return e.Err }

// bound is a registered flag value: it remembers a malformed command-line
// value for Parse, since the flag package keeps only the text of its
// error.
type bound struct {
	flag.Value
	b    *Binder
	name string
	// secret marks a Secret, ConnString or ConnStrings flag: its value
	// never appears in the usage, only whether it is set.
	secret bool
}

func (v *bound) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && v.b.parseErr == nil {
		v.b.parseErr = &ValueError{Source: "--" + v.name + " ", Value: s, Err: err, Secret: v.secret}
	}
	return err
}

func (v *bound) IsBoolFlag() bool {
	bf, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && bf.IsBoolFlag()
}

// Parse parses args into the FlagSet. A malformed value is a
// *ValueError; other errors (an unknown flag, a missing value) read in
// the double-dash form the help uses: "unknown flag --foo". The FlagSet
// should print nothing itself (an empty Usage, output discarded): the
// caller prints the error, or the usage on flag.ErrHelp.
func (b *Binder) Parse(args []string) error {
	b.parseErr = nil
	err := b.fs.Parse(args)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return err
	case b.parseErr != nil:
		return b.parseErr
	}
	msg := err.Error()
	for prefix, say := range map[string]string{
		"flag provided but not defined: -": "unknown flag --",
		"flag needs an argument: -":        "flag needs a value: --",
	} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			return errors.New(say + strings.TrimPrefix(rest, "-"))
		}
	}
	return errors.New(msg)
}
