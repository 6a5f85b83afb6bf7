package apiserver

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/apiserver/openapi"

	apiextopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
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

// openAPIResources is the resources the built-in documents describe: the
// resources table and the CRDs themselves (custom resources are added per
// server, crdopenapi.go).
func openAPIResources() []*resource {
	return append(slices.Clone(resources), crdResource)
}

// openAPIDefinitions is the generated models of the k8s.io/api types and of
// the apiextensions.k8s.io types.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := openapi.GetOpenAPIDefinitions(ref)
	for name, def := range apiextopenapi.GetOpenAPIDefinitions(ref) {
		if _, ok := defs[name]; !ok {
			defs[name] = def
		}
	}
	return defs
}

// servedGroupVersions lists every group version of openAPIResources, in
// table order.
func servedGroupVersions() []schema.GroupVersion {
	var out []schema.GroupVersion
	seen := map[schema.GroupVersion]bool{}
	for _, r := range openAPIResources() {
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
	for _, scheme := range []*runtime.Scheme{clientscheme.Scheme, crdScheme} {
		for gvk, t := range scheme.AllKnownTypes() {
			if !served[gvk.GroupVersion()] {
				continue
			}
			name := util.GetCanonicalTypeName(reflect.New(t).Interface())
			if !slices.Contains(kinds[name], gvk) {
				kinds[name] = append(kinds[name], gvk)
			}
		}
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
		GetDefinitions:    openAPIDefinitions,
		GetDefinitionName: namer,
	})
}

// openAPIV3Key is a group version's key in the v3 index: api/v1, apis/apps/v1.
func openAPIV3Key(gv schema.GroupVersion) string { return strings.TrimPrefix(rootPath(gv), "/") }

type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) { m.Handle(path, h) }

// staticOpenAPI is the documents of the built-in resources.
type staticOpenAPI struct {
	v2 *spec.Swagger
	v3 map[string]*spec3.OpenAPI // by openAPIV3Key
}

// openAPIStatic builds the built-in documents, once, on first use; every
// server of the process shares them.
var openAPIStatic = sync.OnceValues(func() (*staticOpenAPI, error) {
	v2, err := buildOpenAPIV2()
	if err != nil {
		return nil, fmt.Errorf("building OpenAPI v2: %w", err)
	}
	st := &staticOpenAPI{v2: v2, v3: map[string]*spec3.OpenAPI{}}
	namer := openAPIDefinitionNamer()
	for _, gv := range servedGroupVersions() {
		doc, err := buildOpenAPIV3(gv, namer)
		if err != nil {
			return nil, fmt.Errorf("building OpenAPI v3 of %s: %w", gv, err)
		}
		st.v3[openAPIV3Key(gv)] = doc
	}
	return st, nil
})

// openAPIDocs is one server's OpenAPI services: the built-in documents
// merged with those of the CRDs it serves (crdopenapi.go). They are brought
// up to date on the first request after the served CRDs change.
type openAPIDocs struct {
	mu      sync.Mutex
	mux     *http.ServeMux
	v2      *handler.OpenAPIService
	v3      *handler3.OpenAPIService
	gen     int64           // the crdRegistry generation the documents describe
	crdKeys map[string]bool // v3 keys of custom resource group versions
}

// handler returns the server's OpenAPI handler, up to date with its CRDs.
func (s *Server) openAPIHandler() (http.Handler, error) {
	d := &s.openapi
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := openAPIStatic()
	if err != nil {
		return nil, err
	}
	if d.mux == nil {
		d.mux = http.NewServeMux()
		d.v2 = handler.NewOpenAPIService(st.v2)
		d.v2.RegisterOpenAPIVersionedService("/openapi/v2", d.mux)
		d.v3 = handler3.NewOpenAPIService()
		for key, doc := range st.v3 {
			d.v3.UpdateGroupVersion(key, doc)
		}
		if err := d.v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{d.mux}); err != nil {
			return nil, err
		}
		d.gen = -1
	}
	if gen := s.crds.generation(); gen != d.gen {
		if err := s.updateCRDOpenAPI(st); err != nil {
			return nil, err
		}
		d.gen = gen
	}
	return d.mux, nil
}

// serveOpenAPI answers /openapi/v2, /openapi/v3 and /openapi/v3/<group version>.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) error {
	switch {
	case path == "openapi/v2", path == "openapi/v3":
	case strings.HasPrefix(path, "openapi/v3/"):
		if !s.openAPIV3Known(strings.TrimPrefix(path, "openapi/v3/")) {
			return notFoundPath()
		}
	default:
		return notFoundPath()
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method)
	}
	docs, err := s.openAPIHandler()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	r.URL.Path = "/" + path
	docs.ServeHTTP(w, r)
	return nil
}

func (s *Server) openAPIV3Known(key string) bool {
	for _, gv := range servedGroupVersions() {
		if openAPIV3Key(gv) == key {
			return true
		}
	}
	for _, r := range s.crds.all() {
		if openAPIV3Key(r.gv) == key {
			return true
		}
	}
	return false
}
