package apiserver

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	goruntime "runtime"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/version"
	apidiscoveryv2conversion "k8s.io/apiserver/pkg/apis/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
)

// KubernetesVersion is the Kubernetes release whose API, client libraries
// (k8s.io/* v0.37.2) and upstream suites (e2e.test v1.37.2) minikit follows;
// /version reports it with "+minikit-" and minikit's own version.
const KubernetesVersion = "v1.37.2"

// kubernetesMinor is KubernetesVersion's minor version.
const kubernetesMinor = "37"

func (s *Server) versionInfo() version.Info {
	return version.Info{
		Major: "1", Minor: kubernetesMinor, GitVersion: KubernetesVersion + "+minikit-" + s.cfg.Version,
		GitCommit: s.cfg.Version, GitTreeState: "clean", BuildDate: "",
		GoVersion: goruntime.Version(), Compiler: goruntime.Compiler, Platform: goruntime.GOOS + "/" + goruntime.GOARCH,
	}
}

func (s *Server) serveAPIVersions(w http.ResponseWriter, r *http.Request) error {
	writeValue(w, r, http.StatusOK, metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: s.cfg.AdvertiseAddress},
		},
	})
	return nil
}

// groups lists the non-legacy API groups in discovery order, each with its
// versions, the preferred one first.
func (s *Server) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	seen := map[schema.GroupVersion]bool{}
	for _, r := range s.allResources() {
		if r.gv.Group == "" || seen[r.gv] {
			continue
		}
		seen[r.gv] = true
		v := metav1.GroupVersionForDiscovery{GroupVersion: r.gv.String(), Version: r.gv.Version}
		i, ok := index[r.gv.Group]
		if !ok {
			index[r.gv.Group] = len(out)
			out = append(out, metav1.APIGroup{
				TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
				Name:     r.gv.Group, PreferredVersion: v,
			})
			i = len(out) - 1
		}
		out[i].Versions = append(out[i].Versions, v)
	}
	// A group only custom resources serve lists its versions as
	// apiextensions-apiserver does: highest Kubernetes-aware version first,
	// which is the preferred one.
	builtin := map[string]bool{crdResource.gv.Group: true}
	for _, r := range resources {
		builtin[r.gv.Group] = true
	}
	// The review APIs (review.go), create-only, after the built-in groups
	// and before the custom resources'.
	at := slices.IndexFunc(out, func(g metav1.APIGroup) bool { return !builtin[g.Name] })
	if at < 0 {
		at = len(out)
	}
	for i, gv := range reviewGroupVersions {
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		out = slices.Insert(out, at+i, metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
			Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
		builtin[gv.Group] = true
	}
	for i := range out {
		if builtin[out[i].Name] {
			continue
		}
		vs := out[i].Versions
		slices.SortStableFunc(vs, func(a, b metav1.GroupVersionForDiscovery) int {
			return -version.CompareKubeAwareVersionStrings(a.Version, b.Version)
		})
		out[i].PreferredVersion = vs[0]
	}
	return out
}

func (s *Server) serveAPIGroupList(w http.ResponseWriter, r *http.Request) error {
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range s.groups() {
		g.TypeMeta = metav1.TypeMeta{}
		list.Groups = append(list.Groups, g)
	}
	writeValue(w, r, http.StatusOK, list)
	return nil
}

func (s *Server) serveAPIGroup(w http.ResponseWriter, r *http.Request, group string) error {
	for _, g := range s.groups() {
		if g.Name == group {
			writeValue(w, r, http.StatusOK, g)
			return nil
		}
	}
	return notFoundPath()
}

var (
	verbsFull   = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	verbsStatus = metav1.Verbs{"get", "patch", "update"}
	verbsProxy  = metav1.Verbs{"create", "delete", "get", "patch", "update"}
)

func (s *Server) serveResourceList(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) error {
	list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	list.APIResources = s.apiResources(gv)
	if len(list.APIResources) == 0 {
		return notFoundPath()
	}
	writeValue(w, r, http.StatusOK, list)
	return nil
}

