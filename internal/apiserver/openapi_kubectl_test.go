package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	openapiutil "k8s.io/kubectl/pkg/util/openapi"
	kubectlvalidation "k8s.io/kubectl/pkg/validation"
	"sigs.k8s.io/yaml"
)

// kubectlCLI runs the real kubectl against a test server on loopback, with its
// own kubeconfig and cache directory.
type kubectlCLI struct {
	bin, kubeconfig, cache string
}

func newKubectlCLI(t *testing.T, a *testAPI, bin string) kubectlCLI {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: default
users:
- name: test
  user: {}
current-context: test
`, a.url)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectlCLI{bin: bin, kubeconfig: kc, cache: filepath.Join(dir, "cache")}
}

// run runs kubectl with args and returns its stdout, stderr and exit error.
func (k kubectlCLI) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cache}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kubectl %s: timed out; stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// kubectlBinaries are the kubectl binaries the tests drive: the one on PATH,
// and any listed in MINIKIT_EXTRA_KUBECTL (colon-separated), such as Debian's
// kubectl 1.20 unpacked from kubernetes-client, which knows only OpenAPI v2.
func kubectlBinaries(t *testing.T) []string {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed on PATH (scripts/deps.sh installs it): %v", err)
	}
	bins := []string{bin}
	for _, b := range strings.Split(os.Getenv("MINIKIT_EXTRA_KUBECTL"), ":") {
		if b != "" {
			bins = append(bins, b)
		}
	}
	return bins
}

// kubectlMinor is the minor version of a kubectl binary.
func (k kubectlCLI) minor(t *testing.T) int {
	t.Helper()
	out, errOut, err := k.run(t, "version", "--client", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl version: %v: %s", err, errOut)
	}
	var v struct {
		ClientVersion struct{ Minor string } `json:"clientVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("kubectl version: %v: %s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimRight(v.ClientVersion.Minor, "+"))
	if err != nil {
		t.Fatalf("kubectl version: minor %q", v.ClientVersion.Minor)
	}
	return n
}

// words joins s's words with single spaces, undoing kubectl's line wrapping.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestKubectlExplain: kubectl explain prints the fields and their docs from the
// served schemas (kubectl ≥1.27 reads /openapi/v3, older ones /openapi/v2).
func TestKubectlExplain(t *testing.T) {
	a := newTestAPI(t)
	for _, bin := range kubectlBinaries(t) {
		k := newKubectlCLI(t, a, bin)
		minor := k.minor(t)
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"explain", "service.spec"}, []string{
				"Spec defines the behavior of a service.", "clusterIP", "externalTrafficPolicy", "selector",
				"ServiceSpec describes the attributes that a user creates on a service."}},
			{[]string{"explain", "deployment.spec.strategy"}, []string{
				"The deployment strategy to use to replace existing pods with new ones.", "rollingUpdate",
				`Type of deployment. Can be "Recreate" or "RollingUpdate". Default is RollingUpdate.`}},
			{[]string{"explain", "pod.spec.containers.ports"}, []string{
				"containerPort", "protocol", "Number of port to expose on the pod's IP address."}},
			{[]string{"explain", "ingress.spec.rules.http.paths.backend", "--api-version=networking.k8s.io/v1"}, []string{
				"IngressBackend describes all endpoints for a given service and port.", "service references a service as a backend."}},
			{[]string{"explain", "endpointslices.endpoints.conditions"}, []string{"ready", "serving", "terminating"}},
		} {
			out, errOut, err := k.run(t, c.args...)
			if err != nil {
				t.Errorf("kubectl 1.%d %s: %v\n%s%s", minor, strings.Join(c.args, " "), err, out, errOut)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(words(out), w) {
					t.Errorf("kubectl 1.%d %s: output lacks %q:\n%s", minor, strings.Join(c.args, " "), w, out)
				}
			}
		}
		// A field that does not exist is named in kubectl's error.
		_, errOut, err := k.run(t, "explain", "service.spec.nosuchfield")
		if err == nil || !strings.Contains(errOut, "nosuchfield") {
			t.Errorf("kubectl 1.%d explain service.spec.nosuchfield: %v, %s", minor, err, errOut)
		}
	}
}

const validManifests = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 25%, maxUnavailable: 1}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        ports:
        - {name: http, containerPort: 80, protocol: TCP}
        resources:
          limits: {cpu: 100m, memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - {port: 80, targetPort: http}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: web.example
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service: {name: web, port: {number: 80}}
`

const unknownFieldManifest = `apiVersion: v1
kind: Service
metadata:
  name: bad
spec:
  selector: {app: web}
  ports:
  - port: 80
    bogusField: 1
`

// TestKubectlApplyValidation: manifests that use every kind of field (int-or-string,
// quantities, nested objects) apply with validation on, and one with an unknown
// field is rejected naming the field, and not created. kubectl ≥1.25 with
// --validate=strict asks the server (which supports fieldValidation); older
// kubectl validates against /openapi/v2 itself.
func TestKubectlApplyValidation(t *testing.T) {
	a := newTestAPI(t)
	valid := filepath.Join(t.TempDir(), "valid.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(valid, []byte(validManifests), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(unknownFieldManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bin := range kubectlBinaries(t) {
		k := newKubectlCLI(t, a, bin)
		minor := k.minor(t)
		strict := "--validate=strict"
		if minor < 25 {
			strict = "--validate=true"
		}
		out, errOut, err := k.run(t, "apply", strict, "-f", valid)
		if err != nil || strings.Count(out, "created")+strings.Count(out, "unchanged")+strings.Count(out, "configured") != 3 {
			t.Errorf("kubectl 1.%d apply %s of valid manifests: %v\n%s%s", minor, strict, err, out, errOut)
		}
		out, errOut, err = k.run(t, "apply", strict, "-f", bad)
		if err == nil || !strings.Contains(errOut, "unknown field") || !strings.Contains(errOut, "bogusField") {
			t.Errorf("kubectl 1.%d apply %s of an unknown field: want an error naming bogusField, got %v\n%s%s", minor, strict, err, out, errOut)
		}
		if a.exists("/api/v1/namespaces/default/services/bad") {
			t.Errorf("kubectl 1.%d apply %s: the invalid service was created", minor, strict)
		}
	}
}

// schemaResources hands kubectl's client-side validator the parsed /openapi/v2.
type schemaResources struct {
	p *openapiutil.CachedOpenAPIParser
}

func (s schemaResources) OpenAPISchema() (openapiutil.Resources, error) { return s.p.Parse() }

// TestKubectlClientSideValidation: kubectl validates on the client, against
// /openapi/v2, when the server does not take fieldValidation (and always before
// 1.25). The same kubectl code, given minikit's document, accepts valid manifests
// and names an unknown field.
func TestKubectlClientSideValidation(t *testing.T) {
	a := newTestAPI(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	v := kubectlvalidation.NewSchemaValidation(schemaResources{openapiutil.NewOpenAPIParser(dc)})
	for _, doc := range strings.Split(validManifests, "---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.ValidateBytes(js); err != nil {
			t.Errorf("client-side validation rejects a valid manifest: %v\n%s", err, doc)
		}
	}
	js, err := yaml.YAMLToJSON([]byte(unknownFieldManifest))
	if err != nil {
		t.Fatal(err)
	}
	err = v.ValidateBytes(js)
	if err == nil || !strings.Contains(err.Error(), `unknown field "bogusField" in io.k8s.api.core.v1.ServicePort`) {
		t.Errorf("client-side validation of an unknown field: %v", err)
	}
}
