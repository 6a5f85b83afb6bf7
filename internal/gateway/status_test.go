package gateway

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func listener(name string, port int32, proto gatewayv1.ProtocolType, host string, mod ...func(*gatewayv1.Listener)) gatewayv1.Listener {
	l := gatewayv1.Listener{Name: gatewayv1.SectionName(name), Port: gatewayv1.PortNumber(port), Protocol: proto}
	if host != "" {
		l.Hostname = ptr(gatewayv1.Hostname(host))
	}
	for _, m := range mod {
		m(&l)
	}
	return l
}

func from(f gatewayv1.FromNamespaces, sel map[string]string) func(*gatewayv1.Listener) {
	return func(l *gatewayv1.Listener) {
		l.AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &f}}
		if sel != nil {
			l.AllowedRoutes.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: sel}
		}
	}
}

func kinds(ks ...string) func(*gatewayv1.Listener) {
	return func(l *gatewayv1.Listener) {
		if l.AllowedRoutes == nil {
			l.AllowedRoutes = &gatewayv1.AllowedRoutes{}
		}
		for _, k := range ks {
			l.AllowedRoutes.Kinds = append(l.AllowedRoutes.Kinds, gatewayv1.RouteGroupKind{Kind: gatewayv1.Kind(k)})
		}
	}
}

func gw(name string, ls ...gatewayv1.Listener) *gatewayv1.Gateway {
	return &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra", Generation: 3},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: ClassName, Listeners: ls}}
}

type parent struct {
	name, ns, section string
}

type backend struct {
	name, ns, group, kind string
}

func route(ns string, hosts []string, parents []parent, backends ...backend) *gatewayv1.HTTPRoute {
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns, Generation: 7}}
	for _, h := range hosts {
		rt.Spec.Hostnames = append(rt.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	for _, p := range parents {
		pr := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(p.name)}
		if p.ns != "" {
			pr.Namespace = ptr(gatewayv1.Namespace(p.ns))
		}
		if p.section != "" {
			pr.SectionName = ptr(gatewayv1.SectionName(p.section))
		}
		rt.Spec.ParentRefs = append(rt.Spec.ParentRefs, pr)
	}
	var rule gatewayv1.HTTPRouteRule
	for _, b := range backends {
		ref := gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(b.name), Port: ptr(gatewayv1.PortNumber(8080))}
		if b.ns != "" {
			ref.Namespace = ptr(gatewayv1.Namespace(b.ns))
		}
		if b.kind != "" {
			ref.Group, ref.Kind = ptr(gatewayv1.Group(b.group)), ptr(gatewayv1.Kind(b.kind))
		}
		rule.BackendRefs = append(rule.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: ref}})
	}
	rt.Spec.Rules = []gatewayv1.HTTPRouteRule{rule}
	return rt
}

func grant(ns, fromNS, svc string) *gatewayv1.ReferenceGrant {
	g := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: groupGateway, Kind: kindHTTP, Namespace: gatewayv1.Namespace(fromNS)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: kindService}}}}
	if svc != "" {
		g.Spec.To[0].Name = ptr(gatewayv1.ObjectName(svc))
	}
	return g
}

func services(names ...string) map[types.NamespacedName]*corev1.Service {
	m := map[types.NamespacedName]*corev1.Service{}
	for _, n := range names {
		ns, name, _ := strings.Cut(n, "/")
		m[types.NamespacedName{Namespace: ns, Name: name}] = &corev1.Service{}
	}
	return m
}

var namespaces = map[string]map[string]string{"infra": {}, "app": {"team": "app"}, "web": {"team": "web"}}

