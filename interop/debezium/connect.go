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
// Router, on its own slot.
type connector struct {
	name   string
	slot   string
	pub    string
	table  string // schema-qualified
	prefix string // topic.prefix (the connector's logical name)
	// router holds the EventRouter options (without the
	// "transforms.outbox." prefix), route.topic.replacement included.
	router props
	// expand selects the JsonConverter (schemas.enable=false) for values,
	// as table.expand.json.payload=true needs; otherwise values go
	// through the StringConverter.
	expand bool
}

// properties renders the connector's configuration file.
func (c connector) properties(db *pgx.ConnConfig) props {
	p := props{
		{"name", c.name},
		{"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
		{"tasks.max", "1"},
		{"database.hostname", db.Host},
		{"database.port", strconv.Itoa(int(db.Port))},
		{"database.user", db.User},
	}
	if db.Password != "" {
		p = append(p, [2]string{"database.password", db.Password})
	}
	p = append(p, props{
		{"database.dbname", db.Database},
		{"topic.prefix", c.prefix},
		{"plugin.name", "pgoutput"},
		{"slot.name", c.slot},
		{"publication.name", c.pub},
		{"publication.autocreate.mode", "disabled"},
		{"snapshot.mode", "no_data"},
		{"table.include.list", c.table},
		{"key.converter", stringConverter},
	}...)
	if c.expand {
		p = append(p, [2]string{"value.converter", jsonConverter}, [2]string{"value.converter.schemas.enable", "false"})
	} else {
		p = append(p, [2]string{"value.converter", stringConverter})
	}
	p = append(p, [2]string{"transforms", "outbox"}, [2]string{"transforms.outbox.type", eventRouter})
	for _, kv := range c.router {
		p = append(p, [2]string{"transforms.outbox." + kv[0], kv[1]})
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

// defaultRouter is the EventRouter configuration the run uses when
// docs/formats.md has none: the outbox table's columns (migrations/) for
// the router's fields, the event's columns as headers in the order the
// relay writes them, and the row's headers column as one header.
var defaultRouter = props{
	{"table.field.event.id", "event_id"},
	{"table.field.event.key", "aggregate_id"},
	{"table.field.event.payload", "payload"},
	{"route.by.field", "aggregate_type"},
	{"route.topic.replacement", "outbox.event.${routedByValue}"},
	{"table.fields.additional.placement", "event_type:header,aggregate_type:header,aggregate_version:header,schema_version:header,headers:header"},
}

// routerFromDoc extracts the EventRouter options from the first
// .properties code block of doc (docs/formats.md) that configures
// io.debezium.transforms.outbox.EventRouter: the lines
// transforms.<name>.<option>=<value> of the transform of that type,
// "type" left out. ok is false when doc has no such block.
func routerFromDoc(doc string) (p props, ok bool) {
	for _, block := range codeBlocks(doc) {
		name := ""
		for _, line := range block {
			k, v, found := strings.Cut(line, "=")
			if found && strings.HasPrefix(k, "transforms.") && strings.HasSuffix(k, ".type") && strings.TrimSpace(v) == eventRouter {
				name = strings.TrimSuffix(strings.TrimPrefix(k, "transforms."), ".type")
				break
			}
		}
		if name == "" {
			continue
		}
		prefix := "transforms." + name + "."
		for _, line := range block {
			k, v, found := strings.Cut(line, "=")
			k = strings.TrimSpace(k)
			if !found || !strings.HasPrefix(k, prefix) || k == prefix+"type" {
				continue
			}
			p = append(p, [2]string{strings.TrimPrefix(k, prefix), strings.TrimSpace(v)})
		}
		return p, true
	}
	return nil, false
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
