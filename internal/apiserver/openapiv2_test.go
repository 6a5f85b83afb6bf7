package apiserver

import (
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// TestOpenAPIV2ForOldKubectl: kubectl before 1.27 (Debian's is 1.20) fetches
// /openapi/v2 as protobuf through client-go's discovery before every apply and
// gives up when it is missing or unparsable. The same client code must load it.
func TestOpenAPIV2ForOldKubectl(t *testing.T) {
	a := newTestAPI(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: a.url})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("client-go could not load /openapi/v2: %v", err)
	}
	if doc.GetSwagger() != "2.0" || doc.GetInfo().GetTitle() != "Kubernetes" {
		t.Fatalf("unexpected document: %v", doc.GetInfo())
	}
	// The definitions kubectl validates manifests against and explains, each
	// kind marked with its group-version-kind.
	found := map[string]bool{}
	for _, def := range doc.GetDefinitions().GetAdditionalProperties() {
		for _, ext := range def.GetValue().GetVendorExtension() {
			if ext.GetName() == "x-kubernetes-group-version-kind" {
				found[def.GetName()] = strings.Contains(ext.GetValue().GetYaml(), "kind: "+strings.TrimPrefix(def.GetName()[strings.LastIndex(def.GetName(), "."):], "."))
			}
		}
	}
	for _, name := range []string{"io.k8s.api.core.v1.Service", "io.k8s.api.apps.v1.Deployment", "io.k8s.api.networking.v1.Ingress"} {
		if !found[name] {
			t.Errorf("protobuf /openapi/v2 has no definition of %s marked with its kind", name)
		}
	}
	// Plain JSON for everyone else (curl).
	r := a.do("GET", "/openapi/v2", "", nil, "Accept", "application/json")
	if r.code != 200 || r.header.Get("Content-Type") != "application/json" || string(r.body[:15]) != `{"swagger":"2.0` {
		t.Fatalf("JSON /openapi/v2: %d %s %s", r.code, r.header.Get("Content-Type"), r.body)
	}
}
