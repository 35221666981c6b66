package replication

import "strings"

// PluginArgs are the pgoutput options the relay streams with: protocol
// version 1 (no in-progress transactions), the publication, and logical
// messages (the heartbeats).
//
// The server reads publication_names as a string literal holding a list
// of identifiers (SplitIdentifierString): the name is quoted as an
// identifier (so that it is taken exactly, with its case, commas and
// quotes) and then as a literal. Library callers pass any name; unquoted,
// a quote in it would end the literal and a comma split it.
func PluginArgs(publication string) []string {
	return []string{
		"proto_version '1'",
		"publication_names " + quoteLiteral(quoteIdent(publication)),
		"messages 'true'",
	}
}

// quoteIdent is PostgreSQL's quote_ident, always quoting.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteLiteral is a standard-conforming string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
