//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Relay is one `outbox-relay run` subprocess.
type Relay struct {
	t       testing.TB
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	started time.Time

	done     chan struct{} // closed when the process has exited
	exitCode int
	exitErr  error

	mu      sync.Mutex
	peakHWM int64 // bytes, max VmHWM seen
	peakRSS int64 // bytes, max VmRSS seen
}

var relaySeq struct {
	sync.Mutex
	n int
}

// StartRelay starts `outbox-relay run` with exactly env (see processEnv).
// A cleanup stops the process (SIGTERM, then SIGKILL) and dumps the tail of its
// stderr when the test failed.
func StartRelay(t testing.TB, env []string, args ...string) *Relay {
	t.Helper()
	return StartCommand(t, env, append([]string{"run"}, args...)...)
}

// StartCommand is StartRelay for any long-running subcommand (args[0]),
// e.g. recover, which streams like run after its back-fill.
func StartCommand(t testing.TB, env []string, args ...string) *Relay {
	t.Helper()
	requireRelay(t)
	relaySeq.Lock()
	relaySeq.n++
	n := relaySeq.n
	relaySeq.Unlock()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("relay-%d.stderr.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("relay log: %v", err)
	}
	cmd := exec.Command(relayBin, args...)
	cmd.Env = env
	cmd.Dir = repoRoot
	cmd.Stdout = f
	cmd.Stderr = f
	r := &Relay{t: t, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start relay: %v", err)
	}
	r.started = time.Now()
	t.Logf("relay #%d started: pid %d, log %s", n, cmd.Process.Pid, logPath)
	go r.wait()
	go r.pollMemory()
	t.Cleanup(func() {
		if r.Running() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(15 * time.Second):
				t.Logf("relay #%d did not exit 15s after SIGTERM, killing", n)
				_ = cmd.Process.Kill()
				<-r.done
			}
		}
		if t.Failed() {
			t.Logf("relay #%d (pid %d, exit %d) stderr tail (%s):\n%s", n, cmd.Process.Pid, r.exitCode, logPath, r.LogTail(60))
		}
	})
	return r
}

func (r *Relay) wait() {
	err := r.cmd.Wait()
	r.exitErr = err
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.exitCode = 0
	case errors.As(err, &ee):
		r.exitCode = ee.ExitCode() // -1 when killed by a signal
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.exitCode = 128 + int(ws.Signal())
		}
	default:
		r.exitCode = -1
	}
	r.logFile.Close()
	close(r.done)
}

// Pid is the process id.
func (r *Relay) Pid() int { return r.cmd.Process.Pid }

// Running reports whether the process has not exited yet.
func (r *Relay) Running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// Kill9 sends SIGKILL and waits for the process to be gone.
func (r *Relay) Kill9() {
	r.t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("relay pid %d did not die after SIGKILL", r.Pid())
	}
	r.t.Logf("relay pid %d killed with SIGKILL after %s", r.Pid(), time.Since(r.started).Round(time.Millisecond))
}

// Term sends SIGTERM and waits up to timeout for exit. It returns the exit code
// and whether the process exited in time (when not, it is killed).
func (r *Relay) Term(timeout time.Duration) (code int, exited bool) {
	r.t.Helper()
	start := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		r.t.Logf("relay pid %d exited %d %s after SIGTERM", r.Pid(), r.exitCode, time.Since(start).Round(time.Millisecond))
		return r.exitCode, true
	case <-time.After(timeout):
		_ = r.cmd.Process.Kill()
		<-r.done
		return r.exitCode, false
	}
}

// Wait waits up to timeout for the process to exit by itself. It returns the
// exit code and whether it exited in time.
func (r *Relay) Wait(timeout time.Duration) (code int, exited bool) {
	select {
	case <-r.done:
		return r.exitCode, true
	case <-time.After(timeout):
		return 0, false
	}
}

// Log returns the whole captured stderr (and stdout) so far.
func (r *Relay) Log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}

// LogTail returns the last n lines of the log.
func (r *Relay) LogTail(n int) string { return tail(r.Log(), n) }

// LogContains reports whether the log contains substr.
func (r *Relay) LogContains(substr string) bool {
	return strings.Contains(r.Log(), substr)
}

// LogLines returns the log lines that contain substr.
func (r *Relay) LogLines(substr string, max int) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(r.Log())))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
			if len(out) >= max {
				break
			}
		}
	}
	return out
}

// pollMemory samples /proc/<pid>/status every 100ms while the process runs.
func (r *Relay) pollMemory() {
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		r.sampleMemory()
		select {
		case <-r.done:
			return
		case <-tk.C:
		}
	}
}

func (r *Relay) sampleMemory() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return
	}
	hwm, rss := int64(-1), int64(-1)
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "VmHWM:"):
			hwm = parseKB(line)
		case strings.HasPrefix(line, "VmRSS:"):
			rss = parseKB(line)
		}
	}
	r.mu.Lock()
	if hwm > r.peakHWM {
		r.peakHWM = hwm
	}
	if rss > r.peakRSS {
		r.peakRSS = rss
	}
	r.mu.Unlock()
}

func parseKB(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		return -1
	}
	v, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return v * 1024
}

// PeakRSS returns the maximum of VmHWM and sampled VmRSS, in bytes.
func (r *Relay) PeakRSS() int64 {
	if r.Running() {
		r.sampleMemory()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peakRSS > r.peakHWM {
		return r.peakRSS
	}
	return r.peakHWM
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