// The route conditions the spec defines, on one Gateway "infra/edge".
func TestRouteParentStatus(t *testing.T) {
	http := func(mod ...func(*gatewayv1.Listener)) gatewayv1.Listener {
		return listener("http", 80, gatewayv1.HTTPProtocolType, "", mod...)
	}
	edge := parent{name: "edge", ns: "infra"}
	for _, tc := range []struct {
		name     string
		gateway  *gatewayv1.Gateway
		route    *gatewayv1.HTTPRoute
		grants   []*gatewayv1.ReferenceGrant
		accepted string // "True" or the reason of False
		resolved string
		attached int32 // on listener "http"
	}{
		{"same namespace", gw("edge", http()), route("infra", nil, []parent{{name: "edge"}}, backend{name: "web"}), nil, "True", "True", 1},
		{"other namespace, listener allows Same", gw("edge", http()), route("app", nil, []parent{edge}, backend{name: "web"}), nil,
			"NotAllowedByListeners", "True", 0},
		{"other namespace, listener allows All", gw("edge", http(from(gatewayv1.NamespacesFromAll, nil))),
			route("app", nil, []parent{edge}, backend{name: "db"}), nil, "True", "BackendNotFound", 1},
		{"namespace selector matches", gw("edge", http(from(gatewayv1.NamespacesFromSelector, map[string]string{"team": "app"}))),
			route("app", nil, []parent{edge}, backend{name: "web", ns: "infra"}), []*gatewayv1.ReferenceGrant{grant("infra", "app", "web")}, "True", "True", 1},
		{"namespace selector does not match", gw("edge", http(from(gatewayv1.NamespacesFromSelector, map[string]string{"team": "web"}))),
			route("app", nil, []parent{edge}), nil, "NotAllowedByListeners", "True", 0},
		{"listener allows another kind only", gw("edge", http(kinds("GRPCRoute"))), route("infra", nil, []parent{edge}), nil,
			"NotAllowedByListeners", "True", 0},
		{"sectionName of no listener", gw("edge", http()), route("infra", nil, []parent{{name: "edge", section: "https"}}), nil,
			"NoMatchingParent", "True", 0},
		{"hostname intersects", gw("edge", listener("http", 80, gatewayv1.HTTPProtocolType, "*.example.com")),
			route("infra", []string{"foo.example.com", "other.org"}, []parent{edge}), nil, "True", "True", 1},
		{"no hostname intersects", gw("edge", listener("http", 80, gatewayv1.HTTPProtocolType, "*.example.com")),
			route("infra", []string{"example.com"}, []parent{edge}), nil, "NoMatchingListenerHostname", "True", 0},
		{"missing Service", gw("edge", http()), route("infra", nil, []parent{edge}, backend{name: "gone"}), nil, "True", "BackendNotFound", 1},
		{"cross-namespace backend without a grant", gw("edge", http()), route("infra", nil, []parent{edge}, backend{name: "web", ns: "app"}),
			nil, "True", "RefNotPermitted", 1},
		{"grant for another Service", gw("edge", http()), route("infra", nil, []parent{edge}, backend{name: "web", ns: "app"}),
			[]*gatewayv1.ReferenceGrant{grant("app", "infra", "other")}, "True", "RefNotPermitted", 1},
		{"grant for every Service", gw("edge", http()), route("infra", nil, []parent{edge}, backend{name: "web", ns: "app"}),
			[]*gatewayv1.ReferenceGrant{grant("app", "infra", "")}, "True", "True", 1},
		{"unknown backend kind", gw("edge", http()), route("infra", nil, []parent{edge}, backend{name: "web", group: "unknown.io", kind: "Thing"}),
			nil, "True", "InvalidKind", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := World{Gateways: []*gatewayv1.Gateway{tc.gateway}, HTTPRoutes: []*gatewayv1.HTTPRoute{tc.route}, Grants: tc.grants,
				Services: services("infra/web", "app/web"), Namespaces: namespaces}
			r := Compute(w)
			ps := r.Parents[types.NamespacedName{Namespace: tc.route.Namespace, Name: "r"}]
			if len(ps) != 1 {
				t.Fatalf("parents: %+v", ps)
			}
			p := ps[0]
			if p.ControllerName != ControllerName || deref(p.ParentRef.Group, "") != groupGateway || deref(p.ParentRef.Kind, "") != kindGateway {
				t.Errorf("parentRef %+v controller %q: want explicit group, kind and controllerName", p.ParentRef, p.ControllerName)
			}
			check := func(typ, want string) {
				c := findCond(p.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				got := "True"
				if c.Status != metav1.ConditionTrue {
					got = c.Reason
				}
				if got != want || c.ObservedGeneration != 7 {
					t.Errorf("%s = %s (%s, observedGeneration %d), want %s at generation 7", typ, got, c.Message, c.ObservedGeneration, want)
				}
			}
			check("Accepted", tc.accepted)
			check("ResolvedRefs", tc.resolved)
			ls := r.Listeners[types.NamespacedName{Namespace: "infra", Name: "edge"}]
			if ls[0].AttachedRoutes != tc.attached {
				t.Errorf("attachedRoutes = %d, want %d", ls[0].AttachedRoutes, tc.attached)
			}
		})
	}
}

