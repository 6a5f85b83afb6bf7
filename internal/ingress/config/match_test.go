package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// path is one Ingress path: "Prefix /foo" or "Exact /foo" (backend = service
// named after the type and path, so a test can tell which one answered).
type path struct {
	typ  networkingv1.PathType
	path string
}

func (p path) svc() string {
	s := strings.ToLower(string(p.typ)) + strings.NewReplacer("/", "-", ".", "dot", "*", "star", "(", "", ")", "", "|", "", "$", "").Replace(p.path)
	if len(p.path) > 1 && strings.HasSuffix(p.path, "/") {
		s += "slash"
	}
	return strings.TrimSuffix(s, "-")
}

func prefix(p string) path { return path{networkingv1.PathTypePrefix, p} }
func exact(p string) path  { return path{networkingv1.PathTypeExact, p} }
func implSpec(p string) path {
	return path{networkingv1.PathTypeImplementationSpecific, p}
}

// world holds objects for Build: Services and ready endpoints for every backend
// the Ingresses name.
type world struct {
	in   Input
	seen map[string]bool
	age  int
}

func newWorld() *world {
	w := &world{seen: map[string]bool{}}
	w.in.Class = DefaultClass
	w.in.IngressClasses = []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}}
	return w
}

func (w *world) service(ns, name string) {
	if w.seen[ns+"/"+name] {
		return
	}
	w.seen[ns+"/"+name] = true
	w.in.Services = append(w.in.Services, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	n := len(w.in.Services)
	w.in.EndpointSlices = append(w.in.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.%d.%d", n/200, n%200+2)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
	})
}

func ptr[T any](v T) *T { return &v }

func backend(svc string) networkingv1.IngressBackend {
	return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}
}

// ingress adds an Ingress (one second younger than the previous one) with one
// rule for host and the given paths.
func (w *world) ingress(name, host string, paths ...path) *networkingv1.Ingress {
	w.age++
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000+int64(w.age), 0))}}
	rule := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
	for _, p := range paths {
		w.service("default", p.svc())
		rule.HTTP.Paths = append(rule.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.path, PathType: ptr(p.typ), Backend: backend(p.svc())})
	}
	ing.Spec.Rules = []networkingv1.IngressRule{rule}
	w.in.Ingresses = append(w.in.Ingresses, ing)
	return ing
}

// answer names what serves host+path: the backend service, or "404"/"503".
func answer(c *Config, host, p string) string {
	l := c.Server(host).Match(p)
	if l.Upstream != nil {
		return l.Upstream.Service.Name
	}
	return fmt.Sprint(l.Status)
}

