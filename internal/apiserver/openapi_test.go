package apiserver

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// gvkListed reports whether a schema's x-kubernetes-group-version-kind list
// names gvk.
func gvkListed(ext any, gvk schema.GroupVersionKind) bool {
	list, _ := ext.([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		if m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind {
			return true
		}
	}
	return false
}

// resourcePaths are the collection and item paths of res under its group version.
func resourcePaths(res *resource) (collection, item string) {
	collection = rootPath(res.gv) + "/" + res.name
	if res.namespaced {
		collection = rootPath(res.gv) + "/namespaces/{namespace}/" + res.name
	}
	return collection, collection + "/{name}"
}

type openAPIDoc struct {
	Definitions map[string]map[string]any                   `json:"definitions"`
	Components  struct{ Schemas map[string]map[string]any } `json:"components"`
	Paths       map[string]map[string]any                   `json:"paths"`
}

// checkPaths checks that doc describes every verb the server supports on res.
func checkPaths(t *testing.T, doc openAPIDoc, res *resource, version string) {
	t.Helper()
	collection, item := resourcePaths(res)
	want := map[string][]string{collection: {"get", "post", "delete"}, item: {"get", "put", "patch", "delete"}}
	if res.status {
		want[item+"/status"] = []string{"get", "put", "patch"}
	}
	if res.scale {
		want[item+"/scale"] = []string{"get", "put", "patch"}
	}
	for path, verbs := range want {
		ops := doc.Paths[path]
		for _, v := range verbs {
			op, ok := ops[v].(map[string]any)
			if !ok {
				t.Errorf("%s: %s %s is not described", version, strings.ToUpper(v), path)
				continue
			}
			if _, ok := op["x-kubernetes-group-version-kind"]; !ok {
				t.Errorf("%s: %s %s has no x-kubernetes-group-version-kind", version, strings.ToUpper(v), path)
			}
		}
	}
	// kubectl validates on the server when PATCH takes fieldValidation.
	patch, _ := doc.Paths[item]["patch"].(map[string]any)
	gvk, _ := patch["x-kubernetes-group-version-kind"].(map[string]any)
	if gvk["group"] != res.gv.Group || gvk["version"] != res.gv.Version || gvk["kind"] != res.kind {
		t.Errorf("%s: PATCH %s is for %v, want %v", version, item, gvk, res.gvk())
	}
	b, _ := json.Marshal(patch["parameters"])
	if !strings.Contains(string(b), `"name":"fieldValidation"`) {
		t.Errorf("%s: PATCH %s has no fieldValidation parameter: %s", version, item, b)
	}
}

// TestOpenAPIV2DescribesEveryKind: /openapi/v2 has a definition, marked with
// its group-version-kind, and the paths of every resource the server serves.
func TestOpenAPIV2DescribesEveryKind(t *testing.T) {
	a := newTestAPI(t)
	var doc openAPIDoc
	a.do("GET", "/openapi/v2", "", nil, "Accept", "application/json").mustCode(t, http.StatusOK, &doc)
	for _, res := range openAPIResources() {
		found := false
		for _, def := range doc.Definitions {
			if gvkListed(def["x-kubernetes-group-version-kind"], res.gvk()) {
				found = true
				if _, ok := def["properties"].(map[string]any)["metadata"]; !ok {
					t.Errorf("v2 definition of %v has no metadata property", res.gvk())
				}
			}
		}
		if !found {
			t.Errorf("v2: no definition for %v", res.gvk())
		}
		checkPaths(t, doc, res, "v2")
	}
}

// TestOpenAPIV3DescribesEveryGroupVersion: the /openapi/v3 index lists exactly
// the group versions the server serves, and each one's document has the schemas
// of its kinds and the paths of its resources.
func TestOpenAPIV3DescribesEveryGroupVersion(t *testing.T) {
	a := newTestAPI(t)
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	a.get("/openapi/v3").mustCode(t, http.StatusOK, &index)
	want := map[string]bool{}
	for _, gv := range servedGroupVersions() {
		want[openAPIV3Key(gv)] = true
	}
	for _, key := range []string{"api/v1", "apis/apps/v1", "apis/networking.k8s.io/v1", "apis/discovery.k8s.io/v1"} {
		if !want[key] {
			t.Errorf("the resources table serves no %s", key)
		}
	}
	if len(index.Paths) != len(want) {
		t.Errorf("v3 index lists %d group versions, the server serves %d: %v", len(index.Paths), len(want), index.Paths)
	}
	for key := range want {
		u, err := url.Parse(index.Paths[key].ServerRelativeURL)
		if err != nil || u.Path != "/openapi/v3/"+key || u.Query().Get("hash") == "" {
			t.Errorf("v3 index entry of %s: %q", key, index.Paths[key].ServerRelativeURL)
			continue
		}
		var doc openAPIDoc
		a.get(u.String()).mustCode(t, http.StatusOK, &doc)
		for _, res := range openAPIResources() {
			if openAPIV3Key(res.gv) != key {
				continue
			}
			found := false
			for _, s := range doc.Components.Schemas {
				found = found || gvkListed(s["x-kubernetes-group-version-kind"], res.gvk())
			}
			if !found {
				t.Errorf("v3 %s: no schema for %v", key, res.gvk())
			}
			checkPaths(t, doc, res, "v3 "+key)
		}
	}
}

// TestOpenAPICaching: the documents carry ETags and answer If-None-Match with
// 304; a v3 document asked for by its current hash is immutable, by an old hash
// redirects to the current one. Unknown documents are 404s.
func TestOpenAPICaching(t *testing.T) {
	a := newTestAPI(t)
	var index struct {
		Paths map[string]struct{ ServerRelativeURL string } `json:"paths"`
	}
	a.get("/openapi/v3").mustCode(t, http.StatusOK, &index)
	current := index.Paths["apis/apps/v1"].ServerRelativeURL
	for _, c := range []struct{ path, accept string }{
		{"/openapi/v2", "application/json"},
		{"/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
		{"/openapi/v3", "application/json"},
		{"/openapi/v3/api/v1", "application/json"},
		{current, "application/json"},
	} {
		r := a.do("GET", c.path, "", nil, "Accept", c.accept)
		etag := r.header.Get("Etag")
		if r.code != http.StatusOK || etag == "" || len(r.body) == 0 {
			t.Errorf("GET %s (%s): %d, ETag %q, %d bytes", c.path, c.accept, r.code, etag, len(r.body))
			continue
		}
		again := a.do("GET", c.path, "", nil, "Accept", c.accept, "If-None-Match", etag)
		if again.code != http.StatusNotModified || len(again.body) != 0 {
			t.Errorf("GET %s with If-None-Match %s: %d, %d bytes; want 304 and no body", c.path, etag, again.code, len(again.body))
		}
		stale := a.do("GET", c.path, "", nil, "Accept", c.accept, "If-None-Match", `"0"`)
		if stale.code != http.StatusOK || len(stale.body) != len(r.body) {
			t.Errorf("GET %s with a stale If-None-Match: %d, %d bytes", c.path, stale.code, len(stale.body))
		}
	}
	if r := a.get(current); r.header.Get("Cache-Control") != "public, immutable" {
		t.Errorf("GET %s: Cache-Control %q, want public, immutable", current, r.header.Get("Cache-Control"))
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(a.url + "/openapi/v3/apis/apps/v1?hash=0123")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != current {
		t.Errorf("GET with an old hash: %d to %q, want 301 to %q", resp.StatusCode, resp.Header.Get("Location"), current)
	}
	for _, p := range []string{"/openapi/v3/apis/policy/v1", "/openapi/v3/apis/apps", "/openapi/v4", "/openapi/v3/api/v1/x"} {
		if r := a.get(p); r.code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, r.code)
		}
	}
	if r := a.do("POST", "/openapi/v2", "application/json", map[string]any{}); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST /openapi/v2: %d, want 405", r.code)
	}
}

// BenchmarkOpenAPIBuild builds both documents as the server does on the first
// request, and reports their sizes.
func BenchmarkOpenAPIBuild(b *testing.B) {
	namer := openAPIDefinitionNamer()
	for b.Loop() {
		v2, err := buildOpenAPIV2()
		if err != nil {
			b.Fatal(err)
		}
		js, _ := json.Marshal(v2)
		size := len(js)
		for _, gv := range servedGroupVersions() {
			doc, err := buildOpenAPIV3(gv, namer)
			if err != nil {
				b.Fatal(err)
			}
			js, _ := json.Marshal(doc)
			size += len(js)
		}
		b.ReportMetric(float64(len(js)), "v2-bytes")
		b.ReportMetric(float64(size-len(js)), "v3-bytes")
	}
}
