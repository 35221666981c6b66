//go:build !race

package pbjson

const raceEnabled = false