// TestDocsPathExamples is the table of the Kubernetes Ingress docs, "Examples"
// (https://kubernetes.io/docs/concepts/services-networking/ingress/#examples),
// row by row: the paths of one Ingress, a request path, and whether it matches.
func TestDocsPathExamples(t *testing.T) {
	tests := []struct {
		kind     string
		paths    []path
		requests []string
		match    bool
		want     path // which path answers when it matches
		note     string
	}{
		{"Prefix", []path{prefix("/")}, []string{"/", "/foo", "/aaa/bbb", "/x.html"}, true, prefix("/"), "(all paths)"},
		{"Exact", []path{exact("/foo")}, []string{"/foo"}, true, exact("/foo"), ""},
		{"Exact", []path{exact("/foo")}, []string{"/bar"}, false, path{}, ""},
		{"Exact", []path{exact("/foo")}, []string{"/foo/"}, false, path{}, ""},
		{"Exact", []path{exact("/foo/")}, []string{"/foo"}, false, path{}, ""},
		{"Prefix", []path{prefix("/foo")}, []string{"/foo", "/foo/"}, true, prefix("/foo"), ""},
		{"Prefix", []path{prefix("/foo/")}, []string{"/foo", "/foo/"}, true, prefix("/foo/"), ""},
		{"Prefix", []path{prefix("/aaa/bb")}, []string{"/aaa/bbb"}, false, path{}, ""},
		{"Prefix", []path{prefix("/aaa/bbb")}, []string{"/aaa/bbb"}, true, prefix("/aaa/bbb"), ""},
		{"Prefix", []path{prefix("/aaa/bbb/")}, []string{"/aaa/bbb"}, true, prefix("/aaa/bbb/"), "ignores trailing slash"},
		{"Prefix", []path{prefix("/aaa/bbb")}, []string{"/aaa/bbb/"}, true, prefix("/aaa/bbb"), "matches trailing slash"},
		{"Prefix", []path{prefix("/aaa/bbb")}, []string{"/aaa/bbb/ccc"}, true, prefix("/aaa/bbb"), "matches subpath"},
		{"Prefix", []path{prefix("/aaa/bbb")}, []string{"/aaa/bbbxyz"}, false, path{}, "does not match string prefix"},
		{"Prefix", []path{prefix("/"), prefix("/aaa")}, []string{"/aaa/ccc"}, true, prefix("/aaa"), "matches /aaa prefix"},
		{"Prefix", []path{prefix("/"), prefix("/aaa"), prefix("/aaa/bbb")}, []string{"/aaa/bbb"}, true, prefix("/aaa/bbb"), "matches /aaa/bbb prefix"},
		{"Prefix", []path{prefix("/"), prefix("/aaa"), prefix("/aaa/bbb")}, []string{"/ccc"}, true, prefix("/"), "matches / prefix"},
		{"Prefix", []path{prefix("/aaa")}, []string{"/ccc"}, false, path{}, "uses default backend"},
		{"Mixed", []path{prefix("/foo"), exact("/foo")}, []string{"/foo"}, true, exact("/foo"), "prefers Exact"},
	}
	for _, tc := range tests {
		for _, req := range tc.requests {
			name := fmt.Sprintf("%s %v request %s", tc.kind, tc.paths, req)
			t.Run(name, func(t *testing.T) {
				w := newWorld()
				w.ingress("ing", "foo.bar.com", tc.paths...)
				c := Build(w.in)
				if len(c.Problems) > 0 {
					t.Fatalf("problems: %v", c.Problems)
				}
				got := answer(c, "foo.bar.com", req)
				want := "404"
				if tc.match {
					want = tc.want.svc()
				}
				if got != want {
					t.Fatalf("request %s answered by %s, want %s (%s)", req, got, want, tc.note)
				}
			})
		}
	}
}

// TestDocsWildcardHosts is the docs' "Hostname wildcards" table, plus the precise
// host rules around it.
func TestDocsWildcardHosts(t *testing.T) {
	w := newWorld()
	w.ingress("wild", "*.foo.com", prefix("/"))
	c := Build(w.in)
	for _, tc := range []struct{ host, want, why string }{
		{"bar.foo.com", "prefix", "Matches based on shared suffix"},
		{"baz.bar.foo.com", "404", "No match, wildcard only covers a single DNS label"},
		{"foo.com", "404", "No match, wildcard only covers a single DNS label"},
	} {
		if got := answer(c, tc.host, "/"); got != tc.want {
			t.Errorf("Host %s answered by %s, want %s (%s)", tc.host, got, tc.want, tc.why)
		}
	}
}

