package apiserver

import (
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/apiserver/openapi"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// OpenAPI documents, as kube-apiserver publishes them:
//
//   - /openapi/v2: one swagger 2.0 document for every group version, as JSON or
//     as the protobuf kubectl before 1.27 asks for (client-side validation,
//     explain);
//   - /openapi/v3: an index of group versions, each pointing at
//     /openapi/v3/api/v1?hash=…, one OpenAPI 3.0 document per group version
//     (kubectl 1.27+: explain, and the check that PATCH takes fieldValidation,
//     which makes it validate on the server).
//
// The schemas are kube-openapi's generated definitions of the k8s.io/api types
// (package openapi); the paths come from the resources table, so a resource
// added there is described with no further work. Both documents are built
// once, on first request, and served by kube-openapi's handlers, which cache
// the encoded bytes and answer ETag/If-None-Match and the v3 hash query
// (immutable caching for a matching hash, a redirect to the current one
// otherwise).

// gvkExtension is the vendor extension naming the kinds a schema or an
// operation is for.
const gvkExtension = "x-kubernetes-group-version-kind"

// servedGroupVersions lists every group version of the resources table, in
// table order.
func servedGroupVersions() []schema.GroupVersion {
	var out []schema.GroupVersion
	seen := map[schema.GroupVersion]bool{}
	for _, r := range resources {
		if !seen[r.gv] {
			seen[r.gv] = true
			out = append(out, r.gv)
		}
	}
	return out
}

// openAPIDefinitionNamer names definitions by their model name
// (io.k8s.api.core.v1.Pod) and marks the ones that are kinds with the
// group-version-kinds they are served as, so kubectl can find the schema of a
// kind. As kube-apiserver's namer, it takes the kinds from the scheme, but only
// of the group versions minikit serves (and autoscaling/v1, of the scale
// subresource).
func openAPIDefinitionNamer() func(name string) (string, spec.Extensions) {
	served := map[schema.GroupVersion]bool{scaleGVK.GroupVersion(): true}
	for _, gv := range servedGroupVersions() {
		served[gv] = true
	}
	kinds := map[string][]schema.GroupVersionKind{}
	for gvk, t := range clientscheme.Scheme.AllKnownTypes() {
		if !served[gvk.GroupVersion()] {
			continue
		}
		name := util.GetCanonicalTypeName(reflect.New(t).Interface())
		kinds[name] = append(kinds[name], gvk)
	}
	exts := map[string]spec.Extensions{}
	for name, gvks := range kinds {
		sort.Slice(gvks, func(i, j int) bool {
			a, b := gvks[i], gvks[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			return a.Kind < b.Kind
		})
		list := make([]any, len(gvks))
		for i, gvk := range gvks {
			list[i] = map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
		}
		exts[name] = spec.Extensions{gvkExtension: list}
	}
	return func(name string) (string, spec.Extensions) { return name, exts[name] }
}

func openAPIInfo() *spec.Info {
	return &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: KubernetesVersion}}
}

func openAPIRouteContainer(gv schema.GroupVersion) common.RouteContainer {
	return oaContainer{root: rootPath(gv), routes: openAPIRoutes(gv)}
}

// buildOpenAPIV3 builds the OpenAPI 3.0 document of one group version.
func buildOpenAPIV3(gv schema.GroupVersion, namer func(string) (string, spec.Extensions)) (*spec3.OpenAPI, error) {
	return builder3.BuildOpenAPISpecFromRoutes([]common.RouteContainer{openAPIRouteContainer(gv)}, &common.OpenAPIV3Config{
		Info:              openAPIInfo(),
		GetDefinitions:    openapi.GetOpenAPIDefinitions,
		GetDefinitionName: namer,
	})
}

// openAPIV3Key is a group version's key in the v3 index: api/v1, apis/apps/v1.
func openAPIV3Key(gv schema.GroupVersion) string { return strings.TrimPrefix(rootPath(gv), "/") }

type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) { m.Handle(path, h) }

// openAPIDocs builds both documents, once, on first use, and returns the
// handler that serves them.
var openAPIDocs = sync.OnceValues(func() (http.Handler, error) {
	mux := http.NewServeMux()
	v2, err := buildOpenAPIV2()
	if err != nil {
		return nil, fmt.Errorf("building OpenAPI v2: %w", err)
	}
	handler.NewOpenAPIService(v2).RegisterOpenAPIVersionedService("/openapi/v2", mux)
	v3 := handler3.NewOpenAPIService()
	namer := openAPIDefinitionNamer()
	for _, gv := range servedGroupVersions() {
		doc, err := buildOpenAPIV3(gv, namer)
		if err != nil {
			return nil, fmt.Errorf("building OpenAPI v3 of %s: %w", gv, err)
		}
		v3.UpdateGroupVersion(openAPIV3Key(gv), doc)
	}
	if err := v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{mux}); err != nil {
		return nil, err
	}
	return mux, nil
})

// serveOpenAPI answers /openapi/v2, /openapi/v3 and /openapi/v3/<group version>.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) error {
	switch {
	case path == "openapi/v2", path == "openapi/v3":
	case strings.HasPrefix(path, "openapi/v3/"):
		if !openAPIV3Known(strings.TrimPrefix(path, "openapi/v3/")) {
			return notFoundPath()
		}
	default:
		return notFoundPath()
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method)
	}
	docs, err := openAPIDocs()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	r.URL.Path = "/" + path
	docs.ServeHTTP(w, r)
	return nil
}

func openAPIV3Known(key string) bool {
	for _, gv := range servedGroupVersions() {
		if openAPIV3Key(gv) == key {
			return true
		}
	}
	return false
}
