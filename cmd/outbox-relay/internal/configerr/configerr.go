// Package configerr marks a configuration value that a command's package
// finds invalid only when its run uses it, after connecting (a malformed
// replay window, reconcile's consumer database URL): the binary reports it
// like an invalid flag (exit code 2), not as a runtime failure. The
// commands' packages (replay, reconcile) share it, so one type means that
// one thing.
package configerr

// Error is an invalid configuration value; Err names the flag and says
// how to fix it.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
