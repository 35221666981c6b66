package metrics

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
)

// Paths of the deployment files, from this package's directory.
var (
	dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "outbox-relay.json")
	alertsPath    = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
)

// scrapeSeries are series Prometheus synthesises for every target; rules
// may use them although the relay does not export them.
var scrapeSeries = set("up")

// exportedSeries returns the series names the relay's registry exposes:
// every family Gather returns, with _bucket/_sum/_count for histograms
// (and _sum/_count for summaries) instead of the bare name. A Vec without
// children is missing from Gather, so every Vec in Relay (and its PGStats)
// first gets one child, with as many dummy label values as it takes.
func exportedSeries(t testing.TB) map[string]bool {
	t.Helper()
	r := New()
	touchVecs(t, reflect.ValueOf(r).Elem())
	fams, err := r.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out
}

// touchVecs creates one child of every metric vector in the struct v
// (recursing into nested structs such as PGStats).
func touchVecs(t testing.TB, v reflect.Value) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !f.CanInterface() {
			continue
		}
		if f.Kind() == reflect.Struct {
			touchVecs(t, f)
			continue
		}
		var get func(lvs ...string) error
		switch vec := f.Interface().(type) {
		case *prometheus.CounterVec:
			get = func(lvs ...string) error { _, err := vec.GetMetricWithLabelValues(lvs...); return err }
		case *prometheus.GaugeVec:
			get = func(lvs ...string) error { _, err := vec.GetMetricWithLabelValues(lvs...); return err }
		case *prometheus.HistogramVec:
			get = func(lvs ...string) error { _, err := vec.GetMetricWithLabelValues(lvs...); return err }
		case *prometheus.SummaryVec:
			get = func(lvs ...string) error { _, err := vec.GetMetricWithLabelValues(lvs...); return err }
		default:
			continue
		}
		ok := false
		for n := 0; n <= 8 && !ok; n++ {
			lvs := make([]string, n)
			for k := range lvs {
				lvs[k] = "x"
			}
			ok = get(lvs...) == nil
		}
		if !ok {
			t.Fatalf("%s: could not create a child with up to 8 labels", v.Type().Field(i).Name)
		}
	}
}

// dashboardExprs returns every "expr" string in a Grafana dashboard,
// wherever it is nested (rows, panels, targets), keyed by panel title.
func dashboardExprs(data []byte) (map[string][]string, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	var walk func(v any, panel string)
	walk = func(v any, panel string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				panel = title
			}
			for k, c := range v {
				if s, ok := c.(string); ok && k == "expr" {
					out[panel] = append(out[panel], s)
					continue
				}
				walk(c, panel)
			}
		case []any:
			for _, c := range v {
				walk(c, panel)
			}
		}
	}
	walk(doc, "dashboard")
	return out, nil
}

// ruleFile is a Prometheus rule file; KnownFields makes a misspelt key an
// error instead of a silently ignored rule attribute.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertExprs parses a rule file and returns its expressions by rule name.
func alertExprs(data []byte) (map[string][]string, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		return nil, err
	}
	if len(rf.Groups) == 0 {
		return nil, fmt.Errorf("no rule groups")
	}
	out := map[string][]string{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			return nil, fmt.Errorf("group %q: needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") || strings.TrimSpace(r.Expr) == "" {
				return nil, fmt.Errorf("rule %q: needs exactly one of alert/record, and an expr", name)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					return nil, fmt.Errorf("rule %s: for %q: %w", name, r.For, err)
				}
			}
			if r.Alert != "" && (r.Labels["severity"] == "" || r.Annotations["summary"] == "") {
				return nil, fmt.Errorf("alert %s: needs labels.severity and annotations.summary", name)
			}
			out[name] = append(out[name], r.Expr)
		}
	}
	return out, nil
}

