package apiserver

import (
	"net/http"
	"runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
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
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
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
	for _, res := range s.allResources() {
		if res.gv != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: res.name, SingularName: res.singular, Namespaced: res.namespaced, Kind: res.kind,
			Verbs: verbsFull, ShortNames: res.shortNames, Categories: res.categories,
		})
		if res.status {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.name + "/status", Namespaced: res.namespaced, Kind: res.kind, Verbs: verbsStatus,
			})
		}
		if res.scale {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.name + "/scale", Namespaced: res.namespaced, Group: scaleGVK.Group, Version: scaleGVK.Version,
				Kind: scaleGVK.Kind, Verbs: verbsStatus,
			})
		}
		if res.name == "pods" {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: "pods/log", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"},
			})
		}
		if res.name == "pods" {
			// The streaming subresources (stream.go), as kube-apiserver lists them.
			for _, sub := range []struct{ name, kind string }{
				{"attach", "PodAttachOptions"}, {"exec", "PodExecOptions"}, {"portforward", "PodPortForwardOptions"},
			} {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: "pods/" + sub.name, Namespaced: true, Kind: sub.kind, Verbs: metav1.Verbs{"create", "get"},
				})
			}
		}
		if proxyable(res) {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: res.name + "/proxy", Namespaced: res.namespaced, Kind: res.kind + "ProxyOptions", Verbs: verbsProxy,
			})
		}
		if res.name == "serviceaccounts" {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: "serviceaccounts/token", Namespaced: true, Group: "authentication.k8s.io", Version: "v1",
				Kind: "TokenRequest", Verbs: metav1.Verbs{"create"},
			})
		}
		if res.name == "namespaces" {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: "namespaces/finalize", Kind: "Namespace", Verbs: metav1.Verbs{"update"},
			})
		}
	}
	if len(list.APIResources) == 0 {
		return notFoundPath()
	}
	writeValue(w, r, http.StatusOK, list)
	return nil
}
