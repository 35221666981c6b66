package benchkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux this runs on).
const clkTck = 100

// ProcCPU is utime+stime of pid in seconds.
func ProcCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name may hold spaces and parentheses,
// so fields are counted from the last ')'.
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

// ProcMem is the peak RSS (VmHWM) and the current RSS (VmRSS) of pid in
// bytes; an error when /proc/<pid>/status has no VmHWM.
func ProcMem(pid int) (hwm, rss int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	if hwm, rss = parseStatusMem(string(data)); hwm == 0 {
		return 0, 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return hwm, rss, nil
}

// parseStatusMem reads VmHWM and VmRSS (kB in the file, bytes here) from
// a /proc/<pid>/status text; 0 for a value it does not hold.
func parseStatusMem(status string) (hwm, rss int64) {
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmHWM:":
			hwm = kb << 10
		case "VmRSS:":
			rss = kb << 10
		}
	}
	return hwm, rss
}

// LoadAvg is the machine's 1, 5 and 15 minute load average ("0.52 0.61
// 0.70"), or "?".
func LoadAvg() string {
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

// cpuModel is the first "model name" of /proc/cpuinfo, or "" (arm64
// kernels, for one, do not write it).
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