// A route whose parent is no Gateway of this controller gets no status from it.
func TestRouteOfAnotherControllerIsLeftAlone(t *testing.T) {
	r := Compute(World{Gateways: []*gatewayv1.Gateway{gw("edge", listener("http", 80, gatewayv1.HTTPProtocolType, ""))},
		HTTPRoutes: []*gatewayv1.HTTPRoute{route("infra", nil, []parent{{name: "theirs"}})}})
	if ps := r.Parents[types.NamespacedName{Namespace: "infra", Name: "r"}]; len(ps) != 0 {
		t.Errorf("parents = %+v, want none", ps)
	}
}

func TestGatewayAndListenerConditions(t *testing.T) {
	type lwant struct {
		accepted, resolved, conflicted string // "True" or the reason of False (Conflicted: "False" or its reason when True)
		kinds                          []string
	}
	for _, tc := range []struct {
		name      string
		gateway   *gatewayv1.Gateway
		accepted  string // Status/Reason
		listeners []lwant
	}{
		{"one HTTP listener", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, "")), "True/Accepted",
			[]lwant{{"True", "True", "False", []string{"HTTPRoute", "GRPCRoute"}}}},
		{"an unsupported protocol beside a valid listener", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, ""),
			listener("quic", 443, "example.com/quic", "")), "True/ListenersNotValid",
			[]lwant{{"True", "True", "False", []string{"HTTPRoute", "GRPCRoute"}}, {"UnsupportedProtocol", "True", "False", nil}}},
		{"only an unsupported protocol", gw("g", listener("quic", 443, "example.com/quic", "")), "False/ListenersNotValid",
			[]lwant{{"UnsupportedProtocol", "True", "False", nil}}},
		{"TCP and UDP listeners", gw("g", listener("tcp", 9000, gatewayv1.TCPProtocolType, ""), listener("udp", 53, gatewayv1.UDPProtocolType, "")),
			"True/Accepted", []lwant{{"True", "True", "False", []string{"TCPRoute"}}, {"True", "True", "False", []string{"UDPRoute"}}}},
		{"a UDP listener shares its port with an HTTP one", gw("g", listener("http", 53, gatewayv1.HTTPProtocolType, ""),
			listener("udp", 53, gatewayv1.UDPProtocolType, "")), "True/Accepted",
			[]lwant{{"True", "True", "False", []string{"HTTPRoute", "GRPCRoute"}}, {"True", "True", "False", []string{"UDPRoute"}}}},
		{"a TCP listener shares its port with an HTTP one", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, ""),
			listener("tcp", 80, gatewayv1.TCPProtocolType, "")), "False/ListenersNotValid",
			[]lwant{{"True", "True", "ProtocolConflict", []string{"HTTPRoute", "GRPCRoute"}}, {"True", "True", "ProtocolConflict", []string{"TCPRoute"}}}},
		{"two UDP listeners on one port", gw("g", listener("a", 53, gatewayv1.UDPProtocolType, ""),
			listener("b", 53, gatewayv1.UDPProtocolType, "")), "False/ListenersNotValid",
			[]lwant{{"True", "True", "HostnameConflict", []string{"UDPRoute"}}, {"True", "True", "HostnameConflict", []string{"UDPRoute"}}}},
		{"HTTPRoutes on a TCP listener", gw("g", listener("tcp", 9000, gatewayv1.TCPProtocolType, "", kinds("HTTPRoute", "TCPRoute"))),
			"False/ListenersNotValid", []lwant{{"True", "InvalidRouteKinds", "False", []string{"TCPRoute"}}}},
		{"invalid route kinds", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, "", kinds("FooRoute"))), "False/ListenersNotValid",
			[]lwant{{"True", "InvalidRouteKinds", "False", nil}}},
		{"a valid and an invalid route kind", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, "", kinds("HTTPRoute", "FooRoute"))),
			"False/ListenersNotValid", []lwant{{"True", "InvalidRouteKinds", "False", []string{"HTTPRoute"}}}},
		{"only GRPCRoutes", gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, "", kinds("GRPCRoute"))), "True/Accepted",
			[]lwant{{"True", "True", "False", []string{"GRPCRoute"}}}},
		{"two listeners, one port, one hostname", gw("g", listener("a", 80, gatewayv1.HTTPProtocolType, "x.test"),
			listener("b", 80, gatewayv1.HTTPProtocolType, "x.test")), "False/ListenersNotValid",
			[]lwant{{"True", "True", "HostnameConflict", []string{"HTTPRoute", "GRPCRoute"}}, {"True", "True", "HostnameConflict", []string{"HTTPRoute", "GRPCRoute"}}}},
		{"one port, two hostnames", gw("g", listener("a", 80, gatewayv1.HTTPProtocolType, "x.test"),
			listener("b", 80, gatewayv1.HTTPProtocolType, "y.test")), "True/Accepted",
			[]lwant{{"True", "True", "False", []string{"HTTPRoute", "GRPCRoute"}}, {"True", "True", "False", []string{"HTTPRoute", "GRPCRoute"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Compute(World{Gateways: []*gatewayv1.Gateway{tc.gateway}})
			key := types.NamespacedName{Namespace: "infra", Name: "g"}
			a := r.Accepted[key]
			if got := string(a.Status) + "/" + a.Reason; got != tc.accepted || a.ObservedGeneration != 3 {
				t.Errorf("Gateway Accepted = %s (generation %d), want %s at 3", got, a.ObservedGeneration, tc.accepted)
			}
			ls := r.Listeners[key]
			if len(ls) != len(tc.listeners) {
				t.Fatalf("listeners: %+v", ls)
			}
			for i, w := range tc.listeners {
				l := ls[i]
				get := func(typ string, positive metav1.ConditionStatus) string {
					c := findCond(l.Conditions, typ)
					if c == nil {
						t.Fatalf("listener %s: no %s", l.Name, typ)
					}
					if c.ObservedGeneration != 3 {
						t.Errorf("listener %s %s: observedGeneration %d", l.Name, typ, c.ObservedGeneration)
					}
					if c.Status == positive {
						return c.Reason
					}
					return string(c.Status)
				}
				pos := func(typ string) string {
					c := findCond(l.Conditions, typ)
					if c != nil && c.Status == metav1.ConditionTrue {
						return "True"
					}
					return get(typ, metav1.ConditionFalse)
				}
				if got := pos("Accepted"); got != w.accepted {
					t.Errorf("listener %s Accepted = %s, want %s", l.Name, got, w.accepted)
				}
				if got := pos("ResolvedRefs"); got != w.resolved {
					t.Errorf("listener %s ResolvedRefs = %s, want %s", l.Name, got, w.resolved)
				}
				if got := get("Conflicted", metav1.ConditionTrue); got != w.conflicted {
					t.Errorf("listener %s Conflicted = %s, want %s", l.Name, got, w.conflicted)
				}
				valid := w.accepted == "True" && w.resolved == "True" && w.conflicted == "False"
				if p := findCond(l.Conditions, "Programmed"); p == nil || (p.Status == metav1.ConditionTrue) != valid {
					t.Errorf("listener %s Programmed = %+v, want %v", l.Name, p, valid)
				}
				var ks []string
				for _, k := range l.SupportedKinds {
					ks = append(ks, string(deref(k.Group, ""))+"/"+string(k.Kind))
				}
				var want []string
				for _, k := range w.kinds {
					want = append(want, groupGateway+"/"+k)
				}
				if !slices.Equal(ks, want) {
					t.Errorf("listener %s supportedKinds = %v, want %v", l.Name, ks, want)
				}
			}
		})
	}
}