// apiResources is the legacy discovery document of gv: every resource and
// subresource, in the resource table's order.
func (s *Server) apiResources(gv schema.GroupVersion) []metav1.APIResource {
	var out []metav1.APIResource
	for _, res := range s.allResources() {
		if res.gv != gv {
			continue
		}
		if res.cr != nil {
			out = append(out, crAPIResources(res)...)
			continue
		}
		out = append(out, metav1.APIResource{
			Name: res.name, SingularName: res.singular, Namespaced: res.namespaced, Kind: res.kind,
			Verbs: verbsFull, ShortNames: res.shortNames, Categories: res.categories,
		})
		if res.status {
			out = append(out, metav1.APIResource{
				Name: res.name + "/status", Namespaced: res.namespaced, Kind: res.kind, Verbs: verbsStatus,
			})
		}
		if res.scale {
			out = append(out, metav1.APIResource{
				Name: res.name + "/scale", Namespaced: res.namespaced, Group: scaleGVK.Group, Version: scaleGVK.Version,
				Kind: scaleGVK.Kind, Verbs: verbsStatus,
			})
		}
		if res.name == "pods" {
			out = append(out, metav1.APIResource{
				Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"},
			})
			// The streaming subresources (stream.go), as kube-apiserver lists them.
			for _, sub := range []struct{ name, kind string }{
				{"attach", "PodAttachOptions"}, {"exec", "PodExecOptions"}, {"portforward", "PodPortForwardOptions"},
			} {
				out = append(out, metav1.APIResource{
					Name: "pods/" + sub.name, Namespaced: true, Kind: sub.kind, Verbs: metav1.Verbs{"create", "get"},
				})
			}
		}
		if proxyable(res) {
			out = append(out, metav1.APIResource{
				Name: res.name + "/proxy", Namespaced: res.namespaced, Kind: res.kind + "ProxyOptions", Verbs: verbsProxy,
			})
		}
		if res.name == "serviceaccounts" {
			out = append(out, metav1.APIResource{
				Name: "serviceaccounts/token", Namespaced: true, Group: "authentication.k8s.io", Version: "v1",
				Kind: "TokenRequest", Verbs: metav1.Verbs{"create"},
			})
		}
		if res.name == "namespaces" {
			out = append(out, metav1.APIResource{
				Name: "namespaces/finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"},
			})
		}
	}
	out = append(out, reviewAPIResources(gv)...)
	return out
}

// crVerbs is what apiextensions-apiserver's discovery controller lists for a
// custom resource, in its order; a CRD being deleted takes no new objects.
func crVerbs(res *resource) metav1.Verbs {
	if res.cr.terminating {
		return metav1.Verbs{"delete", "deletecollection", "get", "list", "watch"}
	}
	return metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
}

// crAPIResources is a served custom resource version in legacy discovery,
// as apiextensions-apiserver's discovery controller writes it.
func crAPIResources(res *resource) []metav1.APIResource {
	out := []metav1.APIResource{{
		Name: res.name, SingularName: res.singular, Namespaced: res.namespaced, Kind: res.kind,
		Verbs: crVerbs(res), ShortNames: res.shortNames, Categories: res.categories,
		StorageVersionHash: crStorageVersionHash(res),
	}}
	if res.status {
		out = append(out, metav1.APIResource{Name: res.name + "/status", Namespaced: res.namespaced, Kind: res.kind, Verbs: verbsStatus})
	}
	if res.scale {
		out = append(out, metav1.APIResource{Name: res.name + "/scale", Namespaced: res.namespaced,
			Group: scaleGVK.Group, Version: scaleGVK.Version, Kind: scaleGVK.Kind, Verbs: verbsStatus})
	}
	return out
}

