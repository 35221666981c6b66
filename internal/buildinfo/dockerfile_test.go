package buildinfo

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// There is no Docker engine in CI, so these tests read the Dockerfile as
// text and check what a build would otherwise only show at run time.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, ARG, RUN, ...
	args string
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from  string // FROM's arguments
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages. Comment lines, also
// inside a continued instruction, are dropped, as Docker does; the
// instructions before the first FROM (global ARGs) form stage 0.
func parseDockerfile(text string) []stage {
	stages := []stage{{}}
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, stage{from: in.args})
		}
		last := &stages[len(stages)-1]
		last.instr = append(last.instr, in)
	}
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(t, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(t)
		flush()
	}
	flush()
	return stages
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instr {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// args returns the names a stage declares with ARG.
func (s stage) args() map[string]bool {
	m := map[string]bool{}
	for _, a := range s.all("ARG") {
		for _, f := range strings.Fields(a) {
			name, _, _ := strings.Cut(f, "=")
			m[name] = true
		}
	}
	return m
}

// keyValues parses the arguments of LABEL or ENV (key=value pairs, values
// optionally double-quoted).
var keyValueRE = regexp.MustCompile(`([A-Za-z0-9_.-]+)=("(?:[^"\\]|\\.)*"|\S*)`)

func keyValues(list []string) map[string]string {
	m := map[string]string{}
	for _, a := range list {
		for _, kv := range keyValueRE.FindAllStringSubmatch(a, -1) {
			m[kv[1]] = strings.Trim(kv[2], `"`)
		}
	}
	return m
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// buildStage returns the stage whose RUN builds ./cmd/outbox-relay, and
// that RUN.
func buildStage(t *testing.T, stages []stage) (stage, string) {
	t.Helper()
	for _, s := range stages {
		for _, r := range s.all("RUN") {
			if strings.Contains(r, "go build") && strings.Contains(r, "./cmd/outbox-relay") {
				return s, r
			}
		}
	}
	t.Fatal("no stage runs go build ./cmd/outbox-relay")
	return stage{}, ""
}

func TestDockerfileCrossCompilesForTheTargetPlatform(t *testing.T) {
	build, run := buildStage(t, parseDockerfile(readRepoFile(t, "Dockerfile")))
	if !strings.Contains(build.from, "--platform=$BUILDPLATFORM") {
		t.Errorf("build stage FROM %s: want --platform=$BUILDPLATFORM (native compiler, no emulation)", build.from)
	}
	args := build.args()
	for _, want := range []string{"CGO_ENABLED=0", "GOOS=$TARGETOS", "GOARCH=$TARGETARCH", "-trimpath"} {
		if !strings.Contains(strings.NewReplacer("${", "$", "}", "").Replace(run), want) {
			t.Errorf("go build lacks %s:\n%s", want, run)
		}
	}
	for _, a := range []string{"TARGETOS", "TARGETARCH"} {
		if !args[a] {
			t.Errorf("build stage does not declare ARG %s (it would be empty)", a)
		}
	}
}

func TestDockerfileStampsBuildInfo(t *testing.T) {
	stages := parseDockerfile(readRepoFile(t, "Dockerfile"))
	build, run := buildStage(t, stages)
	checkStampFlags(t, "Dockerfile", stampFlags(run),
		map[string]string{"version": "${VERSION}", "revision": "${REVISION}", "date": "${BUILD_DATE}"})
	args := build.args()
	for _, a := range []string{"VERSION", "REVISION", "BUILD_DATE"} {
		if !args[a] {
			t.Errorf("build stage does not declare ARG %s", a)
		}
	}
}

func TestDockerfileImage(t *testing.T) {
	stages := parseDockerfile(readRepoFile(t, "Dockerfile"))
	final := stages[len(stages)-1]
	labels := keyValues(final.all("LABEL"))
	const oci = "org.opencontainers.image."
	want := map[string]string{
		"source":   "https://github.com/outbox-relay/outbox-relay",
		"licenses": "Apache-2.0",
		"version":  "${VERSION}",
		"revision": "${REVISION}",
		"created":  "${BUILD_DATE}",
		"title":    "outbox-relay",
	}
	for k, v := range want {
		if labels[oci+k] != v {
			t.Errorf("LABEL %s%s = %q, want %q", oci, k, labels[oci+k], v)
		}
	}
	if labels[oci+"description"] == "" {
		t.Errorf("LABEL %sdescription missing", oci)
	}
	args := final.args()
	for _, a := range []string{"VERSION", "REVISION", "BUILD_DATE"} {
		if !args[a] {
			t.Errorf("final stage does not declare ARG %s: its labels would be empty", a)
		}
	}

	// Metrics and probes listen on every interface in the image, on the
	// port it exposes; the binary's own default stays loopback.
	env := keyValues(final.all("ENV"))
	host, port, err := net.SplitHostPort(env["OUTBOX_RELAY_METRICS_ADDR"])
	if err != nil || host != "0.0.0.0" {
		t.Errorf("ENV OUTBOX_RELAY_METRICS_ADDR=%q: want 0.0.0.0:<port> (%v)", env["OUTBOX_RELAY_METRICS_ADDR"], err)
	}
	if exposed := final.all("EXPOSE"); len(exposed) != 1 || exposed[0] != port {
		t.Errorf("EXPOSE %v, want the metrics port %s", exposed, port)
	}
	if conf := readRepoFile(t, "docs/configuration.md"); !strings.Contains(conf, "`OUTBOX_RELAY_METRICS_ADDR`") {
		t.Error("OUTBOX_RELAY_METRICS_ADDR is not a documented variable of the binary")
	}
	if u := final.all("USER"); len(u) != 1 || strings.HasPrefix(u[0], "0") || strings.HasPrefix(u[0], "root") {
		t.Errorf("USER %v: the image must run as non-root", u)
	}
}

// TestDockerBuildLeavesBenchOut: bench/ is a module of its own with heavy
// dependencies; neither the Dockerfile nor the build context may bring it in.
func TestDockerBuildLeavesBenchOut(t *testing.T) {
	for _, s := range parseDockerfile(readRepoFile(t, "Dockerfile")) {
		for _, in := range s.instr {
			if regexp.MustCompile(`\bbench\b`).MatchString(in.args) {
				t.Errorf("%s %s refers to bench", in.cmd, in.args)
			}
			if in.cmd == "RUN" && strings.Contains(in.args, "./...") {
				t.Errorf("RUN %s: ./... would build every package, name the command", in.args)
			}
		}
	}
	ignored := map[string]bool{}
	for _, l := range strings.Split(readRepoFile(t, ".dockerignore"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignored[strings.Trim(l, "/")] = true
		}
	}
	for _, want := range []string{"bench", "dist", "bin", ".stack", ".git"} {
		if !ignored[want] {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

func TestParseDockerfile(t *testing.T) {
	stages := parseDockerfile("ARG A=1\nFROM x AS b\n# c\nRUN a \\\n  # inner comment\n  b\nLABEL k=\"v w\" j=z\nFROM y\nENV E=1\n")
	if len(stages) != 3 || stages[0].all("ARG")[0] != "A=1" || stages[1].from != "x AS b" {
		t.Fatalf("stages %+v", stages)
	}
	if r := stages[1].all("RUN"); len(r) != 1 || strings.Join(strings.Fields(r[0]), " ") != "a b" {
		t.Errorf("RUN %q, want %q", r, "a b")
	}
	if l := keyValues(stages[1].all("LABEL")); l["k"] != "v w" || l["j"] != "z" {
		t.Errorf("labels %v", l)
	}
	if e := keyValues(stages[2].all("ENV")); e["E"] != "1" {
		t.Errorf("env %v", e)
	}
}

// pinned is an image reference with its tag and digest: the tag for people
// and scripts/pin-images.sh, the digest for the build.
var pinned = regexp.MustCompile(`^[a-z0-9./_-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)

// TestDockerfileBaseImagesPinned: every image the build pulls (each FROM
// but scratch and earlier stages, and the syntax frontend) is pinned by
// digest, so a tag moved by its publisher, or by someone who took over
// the name, cannot change what is built (issue 36).
func TestDockerfileBaseImagesPinned(t *testing.T) {
	text := readRepoFile(t, "Dockerfile")
	first, _, _ := strings.Cut(text, "\n")
	if syntax, ok := strings.CutPrefix(first, "# syntax="); !ok || !pinned.MatchString(syntax) {
		t.Errorf("first line %q: want # syntax=docker/dockerfile:TAG@sha256:DIGEST", first)
	}
	stages := map[string]bool{"scratch": true}
	for _, st := range parseDockerfile(text)[1:] {
		var image, name string
		for _, f := range strings.Fields(st.from) {
			switch {
			case strings.HasPrefix(f, "--"):
			case image == "":
				image = f
			case strings.EqualFold(f, "AS"):
			default:
				name = f
			}
		}
		if !stages[image] && !pinned.MatchString(image) {
			t.Errorf("FROM %s: pin it as name:tag@sha256:digest (scripts/pin-images.sh)", st.from)
		}
		stages[name] = true
	}
}
