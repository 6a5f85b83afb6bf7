package gateway

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// rrule is a rule in shorthand: its matches and its backends' names.
type rrule struct {
	matches  []gatewayv1.HTTPRouteMatch
	backends []string
	filters  []gatewayv1.HTTPRouteFilter
}

func httpRoute(name string, age int, hosts []string, rules ...rrule) *gatewayv1.HTTPRoute {
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0).Add(time.Duration(age) * time.Hour))}}
	for _, h := range hosts {
		rt.Spec.Hostnames = append(rt.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	for _, r := range rules {
		rule := gatewayv1.HTTPRouteRule{Matches: r.matches, Filters: r.filters}
		for _, b := range r.backends {
			rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(b), Port: ptr(gatewayv1.PortNumber(8080))}}})
		}
		rt.Spec.Rules = append(rt.Spec.Rules, rule)
	}
	return rt
}

func pm(t gatewayv1.PathMatchType, v string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &t, Value: &v}}
}

func withHeaders(m gatewayv1.HTTPRouteMatch, kv ...string) gatewayv1.HTTPRouteMatch {
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(kv[i]), Value: kv[i+1]})
	}
	return m
}

func withQuery(m gatewayv1.HTTPRouteMatch, kv ...string) gatewayv1.HTTPRouteMatch {
	for i := 0; i < len(kv); i += 2 {
		m.QueryParams = append(m.QueryParams, gatewayv1.HTTPQueryParamMatch{Name: gatewayv1.HTTPHeaderName(kv[i]), Value: kv[i+1]})
	}
	return m
}

func withMethod(m gatewayv1.HTTPRouteMatch, method string) gatewayv1.HTTPRouteMatch {
	m.Method = ptr(gatewayv1.HTTPMethod(method))
	return m
}

func prefix(v string) gatewayv1.HTTPRouteMatch { return pm(gatewayv1.PathMatchPathPrefix, v) }