func TestHostPrecedence(t *testing.T) {
	w := newWorld()
	w.ingress("wild", "*.foo.com", prefix("/w"))
	w.ingress("exact", "bar.foo.com", prefix("/e"))
	w.ingress("nohost", "", prefix("/n"))
	c := Build(w.in)
	for _, tc := range []struct{ host, path, want string }{
		{"bar.foo.com", "/e", "prefix-e"},
		{"bar.foo.com", "/w", "404"}, // an exact server wins over the wildcard, whole
		{"qux.foo.com", "/w", "prefix-w"},
		{"qux.foo.com", "/n", "404"},
		{"other.example", "/n", "prefix-n"}, // rules without host: the catch-all
		{"other.example", "/e", "404"},
	} {
		if got := answer(c, tc.host, tc.path); got != tc.want {
			t.Errorf("%s%s answered by %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}
}

func TestPrecedenceBeyondTheDocs(t *testing.T) {
	tests := []struct {
		name  string
		paths []path
		req   string
		want  path
	}{
		{"/foo/ beats /foo, both Prefix", []path{prefix("/foo"), prefix("/foo/")}, "/foo", prefix("/foo/")},
		{"Exact /foo beats Prefix /foo/ for /foo", []path{prefix("/foo/"), exact("/foo")}, "/foo", exact("/foo")},
		{"Exact /foo/ beats Prefix /foo/ for /foo/", []path{prefix("/foo/"), exact("/foo/")}, "/foo/", exact("/foo/")},
		{"Prefix /foo/ still serves /foo/x", []path{exact("/foo"), prefix("/foo/")}, "/foo/x", prefix("/foo/")},
		{"longer Prefix beats Exact of a shorter path", []path{exact("/a"), prefix("/a/b")}, "/a/b", prefix("/a/b")},
		{"ImplementationSpecific is Prefix, element-wise", []path{prefix("/"), implSpec("/tea")}, "/tea/green", implSpec("/tea")},
		{"ImplementationSpecific is not a string prefix", []path{prefix("/"), implSpec("/tea")}, "/teapot", prefix("/")},
		{"Exact is case-sensitive", []path{prefix("/"), exact("/foo")}, "/FOO", prefix("/")},
		{"Prefix is case-sensitive", []path{prefix("/"), prefix("/foo")}, "/Foo/x", prefix("/")},
		{"query is not part of the path", []path{prefix("/"), exact("/foo")}, "/foo", exact("/foo")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.ingress("ing", "h.example", tc.paths...)
			c := Build(w.in)
			if got := answer(c, "h.example", tc.req); got != tc.want.svc() {
				t.Fatalf("%s answered by %s, want %s", tc.req, got, tc.want.svc())
			}
		})
	}
}

func TestRulesMergeAcrossIngressesOldestWins(t *testing.T) {
	w := newWorld()
	w.ingress("old", "cafe.example.com", prefix("/tea"))
	young := w.ingress("young", "cafe.example.com", prefix("/coffee"))
	// The same path and type again: the oldest Ingress keeps it.
	young.Spec.Rules[0].HTTP.Paths = append(young.Spec.Rules[0].HTTP.Paths, networkingv1.HTTPIngressPath{
		Path: "/tea", PathType: ptr(networkingv1.PathTypePrefix), Backend: backend("prefix-coffee")})
	c := Build(w.in)
	if got := answer(c, "cafe.example.com", "/tea"); got != "prefix-tea" {
		t.Errorf("/tea answered by %s, want the oldest Ingress's prefix-tea", got)
	}
	if got := answer(c, "cafe.example.com", "/coffee"); got != "prefix-coffee" {
		t.Errorf("/coffee answered by %s, want prefix-coffee (rules merged)", got)
	}
	if len(c.Problems) != 1 || !strings.Contains(c.Problems[0], `already served by ingress "default/old"`) {
		t.Errorf("problems = %q, want one about the duplicate path", c.Problems)
	}
}

func TestDefaultBackends(t *testing.T) {
	w := newWorld()
	w.service("default", "fallback")
	w.service("default", "site-default")
	catchAll := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "catch-all"},
		Spec: networkingv1.IngressSpec{DefaultBackend: ptr(backend("fallback"))}}
	w.in.Ingresses = append(w.in.Ingresses, catchAll)
	site := w.ingress("site", "site.example", prefix("/app"))
	site.Spec.DefaultBackend = ptr(backend("site-default"))
	w.ingress("plain", "plain.example", prefix("/app"))
	c := Build(w.in)
	for _, tc := range []struct{ host, path, want string }{
		{"unknown.example", "/", "fallback"},             // an Ingress with only a defaultBackend catches all
		{"site.example", "/app", "prefix-app"},           // rules first
		{"site.example", "/other", "site-default"},       // then the Ingress's own defaultBackend
		{"plain.example", "/other", "404"},               // else the built-in 404
		{"unknown.example", "/app/x", "fallback"},        // rules of named hosts do not leak
		{"PLAIN.example", "/app", "fallback"},            // Server() expects a lowercased host
		{"plain.example", "/app/more", "prefix-app"},     // prefix
		{"plain.example", "/application", "404"},         // not a string prefix
		{"site.example", "/application", "site-default"}, // the default backend answers
	} {
		if got := answer(c, tc.host, tc.path); got != tc.want {
			t.Errorf("%s%s answered by %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}
}

func TestBackendProblems(t *testing.T) {
	w := newWorld()
	ing := w.ingress("ing", "h.example", prefix("/ok"))
	rule := &ing.Spec.Rules[0]
	rule.HTTP.Paths = append(rule.HTTP.Paths,
		networkingv1.HTTPIngressPath{Path: "/missing", PathType: ptr(networkingv1.PathTypePrefix), Backend: backend("nope")},
		networkingv1.HTTPIngressPath{Path: "/badport", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "prefix-ok", Port: networkingv1.ServiceBackendPort{Number: 81}}}},
		networkingv1.HTTPIngressPath{Path: "/byname", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "prefix-ok", Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
		networkingv1.HTTPIngressPath{Path: "/bucket", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
			Resource: &corev1.TypedLocalObjectReference{APIGroup: ptr("k8s.example.com"), Kind: "StorageBucket", Name: "assets"}}},
	)
	c := Build(w.in)
	for _, tc := range []struct{ path, want string }{
		{"/ok", "prefix-ok"}, {"/missing", "503"}, {"/badport", "503"}, {"/byname", "prefix-ok"}, {"/bucket", "404"},
	} {
		if got := answer(c, "h.example", tc.path); got != tc.want {
			t.Errorf("%s answered by %s, want %s", tc.path, got, tc.want)
		}
	}
	byName := c.Server("h.example").Match("/byname").Upstream
	if byName.Name != "default-prefix-ok-http" || len(byName.Endpoints) != 1 {
		t.Errorf("upstream by port name = %+v", byName)
	}
	if len(c.Problems) != 2 {
		t.Errorf("problems = %q, want the missing service and the missing port", c.Problems)
	}
}

func TestReadyEndpoints(t *testing.T) {
	e := func(ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{
			Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)}}
	}
	slice := func(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
			Ports:     []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}, {Name: ptr("metrics"), Port: ptr(int32(9090))}},
			Endpoints: eps}
	}
	got := readyEndpoints([]*discoveryv1.EndpointSlice{
		slice(e("10.244.1.3", true, true, false), e("10.244.1.2", false, false, false)),
		slice(e("10.244.2.9", false, true, true), e("10.244.1.3", true, true, false)),
	}, "http")
	if fmt.Sprint(got) != "[10.244.1.3:8080]" {
		t.Errorf("ready endpoints = %v, want only the ready one, once", got)
	}
	got = readyEndpoints([]*discoveryv1.EndpointSlice{slice(e("10.244.2.9", false, true, true), e("10.244.1.2", false, false, false))}, "http")
	if fmt.Sprint(got) != "[10.244.2.9:8080]" {
		t.Errorf("with none ready = %v, want the serving terminating one", got)
	}
}

