package replication

import "fmt"

// PluginArgs are the pgoutput options the relay streams with: protocol
// version 1 (no in-progress transactions), the publication, and logical
// messages (the heartbeats).
func PluginArgs(publication string) []string {
	return []string{
		"proto_version '1'",
		fmt.Sprintf("publication_names '%s'", publication),
		"messages 'true'",
	}
}
