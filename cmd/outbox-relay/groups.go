package main

import (
	"fmt"
	"io"
	"slices"
)

// groupVerb reads the verb of a command group (slot, dlq, checkpoint):
// with --help (or -h, help) it asks for the group's usage on stdout (exit
// 0); without a known verb it prints that usage to stderr, a usage error.
func groupVerb(args []string, usage string, stderr io.Writer, verbs ...string) (string, error) {
	switch {
	case len(args) > 0 && isHelp(args[0]):
		return "", &helpRequest{usage}
	case len(args) > 0 && slices.Contains(verbs, args[0]):
		return args[0], nil
	}
	fmt.Fprint(stderr, usage)
	return "", errUsage
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}
