package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// appManifest is the lab a student applies first: a Deployment behind a ClusterIP
// Service, a NodePort Service on a fixed port, and a ConfigMap.
const appManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: hostnames
spec:
  replicas: 3
  selector:
    matchLabels:
      app: hostnames
  template:
    metadata:
      labels:
        app: hostnames
    spec:
      containers:
      - name: hostnames
        image: registry.k8s.io/serve_hostname
        ports:
        - containerPort: 9376
---
apiVersion: v1
kind: Service
metadata:
  name: hostnames
spec:
  selector:
    app: hostnames
  ports:
  - name: default
    protocol: TCP
    port: 80
    targetPort: 9376
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 8080
    nodePort: 30080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  greeting: hello
`

// appEdits changes the ConfigMap's data and web's targetPort; the re-apply must say
// exactly those two objects were configured.
var appEdits = strings.NewReplacer("greeting: hello", "greeting: goodbye", "targetPort: 8080", "targetPort: 8081")

const podManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels:
    app: web
spec:
  containers:
  - name: web
    image: registry.k8s.io/serve_hostname
`

// badNodePortManifest asks for a NodePort outside the default range.
const badNodePortManifest = `apiVersion: v1
kind: Service
metadata:
  name: bad-nodeport
spec:
  type: NodePort
  selector:
    app: web
  ports:
  - port: 80
    nodePort: 8080
`

var serviceCIDR = netip.MustParsePrefix("10.96.0.0/12")

// client runs a kubectl-compatible binary (kubectl, or minikit's embedded commands)
// against one server.
type client struct {
	bin        string
	kubeconfig string
	args       []string // prepended to every command line
}

func newKubectl(t *testing.T, p *serverProc) client {
	t.Helper()
	return client{bin: requireKubectl(t), kubeconfig: p.Kubeconfig, args: []string{"--cache-dir", t.TempDir()}}
}

func newMinikitClient(t *testing.T, p *serverProc) client {
	// --kubeconfig as a student would type it; KUBECONFIG is set too so that a
	// minikit that ignored the flag would fail rather than find another cluster.
	return client{bin: minikitBin, kubeconfig: filepath.Join(t.TempDir(), "missing-kubeconfig"),
		args: []string{"--kubeconfig", p.Kubeconfig, "--cache-dir", t.TempDir()}}
}

// requireKubectl finds kubectl on PATH. A CI run must have it; elsewhere the test is
// skipped without it.
func requireKubectl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kubectl is required when CI is set: %v", err)
		}
		t.Skipf("kubectl not on PATH (set CI to make this a failure): %v", err)
	}
	return path
}

func (c client) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, append(slices.Clone(c.args), args...)...)
	env := []string{"KUBECONFIG=" + c.kubeconfig}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs one command to completion and returns its stdout, stderr and exit error.
