package gateway

import (
	"bytes"
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

func mirrorFilter(ns, name string) gatewayv1.HTTPRouteFilter {
	ref := gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr(gatewayv1.PortNumber(8080))}
	if ns != "" {
		ref.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: ref}}
}

var (
	authFilter = gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterExternalAuth, ExternalAuth: &gatewayv1.HTTPExternalAuthFilter{}}
	extFilter  = gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Group: "networking.example.net", Kind: "MyFilter", Name: "f"}}
)

// A filter the data plane cannot honour is reported on the route's parent,
// with the field it is in: a type it does not implement is Accepted=False
// (UnsupportedValue), an ExtensionRef (minikit serves no extension kinds)
// ResolvedRefs=False (InvalidKind); a mirror's backendRef resolves as a
// backendRef does. The route stays attached either way, so its other rules
// are served.
func TestUnhonouredFilterStatus(t *testing.T) {
	edge := gw("edge", listener("http", 80, gatewayv1.HTTPProtocolType, ""))
	withFilters := func(rule int, fs ...gatewayv1.HTTPRouteFilter) *gatewayv1.HTTPRoute {
		rt := route("infra", nil, []parent{{name: "edge"}}, backend{name: "web"})
		rt.Spec.Rules = append(rt.Spec.Rules, *rt.Spec.Rules[0].DeepCopy()) // a second, valid rule
		rt.Spec.Rules[rule].Filters = fs
		return rt
	}
	onBackend := withFilters(0)
	onBackend.Spec.Rules[1].BackendRefs[0].Filters = []gatewayv1.HTTPRouteFilter{mirrorFilter("", "web")}
	for _, tc := range []struct {
		name               string
		route              *gatewayv1.HTTPRoute
		accepted, resolved string // "True" or the reason of False
		message            string // in the False condition's message
	}{
		{"ExternalAuth", withFilters(1, authFilter), "UnsupportedValue", "True", `spec.rules[1].filters[0].type: Unsupported value: "ExternalAuth"`},
		{"a type of a newer API", withFilters(0, gatewayv1.HTTPRouteFilter{Type: "Compress"}), "UnsupportedValue", "True", `"Compress"`},
		{"RequestMirror on a backendRef", onBackend, "UnsupportedValue", "True", `spec.rules[1].backendRefs[0].filters[0].type`},
		{"ExtensionRef", withFilters(1, extFilter), "True", "InvalidKind",
			`spec.rules[1].filters[0].extensionRef: networking.example.net/MyFilter "f"`},
		{"mirror to a Service", withFilters(0, mirrorFilter("", "web")), "True", "True", ""},
		{"mirror to a missing Service", withFilters(0, mirrorFilter("", "gone")), "True", "BackendNotFound",
			"spec.rules[0].filters[0].requestMirror.backendRef Service infra/gone not found"},
		{"mirror across namespaces without a grant", withFilters(0, mirrorFilter("app", "web")), "True", "RefNotPermitted", "app/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Compute(World{Gateways: []*gatewayv1.Gateway{edge}, HTTPRoutes: []*gatewayv1.HTTPRoute{tc.route},
				Services: services("infra/web", "app/web"), Namespaces: namespaces})
			ps := r.Parents[types.NamespacedName{Namespace: "infra", Name: "r"}]
			if len(ps) != 1 {
				t.Fatalf("parents: %+v", ps)
			}
			for _, c := range []struct{ typ, want string }{{"Accepted", tc.accepted}, {"ResolvedRefs", tc.resolved}} {
				got := findCond(ps[0].Conditions, c.typ)
				if got == nil {
					t.Fatalf("no %s condition", c.typ)
				}
				reason := "True"
				if got.Status != metav1.ConditionTrue {
					reason = got.Reason
					if !strings.Contains(got.Message, tc.message) {
						t.Errorf("%s message %q does not say %q", c.typ, got.Message, tc.message)
					}
				}
				if reason != c.want || got.ObservedGeneration != 7 {
					t.Errorf("%s = %s (%s, generation %d), want %s at 7", c.typ, reason, got.Message, got.ObservedGeneration, c.want)
				}
			}
			if n := len(r.Attached[ListenerKey{types.NamespacedName{Namespace: "infra", Name: "edge"}, "http"}]); n != 1 {
				t.Errorf("%d routes attached, want 1 (the valid rule is still served)", n)
			}
		})
	}
}

// A GRPCRoute's filters go through the same rules: an ExtensionRef on it is
// ResolvedRefs=False, not skipped.
func TestGRPCRouteExtensionRef(t *testing.T) {
	rt := grpcRoute("r", grpcRule("a"))
	rt.Namespace = "infra"
	rt.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "g"}}
	rt.Spec.Rules[0].Filters = []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterExtensionRef, ExtensionRef: extFilter.ExtensionRef}}
	res := Compute(World{Gateways: []*gatewayv1.Gateway{gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, ""))},
		GRPCRoutes: []*gatewayv1.GRPCRoute{rt}, Services: services("infra/a")})
	ps := res.GRPCParents[types.NamespacedName{Namespace: "infra", Name: "r"}]
	if len(ps) != 1 {
		t.Fatalf("parents %+v", ps)
	}
	if c := findCond(ps[0].Conditions, "ResolvedRefs"); c == nil || c.Reason != string(gatewayv1.RouteReasonInvalidKind) {
		t.Errorf("ResolvedRefs %+v, want InvalidKind", c)
	}
}

