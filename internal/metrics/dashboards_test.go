package metrics

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/inbox/inboxprom"
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
// first gets one child, with as many dummy label values as it takes. The
// inbox's collectors (package inboxprom, in the consumers' processes) are
// included: the dashboard and the alerts cover them too.
func exportedSeries(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name := range exportedLabels(t) {
		out[name] = true
	}
	return out
}

// exportedLabels returns, for every series of exportedSeries, the names of
// its labels (le excluded).
func exportedLabels(t testing.TB) map[string]map[string]bool {
	t.Helper()
	r := New()
	touchVecs(t, reflect.ValueOf(r).Elem())
	touchInbox(inboxprom.New(r.Registry))
	fams, err := r.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = labels, labels, labels
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = labels, labels, labels
		default:
			out[name] = labels
		}
	}
	return out
}

// touchInbox creates one child of every inbox collector (their fields are
// unexported, so through the methods a consumer calls).
func touchInbox(m *inboxprom.Metrics) {
	const c = "x"
	m.Applied(c)
	m.Duplicate(c)
	m.Parked(c)
	m.DeadLettered(c)
	m.Error(c, "handler")
	m.OffsetCommit(c, time.Millisecond)
	m.Pruned(c, 1)
	m.Processed(c, time.Millisecond, time.Now())
	m.Lag(c, "t", 0, 1)
	m.RegistryRequest(c, "schema_by_id", "ok", time.Millisecond)
	m.RegistryCacheLookup(c, "schema_by_id", true)
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

// parseRules decodes a rule file strictly.
func parseRules(data []byte) (ruleFile, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	var rf ruleFile
	err := dec.Decode(&rf)
	return rf, err
}

// alertExprs parses a rule file and returns its expressions by rule name.
func alertExprs(data []byte) (map[string][]string, error) {
	rf, err := parseRules(data)
	if err != nil {
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
		if sc.JobName == "" {
			t.Error("a scrape config without job_name")
		}
	}
	if want := net.JoinHostPort("outbox-relay", metricsPort); len(targets) != 1 || targets[0] != want {
		t.Errorf("prometheus scrapes %v, want [%s]", targets, want)
	}

	// Grafana: provisioning directories, the default datasource.
	var ds struct {
		Datasources []struct {
			UID       string `yaml:"uid"`
			Type      string `yaml:"type"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
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
	// The dashboard names no datasource uid (TestDashboardImportsAnywhere):
	// its datasource variable falls back to Grafana's default datasource,
	// which must therefore be this Prometheus.
	if !ds.Datasources[0].IsDefault {
		t.Error("the provisioned Prometheus is not the default datasource, which the dashboard's datasource variable picks")
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

// dashboard is the part of a Grafana dashboard the checks below read.
type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dashDatasource `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashPanel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options any    `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // a collapsed row's
}

// panels returns every panel, those of collapsed rows included.
func (d dashboard) panels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// unit is the unit Grafana shows the target refID in: an override
// matching its refId, else the panel's default.
func (p dashPanel) unit(refID string) string {
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID != "byFrameRefID" || o.Matcher.Options != refID {
			continue
		}
		for _, prop := range o.Properties {
			if u, ok := prop.Value.(string); ok && prop.ID == "unit" {
				return u
			}
		}
	}
	return p.FieldConfig.Defaults.Unit
}

// dsVar is how every panel, target and query variable names its
// datasource: the dashboard's datasource variable, never a uid.
const dsVar = "${datasource}"

// datasourceProblems checks that the dashboard imports into any Grafana:
// an __inputs entry for the import dialog, a datasource variable, and no
// hard-coded datasource (uid or name) anywhere in the JSON.
func datasourceProblems(data []byte) []string {
	var bad []string
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{err.Error()}
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		bad = append(bad, fmt.Sprintf("__inputs %+v: want one prometheus datasource DS_PROMETHEUS", d.Inputs))
	}
	hasVar := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasVar = true
		}
	}
	if !hasVar {
		bad = append(bad, "no datasource variable named datasource (type datasource, query prometheus)")
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return append(bad, err.Error())
	}
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if t, ok := v["title"].(string); ok {
				where = t
			} else if n, ok := v["name"].(string); ok {
				where = n
			}
			for k, c := range v {
				if k == "datasource" {
					ds, ok := c.(map[string]any)
					if !ok || ds["uid"] != dsVar || ds["type"] != "prometheus" {
						bad = append(bad, fmt.Sprintf("%s: datasource %v, want {type: prometheus, uid: %s}", where, c, dsVar))
					}
					continue
				}
				walk(c, where)
			}
		case []any:
			for _, c := range v {
				walk(c, where)
			}
		}
	}
	walk(doc, "dashboard")
	sort.Strings(bad)
	return bad
}

// filterLabels are the labels with a dashboard variable: every selector
// of a metric carrying one of them must match it against its variable
// (=~, since the variables are multi-valued with "All" as .*).
var filterLabels = []string{"job", "instance", "slot", "consumer"}

// scrapeLabels are added by Prometheus to every series, so every selector
// must match them, whatever the metric's own labels.
var scrapeLabels = set("job", "instance")

// variableProblems checks that the variables exist and that every query
// of the dashboard filters by them.
func variableProblems(data []byte, labels map[string]map[string]bool) []string {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{err.Error()}
	}
	var bad []string
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != dsVar || !v.Multi || !v.IncludeAll || v.AllValue != ".*") {
			bad = append(bad, fmt.Sprintf("variable %s: want datasource %s, multi, includeAll with allValue .*", v.Name, dsVar))
		}
	}
	for _, l := range filterLabels {
		if !vars[l] {
			bad = append(bad, "no "+l+" variable")
		}
	}
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			sels, err := promqlSelectors(tg.Expr)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %q: %v", p.Title, tg.Expr, err))
				continue
			}
			for _, s := range sels {
				for _, l := range filterLabels {
					if !scrapeLabels[l] && !labels[s.metric][l] {
						continue
					}
					if !s.matches(l, "=~", "$"+l) {
						bad = append(bad, fmt.Sprintf("%s: %q: %s lacks %s=~\"$%s\"", p.Title, tg.Expr, s.metric, l, l))
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// Grafana units by what they measure.
var (
	timeUnits  = set("s", "ms", "µs", "ns", "dtdurations", "dtdhms")
	dateUnits  = set("dateTimeAsIso", "dateTimeAsSystem", "dateTimeFromNow")
	byteUnits  = set("bytes", "decbytes", "kbytes", "mbytes", "gbytes")
	rateUnits  = set("ops", "reqps", "rps", "wps", "cps")
	countUnits = set("short", "none", "locale")
	ratioUnits = set("percentunit", "short", "none")
)

// allowedUnits is the set of units an expression over metric can be shown
// in, from the metric's suffix: _seconds a duration (or, for a
// _timestamp_seconds, a date unless subtracted from time()), _bytes a
// size, a counter's rate per second, a counter's increase (or a gauge
// without a unit suffix) a plain count, a counter divided by itself
// (hits over all lookups: one family under two matchers) a ratio.
func allowedUnits(expr, metric string) map[string]bool {
	base := strings.TrimSuffix(strings.TrimSuffix(metric, "_bucket"), "_sum")
	if b, ok := strings.CutSuffix(base, "_count"); ok {
		base = b + "_total"
	}
	switch {
	case strings.HasSuffix(base, "_total"):
		if names, err := promqlMetrics(expr); err == nil && len(names) == 1 && names[0] == metric && strings.Contains(expr, " / ") {
			return ratioUnits
		}
		if strings.Contains(expr, "rate(") {
			return rateUnits
		}
		return countUnits
	case strings.HasSuffix(base, "_timestamp_seconds"):
		if strings.Contains(expr, "time()") {
			return timeUnits
		}
		return dateUnits
	case strings.HasSuffix(base, "_seconds"):
		return timeUnits
	case strings.HasSuffix(base, "_bytes"):
		return byteUnits
	}
	return countUnits
}

// unitProblems checks every target's unit against its metrics' suffixes.
func unitProblems(data []byte) []string {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			names, err := promqlMetrics(tg.Expr)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %q: %v", p.Title, tg.Expr, err))
				continue
			}
			u := p.unit(tg.RefID)
			for _, n := range names {
				if ok := allowedUnits(tg.Expr, n); !ok[u] {
					bad = append(bad, fmt.Sprintf("%s (%s): %s shown in unit %q, want one of %v", p.Title, tg.RefID, n, u, keys(ok)))
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDashboardImportsAnywhere(t *testing.T) {
	for _, bad := range datasourceProblems(readFile(t, dashboardPath)) {
		t.Error(bad)
	}
}

func TestDashboardQueriesUseVariables(t *testing.T) {
	for _, bad := range variableProblems(readFile(t, dashboardPath), exportedLabels(t)) {
		t.Error(bad)
	}
}

func TestDashboardUnitsMatchMetrics(t *testing.T) {
	for _, bad := range unitProblems(readFile(t, dashboardPath)) {
		t.Error(bad)
	}
}

// TestDashboardChecksCatch proves the three checks above can fail: the
// real dashboard with one thing broken must be rejected.
func TestDashboardChecksCatch(t *testing.T) {
	labels := exportedLabels(t)
	dash := string(readFile(t, dashboardPath))
	vars := func(b []byte) []string { return variableProblems(b, labels) }
	q := func(expr string) string { return strings.ReplaceAll(expr, `"`, `\"`) } // as in the JSON
	cases := []struct {
		name, old, new string
		check          func([]byte) []string
	}{
		{"hard-coded uid", `"uid": "${datasource}"`, `"uid": "prometheus"`, datasourceProblems},
		{"datasource by name", `"type": "prometheus",
          "uid": "${datasource}"`, `"type": "prometheus",
          "name": "Prometheus"`, datasourceProblems},
		{"no __inputs", `"__inputs"`, `"__unused"`, datasourceProblems},
		{"no job filter", q(`outbox_relay_inflight_bytes{job=~"$job", `), `outbox_relay_inflight_bytes{`, vars},
		{"job filter with =", q(`outbox_relay_leader{job=~"$job"`), q(`outbox_relay_leader{job="$job"`), vars},
		{"no instance filter", q(`outbox_relay_leader{job=~"$job", instance=~"$instance"}`), q(`outbox_relay_leader{job=~"$job"}`), vars},
		{"no slot filter", q(`(outbox_relay_slot_lag_bytes{job=~"$job", instance=~"$instance", slot=~"$slot"})`),
			q(`(outbox_relay_slot_lag_bytes{job=~"$job", instance=~"$instance"})`), vars},
		{"no consumer filter", q(`, consumer=~"$consumer"}`), `}`, vars},
		{"bytes as a count", `"unit": "bytes"`, `"unit": "short"`, unitProblems},
		{"seconds as bytes", `"unit": "s"`, `"unit": "bytes"`, unitProblems},
		{"a rate in seconds", `"value": "ops"`, `"value": "s"`, unitProblems},
		{"a rate as a ratio", `"unit": "ops"`, `"unit": "percentunit"`, unitProblems},
		{"a ratio as a rate", `"unit": "percentunit"`, `"unit": "ops"`, unitProblems},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(dash, c.old) {
				t.Fatalf("the dashboard no longer contains %q: update the case", c.old)
			}
			if bad := c.check([]byte(strings.Replace(dash, c.old, c.new, 1))); len(bad) == 0 {
				t.Fatalf("replacing %q by %q went unnoticed", c.old, c.new)
			}
		})
	}
}

// runbookPrefix is where every alert's runbook_url points: a file of the
// project's docs on GitHub, with the anchor of the alert's section.
const runbookPrefix = "https://github.com/outbox-relay/outbox-relay/blob/main/"

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case,
// spaces to hyphens, punctuation (but - and _) dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// markdownAnchors returns the anchors of every heading of a Markdown
// file (outside code fences); repeated headings get -1, -2, … as on GitHub.
func markdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		text, ok := strings.CutPrefix(line, "#")
		if fenced || !ok {
			continue
		}
		a := githubAnchor(strings.TrimLeft(text, "#"))
		for n := 1; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", githubAnchor(strings.TrimLeft(text, "#")), n)
		}
		out[a] = true
	}
	return out
}