func (c client) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := c.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out; stderr: %s", filepath.Base(c.bin), strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// ok runs a command that must succeed and returns its stdout.
func (c client) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := c.run(t, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", filepath.Base(c.bin), strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fails runs a command that must exit non-zero and returns its stderr.
func (c client) fails(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := c.run(t, args...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("%s %s: want a non-zero exit, got err=%v\nstdout: %s\nstderr: %s", filepath.Base(c.bin), strings.Join(args, " "), err, out, errOut)
	}
	return errOut
}

func writeManifest(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// table is `kubectl get` output split on whitespace; it suits tables whose cells
// hold no spaces (Services, api-resources) and header checks.
type table struct {
	header []string
	rows   [][]string
}

func parseTable(out string) table {
	var tb table
	for i, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if i == 0 {
			tb.header = strings.Fields(line)
		} else if f := strings.Fields(line); len(f) > 0 {
			tb.rows = append(tb.rows, f)
		}
	}
	return tb
}

// row returns the row whose first cell is name, as a map from column to cell.
func (tb table) row(t *testing.T, name string) map[string]string {
	t.Helper()
	for _, r := range tb.rows {
		if r[0] != name {
			continue
		}
		if len(r) != len(tb.header) {
			t.Fatalf("row %q has %d cells for %d columns %q: %q", name, len(r), len(tb.header), tb.header, r)
		}
		m := map[string]string{}
		for i, h := range tb.header {
			m[h] = r[i]
		}
		return m
	}
	t.Fatalf("no row %q in table with rows %q", name, tb.rows)
	return nil
}

func (tb table) names() []string {
	var out []string
	for _, r := range tb.rows {
		out = append(out, r[0])
	}
	return out
}

// lines splits command output into trimmed, non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func wantLines(t *testing.T, cmd, got string, want ...string) {
	t.Helper()
	if g := lines(got); !slices.Equal(g, want) {
		t.Errorf("%s printed\n%s\nwant\n%s", cmd, strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

func wantMatch(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("%s: no line matches %q in:\n%s", what, p, out)
		}
	}
}

func getService(t *testing.T, c client, name string) (*corev1.Service, string) {
	t.Helper()
	out := c.ok(t, "get", "svc", name, "-o", "yaml")
	var svc corev1.Service
	if err := yaml.Unmarshal([]byte(out), &svc); err != nil {
		t.Fatalf("decoding `get svc %s -o yaml`: %v\n%s", name, err, out)
	}
	return &svc, out
}

// TestKubectl drives a server with the real kubectl, as a student following a
// Kubernetes tutorial would, and checks what kubectl prints.
func TestKubectl(t *testing.T) {
	srv := startServer(t, t.TempDir())
	k := newKubectl(t, srv)
	if v, _, err := k.run(t, "version", "--client"); err == nil {
		t.Logf("using %s", strings.Join(lines(v), ", "))
	}
	app := writeManifest(t, "app.yaml", appManifest)
	var hostnamesIP, webIP string

	t.Run("apply", func(t *testing.T) {
		wantLines(t, "first apply", k.ok(t, "apply", "-f", app),
			"deployment.apps/hostnames created", "service/hostnames created", "service/web created", "configmap/settings created")
		wantLines(t, "second apply", k.ok(t, "apply", "-f", app),
			"deployment.apps/hostnames unchanged", "service/hostnames unchanged", "service/web unchanged", "configmap/settings unchanged")
		web, _ := getService(t, k, "web")
		edited := writeManifest(t, "app-edited.yaml", appEdits.Replace(appManifest))
		wantLines(t, "apply after an edit", k.ok(t, "apply", "-f", edited),
			"deployment.apps/hostnames unchanged", "service/hostnames unchanged", "service/web configured", "configmap/settings configured")
		if got := k.ok(t, "get", "configmap", "settings", "-o", "jsonpath={.data.greeting}"); got != "goodbye" {
			t.Errorf("configmap settings greeting = %q after apply, want goodbye", got)
		}
		// The edit omits clusterIP; the Service keeps its allocations across it.
		after, _ := getService(t, k, "web")
		if after.Spec.Ports[0].TargetPort.IntValue() != 8081 || after.Spec.Ports[0].NodePort != 30080 || after.Spec.ClusterIP != web.Spec.ClusterIP {
			t.Errorf("web after apply: targetPort %v nodePort %d clusterIP %s, want 8081, 30080, %s",
				after.Spec.Ports[0].TargetPort, after.Spec.Ports[0].NodePort, after.Spec.ClusterIP, web.Spec.ClusterIP)
		}
	})

	t.Run("get svc -o yaml", func(t *testing.T) {
		svc, out := getService(t, k, "hostnames")
		wantMatch(t, "get svc hostnames -o yaml", out, `(?m)^  type: ClusterIP$`, `(?m)^  clusterIP: \S+$`)
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !serviceCIDR.Contains(ip) {
			t.Errorf("hostnames clusterIP %q, want an address in %s", svc.Spec.ClusterIP, serviceCIDR)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.IntValue() != 9376 {
			t.Errorf("hostnames spec = %+v, want ClusterIP 80 -> 9376", svc.Spec)
		}
		hostnamesIP = svc.Spec.ClusterIP
		web, _ := getService(t, k, "web")
		webIP = web.Spec.ClusterIP
	})

	t.Run("get svc", func(t *testing.T) {
		tb := parseTable(k.ok(t, "get", "svc"))
		if want := []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}; !slices.Equal(tb.header, want) {
			t.Fatalf("get svc header = %q, want %q", tb.header, want)
		}
		for name, want := range map[string]map[string]string{
			"hostnames":  {"TYPE": "ClusterIP", "CLUSTER-IP": hostnamesIP, "EXTERNAL-IP": "<none>", "PORT(S)": "80/TCP"},
			"web":        {"TYPE": "NodePort", "CLUSTER-IP": webIP, "EXTERNAL-IP": "<none>", "PORT(S)": "80:30080/TCP"},
			"kubernetes": {"TYPE": "ClusterIP", "CLUSTER-IP": "10.96.0.1", "EXTERNAL-IP": "<none>", "PORT(S)": "443/TCP"},
		} {
			row := tb.row(t, name)
			for col, v := range want {
				if row[col] != v {
					t.Errorf("get svc: %s %s = %q, want %q", name, col, row[col], v)
				}
			}
		}

		wide := parseTable(k.ok(t, "get", "svc", "-o", "wide"))
		if want := []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"}; !slices.Equal(wide.header, want) {
			t.Fatalf("get svc -o wide header = %q, want %q", wide.header, want)
		}
		for name, sel := range map[string]string{"hostnames": "app=hostnames", "web": "app=web", "kubernetes": "<none>"} {
			if got := wide.row(t, name)["SELECTOR"]; got != sel {
				t.Errorf("get svc -o wide: %s SELECTOR = %q, want %q", name, got, sel)
			}
		}
	})

	t.Run("get pods -o wide", func(t *testing.T) {
		wantLines(t, "apply pod", k.ok(t, "apply", "-f", writeManifest(t, "pod.yaml", podManifest)), "pod/web-0 created")
		out := k.ok(t, "get", "pods", "-o", "wide")
		tb := parseTable(out)
		for _, col := range []string{"NAME", "READY", "STATUS", "IP", "NODE"} {
			if !slices.Contains(tb.header, col) {
				t.Errorf("get pods -o wide header %q lacks %s", tb.header, col)
			}
		}
		// No node agent yet: the pod is unscheduled, without an IP.
		wantMatch(t, "get pods -o wide", out, `(?m)^web-0\s+0/1\s+Pending\s+0\s+\S+\s+<none>\s+<none>\s`)
	})

	t.Run("get svc -w", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut testenv.Buffer
		w := k.command(ctx, "get", "svc", "-w")
		w.Stdout, w.Stderr = &out, &errOut
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { w.Wait(); close(done) }()
		t.Cleanup(func() { cancel(); <-done })

		// kubectl lists, prints, then watches from the list's resourceVersion, so a
		// Service created after the first rows appear must arrive as an event.
		testutil.Eventually(t, 30*time.Second, "kubectl get svc -w to print the current services", func() error {
			if !strings.Contains(out.String(), "hostnames") {
				return errors.New(out.String() + errOut.String())
			}
			return nil
		})
		wantLines(t, "create service", k.ok(t, "create", "service", "clusterip", "watched", "--tcp=80:8080"), "service/watched created")
		watchedRow := regexp.MustCompile(`(?m)^watched\s+ClusterIP\s+10\.\S+\s+<none>\s+80/TCP\s+\S+$`)
		testutil.Eventually(t, 30*time.Second, "kubectl get svc -w to print the new service", func() error {
			select {
			case <-done:
				t.Fatalf("kubectl get svc -w exited early: %v\n%s%s", w.ProcessState, out.String(), errOut.String())
			default:
			}
			if !watchedRow.MatchString(out.String()) {
				return errors.New(out.String())
			}
			return nil
		})
	})

	t.Run("describe service", func(t *testing.T) {
		out := k.ok(t, "describe", "service", "hostnames")
		wantMatch(t, "describe service hostnames", out,
			`(?m)^Name:\s+hostnames$`,
			`(?m)^Namespace:\s+default$`,
			`(?m)^Selector:\s+app=hostnames$`,
			`(?m)^Type:\s+ClusterIP$`,
			`(?m)^IP:\s+`+regexp.QuoteMeta(hostnamesIP)+`$`,
			`(?m)^Port:\s+default\s+80/TCP$`,
			`(?m)^TargetPort:\s+9376/TCP$`,
		)
	})

	t.Run("patch and label selector", func(t *testing.T) {
		wantLines(t, "patch", k.ok(t, "patch", "svc", "hostnames", "-p", `{"metadata":{"labels":{"tier":"web"}}}`), "service/hostnames patched")
		if got := parseTable(k.ok(t, "get", "svc", "-l", "tier=web")).names(); !slices.Equal(got, []string{"hostnames"}) {
			t.Errorf("get svc -l tier=web lists %q, want [hostnames]", got)
		}
	})

	t.Run("scale", func(t *testing.T) {
		wantLines(t, "scale", k.ok(t, "scale", "deployment", "hostnames", "--replicas=5"), "deployment.apps/hostnames scaled")
		if got := k.ok(t, "get", "deploy", "hostnames", "-o", "jsonpath={.spec.replicas}"); got != "5" {
			t.Errorf("deployment hostnames replicas = %q after scale, want 5", got)
		}
	})

	t.Run("validation error", func(t *testing.T) {
		errOut := k.fails(t, "apply", "-f", writeManifest(t, "bad.yaml", badNodePortManifest))
		for _, want := range []string{`The Service "bad-nodeport" is invalid`, "spec.ports[0].nodePort", "8080", "30000-32767"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("apply of nodePort 8080: stderr lacks %q:\n%s", want, errOut)
			}
		}
		if errOut := k.fails(t, "get", "svc", "bad-nodeport"); !strings.Contains(errOut, "NotFound") {
			t.Errorf("the rejected service was stored? get svc bad-nodeport: %s", errOut)
		}
	})

	t.Run("namespace lifecycle", func(t *testing.T) {
		wantLines(t, "create namespace", k.ok(t, "create", "namespace", "lab1"), "namespace/lab1 created")
		wantLines(t, "create configmap", k.ok(t, "create", "configmap", "c", "--from-literal=a=b", "-n", "lab1"), "configmap/c created")
		if got := k.ok(t, "get", "configmap", "c", "-n", "lab1", "-o", "jsonpath={.data.a}"); got != "b" {
			t.Errorf("configmap lab1/c data a = %q, want b", got)
		}
		wantLines(t, "delete namespace", k.ok(t, "delete", "namespace", "lab1"), `namespace "lab1" deleted`)
		var last string
		testutil.Eventually(t, 30*time.Second, "namespace lab1 to go away", func() error {
			out, errOut, err := k.run(t, "get", "ns", "lab1")
			last = errOut
			if err == nil {
				return errors.New(out + errOut)
			}
			return nil
		})
		if !strings.Contains(last, `namespaces "lab1" not found`) {
			t.Errorf("get ns lab1 after deletion: %s, want NotFound", last)
		}
		// kubectl reports the missing namespace (it looks it up after a 404), so ask
		// the API whether the namespace's content went with it.
		if resp, body, err := srv.do(http.MethodGet, "/api/v1/namespaces/lab1/configmaps/c", nil); err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET configmap lab1/c after its namespace was deleted: %v %s", err, body)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		var v struct{ Major, Minor, GitVersion string }
		out := k.ok(t, "get", "--raw", "/version")
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Major != "1" || v.Minor != "37" || !strings.HasPrefix(v.GitVersion, "v1.37.2+minikit-") {
			t.Errorf("get --raw /version = %s (err %v), want major 1 minor 37, v1.37.2+minikit-VERSION", out, err)
		}
		tb := parseTable(k.ok(t, "api-resources"))
		if want := []string{"NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"}; !slices.Equal(tb.header, want) {
			t.Errorf("api-resources header = %q, want %q", tb.header, want)
		}
		// SHORTNAMES may be empty, so match the row's cells rather than columns.
		for name, want := range map[string][]string{
			"services":               {"svc", "v1", "true", "Service"},
			"deployments":            {"deploy", "apps/v1", "true", "Deployment"},
			"replicasets":            {"rs", "apps/v1", "true", "ReplicaSet"},
			"replicationcontrollers": {"rc", "v1", "true", "ReplicationController"},
			"endpointslices":         {"discovery.k8s.io/v1", "true", "EndpointSlice"},
			"ingresses":              {"ing", "networking.k8s.io/v1", "true", "Ingress"},
		} {
			i := slices.IndexFunc(tb.rows, func(r []string) bool { return r[0] == name && slices.Contains(r, want[len(want)-3]) })
			if i < 0 {
				t.Errorf("api-resources lacks %s: %q", name, tb.names())
			} else if got := tb.rows[i][1:]; !slices.Equal(got, want) {
				t.Errorf("api-resources row %s = %q, want %q", name, got, want)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		if out := k.ok(t, "delete", "svc", "web"); !strings.HasPrefix(strings.TrimSpace(out), `service "web" deleted`) {
			t.Errorf("delete svc web printed %q", out)
		}
		if errOut := k.fails(t, "get", "svc", "web"); strings.TrimSpace(errOut) != `Error from server (NotFound): services "web" not found` {
			t.Errorf("get svc web after delete: stderr %q", errOut)
		}
	})
}

// TestMinikitClientCommands runs apply, get, describe and delete through the minikit
// binary, which embeds kubectl's commands, and expects kubectl's output.
func TestMinikitClientCommands(t *testing.T) {
	srv := startServer(t, t.TempDir())
	m := newMinikitClient(t, srv)
	app := writeManifest(t, "app.yaml", appManifest)

	wantLines(t, "minikit apply", m.ok(t, "apply", "-f", app),
		"deployment.apps/hostnames created", "service/hostnames created", "service/web created", "configmap/settings created")
	wantLines(t, "minikit apply again", m.ok(t, "apply", "-f", app),
		"deployment.apps/hostnames unchanged", "service/hostnames unchanged", "service/web unchanged", "configmap/settings unchanged")

	tb := parseTable(m.ok(t, "get", "svc"))
	if want := []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}; !slices.Equal(tb.header, want) {
		t.Fatalf("minikit get svc header = %q, want %q", tb.header, want)
	}
	if row := tb.row(t, "web"); row["TYPE"] != "NodePort" || row["PORT(S)"] != "80:30080/TCP" {
		t.Errorf("minikit get svc: web row %v, want NodePort 80:30080/TCP", row)
	}
	svc, out := getService(t, m, "hostnames")
	wantMatch(t, "minikit get svc hostnames -o yaml", out, `(?m)^  type: ClusterIP$`)
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !serviceCIDR.Contains(ip) {
		t.Errorf("hostnames clusterIP %q, want an address in %s", svc.Spec.ClusterIP, serviceCIDR)
	}
	if row := tb.row(t, "hostnames"); row["CLUSTER-IP"] != svc.Spec.ClusterIP {
		t.Errorf("get svc shows CLUSTER-IP %s, -o yaml %s", row["CLUSTER-IP"], svc.Spec.ClusterIP)
	}

	wantMatch(t, "minikit describe service hostnames", m.ok(t, "describe", "service", "hostnames"),
		`(?m)^Name:\s+hostnames$`, `(?m)^Type:\s+ClusterIP$`, `(?m)^IP:\s+`+regexp.QuoteMeta(svc.Spec.ClusterIP)+`$`,
		`(?m)^Port:\s+default\s+80/TCP$`, `(?m)^TargetPort:\s+9376/TCP$`)

	errOut := m.fails(t, "apply", "-f", writeManifest(t, "bad.yaml", badNodePortManifest))
	for _, want := range []string{"spec.ports[0].nodePort", "30000-32767"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("minikit apply of nodePort 8080: stderr lacks %q:\n%s", want, errOut)
		}
	}

	if out := m.ok(t, "delete", "svc", "web"); !strings.HasPrefix(strings.TrimSpace(out), `service "web" deleted`) {
		t.Errorf("minikit delete svc web printed %q", out)
	}
	if errOut := m.fails(t, "get", "svc", "web"); !strings.Contains(errOut, `services "web" not found`) {
		t.Errorf("minikit get svc web after delete: stderr %q", errOut)
	}
}
