package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A backend that names itself and echoes what it received.
func echo(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host=%s uri=%s x-env=%s", name, r.Host, r.RequestURI, r.Header.Get("X-Env"))
	}))
	t.Cleanup(s.Close)
	return s
}

// svcWithSlice is a Service on port 8080 whose one EndpointSlice points at
// srv, or at ip on srv's port when ip is given.
func svcWithSlice(name string, srv *httptest.Server, ip ...string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	if len(ip) > 0 {
		host = ip[0]
	}
	var p int32
	fmt.Sscan(port, &p)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}
	es := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &p}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}}
	return svc, es
}

// The data plane end to end on loopback: a route's match reaches its
// backend with Host and the raw URI unchanged and the header filter
// applied; nothing matching is 404; a missing backend is 500; a redirect
// filter answers 302 with the Location the spec derives.
func TestHandlerServesTheTable(t *testing.T) {
	a := echo(t, "a")
	svcA, esA := svcWithSlice("a", a)
	rt := httpRoute("r", 0, []string{"example.test"},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/a")}, backends: []string{"a"},
			filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Env", Value: "canary"}}}}}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/gone")}, backends: []string{"gone"}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/old")}, filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
			RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Hostname: ptr(gatewayv1.PreciseHostname("new.test"))}}}},
	)
	for i := range rt.Spec.Rules[0].BackendRefs {
		rt.Spec.Rules[0].BackendRefs[i].Port = ptr(gatewayv1.PortNumber(8080))
	}
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA}
	w := World{Services: svcs}
	hosts, _ := IntersectHostnames(nil, rt.Spec.Hostnames)
	table, errs := BuildTable(w, []Attachment{{Route: rt, Hostnames: hosts}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, Ports: map[int32]int32{20000: 80},
		Endpoints: ResolveEndpoints(tables, svcs, map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "default", Name: "a"}: {esA}})}
	gw := httptest.NewServer(Handler(20000, func() *Snapshot { return snap }, nil))
	defer gw.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		host, uri string
		status    int
		body      string
		location  string
	}{
		{"example.test", "/a/b%2Fc?x=1", 200, "a host=example.test uri=/a/b%2Fc?x=1 x-env=canary", ""},
		{"EXAMPLE.test:80", "/a", 200, "a host=EXAMPLE.test:80 uri=/a x-env=canary", ""},
		{"other.test", "/a", 404, "", ""},
		{"example.test", "/nothing", 404, "", ""},
		{"example.test", "/gone", 500, "", ""},
		{"example.test", "/old/page?q=1", 302, "", "http://new.test/old/page?q=1"},
	} {
		req, _ := http.NewRequest("GET", gw.URL+tc.uri, nil)
		req.Host = tc.host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(body) != tc.body) || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s%s: %d %q Location %q; want %d %q Location %q", tc.host, tc.uri, resp.StatusCode, body, resp.Header.Get("Location"), tc.status, tc.body, tc.location)
		}
	}
}