// crStorageVersionHash is the hash of the CRD's storage version, which every
// served version of it reports.
func crStorageVersionHash(res *resource) string {
	for _, v := range res.cr.crd.Spec.Versions {
		if v.Storage {
			return discovery.StorageVersionHash(res.gv.Group, v.Name, res.cr.crd.Spec.Names.Kind)
		}
	}
	return ""
}

// Aggregated discovery (apidiscovery.k8s.io/v2, KEP-3352): a client that asks
// /api or /apis for an APIGroupDiscoveryList gets every group, version and
// resource in one document instead of one request per group version. The
// choice of document, the media types (JSON, YAML, protobuf, with the
// apidiscovery/v2 conversions) and the ETag/304 handling are
// k8s.io/apiserver's own (endpoints/discovery/aggregated); the documents are
// built as kube-apiserver builds them: a built-in group version is its
// legacy resource list folded by endpoints.ConvertGroupVersionIntoToDiscovery
// (subresources under their parent, responseKind empty but for subresources
// of another kind), a custom resource as apiextensions-apiserver's discovery
// controller writes it (full responseKind, resources sorted by name). Every
// version is Current: nothing here is served by another, possibly stale,
// server.
//
// The documents are rebuilt only when the served custom resources change
// (crdRegistry.gen, bumped by the CRD controller as soon as it sees a CRD
// established, changed or deleted in the store), and cached with their ETag
// in between.

// discoveryCodecs serves the apidiscovery types, as aggregated.NewResourceManager does.
var discoveryCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(apidiscoveryv2.AddToScheme(scheme))
	utilruntime.Must(apidiscoveryv2beta1.AddToScheme(scheme))
	utilruntime.Must(apidiscoveryv2conversion.RegisterConversions(scheme))
	return serializer.NewCodecFactory(scheme)
}()

// aggregatedDocs are the two documents built from one generation of the
// served custom resources.
type aggregatedDocs struct {
	gen        int64
	apis, api  *apidiscoveryv2.APIGroupDiscoveryList
	apisETag   string
	legacyETag string
}

// wantsAggregated reports whether r's Accept header chooses an aggregated
// discovery document over the legacy one, by upstream's negotiation (which
// also decides whether the removed v2beta1 still counts).
func wantsAggregated(r *http.Request) bool {
	mt, ok := negotiation.NegotiateMediaTypeOptions(r.Header.Get("Accept"), discoveryCodecs.SupportedMediaTypes(), aggregated.DiscoveryEndpointRestrictions)
	return ok && aggregated.IsAggregatedDiscoveryGVK(mt.Convert)
}

// serveAggregated writes the /api (legacy) or /apis document with its ETag,
// or 304 when the client already has it.
func (s *Server) serveAggregated(w http.ResponseWriter, r *http.Request, legacy bool) error {
	docs, err := s.aggregatedDocs()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	mt, _, err := negotiation.NegotiateOutputMediaType(r, discoveryCodecs, aggregated.DiscoveryEndpointRestrictions)
	if err != nil {
		return err // a 406 Status
	}
	if mt.Convert == nil { // wantsAggregated said otherwise
		return apierrors.NewInternalError(fmt.Errorf("negotiating aggregated discovery: no group version in %q", r.Header.Get("Accept")))
	}
	list, etag := docs.apis, docs.apisETag
	if legacy {
		list, etag = docs.api, docs.legacyETag
	}
	// The encoder sets the target kind on the object it writes and puts the
	// old one back, so concurrent requests must not share the cached list.
	aggregated.ServeHTTPWithETag(list.DeepCopy(), etag, mt.Convert.GroupVersion(), discoveryCodecs, w, r)
	return nil
}

