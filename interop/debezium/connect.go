package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Converter class names of Kafka Connect.
const (
	stringConverter = "org.apache.kafka.connect.storage.StringConverter"
	jsonConverter   = "org.apache.kafka.connect.json.JsonConverter"
	eventRouter     = "io.debezium.transforms.outbox.EventRouter"
)

// jvmOptions are the options Kafka's bin/connect-standalone.sh starts the
// worker with (KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS of
// kafka-run-class.sh): what a Connect deployment runs unless it tunes them.
var jvmOptions = []string{
	"-Xms256M", "-Xmx2G",
	"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
}

// props is an ordered list of Java properties.
type props [][2]string

func (p props) String() string {
	var b strings.Builder
	for _, kv := range p {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(escapeProp(kv[1]))
		b.WriteByte('\n')
	}
	return b.String()
}

// get is the last value of key, and whether it is set.
func (p props) get(key string) (string, bool) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i][0] == key {
			return p[i][1], true
		}
	}
	return "", false
}

// escapeProp escapes a value for a .properties file: backslashes, and a
// leading space.
func escapeProp(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	if strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// connector is one Debezium PostgreSQL connector with the Outbox Event
// Router, on its own slot: the template's configuration with this
// connector's names, database and topic suffix.
type connector struct {
	name   string
	slot   string
	pub    string
	table  string // schema-qualified
	prefix string // topic.prefix (the connector's logical name)
	suffix string // appended to route.topic.replacement
	tmpl   connectorTemplate
	// expand applies the template's expansion overrides
	// (table.expand.json.payload=true with the JsonConverter).
	expand bool
	// tombstones sets route.tombstone.on.empty.payload=true, the
	// router's match of --tombstone-on-null-payload.
	tombstones bool
}

// properties renders the connector's configuration file.
func (c connector) properties(db *pgx.ConnConfig) props {
	p := append(props(nil), c.tmpl.base...)
	if c.expand {
		for _, kv := range c.tmpl.expand {
			p = p.withOption(kv[0], kv[1])
		}
	}
	t := "transforms." + c.tmpl.transform + "."
	replacement, ok := p.get(t + "route.topic.replacement")
	if !ok {
		replacement = defaultReplacement
	}
	for _, kv := range [][2]string{
		{"name", c.name},
		{"database.hostname", db.Host},
		{"database.port", strconv.Itoa(int(db.Port))},
		{"database.user", db.User},
		{"database.dbname", db.Database},
		{"topic.prefix", c.prefix},
		{"table.include.list", c.table},
		{"slot.name", c.slot},
		{"publication.name", c.pub},
		{t + "route.topic.replacement", replacement + c.suffix},
	} {
		p = p.withOption(kv[0], kv[1])
	}
	if db.Password != "" {
		p = p.withOption("database.password", db.Password)
	}
	if c.tombstones {
		p = p.withOption(t+"route.tombstone.on.empty.payload", "true")
	}
	return p
}

// defaultReplacement is the router's default route.topic.replacement.
const defaultReplacement = "outbox.event.${routedByValue}"

// connectorTemplate is the connector configuration every connector of the
// run starts from: docs/formats.md's, the configuration that matches the
// relay's debezium format (one source: the run tests what the
// documentation gives out).
type connectorTemplate struct {
	base      props  // the whole connector configuration
	expand    props  // what the expansion profile sets on top of it
	transform string // the name of the EventRouter transform
	from      string // where it was read
}

// router is the EventRouter's options, without "transforms.<name>.".
func (t connectorTemplate) router() props {
	var p props
	prefix := "transforms." + t.transform + "."
	for _, kv := range t.base {
		if k, ok := strings.CutPrefix(kv[0], prefix); ok && k != "type" {
			p = append(p, [2]string{k, kv[1]})
		}
	}
	return p
}

// templateFromDoc reads the connector template from doc: the first code
// block that configures a transform of type EventRouter is the
// connector's configuration, the first other block that sets that
// transform's table.expand.json.payload=true the expansion profile's
// overrides. ok is false when doc has no connector block.
func templateFromDoc(doc string) (t connectorTemplate, ok bool) {
	blocks := codeBlocks(doc)
	for i, block := range blocks {
		p := parseProps(block)
		name := ""
		for _, kv := range p {
			if strings.HasPrefix(kv[0], "transforms.") && strings.HasSuffix(kv[0], ".type") && kv[1] == eventRouter {
				name = strings.TrimSuffix(strings.TrimPrefix(kv[0], "transforms."), ".type")
				break
			}
		}
		if name == "" {
			continue
		}
		t = connectorTemplate{base: p, transform: name}
		for _, other := range blocks[i+1:] {
			q := parseProps(other)
			if v, _ := q.get("transforms." + name + ".table.expand.json.payload"); v == "true" {
				t.expand = q
				break
			}
		}
		return t, true
	}
	return connectorTemplate{}, false
}

// parseProps reads key=value lines (a code block's, comments left out).
func parseProps(lines []string) props {
	var p props
	for _, line := range lines {
		k, v, found := strings.Cut(line, "=")
		if found {
			p = append(p, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
	}
	return p
}

// workerProperties renders the standalone worker's configuration:
// StringConverter by default (connectors set their own), offsets in a
// file, the REST listener on a port of its own on the loopback, and
// service-loader plugin discovery (every jar is on the classpath and has
// its manifest; Connect suggests it at start).
func workerProperties(brokers, offsetsFile, listener string) props {
	return props{
		{"bootstrap.servers", brokers},
		{"key.converter", stringConverter},
		{"value.converter", stringConverter},
		{"offset.storage.file.filename", offsetsFile},
		{"listeners", "http://" + listener},
		{"plugin.discovery", "service_load"},
	}
}

// log4j2Config is the Connect JVM's logging: INFO to standard output,
// which goes to the log file.
const log4j2Config = `<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="%d{HH:mm:ss.SSS} %-5p [%t] %c{1}: %m%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="stdout"/></Root>
  </Loggers>
</Configuration>
`

// connectProc is a running Connect standalone worker.
type connectProc struct {
	*proc
	rest       string
	connectors []string
}

// startConnect writes the worker's and connectors' files into dir and
// starts ConnectStandalone with every jar of libs on the classpath.
func (r *run) startConnect(dir string, conns []connector) (*connectProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	listener, err := freeAddr()
	if err != nil {
		return nil, err
	}
	worker := filepath.Join(dir, "worker.properties")
	if err := os.WriteFile(worker, []byte(workerProperties(strings.Join(r.cfg.brokers, ","), filepath.Join(dir, "offsets.dat"), listener).String()), 0o644); err != nil {
		return nil, err
	}
	log4j := filepath.Join(dir, "log4j2.xml")
	if err := os.WriteFile(log4j, []byte(log4j2Config), 0o644); err != nil {
		return nil, err
	}
	argv := []string{r.cfg.java}
	argv = append(argv, jvmOptions...)
	argv = append(argv, "-Dlog4j2.configurationFile="+log4j, "-cp", filepath.Join(r.cfg.connectLibs, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone", worker)
	var names []string
	for _, c := range conns {
		f := filepath.Join(dir, c.name+".properties")
		if err := os.WriteFile(f, []byte(c.properties(r.db).String()), 0o644); err != nil {
			return nil, err
		}
		argv = append(argv, f)
		names = append(names, c.name)
	}
	p, err := startProc("Kafka Connect", argv, nil, filepath.Join(dir, "connect.log"), r.cfg.pidFile)
	if err != nil {
		return nil, err
	}
	return &connectProc{proc: p, rest: "http://" + listener, connectors: names}, nil
}

// failed is non-nil when the worker has exited or a connector or its task
// reports FAILED on the REST API (the trace's first line says why). A
// REST API that does not answer yet is no failure.
func (c *connectProc) failed(ctx context.Context) error {
	if err := c.exited(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, name := range c.connectors {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.rest+"/connectors/"+name+"/status", nil)
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		var st struct {
			Connector struct {
				State string `json:"state"`
				Trace string `json:"trace"`
			} `json:"connector"`
			Tasks []struct {
				ID    int    `json:"id"`
				State string `json:"state"`
				Trace string `json:"trace"`
			} `json:"tasks"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			continue
		}
		if st.Connector.State == "FAILED" {
			return fmt.Errorf("connector %s FAILED: %s (log: %s)", name, firstLine(st.Connector.Trace), c.logPath)
		}
		for _, t := range st.Tasks {
			if t.State == "FAILED" {
				return fmt.Errorf("connector %s task %d FAILED: %s (log: %s)", name, t.ID, firstLine(t.Trace), c.logPath)
			}
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// freeAddr is a free TCP address on the loopback.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// codeBlocks are the lines of doc's fenced code blocks, comments and
// blank lines left out.
func codeBlocks(doc string) [][]string {
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") {
			if in {
				blocks = append(blocks, cur)
				cur = nil
			}
			in = !in
			continue
		}
		if in && t != "" && !strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "!") {
			cur = append(cur, t)
		}
	}
	return blocks
}

// withOption returns p with key set to value (replacing an earlier value
// in place, else appended).
func (p props) withOption(key, value string) props {
	out := append(props(nil), p...)
	for i := range out {
		if out[i][0] == key {
			out[i][1] = value
			return out
		}
	}
	return append(out, [2]string{key, value})
}
