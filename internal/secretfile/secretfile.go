// Package secretfile reads the files that hold secrets: a database
// password, a _FILE variable's value, an OAuth token. One reader gives
// them one set of rules, so a value never depends on which flag named the
// file:
//
//   - the file must be a regular file (after symlinks) of at most MaxSize
//     bytes: /dev/zero, a FIFO or a log file named by mistake is refused
//     with an error instead of exhausting memory;
//   - trailing line endings (\n, \r\n, any number) are dropped, as editors,
//     echo and Kubernetes leave them; nothing else is trimmed, so a
//     password may begin or end with a space;
//   - an empty value is an error (a file caught half-written, or the wrong
//     file).
//
// Exposed reports a file other users of the machine may read, for a
// warning: group access is how Kubernetes lets a non-root container read a
// mounted Secret (fsGroup), so only world access counts.
package secretfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// MaxSize is the largest secret file read: far above any password, URL
// or JWT (a few KiB), far below what could hurt.
const MaxSize = 64 << 10

// ErrTooLarge is the error of a file over MaxSize.
var ErrTooLarge = fmt.Errorf("larger than %d KiB: not a secret file", MaxSize>>10)

// Read returns the secret in the file at path.
func Read(path string) (string, error) {
	// Checked before the open too: opening a named pipe blocks until
	// something writes to it.
	if st, err := os.Stat(path); err != nil {
		return "", err
	} else if !st.Mode().IsRegular() {
		return "", notRegular(path, st.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", notRegular(path, st.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxSize {
		return "", fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s is empty: it must hold the secret", path)
	}
	return v, nil
}

// Exposed reports whether the file at path (after symlinks) may be read
// or written by every user of the machine. A file that cannot be
// examined is not reported: Read says what is wrong with it.
func Exposed(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	return st.Mode().Perm()&0o006 != 0
}

func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is not a regular file (%s): point it at a file holding the secret", path, kind(m))
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}
