//go:build !testhooks

package main

import "github.com/outbox-relay/outbox-relay/relay"

// testOptions: a release build reads no test hook from the environment
// (see testhooks.go, built with -tags testhooks).
func testOptions() ([]relay.Option, error) { return nil, nil }