// A request a rule with an unhonoured filter matches gets 500 and never
// reaches the backend; the route's other rules serve.
func TestHandlerAnswers500ForUnhonouredFilters(t *testing.T) {
	hits := make(chan string, 10)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		io.WriteString(w, "a")
	}))
	t.Cleanup(a.Close)
	svcA, esA := svcWithSlice("a", a)
	rt := httpRoute("r", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/ok")}, backends: []string{"a"}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/auth")}, backends: []string{"a"}, filters: []gatewayv1.HTTPRouteFilter{authFilter}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/ext")}, backends: []string{"a"}, filters: []gatewayv1.HTTPRouteFilter{extFilter}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/unknown")}, backends: []string{"a"}, filters: []gatewayv1.HTTPRouteFilter{{Type: "Compress"}}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/on-backend")}, backends: []string{"a"}},
	)
	rt.Spec.Rules[4].BackendRefs[0].Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS, CORS: &gatewayv1.HTTPCORSFilter{}}}
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
		path   string
		status int
	}{{"/auth", 500}, {"/ext", 500}, {"/unknown", 500}, {"/on-backend", 500}, {"/ok", 200}} {
		resp, err := http.Get(gw.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.path, resp.StatusCode, body, tc.status)
		}
	}
	// The backend saw /ok alone: the 500s never reached it (the channel is
	// read after every answer, so anything sent is in it).
	close(hits)
	var seen []string
	for p := range hits {
		seen = append(seen, p)
	}
	if strings.Join(seen, ",") != "/ok" {
		t.Errorf("backend saw %v, want [/ok]", seen)
	}
}

// RequestMirror sends a copy of the request, as the backend gets it (header
// filter applied, body included), to every mirror; the client's answer is
// the backend's, whether a mirror answers, hangs or is down.
func TestHandlerMirrors(t *testing.T) {
	type seen struct{ name, uri, header, body string }
	got := make(chan seen, 10)
	recorder := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{name, r.RequestURI, r.Header.Get("X-Env"), string(b)}
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		return s
	}
	primary, m1, m2 := recorder("primary"), recorder("m1"), recorder("m2")
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // runs before hung.Close
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	svcs := map[types.NamespacedName]*corev1.Service{}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for name, srv := range map[string]*httptest.Server{"primary": primary, "m1": m1, "m2": m2, "hung": hung, "down": down} {
		svc, es := svcWithSlice(name, srv)
		svcs[types.NamespacedName{Namespace: "default", Name: name}] = svc
		slices[types.NamespacedName{Namespace: "default", Name: name}] = []*discoveryv1.EndpointSlice{es}
	}
	never := mirrorFilter("", "m2")
	never.RequestMirror.Percent = ptr(int32(0))
	rt := httpRoute("r", 0, nil,
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/m")}, backends: []string{"primary"}, filters: []gatewayv1.HTTPRouteFilter{
			{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Env", Value: "mirrored"}}}},
			mirrorFilter("", "m1"), mirrorFilter("", "m2"), mirrorFilter("", "missing")}},
		rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/bad-mirrors")}, backends: []string{"primary"}, filters: []gatewayv1.HTTPRouteFilter{
			mirrorFilter("", "hung"), mirrorFilter("", "down"), never}},
	)
	table, errs := BuildTable(World{Services: svcs}, []Attachment{{Route: rt}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, Endpoints: ResolveEndpoints(tables, svcs, slices)}
	gw := httptest.NewServer(Handler(20000, func() *Snapshot { return snap }, nil))
	defer gw.Close()

	post := func(path string) string {
		resp, err := http.Post(gw.URL+path, "text/plain", bytes.NewReader([]byte("payload")))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "primary" {
			t.Fatalf("%s: %d %q, want 200 from primary", path, resp.StatusCode, b)
		}
		return string(b)
	}
	post("/m/x?id=1")
	want := map[string]bool{"primary": true, "m1": true, "m2": true}
	for len(want) > 0 {
		select {
		case s := <-got:
			if !want[s.name] || s.uri != "/m/x?id=1" || s.header != "mirrored" || s.body != "payload" {
				t.Fatalf("%+v: want one request each to %v with uri /m/x?id=1, X-Env mirrored, body payload", s, want)
			}
			delete(want, s.name)
		case <-time.After(30 * time.Second):
			t.Fatalf("no request reached %v", want)
		}
	}
	// A hung mirror, a dead one and one sampled at 0%: the client is served
	// by the backend, and only the backend (m2's 0% draws nothing).
	for range 5 {
		post("/bad-mirrors")
		if s := <-got; s.name != "primary" {
			t.Fatalf("%+v reached, want primary", s)
		}
	}
	select {
	case s := <-got:
		t.Errorf("%+v reached after the answers, want nothing more", s)
	default:
	}
}

// A mirror's share: percent, fraction (denominator 100 by default), or all.
func TestMirrorSampling(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        gatewayv1.HTTPRequestMirrorFilter
		num, den int32
	}{
		{"neither", gatewayv1.HTTPRequestMirrorFilter{}, 100, 100},
		{"percent", gatewayv1.HTTPRequestMirrorFilter{Percent: ptr(int32(20))}, 20, 100},
		{"fraction", gatewayv1.HTTPRequestMirrorFilter{Fraction: &gatewayv1.Fraction{Numerator: 25, Denominator: ptr(int32(50))}}, 25, 50},
		{"fraction of 100", gatewayv1.HTTPRequestMirrorFilter{Fraction: &gatewayv1.Fraction{Numerator: 3}}, 3, 100},
	} {
		m := mirrorOf(World{}, httpRoute("r", 0, nil), &tc.f)
		n := int32(0)
		for i := range m.Denominator {
			if m.Sampled(i) {
				n++
			}
		}
		if m.Denominator != tc.den || n != tc.num {
			t.Errorf("%s: %d of %d draws mirrored, want %d of %d", tc.name, n, m.Denominator, tc.num, tc.den)
		}
	}
}
