package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRead: one trimming rule (trailing line endings only), a size cap,
// regular files only, never empty. Issue 36, row 5: /dev/zero as a
// password file or a _FILE variable ended the process with "out of
// memory", and three readers trimmed three ways.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for content, want := range map[string]string{
		"pw\n": "pw", "pw\r\n": "pw", "pw\n\n": "pw", "pw": "pw", " pw ": " pw ", "a\nb\n": "a\nb",
	} {
		if got, err := Read(write("f", content)); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", content, got, err, want)
		}
	}
	if _, err := Read(write("empty", "\r\n")); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty: %v", err)
	}
	big := write("big", strings.Repeat("x", MaxSize+1))
	if _, err := Read(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d bytes: %v", MaxSize+1, err)
	}
	if got, err := Read(write("max", strings.Repeat("x", MaxSize))); err != nil || len(got) != MaxSize {
		t.Errorf("%d bytes: %d, %v", MaxSize, len(got), err)
	}
	for _, p := range []string{"/dev/zero", dir} {
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v", p, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(fifo); err == nil || !strings.Contains(err.Error(), "a named pipe") {
		t.Errorf("fifo: %v", err) // and it did not block
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", "s3cret\n"), link); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(link); err != nil || got != "s3cret" {
		t.Errorf("through a symlink: %q, %v", got, err)
	}
}

// TestExposed: a file every user may read or write is exposed, through a
// symlink too (the mode of the target counts); group access is not (a
// Kubernetes Secret mounted for a non-root container through fsGroup).
func TestExposed(t *testing.T) {
	dir := t.TempDir()
	for mode, want := range map[os.FileMode]bool{0o600: false, 0o400: false, 0o440: false, 0o640: false, 0o644: true, 0o604: true, 0o602: true} {
		p := filepath.Join(dir, "f")
		os.Remove(p)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		link := filepath.Join(dir, "l")
		os.Remove(link)
		if err := os.Symlink(p, link); err != nil {
			t.Fatal(err)
		}
		if got := Exposed(link); got != want {
			t.Errorf("mode %o: Exposed = %v, want %v", mode, got, want)
		}
	}
	if Exposed(filepath.Join(dir, "missing")) {
		t.Error("a missing file is exposed")
	}
}
