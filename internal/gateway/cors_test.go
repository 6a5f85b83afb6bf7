package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// allowOrigins as HTTPCORSFilter's doc reads it: a default port, a
// wildcard of one or more labels, "*" alone for any origin.
func TestCORSAllowsOrigins(t *testing.T) {
	c := &CORS{gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com", "http://local:8080"}}}
	for origin, want := range map[string]bool{
		"https://www.foo.com":      true,
		"https://WWW.foo.com:443":  true,
		"http://www.foo.com":       false,
		"https://www.foo.com:8443": false,
		"https://www.bar.com":      true,
		"https://a.b.bar.com":      true,
		"https://bar.com":          false,
		"https://foobar.com":       false,
		"http://local:8080":        true,
		"http://local":             false,
		"":                         false,
		"null":                     false,
	} {
		if got := c.allowed(origin); got != want {
			t.Errorf("origin %q allowed = %v, want %v", origin, got, want)
		}
	}
	any := &CORS{gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"*"}}}
	if !any.allowed("https://foobar.com:12345") {
		t.Error(`"*" does not allow https://foobar.com:12345`)
	}
}

// The data plane answers preflights itself and adds the CORS headers to the
// backend's answers, only for allowed origins; credentials and wildcards
// as the spec says.
func TestHandlerAnswersCORS(t *testing.T) {
	var hits atomic.Int32
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "a")
	}))
	t.Cleanup(a.Close)
	svcA, esA := svcWithSlice("a", a)
	list := &gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com"},
		AllowMethods: []gatewayv1.HTTPMethodWithWildcard{"GET", "OPTIONS"}, AllowHeaders: []gatewayv1.HTTPHeaderName{"x-header-1", "x-header-2"},
		ExposeHeaders: []gatewayv1.HTTPHeaderName{"x-header-3"}, AllowCredentials: ptr(true), MaxAge: 3600}
	wild := &gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"*"}, AllowMethods: []gatewayv1.HTTPMethodWithWildcard{"*"},
		AllowHeaders: []gatewayv1.HTTPHeaderName{"*"}, ExposeHeaders: []gatewayv1.HTTPHeaderName{"*"}, AllowCredentials: ptr(true)}
	rt := httpRoute("r", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/list")}, backends: []string{"a"},
			filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS, CORS: list}}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/wild")}, backends: []string{"a"},
			filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS, CORS: wild}}},
	)
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA}
	table, errs := BuildTable(World{Services: svcs}, []Attachment{{Route: rt}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, Endpoints: ResolveEndpoints(tables, svcs,
		map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "default", Name: "a"}: {esA}})}
	gw := httptest.NewServer(Handler(20000, func() *Snapshot { return snap }, nil))
	defer gw.Close()
	for _, tc := range []struct {
		name, method, path string
		req                map[string]string
		status             int
		want               map[string]string // "" is absent
		backend            bool
	}{
		{"preflight, listed origin", "OPTIONS", "/list", map[string]string{"Origin": "https://x.y.bar.com", "Access-Control-Request-Method": "GET",
			"Access-Control-Request-Headers": "x-header-1"}, 204, map[string]string{"Access-Control-Allow-Origin": "https://x.y.bar.com",
			"Access-Control-Allow-Methods": "GET, OPTIONS", "Access-Control-Allow-Headers": "x-header-1, x-header-2",
			"Access-Control-Expose-Headers": "x-header-3", "Access-Control-Max-Age": "3600", "Access-Control-Allow-Credentials": "true"}, false},
		{"preflight, other origin", "OPTIONS", "/list", map[string]string{"Origin": "https://foobar.com", "Access-Control-Request-Method": "GET"},
			204, map[string]string{"Access-Control-Allow-Origin": "", "Access-Control-Allow-Methods": ""}, false},
		{"preflight, wildcards with credentials echo the request", "OPTIONS", "/wild", map[string]string{"Origin": "https://o.test",
			"Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x-a, x-b"}, 204,
			map[string]string{"Access-Control-Allow-Origin": "https://o.test", "Access-Control-Allow-Methods": "PUT",
				"Access-Control-Allow-Headers": "x-a, x-b", "Access-Control-Expose-Headers": "", "Access-Control-Max-Age": "5"}, false},
		{"request, listed origin", "GET", "/list", map[string]string{"Origin": "https://www.foo.com"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "https://www.foo.com", "Access-Control-Allow-Credentials": "true",
				"Access-Control-Expose-Headers": "x-header-3", "Access-Control-Allow-Methods": ""}, true},
		{"request, other origin", "GET", "/list", map[string]string{"Origin": "https://foobar.com"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "", "Access-Control-Allow-Credentials": ""}, true},
		{"OPTIONS that is no preflight goes to the backend", "OPTIONS", "/list", map[string]string{"Origin": "https://www.foo.com"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "https://www.foo.com"}, true},
	} {
		req, _ := http.NewRequest(tc.method, gw.URL+tc.path, nil)
		for k, v := range tc.req {
			req.Header.Set(k, v)
		}
		before := hits.Load()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		for k, v := range tc.want {
			if got := resp.Header.Values(k); (v == "" && len(got) != 0) || (v != "" && (len(got) != 1 || got[0] != v)) {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, v)
			}
		}
		if (hits.Load() > before) != tc.backend {
			t.Errorf("%s: backend reached = %v, want %v", tc.name, hits.Load() > before, tc.backend)
		}
	}
}