// unknownMetrics checks every expression and returns one line per metric
// that the relay does not export (or per expression that does not parse).
func unknownMetrics(exprs map[string][]string, known map[string]bool) []string {
	var bad []string
	for where, list := range exprs {
		for _, e := range list {
			names, err := promqlMetrics(e)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %q: %v", where, e, err))
				continue
			}
			if len(names) == 0 {
				bad = append(bad, fmt.Sprintf("%s: %q uses no metric", where, e))
			}
			for _, n := range names {
				if !known[n] {
					bad = append(bad, fmt.Sprintf("%s: %q uses %s, which the relay does not export", where, e, n))
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExportedSeriesComeFromTheRegistry(t *testing.T) {
	known := exportedSeries(t)
	for _, want := range []string{
		"outbox_relay_commit_to_ack_seconds_bucket", "outbox_relay_events_published_total",
		"outbox_relay_slot_wal_status", "outbox_relay_stats_scrape_errors_total", "go_goroutines",
	} {
		if !known[want] {
			t.Errorf("%s missing from the exported series", want)
		}
	}
	if known["outbox_relay_commit_to_ack_seconds"] {
		t.Error("a histogram's bare name is not a series")
	}
}

func TestDashboardUsesExportedMetrics(t *testing.T) {
	known := exportedSeries(t)
	exprs, err := dashboardExprs(readFile(t, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range exprs {
		n += len(l)
	}
	if n < 20 {
		t.Fatalf("dashboard has %d expressions; the walk is broken", n)
	}
	for _, bad := range unknownMetrics(exprs, known) {
		t.Error(bad)
	}
}

func TestAlertsUseExportedMetrics(t *testing.T) {
	known := exportedSeries(t)
	for s := range scrapeSeries {
		known[s] = true
	}
	exprs, err := alertExprs(readFile(t, alertsPath))
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 10 {
		t.Fatalf("alerts.yml has %d rules", len(exprs))
	}
	for _, bad := range unknownMetrics(exprs, known) {
		t.Error(bad)
	}
}

// TestUnknownMetricIsCaught proves the checks above can fail: the real
// files with one expression broken must be rejected.
func TestUnknownMetricIsCaught(t *testing.T) {
	known := exportedSeries(t)
	dash := string(readFile(t, dashboardPath))
	alerts := string(readFile(t, alertsPath))
	cases := []struct {
		name, file, old, new string
		parse                func([]byte) (map[string][]string, error)
	}{
		{"dashboard: misspelt metric", dash, "outbox_relay_slot_lag_bytes", "outbox_relay_slot_lag", dashboardExprs},
		{"dashboard: histogram bare name", dash, "outbox_relay_commit_to_ack_seconds_bucket", "outbox_relay_commit_to_ack_seconds", dashboardExprs},
		{"dashboard: counter without _total", dash, "outbox_relay_events_published_total", "outbox_relay_events_published", dashboardExprs},
		{"dashboard: misspelt function", dash, "histogram_quantile(", "histogram_quantil(", dashboardExprs},
		{"alerts: unknown metric", alerts, "outbox_relay_slot_wal_exhaustion_seconds", "outbox_relay_wal_exhaustion_seconds", alertExprs},
		{"alerts: label matcher typo", alerts, `{status="lost"}`, `{status=lost}`, alertExprs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(c.file, c.old) {
				t.Fatalf("the file no longer contains %q: update the case", c.old)
			}
			exprs, err := c.parse([]byte(strings.Replace(c.file, c.old, c.new, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if bad := unknownMetrics(exprs, known); len(bad) == 0 {
				t.Fatalf("replacing %q by %q went unnoticed", c.old, c.new)
			}
		})
	}
	// And a rule file with a misspelt key does not parse at all.
	if _, err := alertExprs([]byte(strings.Replace(alerts, "expr:", "exp:", 1))); err == nil {
		t.Fatal("a rule with exp: instead of expr: was accepted")
	}
}

// compose is the part of docker-compose.yml the checks below read.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
}

// TestComposeWiresPrometheusAndGrafana checks what Docker would only show
// at run time: the mounted files exist, Prometheus scrapes the relay's
// metrics port and loads the rules where they are mounted, Grafana's
// datasource points at Prometheus and the dashboard at that datasource.
func TestComposeWiresPrometheusAndGrafana(t *testing.T) {
	var c compose
	if err := yaml.Unmarshal(readFile(t, filepath.Join("..", "..", "docker-compose.yml")), &c); err != nil {
		t.Fatal(err)
	}
	relay, prom, graf := c.Services["outbox-relay"], c.Services["prometheus"], c.Services["grafana"]
	if prom.Image == "" || graf.Image == "" {
		t.Fatal("docker-compose.yml lacks the prometheus or grafana service")
	}
	mounts := func(svc string, vols []string) map[string]string { // container path -> host file
		m := map[string]string{}
		for _, v := range vols {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], "./") {
				continue // a named volume
			}
			host := filepath.Join("..", "..", parts[0])
			if _, err := os.Stat(host); err != nil {
				t.Errorf("%s mounts %s: %v", svc, parts[0], err)
			}
			m[parts[1]] = host
		}
		return m
	}
	pm, gm := mounts("prometheus", prom.Volumes), mounts("grafana", graf.Volumes)

	// Prometheus: config file, rules, scrape target = the relay's metrics port.
	var cfgPath string
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfgPath = v
		}
	}
	host, ok := pm[cfgPath]
	if !ok {
		t.Fatalf("prometheus --config.file=%q is not a mounted file (%v)", cfgPath, pm)
	}
	var pcfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(readFile(t, host), &pcfg); err != nil {
		t.Fatal(err)
	}
	for _, rf := range pcfg.RuleFiles {
		if pm[rf] != alertsPath {
			t.Errorf("rule file %s is not deploy/prometheus/alerts.yml mounted (%v)", rf, pm)
		}
	}
	if len(pcfg.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule files")
	}
	_, metricsPort, err := net.SplitHostPort(relay.Environment["OUTBOX_RELAY_METRICS_ADDR"])
	if err != nil {
		t.Fatalf("relay OUTBOX_RELAY_METRICS_ADDR: %v", err)
	}
	var targets []string
	for _, sc := range pcfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
		if sc.JobName != "outbox-relay" {
			t.Errorf("job %q: the alerts (up{job=\"outbox-relay\"}) expect job outbox-relay", sc.JobName)
		}
	}
	if want := net.JoinHostPort("outbox-relay", metricsPort); len(targets) != 1 || targets[0] != want {
		t.Errorf("prometheus scrapes %v, want [%s]", targets, want)
	}

	// Grafana: provisioning directories, datasource uid used by the dashboard.
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	dsDir, ok := gm["/etc/grafana/provisioning/datasources"]
	if !ok {
		t.Fatal("grafana does not mount datasource provisioning")
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dsDir, "prometheus.yml")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("datasource %+v: want prometheus at http://prometheus:9090", ds.Datasources)
	}
	if !containsPort(prom.Ports, "9090") {
		t.Errorf("prometheus ports %v do not publish 9090", prom.Ports)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	pvDir, ok := gm["/etc/grafana/provisioning/dashboards"]
	if !ok {
		t.Fatal("grafana does not mount dashboard provisioning")
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(pvDir, "outbox-relay.yml")), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 || gm[prov.Providers[0].Options.Path+"/outbox-relay.json"] != dashboardPath {
		t.Fatalf("dashboard provider %+v does not load the mounted deploy/grafana/outbox-relay.json (%v)", prov.Providers, gm)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Type string `json:"type"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, dashboardPath), &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != ds.Datasources[0].UID) {
			t.Errorf("a %s panel does not use datasource uid %q", p.Type, ds.Datasources[0].UID)
		}
	}
}

func containsPort(ports []string, port string) bool {
	for _, p := range ports {
		if strings.HasSuffix(p, ":"+port) {
			return true
		}
	}
	return false
}