func TestClassFilter(t *testing.T) {
	classes := func(defaultClass bool) []*networkingv1.IngressClass {
		ann := map[string]string{}
		if defaultClass {
			ann[networkingv1.AnnotationIsDefaultIngressClass] = "true"
		}
		return []*networkingv1.IngressClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: ann}, Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: networkingv1.IngressClassSpec{Controller: "example.com/other"}},
		}
	}
	ing := func(className, annotation string) *networkingv1.Ingress {
		i := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if className != "" {
			i.Spec.IngressClassName = &className
		}
		if annotation != "" {
			i.Annotations[AnnotationIngressClass] = annotation
		}
		return i
	}
	for _, tc := range []struct {
		name       string
		ing        *networkingv1.Ingress
		defaultCls bool
		want       bool
	}{
		{"ingressClassName of ours", ing("nginx", ""), false, true},
		{"ingressClassName of another controller", ing("other", ""), true, false},
		{"ingressClassName of no IngressClass", ing("some-invalid-class-name", ""), true, false},
		{"legacy annotation nginx", ing("", "nginx"), false, true},
		{"legacy annotation of another class", ing("", "traefik"), true, false},
		{"no class, ours is the default", ing("", ""), true, true},
		{"no class, no default", ing("", ""), false, false},
	} {
		if got := DefaultClass.Serves(tc.ing, classes(tc.defaultCls)); got != tc.want {
			t.Errorf("%s: serves = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/tea", "/tea", true},
		{"", "/", true},
		{"/tea/../coffee", "/coffee", true},
		{"/tea/%2e%2e/coffee", "/coffee", true},
		{"//tea///green", "/tea/green", true},
		{"/tea/./", "/tea/", true},
		{"/t%65a", "/tea", true},
		{"/..", "", false},
		{"/a/%zz", "", false},
		{"/a%00b", "", false},
		{"/.well-known/acme", "/.well-known/acme", true},
	} {
		got, ok := CleanPath(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
