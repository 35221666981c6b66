package main

import (
	"fmt"
	"io"
)

// groupVerb reads the verb of a command group (slot, dlq, checkpoint):
// with --help (or -h, help) it asks for the group's usage on stdout (exit
// 0); without a known verb (a key of summaries, the verbs' --help texts)
// it prints that usage to stderr, a usage error.
func groupVerb(args []string, usage string, stderr io.Writer, summaries map[string]string) (string, error) {
	switch {
	case len(args) > 0 && isHelp(args[0]):
		return "", &helpRequest{usage}
	case len(args) > 0:
		if _, ok := summaries[args[0]]; ok {
			return args[0], nil
		}
	}
	fmt.Fprint(stderr, usage)
	return "", errUsage
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}