// runbookProblems checks that every alert has a runbook_url to its own
// section (anchor = the alert's name in lower case) of a docs file that
// has that heading, that no rule hard-codes a job, and that the relay's
// absence is detected with absent().
func runbookProblems(data []byte, readDoc func(path string) (string, error)) []string {
	rf, err := parseRules(data)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	hasAbsent := false
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			sels, err := promqlSelectors(r.Expr)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", name, err))
			}
			for _, s := range sels {
				for _, m := range s.matchers {
					if m.label == "job" {
						bad = append(bad, fmt.Sprintf("%s: %s{job%s%q}: a job name differs from one installation to the next", name, s.metric, m.op, m.value))
					}
				}
			}
			hasAbsent = hasAbsent || strings.Contains(r.Expr, "absent(")
			if r.Alert == "" {
				continue
			}
			url := r.Annotations["runbook_url"]
			path, anchor, ok := strings.Cut(strings.TrimPrefix(url, runbookPrefix), "#")
			if !strings.HasPrefix(url, runbookPrefix+"docs/") || !ok {
				bad = append(bad, fmt.Sprintf("%s: runbook_url %q: want %sdocs/FILE.md#ANCHOR", name, url, runbookPrefix))
				continue
			}
			if anchor != strings.ToLower(r.Alert) {
				bad = append(bad, fmt.Sprintf("%s: runbook_url anchor %q: want the alert's own section #%s", name, anchor, strings.ToLower(r.Alert)))
			}
			md, err := readDoc(path)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: runbook_url %q: %v", name, url, err))
				continue
			}
			if !markdownAnchors(md)[anchor] {
				bad = append(bad, fmt.Sprintf("%s: %s has no heading with anchor #%s", name, path, anchor))
			}
		}
	}
	if !hasAbsent {
		bad = append(bad, "no rule detects a missing relay with absent()")
	}
	sort.Strings(bad)
	return bad
}