// aggregatedDocs returns the cached documents, rebuilding them when the
// served custom resources changed since.
func (s *Server) aggregatedDocs() (*aggregatedDocs, error) {
	gen := s.crds.generation()
	if d := s.discovery.Load(); d != nil && d.gen == gen {
		return d, nil
	}
	d := &aggregatedDocs{gen: gen}
	var err error
	if d.apis, err = s.buildAggregated(false); err != nil {
		return nil, err
	}
	if d.api, err = s.buildAggregated(true); err != nil {
		return nil, err
	}
	if d.apisETag, err = discoveryETag(d.apis); err != nil {
		return nil, err
	}
	if d.legacyETag, err = discoveryETag(d.api); err != nil {
		return nil, err
	}
	// A concurrent rebuild of the same or a newer generation may win; either
	// is right for its own request.
	s.discovery.Store(d)
	return d, nil
}

// discoveryETag is upstream's: the SHA-512 of the document's JSON, in hex.
func discoveryETag(list *apidiscoveryv2.APIGroupDiscoveryList) (string, error) {
	b, err := json.Marshal(list)
	if err != nil {
		return "", fmt.Errorf("encoding the aggregated discovery document: %w", err)
	}
	return fmt.Sprintf("%X", sha512.Sum512(b)), nil
}

// buildAggregated builds the /api document (legacy: the core group) or the
// /apis one (every other group, in the legacy /apis order).
func (s *Server) buildAggregated(legacy bool) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	list := &apidiscoveryv2.APIGroupDiscoveryList{}
	groups := s.groups()
	if legacy {
		groups = []metav1.APIGroup{{Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}}}}
	}
	for _, g := range groups {
		item := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, v := range g.Versions {
			resources, err := s.versionDiscovery(schema.GroupVersion{Group: g.Name, Version: v.Version})
			if err != nil {
				return nil, err
			}
			item.Versions = append(item.Versions, apidiscoveryv2.APIVersionDiscovery{
				Version: v.Version, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			})
		}
		list.Items = append(list.Items, item)
	}
	return list, nil
}

// versionDiscovery is the resources of one group version in the aggregated
// document.
func (s *Server) versionDiscovery(gv schema.GroupVersion) ([]apidiscoveryv2.APIResourceDiscovery, error) {
	var builtin []metav1.APIResource
	var custom []apidiscoveryv2.APIResourceDiscovery
	for _, res := range s.allResources() {
		if res.gv != gv || res.cr == nil {
			continue
		}
		custom = append(custom, crResourceDiscovery(res))
	}
	for _, r := range s.apiResources(gv) {
		if custom != nil && slices.ContainsFunc(custom, func(c apidiscoveryv2.APIResourceDiscovery) bool {
			return c.Resource == strings.SplitN(r.Name, "/", 2)[0]
		}) {
			continue
		}
		builtin = append(builtin, r)
	}
	out, err := endpoints.ConvertGroupVersionIntoToDiscovery(builtin)
	if err != nil {
		return nil, fmt.Errorf("building the aggregated discovery of %s: %w", gv, err)
	}
	slices.SortStableFunc(custom, func(a, b apidiscoveryv2.APIResourceDiscovery) int { return strings.Compare(a.Resource, b.Resource) })
	return append(out, custom...), nil
}

// crResourceDiscovery is a served custom resource version as
// apiextensions-apiserver's discovery controller publishes it.
func crResourceDiscovery(res *resource) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if res.namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	kind := &metav1.GroupVersionKind{Group: res.gv.Group, Version: res.gv.Version, Kind: res.kind}
	d := apidiscoveryv2.APIResourceDiscovery{
		Resource: res.name, SingularResource: res.singular, Scope: scope, ResponseKind: kind,
		Verbs: crVerbs(res), ShortNames: res.shortNames, Categories: res.categories,
	}
	if res.status {
		d.Subresources = append(d.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource: "status", ResponseKind: kind.DeepCopy(), Verbs: verbsStatus,
		})
	}
	if res.scale {
		d.Subresources = append(d.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  "scale",
			ResponseKind: &metav1.GroupVersionKind{Group: scaleGVK.Group, Version: scaleGVK.Version, Kind: scaleGVK.Kind},
			Verbs:        verbsStatus,
		})
	}
	return d
}
