package openapi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/kube-openapi/pkg/validation/spec"
)

// TestGeneratedFileIsCurrent regenerates zz_generated.openapi.go with the
// go:generate command of doc.go, into a temporary directory, and compares it
// with the checked-in file: a change of the k8s.io/api, apimachinery or
// kube-openapi versions in go.mod, or of the package list, needs
// `go generate ./internal/apiserver/openapi/`. The generator and its inputs come from
// the module cache (go mod download), so the test needs no network.
func TestGeneratedFileIsCurrent(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "//go:generate go "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) == 0 {
		t.Fatal("doc.go has no //go:generate go … line")
	}
	out := t.TempDir()
	for i, a := range args {
		if a == "--output-dir" && i+1 < len(args) {
			args[i+1] = out
		}
	}
	if !strings.Contains(strings.Join(args, " "), out) {
		t.Fatalf("the go:generate line has no --output-dir: %v", args)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	start := time.Now()
	cmd := exec.Command(goBin, args...)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	t.Logf("regenerated in %v", time.Since(start))
	got, err := os.ReadFile(filepath.Join(out, "zz_generated.openapi.go"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("zz_generated.openapi.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("zz_generated.openapi.go is stale (run go generate ./internal/apiserver/openapi/); first difference at line %d:\n checked in: %s\n generated:  %s", i+1, wl[i], gl[i])
			}
		}
		t.Fatalf("zz_generated.openapi.go is stale (run go generate ./internal/apiserver/openapi/): %d lines checked in, %d generated", len(wl), len(gl))
	}
}

// TestDefinitionsOfServedKinds: the generated definitions cover the kinds of
// every package the generator was given, by their model names.
func TestDefinitionsOfServedKinds(t *testing.T) {
	defs := GetOpenAPIDefinitions(func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) })
	for _, name := range []string{
		"io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Service", "io.k8s.api.apps.v1.Deployment",
		"io.k8s.api.batch.v1.Job", "io.k8s.api.coordination.v1.Lease", "io.k8s.api.discovery.v1.EndpointSlice",
		"io.k8s.api.networking.v1.Ingress", "io.k8s.api.autoscaling.v1.Scale", "io.k8s.api.authentication.v1.TokenReview",
		"io.k8s.api.policy.v1.PodDisruptionBudget", "io.k8s.api.extensions.v1beta1.Ingress",
		"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "io.k8s.apimachinery.pkg.runtime.RawExtension",
		"io.k8s.apimachinery.pkg.version.Info", "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
		"io.k8s.apimachinery.pkg.api.resource.Quantity",
	} {
		if _, ok := defs[name]; !ok {
			t.Errorf("no generated definition for %s", name)
		}
	}
}
