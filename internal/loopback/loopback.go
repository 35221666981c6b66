// Package loopback tells whether a host is this machine, where a setting
// that would be insecure over a network (plain-text credentials, a
// disabled certificate check, a profiling endpoint) is safe.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether host (a name or an address, IPv6 possibly in
// brackets) is this machine: localhost or a loopback address.
func Host(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
