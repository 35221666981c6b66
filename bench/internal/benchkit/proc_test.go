package benchkit

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	for _, stat := range []string{
		"1234 (outbox relay (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 0 0",
		"1234 (inbox bench (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 0 0",
	} {
		cpu, err := parseStatCPU(stat)
		if err != nil || cpu != 3 {
			t.Fatalf("cpu = %v, %v", cpu, err)
		}
	}
	if _, err := parseStatCPU("1234 (x) S 1 2"); err == nil {
		t.Fatal("short stat accepted")
	}
	if _, err := parseStatCPU("1234 x S"); err == nil {
		t.Fatal("stat without a command name accepted")
	}
}

func TestParseStatusMem(t *testing.T) {
	hwm, rss := parseStatusMem("Name:\tinbox-bench\nVmPeak:\t  900000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30000 kB\n")
	if hwm != 40<<20 || rss != 30000<<10 {
		t.Fatalf("hwm = %v, rss = %v", hwm, rss)
	}
	if hwm, _ := parseStatusMem("Name:\tx\n"); hwm != 0 {
		t.Fatalf("hwm = %v without VmHWM", hwm)
	}
}

// TestProcSelf reads this test's own process.
func TestProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := ProcCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if hwm, rss, err := ProcMem(os.Getpid()); err != nil || hwm <= 0 || rss <= 0 || rss > hwm {
		t.Fatalf("hwm %d, rss %d, %v", hwm, rss, err)
	}
	if LoadAvg() == "?" {
		t.Fatal("no load average")
	}
}