// Which backend serves which request on one listener, per the spec's
// precedence; "404" when no rule matches.
func TestTableRoutesByPrecedence(t *testing.T) {
	routes := []*gatewayv1.HTTPRoute{
		httpRoute("any", 0, nil,
			rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/")}, backends: []string{"root"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/v2")}, backends: []string{"v2"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{pm(gatewayv1.PathMatchExact, "/v2/exact")}, backends: []string{"exact"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{withHeaders(prefix("/v2"), "version", "two")}, backends: []string{"v2-header"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{withHeaders(prefix("/v2"), "version", "two", "color", "blue")}, backends: []string{"v2-two-headers"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{withMethod(prefix("/v2"), "POST")}, backends: []string{"v2-post"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{withQuery(prefix("/q"), "animal", "whale")}, backends: []string{"whale"}},
			rrule{matches: []gatewayv1.HTTPRouteMatch{pm(gatewayv1.PathMatchRegularExpression, "/re/[0-9]+")}, backends: []string{"regex"}},
		),
		// An older route with the same match wins the tie.
		httpRoute("old", -1, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/tie")}, backends: []string{"old"}}),
		httpRoute("new", 1, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/tie")}, backends: []string{"new"}}),
		// Hostname specificity comes before path length.
		httpRoute("wild", 0, []string{"*.example.com"}, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/")}, backends: []string{"wild"}}),
		httpRoute("exact-host", 0, []string{"foo.example.com"}, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/only")}, backends: []string{"foo"}}),
	}
	var att []Attachment
	for _, r := range routes {
		hosts, _ := IntersectHostnames(nil, r.Spec.Hostnames)
		att = append(att, Attachment{Route: r, Hostnames: hosts})
	}
	table, errs := BuildTable(World{Services: services()}, att)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		host, method, target string
		header               http.Header
		want                 string
	}{
		{"x.test", "GET", "/", nil, "root"},
		{"x.test", "GET", "/v2", nil, "v2"},
		{"x.test", "GET", "/v2/", nil, "v2"},
		{"x.test", "GET", "/v2x", nil, "root"}, // element-wise prefix
		{"x.test", "GET", "/v2/exact", nil, "exact"},
		{"x.test", "GET", "/v2/exact", http.Header{"Version": {"two"}}, "exact"}, // Exact before any header count
		{"x.test", "GET", "/v2/a", http.Header{"Version": {"two"}}, "v2-header"},
		{"x.test", "GET", "/v2/a", http.Header{"Version": {"two"}, "Color": {"blue"}}, "v2-two-headers"},
		{"x.test", "POST", "/v2/a", http.Header{"Version": {"two"}}, "v2-post"}, // method before headers
		{"x.test", "GET", "/q?animal=whale", nil, "whale"},
		{"x.test", "GET", "/q?animal=dolphin", nil, "root"},
		{"x.test", "GET", "/re/123", nil, "regex"},
		{"x.test", "GET", "/re/abc", nil, "root"},
		{"x.test", "GET", "/tie", nil, "old"},
		{"bar.example.com", "GET", "/v2/exact", nil, "wild"}, // a wildcard host beats any host
		{"foo.example.com", "GET", "/only", nil, "foo"},
		{"foo.example.com", "GET", "/other", nil, "wild"}, // precedence orders rules, it does not exclude the wildcard route
		{"example.com", "GET", "/only", nil, "root"},
	} {
		u, _ := url.Parse(tc.target)
		if tc.header == nil {
			tc.header = http.Header{}
		}
		act := table.Route(Request{Host: tc.host, Path: u.Path, Method: tc.method, Header: tc.header, Query: u.Query()})
		got := "404"
		if act != nil {
			got = act.Backends[0].Service.Name
		}
		if got != tc.want {
			t.Errorf("%s %s%s %v → %s, want %s", tc.method, tc.host, tc.target, tc.header, got, tc.want)
		}
	}
}

// Weighted backends, and the 500s the spec asks for: a missing backend's
// share, a rule with no backend.
func TestActionPicksByWeightAnd500s(t *testing.T) {
	rt := httpRoute("w", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/split")}, backends: []string{"a", "b", "gone"}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/none")}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/redirect")}, filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
			RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Hostname: ptr(gatewayv1.PreciseHostname("example.org")), StatusCode: ptr(302)}}}},
	)
	rt.Spec.Rules[0].BackendRefs[0].Weight = ptr(int32(3))
	rt.Spec.Rules[0].BackendRefs[1].Weight = ptr(int32(1))
	table, _ := BuildTable(World{Services: services("default/a", "default/b")}, []Attachment{{Route: rt}})
	split := table.Route(Request{Path: "/split", Method: "GET", Header: http.Header{}})
	if split.TotalWeight() != 5 {
		t.Fatalf("total weight %d, want 5", split.TotalWeight())
	}
	counts := map[string]int{}
	for n := range split.TotalWeight() {
		b, ok := split.Pick(n)
		if !ok {
			counts["500"]++
			continue
		}
		counts[b.Service.Name]++
	}
	if counts["a"] != 3 || counts["b"] != 1 || counts["500"] != 1 {
		t.Errorf("shares %v, want a:3 b:1 500:1", counts)
	}
	none := table.Route(Request{Path: "/none", Method: "GET", Header: http.Header{}})
	if _, ok := none.Pick(0); ok || none.TotalWeight() != 0 || none.Redirect != nil {
		t.Errorf("a rule without backends must answer 500: %+v", none)
	}
	red := table.Route(Request{Path: "/redirect", Method: "GET", Header: http.Header{}})
	if red.Redirect == nil || string(*red.Redirect.Hostname) != "example.org" {
		t.Errorf("redirect rule: %+v", red)
	}
	if got := table.Route(Request{Path: "/nothing", Method: "GET", Header: http.Header{}}); got != nil {
		t.Errorf("no match must be nil (404), got %+v", got)
	}
	if split.Route != (types.NamespacedName{Namespace: "default", Name: "w"}) {
		t.Errorf("action route %v", split.Route)
	}
}

func TestBuildTableReportsBadRegex(t *testing.T) {
	rt := httpRoute("bad", 0, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{pm(gatewayv1.PathMatchRegularExpression, "/(")}, backends: []string{"a"}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/ok")}, backends: []string{"a"}})
	table, errs := BuildTable(World{Services: services("default/a")}, []Attachment{{Route: rt}})
	if len(errs) != 1 {
		t.Fatalf("errors %v, want one naming the bad expression", errs)
	}
	if table.Route(Request{Path: "/ok", Method: "GET", Header: http.Header{}}) == nil {
		t.Error("the valid rule must still be served")
	}
}

// ModifyPath follows the table in HTTPPathModifier's doc for
// ReplacePrefixMatch, and ReplaceFullPath replaces the whole path.
func TestModifyPath(t *testing.T) {
	prefixMod := func(v string) *gatewayv1.HTTPPathModifier {
		return &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr(v)}
	}
	for _, tc := range []struct{ path, prefix, repl, want string }{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		{"/any/thing", "/", "/pre", "/pre/any/thing"},
	} {
		rt := httpRoute("r", 0, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix(tc.prefix)}})
		table, _ := BuildTable(World{}, []Attachment{{Route: rt}})
		act := table.Route(Request{Path: tc.path})
		if act == nil {
			t.Fatalf("%s does not match prefix %s", tc.path, tc.prefix)
		}
		if got := act.ModifyPath(tc.path, prefixMod(tc.repl)); got != tc.want {
			t.Errorf("%s, prefix %s, replacePrefixMatch %q: %s, want %s", tc.path, tc.prefix, tc.repl, got, tc.want)
		}
	}
	act := &Action{Prefix: "/foo"}
	full := &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/one")}
	if got := act.ModifyPath("/foo/bar/baz", full); got != "/one" {
		t.Errorf("ReplaceFullPath /one: %s", got)
	}
}