func TestIntersectHostnames(t *testing.T) {
	for _, tc := range []struct {
		listener string
		route    []string
		want     []string
		ok       bool
	}{
		{"", nil, nil, true},
		{"", []string{"a.test"}, []string{"a.test"}, true},
		{"a.test", nil, []string{"a.test"}, true},
		{"a.test", []string{"a.test", "b.test"}, []string{"a.test"}, true},
		{"*.example.com", []string{"foo.example.com"}, []string{"foo.example.com"}, true},
		{"*.example.com", []string{"a.b.example.com"}, []string{"a.b.example.com"}, true},
		{"*.example.com", []string{"example.com"}, nil, false},
		{"foo.example.com", []string{"*.example.com"}, []string{"foo.example.com"}, true},
		{"*.example.com", []string{"*.foo.example.com"}, []string{"*.foo.example.com"}, true},
		{"*.foo.example.com", []string{"*.example.com"}, []string{"*.foo.example.com"}, true},
		{"*.example.com", []string{"*.example.com"}, []string{"*.example.com"}, true},
		{"very.specific.com", []string{"*.other.com"}, nil, false},
	} {
		var l *gatewayv1.Hostname
		if tc.listener != "" {
			l = ptr(gatewayv1.Hostname(tc.listener))
		}
		var rh []gatewayv1.Hostname
		for _, h := range tc.route {
			rh = append(rh, gatewayv1.Hostname(h))
		}
		got, ok := IntersectHostnames(l, rh)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("IntersectHostnames(%q, %q) = %q, %v; want %q, %v", tc.listener, tc.route, got, ok, tc.want, tc.ok)
		}
	}
}

func findCond(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
