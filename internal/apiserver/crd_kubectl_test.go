package apiserver

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	openapiutil "k8s.io/kubectl/pkg/util/openapi"
	kubectlvalidation "k8s.io/kubectl/pkg/validation"
	"sigs.k8s.io/yaml"
)

// TestCRDOpenAPI: a CRD's versions appear in /openapi/v3 and in
// /openapi/v2, and leave them with the CRD.
func TestCRDOpenAPI(t *testing.T) {
	a := newTestAPI(t)
	// Built before the CRD exists, then updated.
	a.get("/openapi/v2").mustCode(t, http.StatusOK, nil)
	a.establish(widgetCRD(), widgetsPath)
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	a.read("/openapi/v3", &index)
	p, ok := index.Paths["apis/example.com/v1"]
	if !ok || index.Paths["apis/example.com/v1beta1"].ServerRelativeURL == "" || index.Paths["api/v1"].ServerRelativeURL == "" {
		t.Fatalf("/openapi/v3 index lacks the CRD versions or the built-ins: %v", index.Paths)
	}
	doc := a.get("/"+p.ServerRelativeURL).obj(t, http.StatusOK)
	schemas, _ := doc.at("components.schemas").(map[string]any)
	if w, _ := schemas["com.example.v1.Widget"].(map[string]any); obj(w).at("properties.spec.properties.color.type") != "string" {
		t.Errorf("v3 document of example.com/v1 lacks Widget.spec.color: %v", w)
	}
	v2 := a.get("/openapi/v2").obj(t, http.StatusOK)
	defs, _ := v2.at("definitions").(map[string]any)
	if defs["com.example.v1.Widget"] == nil || defs["io.k8s.api.core.v1.Service"] == nil {
		t.Errorf("/openapi/v2 lacks com.example.v1.Widget or the built-ins")
	}
	a.delete(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, nil)
	a.waitGone(widgetsPath)
	index.Paths = nil
	a.read("/openapi/v3", &index)
	if _, ok := index.Paths["apis/example.com/v1"]; ok {
		t.Error("/openapi/v3 still lists a deleted CRD")
	}
	if r := a.get("/openapi/v3/apis/example.com/v1"); r.code != http.StatusNotFound {
		t.Errorf("deleted CRD's v3 document: HTTP %d", r.code)
	}
}

// waitGone waits until a collection is no longer served.
func (a *testAPI) waitGone(path string) {
	a.t.Helper()
	testutil.Eventually(a.t, waitTimeout, path+" no longer served", func() error {
		if r := a.get(path); r.code != http.StatusNotFound {
			return fmt.Errorf("HTTP %d", r.code)
		}
		return nil
	})
}

// TestCRDWithKubectl: the real kubectl applies a CRD and a custom resource,
// lists them with the CRD's columns and short name, and explains them.
func TestCRDWithKubectl(t *testing.T) {
	a := newTestAPI(t)
	crd, err := yaml.Marshal(widgetCRD())
	if err != nil {
		t.Fatal(err)
	}
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	apply := func(manifest string) (string, string, error) {
		t.Helper()
		f := t.TempDir() + "/m.yaml"
		if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return k.run(t, "apply", "-f", f)
	}
	if out, errOut, err := apply(string(crd)); err != nil {
		t.Fatalf("kubectl apply of the CRD: %v\n%s%s", err, out, errOut)
	}
	// kubectl wait fails at once on a CRD whose controller has not written
	// its status yet, on any cluster: ask again until it holds.
	testutil.Eventually(t, establishTimeout, "kubectl wait --for=condition=Established crd/widgets.example.com", func() error {
		if out, errOut, err := k.run(t, "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s"); err != nil {
			return fmt.Errorf("%v\n%s%s", err, out, errOut)
		}
		return nil
	})
	a.waitEstablished("widgets.example.com", widgetsPath)
	w := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: red\n"
	if out, errOut, err := apply(w); err != nil {
		t.Fatalf("kubectl apply of a Widget: %v\n%s%s", err, out, errOut)
	}
	// Applied again with a change: kubectl patches it (a merge patch, as for
	// any type it has no Go type for).
	if out, errOut, err := apply(strings.Replace(w, "red", "green", 1)); err != nil || !strings.Contains(out, "configured") {
		t.Fatalf("kubectl apply of a changed Widget: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err := k.run(t, "get", "wd")
	if err != nil {
		t.Fatalf("kubectl get wd: %v\n%s", err, errOut)
	}
	if f := strings.Fields(out); strings.Join(f, " ") != "NAME COLOR REPLICAS w1 green 1" {
		t.Errorf("kubectl get wd:\n%s", out)
	}
	out, errOut, err = k.run(t, "explain", "widget.spec")
	if err != nil || !strings.Contains(out, "color") || !strings.Contains(out, "replicas") {
		t.Errorf("kubectl explain widget.spec: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = k.run(t, "explain", "crd.spec.versions.schema")
	if err != nil || !strings.Contains(out, "openAPIV3Schema") {
		t.Errorf("kubectl explain crd.spec.versions.schema: %v\n%s%s", err, out, errOut)
	}
	// A CEL rule's message, through kubectl.
	_, errOut, err = apply(strings.Replace(w, "color: red", "replicas: 11", 1))
	if err == nil || !strings.Contains(errOut, "at most 10 replicas") {
		t.Errorf("kubectl apply of a Widget breaking the CEL rule: %v\n%s", err, errOut)
	}
	if out, errOut, err := k.run(t, "delete", "crd", "widgets.example.com"); err != nil {
		t.Errorf("kubectl delete crd: %v\n%s%s", err, out, errOut)
	}
}

// TestCRDClientSideValidation: kubectl's client-side validation, given the
// merged /openapi/v2, names an unknown field of a custom resource.
func TestCRDClientSideValidation(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	v := kubectlvalidation.NewSchemaValidation(schemaResources{openapiutil.NewOpenAPIParser(dc)})
	if err := v.ValidateBytes([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"red"}}`)); err != nil {
		t.Errorf("a valid Widget: %v", err)
	}
	err = v.ValidateBytes([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"colour":"red"}}`))
	if err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("an unknown field of a Widget: %v", err)
	}
}
