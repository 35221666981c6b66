package helmtest

import (
	"net"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// imageUser is the USER of the Dockerfile's scratch image.
const imageUser = 65532

// checkSecurity asserts the pod runs as the image's non-root user with a
// read-only root filesystem, no privilege escalation, no capabilities and
// the runtime's default seccomp profile.
func checkSecurity(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	ps := pod.SecurityContext
	if ps == nil || !isTrue(ps.RunAsNonRoot) || ps.RunAsUser == nil || *ps.RunAsUser != imageUser {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser %d", ps, imageUser)
	}
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext: want seccompProfile RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken: want false (the relay never calls the Kubernetes API)")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s: no securityContext", c.Name)
		case !isTrue(sc.RunAsNonRoot), !isTrue(sc.ReadOnlyRootFilesystem):
			t.Errorf("container %s: want runAsNonRoot and readOnlyRootFilesystem", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: want allowPrivilegeEscalation false", c.Name)
		case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: want capabilities drop [ALL], add none", c.Name)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("container %s: want seccompProfile RuntimeDefault", c.Name)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkEnv asserts every OUTBOX_RELAY_* variable of the container's is a
// variable of its subcommand (args[0]) in configuration.md, with a value
// its flag parses, and that every _FILE variable names a file of a mounted
// Secret. It returns the variables by name.
func checkEnv(t *testing.T, pod corev1.PodSpec, c corev1.Container, flags flagTable) map[string]string {
	t.Helper()
	if len(c.Args) != 1 || len(c.Command) != 0 {
		t.Fatalf("container %s: args %q, command %q: want one subcommand as args, the image's entrypoint", c.Name, c.Args, c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("container %s: %s set twice", c.Name, e.Name)
		}
		env[e.Name] = e.Value
		if !strings.HasPrefix(e.Name, "OUTBOX_RELAY_") {
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("%s: from valueFrom; the chart passes secrets as files (_FILE)", e.Name)
		}
		if err := flags.check(e.Name, e.Value, c.Args[0]); err != nil {
			t.Errorf("container %s: %v", c.Name, err)
		}
		if strings.HasSuffix(e.Name, "_FILE") {
			checkSecretFile(t, pod, c, e.Name, e.Value)
		}
	}
	for name := range env {
		if base, ok := strings.CutSuffix(name, "_FILE"); ok {
			if _, both := env[base]; both && flags[base].name == flags[name].name {
				t.Errorf("container %s: both %s and %s are set: the binary refuses that", c.Name, base, name)
			}
		}
	}
	return env
}

// checkSecretFile asserts file is a key of a Secret volume mounted
// read-only in c.
func checkSecretFile(t *testing.T, pod corev1.PodSpec, c corev1.Container, env, file string) {
	t.Helper()
	dir, base := path.Split(file)
	for _, m := range c.VolumeMounts {
		if strings.TrimSuffix(dir, "/") != m.MountPath {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s: mount %s is not readOnly", env, m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, item := range v.Secret.Items {
				if item.Path == base {
					return
				}
			}
		}
	}
	t.Errorf("%s=%s: no mounted Secret volume holds that file", env, file)
}

// checkProbes asserts the probes hit the binary's endpoints on the port
// the relay listens on: OUTBOX_RELAY_METRICS_ADDR on all interfaces, the
// container port named metrics.
func checkProbes(t *testing.T, c corev1.Container, env map[string]string, wantPort int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(env["OUTBOX_RELAY_METRICS_ADDR"])
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("OUTBOX_RELAY_METRICS_ADDR=%q: want 0.0.0.0:PORT (the binary's default is loopback, which no probe reaches)", env["OUTBOX_RELAY_METRICS_ADDR"])
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != wantPort || strconv.Itoa(int(wantPort)) != port {
		t.Errorf("ports %+v, metrics address port %s: want one port named metrics, %d", c.Ports, port, wantPort)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, healthzPath(t)}, {"readinessProbe", c.ReadinessProbe, readyzPath(t)}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Port != intstr.FromString("metrics") {
			t.Errorf("%s: GET %s on port %s; want GET %s on port metrics", p.name, g.Path, g.Port.String(), p.path)
		}
	}
}

// checkGracePeriod asserts the kubelet waits longer than the relay's
// shutdown drain before it kills the pod.
func checkGracePeriod(t *testing.T, pod corev1.PodSpec, env map[string]string) time.Duration {
	t.Helper()
	drain, err := time.ParseDuration(env["OUTBOX_RELAY_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("OUTBOX_RELAY_SHUTDOWN_TIMEOUT: %v", err)
	}
	if pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds %v: want more than the shutdown timeout %s", pod.TerminationGracePeriodSeconds, drain)
	}
	return drain
}