func readRepoDoc(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	return string(b), err
}

func TestAlertsHaveRunbooks(t *testing.T) {
	for _, bad := range runbookProblems(readFile(t, alertsPath), readRepoDoc) {
		t.Error(bad)
	}
}

func TestRunbookChecksCatch(t *testing.T) {
	alerts := string(readFile(t, alertsPath))
	cases := []struct{ name, old, new string }{
		{"missing runbook_url", `runbook_url:`, `runbook_link:`},
		{"anchor without a heading", `#outboxrelaystalled"`, `#outboxrelay-stalled"`},
		{"another alert's section", `#outboxrelaystalled"`, `#outboxrelaydown"`},
		{"a docs file that does not exist", `docs/operations.md#outboxrelaystalled`, `docs/runbooks.md#outboxrelaystalled`},
		{"hard-coded job", `absent(outbox_relay_leader)`, `up{job="outbox-relay"} == 0`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(alerts, c.old) {
				t.Fatalf("alerts.yml no longer contains %q: update the case", c.old)
			}
			broken := []byte(strings.Replace(alerts, c.old, c.new, 1))
			if c.name == "missing runbook_url" {
				// A misspelt key is a decode error already; drop the line instead.
				broken = []byte(regexp.MustCompile(`(?m)^\s*runbook_url:.*\n`).ReplaceAllString(alerts, ""))
			}
			if bad := runbookProblems(broken, readRepoDoc); len(bad) == 0 {
				t.Fatalf("replacing %q by %q went unnoticed", c.old, c.new)
			}
		})
	}
	for heading, want := range map[string]string{
		" OutboxRelayDown": "outboxrelaydown", " Recover a lost slot": "recover-a-lost-slot",
		" Dead letters: `dlq`": "dead-letters-dlq", " Retention: how the periods must relate": "retention-how-the-periods-must-relate",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
	if a := markdownAnchors("# A\n## A\n```\n# B\n```\n"); !a["a"] || !a["a-1"] || a["b"] {
		t.Errorf("markdownAnchors: %v", a)
	}
}
