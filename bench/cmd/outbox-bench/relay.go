package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// relayProc is one `outbox-relay run` started by the bench.
type relayProc struct {
	cmd *exec.Cmd
	pid int
	url string
	// pprofURL is the relay's --pprof-addr, as a URL (with -pprof).
	pprofURL string
	logPath  string
	started  time.Time
	done     chan struct{}
	waitErr  error
	client   *http.Client
}

// relayEnv is the relay's environment: the machine's, without any
// OUTBOX_RELAY_* setting (defaults only), plus the target's names and
// the current variant's delivery and topic (its record format is
// startRelay's).
func (b *bench) relayEnv(t *target, metricsAddr, pprofAddr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_RELAY_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"OUTBOX_RELAY_DATABASE_URL="+b.cfg.DatabaseURL,
		"OUTBOX_RELAY_KAFKA_BROKERS="+strings.Join(b.cfg.Brokers, ","),
		"OUTBOX_RELAY_TABLE="+t.table,
		"OUTBOX_RELAY_SLOT="+t.slot,
		"OUTBOX_RELAY_PUBLICATION="+t.pub,
		"OUTBOX_RELAY_TOPIC_TEMPLATE="+b.topicFor(b.variant.Format),
		"OUTBOX_RELAY_CREATE_TOPICS=false",
		"OUTBOX_RELAY_METRICS_ADDR="+metricsAddr,
		"OUTBOX_RELAY_LOG_LEVEL=info",
		fmt.Sprintf("OUTBOX_RELAY_PPROF=%t", b.cfg.PProf),
		"OUTBOX_RELAY_PPROF_ADDR="+pprofAddr,
		"OUTBOX_RELAY_DELIVERY="+cmp.Or(b.variant.Delivery, deliveryALO),
	)
}

// formatArgs are the relay's flags of the current variant's record
// format: none for native (the default), else --record-format and
// --schema-registry-url (in the environment, where a password in the URL
// is not shown to ps).
func (b *bench) formatArgs() (args, env []string) {
	if !b.variant.registry() {
		return nil, nil
	}
	return []string{"--record-format", b.variant.Format}, []string{"OUTBOX_RELAY_SCHEMA_REGISTRY_URL=" + b.cfg.RegistryURL}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startRelay starts the relay on t; its stderr goes to a log file.
func (b *bench) startRelay(t *target, phase string) (*relayProc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.cfg.LogDir, "relay-"+phase+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args, env := b.formatArgs()
	cmd := exec.Command(b.cfg.RelayBin, append([]string{"run"}, args...)...)
	pprofAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd.Env = append(b.relayEnv(t, addr, pprofAddr), env...)
	cmd.Stdout = f
	cmd.Stderr = f
	r := &relayProc{
		cmd: cmd, url: "http://" + addr + "/metrics", pprofURL: "http://" + pprofAddr, logPath: logPath, done: make(chan struct{}),
		client: &http.Client{Timeout: 5 * time.Second},
	}
	r.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s run: %w", b.cfg.RelayBin, err)
	}
	r.pid = cmd.Process.Pid
	b.mu.Lock()
	b.relays = append(b.relays, r)
	b.mu.Unlock()
	go func() {
		r.waitErr = cmd.Wait()
		f.Close()
		close(r.done)
	}()
	return r, nil
}

// alive reports an error once the relay has exited.
func (r *relayProc) alive() error {
	select {
	case <-r.done:
		return fmt.Errorf("relay exited (%v); log %s: %s", r.waitErr, r.logPath, r.tail(5))
	default:
		return nil
	}
}

func (r *relayProc) tail(n int) string {
	data, _ := os.ReadFile(r.logPath)
	return strings.TrimSpace(lastLines(string(data), n))
}

// stop sends SIGTERM and waits for the drain (the relay's shutdown
// timeout is 30 s), then kills.
func (r *relayProc) stop() error {
	select {
	case <-r.done:
		return r.waitErr
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return r.waitErr
	case <-time.After(40 * time.Second):
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	return errors.New("relay did not stop within 40 s of SIGTERM: killed")
}

// waitReady waits until the relay streams (replication_connected 1).
func (r *relayProc) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := r.alive(); err != nil {
			return err
		}
		if m, err := r.scrape(ctx); err == nil && m.value("outbox_relay_replication_connected") == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay not streaming after %s; log %s: %s", timeout, r.logPath, r.tail(5))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitPublished waits until events_published_total reaches n.
func (r *relayProc) waitPublished(ctx context.Context, n float64, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := 0.0
	for {
		if err := r.alive(); err != nil {
			return time.Time{}, err
		}
		if m, err := r.scrape(ctx); err == nil {
			if last = m.sum("outbox_relay_events_published_total"); last >= n {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("relay published %.0f of %.0f events within %s", last, n, timeout)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// metrics is one scrape: series name{labels} → value.
type metrics map[string]float64

func (r *relayProc) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", r.url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// profile saves the relay's pprof profile kind (e.g. "profile?seconds=5",
// "allocs") to path.
func (r *relayProc) profile(ctx context.Context, kind, path string) error {
	url := r.pprofURL + "/debug/pprof/" + kind
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseMetrics reads the Prometheus text format (samples only).
func parseMetrics(rd io.Reader) (metrics, error) {
	m := metrics{}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// name{labels} value [timestamp]; label values never hold spaces here
		// except inside quotes, so split at the closing brace when present.
		var series, rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			series, rest = line[:j+1], strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			series, rest = f[0], f[1]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		m[series] = v
	}
	return m, sc.Err()
}

func seriesName(series string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i]
	}
	return series
}

// value is the unlabelled series name.
func (m metrics) value(name string) float64 { return m[name] }

// sum adds every series of name (all label sets).
func (m metrics) sum(name string) float64 {
	t := 0.0
	for k, v := range m {
		if seriesName(k) == name {
			t += v
		}
	}
	return t
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	LE    float64
	Count float64
}

// MarshalJSON writes le as text: JSON has no +Inf.
func (b bucket) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		LE    string  `json:"le"`
		Count float64 `json:"count"`
	}{strconv.FormatFloat(b.LE, 'g', -1, 64), b.Count})
}

// histogram returns the cumulative buckets of name, +Inf last.
func (m metrics) histogram(name string) []bucket {
	var out []bucket
	for k, v := range m {
		if seriesName(k) != name+"_bucket" {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		s := k[i+4:]
		s = s[:strings.IndexByte(s, '"')]
		le, err := strconv.ParseFloat(s, 64) // "+Inf" parses as +Inf
		if err != nil {
			continue
		}
		out = append(out, bucket{le, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LE < out[j].LE })
	return out
}
