package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process the run starts and measures: the relay or the
// Connect JVM. Its output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	waitErr error
	pidFile string
}

// startProc starts argv with env (nil: this process's), output to
// logPath. The child gets its own process group and SIGTERM when this
// program dies (Pdeathsig), so a crash of the run leaves no JVM behind;
// pidFile, when not "", holds its pid while it runs, for the EXIT trap of
// scripts/interop.sh.
func startProc(name string, argv, env []string, logPath, pidFile string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), pidFile: pidFile}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if pidFile != "" {
		_ = os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		if pidFile != "" {
			_ = os.Remove(pidFile)
		}
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited is non-nil once the process has ended.
func (p *proc) exited() error {
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s exited: %w (log: %s)", p.name, p.waitErr, p.logPath)
		}
		return fmt.Errorf("%s exited (log: %s)", p.name, p.logPath)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to grace for the process to end (both
// the relay and Connect shut down cleanly on it: the relay confirms what
// Kafka acknowledged, Connect stops its task and flushes its offsets);
// after that it is killed and stop reports it. A process already gone is
// no error.
func (p *proc) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", p.name, grace)
}

// clkTck is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
const clkTck = 100

// procCPU is utime+stime of pid (all its threads) in seconds.
func procCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line, counting fields from the last ')' (the command
// name may hold spaces and parentheses).
func parseStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + st) / clkTck, nil
}

// procPeakRSS is the peak resident set size (VmHWM) of pid in bytes.
func procPeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	if hwm := parseVmHWM(string(data)); hwm > 0 {
		return hwm, nil
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// parseVmHWM reads VmHWM (kB in the file, bytes here) of a
// /proc/<pid>/status text; 0 when it has none.
func parseVmHWM(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// loadAvg is the machine's 1, 5 and 15 minute load average, or "?".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			return strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
		}
	}
	return ""
}
