package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// The URLRewrite filter changes the Host and path the backend sees (the
// query kept); ResponseHeaderModifier edits the backend's response and a
// redirect's; a redirect's path modifier rewrites the Location's path.
func TestHandlerRewritesAndModifiesResponses(t *testing.T) {
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "set-by-backend")
		w.Header().Set("X-Drop", "x")
		fmt.Fprintf(w, "host=%s uri=%s", r.Host, r.RequestURI)
	}))
	t.Cleanup(a.Close)
	svcA, esA := svcWithSlice("a", a)
	respMod := gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier,
		ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Backend", Value: "overwritten"}},
			Add: []gatewayv1.HTTPHeader{{Name: "X-Added", Value: "1"}}, Remove: []string{"X-Drop"}}}
	rt := httpRoute("r", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/pre")}, backends: []string{"a"},
			filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &gatewayv1.HTTPURLRewriteFilter{
				Hostname: ptr(gatewayv1.PreciseHostname("rewritten.test")),
				Path:     &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/new")}}}, respMod}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/full")}, backends: []string{"a"},
			filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &gatewayv1.HTTPURLRewriteFilter{
				Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/one")}}}}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/old")}, filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
			RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr(301),
				Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/moved")}}}, respMod}},
	)
	for _, ri := range []int{0, 1} {
		rt.Spec.Rules[ri].BackendRefs[0].Port = ptr(gatewayv1.PortNumber(8080))
	}
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA}
	table, errs := BuildTable(World{Services: svcs}, []Attachment{{Route: rt}})
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
		uri            string
		status         int
		body, location string
		backend, added string
		drop           string
	}{
		{"/pre/x?q=1", 200, "host=rewritten.test uri=/new/x?q=1", "", "overwritten", "1", ""},
		{"/full/a/b", 200, "host=example.test uri=/one", "", "set-by-backend", "", "x"},
		{"/old/page?q=1", 301, "", "http://example.test/moved/page?q=1", "overwritten", "1", ""},
	} {
		req, _ := http.NewRequest("GET", gw.URL+tc.uri, nil)
		req.Host = "example.test"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(body) != tc.body) || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s: %d %q Location %q; want %d %q Location %q", tc.uri, resp.StatusCode, body, resp.Header.Get("Location"), tc.status, tc.body, tc.location)
		}
		if tc.status == 200 && (resp.Header.Get("X-Backend") != tc.backend || resp.Header.Get("X-Added") != tc.added || resp.Header.Get("X-Drop") != tc.drop) {
			t.Errorf("%s: response headers %v", tc.uri, resp.Header)
		}
		if tc.status == 301 && (resp.Header.Get("X-Backend") != tc.backend || resp.Header.Get("X-Added") != tc.added) {
			t.Errorf("%s: redirect's headers %v", tc.uri, resp.Header)
		}
	}
}

// A rule's timeout is the smaller of timeouts.request and
// timeouts.backendRequest ("0s" disables either); a backend that does not
// answer within it gets the client a 504.
func TestHandlerTimesOut(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hang") != "" {
			<-r.Context().Done() // until the proxy gives up
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(hang.Close)
	svc, es := svcWithSlice("a", hang)
	dur := func(s string) *gatewayv1.Duration { d := gatewayv1.Duration(s); return &d }
	rt := httpRoute("r", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/t")}, backends: []string{"a"}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/off")}, backends: []string{"a"}})
	rt.Spec.Rules[0].Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: dur("10s"), BackendRequest: dur("100ms")}
	rt.Spec.Rules[1].Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: dur("0s")}
	for ri := range rt.Spec.Rules {
		rt.Spec.Rules[ri].BackendRefs[0].Port = ptr(gatewayv1.PortNumber(8080))
	}
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svc}
	table, errs := BuildTable(World{Services: svcs}, []Attachment{{Route: rt}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := table.Route(Request{Path: "/t"}).Timeout; got != 100*time.Millisecond {
		t.Errorf("timeout of request 10s, backendRequest 100ms: %s", got)
	}
	if got := table.Route(Request{Path: "/off"}).Timeout; got != 0 {
		t.Errorf("timeout of request 0s: %s", got)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables,
		Endpoints: ResolveEndpoints(tables, svcs, map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "default", Name: "a"}: {es}})}
	gw := httptest.NewServer(Handler(20000, func() *Snapshot { return snap }, nil))
	defer gw.Close()
	for uri, want := range map[string]int{"/t": 200, "/t?hang=1": 504, "/off": 200} {
		resp, err := http.Get(gw.URL + uri)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", uri, resp.StatusCode, want)
		}
	}
}

// A backendRef's own header filters apply only to the requests sent to
// that backend, and to their responses.
func TestHandlerAppliesBackendFilters(t *testing.T) {
	a, b := echo(t, "a"), echo(t, "b")
	svcA, esA := svcWithSlice("a", a)
	svcB, esB := svcWithSlice("b", b)
	rt := httpRoute("r", 0, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/")}, backends: []string{"a", "b"}})
	for i, name := range []string{"a", "b"} {
		br := &rt.Spec.Rules[0].BackendRefs[i]
		br.Port = ptr(gatewayv1.PortNumber(8080))
		br.Filters = []gatewayv1.HTTPRouteFilter{
			{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Env", Value: "to-" + name}}}},
			{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier,
				ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-From", Value: name}}}},
		}
	}
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA, {Namespace: "default", Name: "b"}: svcB}
	table, errs := BuildTable(World{Services: svcs}, []Attachment{{Route: rt}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, Endpoints: ResolveEndpoints(tables, svcs, map[types.NamespacedName][]*discoveryv1.EndpointSlice{
		{Namespace: "default", Name: "a"}: {esA}, {Namespace: "default", Name: "b"}: {esB}})}
	gw := httptest.NewServer(Handler(20000, func() *Snapshot { return snap }, nil))
	defer gw.Close()
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) {
		resp, err := http.Get(gw.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name, _, _ := strings.Cut(string(body), " ")
		if want := name + " host=" + strings.TrimPrefix(gw.URL, "http://") + " uri=/x x-env=to-" + name; string(body) != want || resp.Header.Get("X-From") != name {
			t.Fatalf("%q X-From %q; want %q X-From %q", body, resp.Header.Get("X-From"), want, name)
		}
		seen[name] = true
	}
	if len(seen) < 2 {
		t.Errorf("only backends %v answered", seen)
	}
}
