package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// l4Spec is a TCPRoute's or UDPRoute's parents and backendRefs: parents as
// "gateway", "gateway/section" or "gateway:port"; backends as "name",
// "ns/name", "name=weight" or "group/Kind/name".
func l4Spec(parents []string, backends ...string) (gatewayv1.CommonRouteSpec, []gatewayv1.BackendRef) {
	var common gatewayv1.CommonRouteSpec
	for _, p := range parents {
		pr := gatewayv1.ParentReference{}
		name, port, hasPort := strings.Cut(p, ":")
		name, section, _ := strings.Cut(name, "/")
		pr.Name = gatewayv1.ObjectName(name)
		if section != "" {
			pr.SectionName = ptr(gatewayv1.SectionName(section))
		}
		if hasPort {
			n, _ := strconv.Atoi(port)
			pr.Port = ptr(gatewayv1.PortNumber(n))
		}
		common.ParentRefs = append(common.ParentRefs, pr)
	}
	var refs []gatewayv1.BackendRef
	for _, b := range backends {
		b, weight, hasWeight := strings.Cut(b, "=")
		ref := gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Port: ptr(gatewayv1.PortNumber(3000))}}
		switch parts := strings.Split(b, "/"); len(parts) {
		case 1:
			ref.Name = gatewayv1.ObjectName(parts[0])
		case 2:
			ref.Namespace, ref.Name = ptr(gatewayv1.Namespace(parts[0])), gatewayv1.ObjectName(parts[1])
		case 3:
			ref.Group, ref.Kind, ref.Name = ptr(gatewayv1.Group(parts[0])), ptr(gatewayv1.Kind(parts[1])), gatewayv1.ObjectName(parts[2])
		}
		if hasWeight {
			n, _ := strconv.Atoi(weight)
			ref.Weight = ptr(int32(n))
		}
		refs = append(refs, ref)
	}
	return common, refs
}

func tcpRoute(ns, name string, age int, parents []string, backends ...string) *gatewayv1.TCPRoute {
	common, refs := l4Spec(parents, backends...)
	return &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 4, CreationTimestamp: metav1.Unix(int64(1000-age), 0)},
		Spec: gatewayv1.TCPRouteSpec{CommonRouteSpec: common, Rules: []gatewayv1.TCPRouteRule{{BackendRefs: refs}}}}
}

func udpRoute(ns, name string, age int, parents []string, backends ...string) *gatewayv1.UDPRoute {
	common, refs := l4Spec(parents, backends...)
	return &gatewayv1.UDPRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 6, CreationTimestamp: metav1.Unix(int64(1000-age), 0)},
		Spec: gatewayv1.UDPRouteSpec{CommonRouteSpec: common, Rules: []gatewayv1.UDPRouteRule{{BackendRefs: refs}}}}
}

// TCPRoutes and UDPRoutes through the status rules, as the GATEWAY-TCP and
// GATEWAY-UDP profiles' tests check them, and what each listener serves.
func TestTCPAndUDPRouteStatus(t *testing.T) {
	gws := []*gatewayv1.Gateway{
		gw("l4", listener("tcp", 9000, gatewayv1.TCPProtocolType, ""), listener("udp", 5300, gatewayv1.UDPProtocolType, ""),
			listener("udp-2", 5301, gatewayv1.UDPProtocolType, ""), listener("http", 80, gatewayv1.HTTPProtocolType, "")),
		gw("tls-only", passthrough("tls", "", gatewayv1.TLSModePassthrough)),
	}
	tcpGrant, udpGrant := grant("web", "infra", ""), grant("web", "infra", "")
	tcpGrant.Spec.From[0].Kind, udpGrant.Spec.From[0].Kind = kindTCP, kindUDP
	w := World{Gateways: gws, Namespaces: namespaces, Services: services("infra/echo", "infra/dns", "web/echo", "web/dns", "app/echo"),
		TCPRoutes: []*gatewayv1.TCPRoute{
			tcpRoute("infra", "by-section", 2, []string{"l4/tcp"}, "echo"),
			tcpRoute("infra", "by-port", 0, []string{"l4:9000"}, "echo"),
			tcpRoute("infra", "attach-all", 0, []string{"l4"}, "echo"),
			tcpRoute("infra", "on-udp", 0, []string{"l4/udp"}, "echo"),
			tcpRoute("infra", "on-http", 0, []string{"l4/http"}, "echo"),
			tcpRoute("infra", "no-section", 0, []string{"l4/nope"}, "echo"),
			tcpRoute("infra", "no-port", 0, []string{"l4:9999"}, "echo"),
			tcpRoute("infra", "section-and-wrong-port", 0, []string{"l4/tcp:9001"}, "echo"),
			tcpRoute("infra", "missing", 0, []string{"l4/tcp"}, "nothing"),
			tcpRoute("infra", "cross", 0, []string{"l4/tcp"}, "web/echo"),
			tcpRoute("infra", "kind", 0, []string{"l4/tcp"}, "example.com/Foo/echo"),
			tcpRoute("app", "other-ns", 0, []string{"infra/l4/tcp"}, "echo"),
		},
		UDPRoutes: []*gatewayv1.UDPRoute{
			udpRoute("infra", "dns", 1, []string{"l4/udp"}, "dns"),
			udpRoute("infra", "attach-all", 0, []string{"l4"}, "dns"),
			udpRoute("infra", "on-tls", 0, []string{"tls-only/tls"}, "dns"),
			udpRoute("infra", "on-tcp", 0, []string{"l4/tcp"}, "dns"),
			udpRoute("infra", "missing", 0, []string{"l4/udp"}, "nothing"),
			udpRoute("infra", "cross", 0, []string{"l4/udp"}, "web/dns"),
		},
		// Grants from other kinds: a TCPRoute's must name TCPRoute, a UDPRoute's UDPRoute.
		Grants: []*gatewayv1.ReferenceGrant{grant("web", "infra", "")},
	}
	// "app/other-ns" names its Gateway in another namespace.
	w.TCPRoutes[11].Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "l4", Namespace: ptr(gatewayv1.Namespace("infra")), SectionName: ptr(gatewayv1.SectionName("tcp"))}}
	res := Compute(w)
	key := func(ns, n string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: n} }

	for _, tc := range []struct {
		kind, ns, route, accepted, resolved string
	}{
		{kindTCP, "infra", "by-section", "Accepted", "ResolvedRefs"},
		{kindTCP, "infra", "by-port", "Accepted", "ResolvedRefs"},
		{kindTCP, "infra", "attach-all", "Accepted", "ResolvedRefs"},
		{kindTCP, "infra", "on-udp", "NotAllowedByListeners", "ResolvedRefs"},
		{kindTCP, "infra", "on-http", "NotAllowedByListeners", "ResolvedRefs"},
		{kindTCP, "infra", "no-section", "NoMatchingParent", "ResolvedRefs"},
		{kindTCP, "infra", "no-port", "NoMatchingParent", "ResolvedRefs"},
		{kindTCP, "infra", "section-and-wrong-port", "NoMatchingParent", "ResolvedRefs"},
		{kindTCP, "infra", "missing", "Accepted", "BackendNotFound"},
		{kindTCP, "infra", "cross", "Accepted", "RefNotPermitted"},
		{kindTCP, "infra", "kind", "Accepted", "InvalidKind"},
		{kindTCP, "app", "other-ns", "NotAllowedByListeners", "ResolvedRefs"}, // allowedRoutes: Same
		{kindUDP, "infra", "dns", "Accepted", "ResolvedRefs"},
		{kindUDP, "infra", "attach-all", "Accepted", "ResolvedRefs"},
		{kindUDP, "infra", "on-tls", "NotAllowedByListeners", "ResolvedRefs"},
		{kindUDP, "infra", "on-tcp", "NotAllowedByListeners", "ResolvedRefs"},
		{kindUDP, "infra", "missing", "Accepted", "BackendNotFound"},
		{kindUDP, "infra", "cross", "Accepted", "RefNotPermitted"},
	} {
		parents, gen := res.TCPParents[key(tc.ns, tc.route)], int64(4)
		if tc.kind == kindUDP {
			parents, gen = res.UDPParents[key(tc.ns, tc.route)], 6
		}
		if len(parents) != 1 {
			t.Errorf("%s %s/%s: parents %+v, want one", tc.kind, tc.ns, tc.route, parents)
			continue
		}
		p := parents[0]
		if c := findCond(p.Conditions, "Accepted"); c == nil || c.Reason != tc.accepted || c.ObservedGeneration != gen {
			t.Errorf("%s %s/%s: Accepted %+v, want reason %s at generation %d", tc.kind, tc.ns, tc.route, c, tc.accepted, gen)
		}
		if c := findCond(p.Conditions, "ResolvedRefs"); c == nil || c.Reason != tc.resolved || c.ObservedGeneration != gen {
			t.Errorf("%s %s/%s: ResolvedRefs %+v, want reason %s at generation %d", tc.kind, tc.ns, tc.route, c, tc.resolved, gen)
		}
		if p.ControllerName != ControllerName || deref(p.ParentRef.Kind, "") != kindGateway || deref(p.ParentRef.Group, "") != groupGateway {
			t.Errorf("%s %s/%s: parent %+v, want this controller's, kind and group spelled out", tc.kind, tc.ns, tc.route, p)
		}
	}
	if len(res.Parents)+len(res.GRPCParents)+len(res.TLSParents) != 0 {
		t.Errorf("TCPRoutes' and UDPRoutes' status went to other kinds: %v %v %v", res.Parents, res.GRPCParents, res.TLSParents)
	}
	// attachedRoutes counts every route that attaches, valid backends or not.
	for _, tc := range []struct {
		listener string
		attached int32
		kind     string
	}{
		{"tcp", 6, kindTCP}, // by-section, by-port, attach-all, missing, cross, kind
		{"udp", 4, kindUDP}, // dns, attach-all, missing, cross
		{"udp-2", 1, kindUDP},
		{"http", 0, kindHTTP},
	} {
		var l *gatewayv1.ListenerStatus
		for i := range res.Listeners[key("infra", "l4")] {
			if s := &res.Listeners[key("infra", "l4")][i]; string(s.Name) == tc.listener {
				l = s
			}
		}
		if l == nil || l.AttachedRoutes != tc.attached || l.SupportedKinds[0].Kind != gatewayv1.Kind(tc.kind) {
			t.Errorf("listener %s: %+v, want %d attached routes and kind %s first", tc.listener, l, tc.attached, tc.kind)
		}
	}
	if l := res.Listeners[key("infra", "tls-only")][0]; l.AttachedRoutes != 0 {
		t.Errorf("tls-only: %d attached routes, want 0", l.AttachedRoutes)
	}
	// A grant that names the route's kind lets the backend resolve; one per kind.
	w.Grants = []*gatewayv1.ReferenceGrant{tcpGrant, udpGrant}
	res = Compute(w)
	if c := findCond(res.TCPParents[key("infra", "cross")][0].Conditions, "ResolvedRefs"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("TCPRoute cross with a TCPRoute grant: ResolvedRefs %+v, want True", c)
	}
	if c := findCond(res.UDPParents[key("infra", "cross")][0].Conditions, "ResolvedRefs"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("UDPRoute cross with a UDPRoute grant: ResolvedRefs %+v, want True", c)
	}

	// What the listeners serve: the oldest route attached (by-section on
	// tcp, dns on udp), whatever the order of the others.
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, name := range []string{"echo", "dns"} {
		k := key("infra", name)
		w.Services[k] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 3000, Protocol: map[string]corev1.Protocol{"echo": "TCP", "dns": "UDP"}[name]}}}}
		slices[k] = []*discoveryv1.EndpointSlice{{Ports: []discoveryv1.EndpointPort{{Name: ptr("p"), Port: ptr(int32(3000))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{map[string]string{"echo": "10.0.0.1", "dns": "10.0.0.2"}[name]}}}}}
	}
	tables := map[int32]*Table{}
	for dp, l := range map[int32]string{20000: "tcp", 20001: "udp"} {
		tb, errs := BuildTable(w, res.Attached[ListenerKey{key("infra", "l4"), gatewayv1.SectionName(l)}])
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		tables[dp] = tb
	}
	snap := &Snapshot{Tables: tables, TCP: map[int32]bool{20000: true}, UDP: map[int32]bool{20001: true}, Endpoints: ResolveEndpoints(tables, w.Services, slices)}
	for dp, want := range map[int32]string{20000: "10.0.0.1:3000", 20001: "10.0.0.2:3000"} {
		for n := range 3 {
			if ep, err := L4Endpoint(snap, dp, func(int) int { return n % 1 }); err != nil || ep != want {
				t.Errorf("data port %d: endpoint %q, %v; want %s", dp, ep, err, want)
			}
		}
		if act := tables[dp].Route(Request{Path: "/"}); act == nil || (act.Route.Name != "by-section" && act.Route.Name != "dns") {
			t.Errorf("data port %d serves %+v, want the oldest route", dp, act)
		}
	}
}

// A route's backends share the connections by weight: n, drawn in [0, total
// weight), falls on a backend by the order of its refs; a weight 0 backend
// gets nothing; an invalid backend's share is refused, as TCPRouteRule's doc
// asks; a Service without ready endpoints refuses too.
func TestL4EndpointWeights(t *testing.T) {
	w := World{Services: map[types.NamespacedName]*corev1.Service{}}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for name, ips := range map[string][]string{"v1": {"10.0.1.1", "10.0.1.2"}, "v2": {"10.0.2.1"}, "v3": {"10.0.3.1"}, "empty": nil} {
		k := types.NamespacedName{Namespace: "infra", Name: name}
		w.Services[k] = &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 3000}}}}
		es := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr("p"), Port: ptr(int32(4000))}}}
		for _, ip := range ips {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
		}
		slices[k] = []*discoveryv1.EndpointSlice{es}
	}
	table, _ := BuildTable(w, []Attachment{{Route: tcpAsHTTP(tcpRoute("infra", "r", 0, nil, "v1=70", "v2=30", "v3=0", "missing=10", "empty=10"))}})
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, TCP: map[int32]bool{20000: true}, Endpoints: ResolveEndpoints(tables, w.Services, slices)}
	for _, tc := range []struct {
		backend, endpoint int // what pick returns: first for the backend, then for the endpoint
		want              string
	}{
		{0, 0, "10.0.1.1:4000"},
		{69, 1, "10.0.1.2:4000"},
		{70, 0, "10.0.2.1:4000"},
		{99, 0, "10.0.2.1:4000"},
		{100, 0, ""}, // missing: not found
		{115, 0, ""}, // empty: no endpoint
	} {
		calls := 0
		ep, err := L4Endpoint(snap, 20000, func(n int) int {
			calls++
			if calls == 1 {
				if n != 120 {
					t.Errorf("total weight %d, want 120", n)
				}
				return tc.backend
			}
			return tc.endpoint
		})
		if tc.want == "" {
			if err == nil {
				t.Errorf("pick %d: endpoint %s, want refused", tc.backend, ep)
			}
			continue
		}
		if err != nil || ep != tc.want {
			t.Errorf("pick %d/%d: %q, %v; want %s", tc.backend, tc.endpoint, ep, err, tc.want)
		}
	}
	if _, err := L4Endpoint(snap, 20999, func(int) int { return 0 }); err == nil {
		t.Error("a data port without a table: want refused")
	}
}

// lineEcho is a TCP server that greets with its name, then echoes lines
// until the client half-closes, then says bye.
func lineEcho(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "hello from %s\n", name)
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s: %s\n", name, sc.Text())
				}
				fmt.Fprintf(c, "%s: bye\n", name)
			}()
		}
	}()
	return ln.Addr().String()
}

// l4Services makes a Service "infra/<name>" port 3000 of protocol proto per
// backend address, its EndpointSlice naming the address.
func l4Services(proto corev1.Protocol, addrs map[string]string) (map[types.NamespacedName]*corev1.Service, map[types.NamespacedName][]*discoveryv1.EndpointSlice) {
	svcs := map[types.NamespacedName]*corev1.Service{}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for name, addr := range addrs {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		k := types.NamespacedName{Namespace: "infra", Name: name}
		svcs[k] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 3000, Protocol: proto}}}}
		slices[k] = []*discoveryv1.EndpointSlice{{Ports: []discoveryv1.EndpointPort{{Name: ptr("p"), Port: ptr(int32(p))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}}}
	}
	return svcs, slices
}

// A TCP listener's data port on loopback: each connection reaches the
// backend of the oldest route, server-first greeting and half close passed
// through both ways; with no route the connection is closed unanswered; the
// listener never hands a connection to the HTTP server.
func TestTCPSplice(t *testing.T) {
	svcs, slices := l4Services(corev1.ProtocolTCP, map[string]string{"old": lineEcho(t, "old"), "young": lineEcho(t, "young")})
	w := World{Services: svcs}
	table, _ := BuildTable(w, []Attachment{
		{Route: tcpAsHTTP(tcpRoute("infra", "young", 0, nil, "young"))},
		{Route: tcpAsHTTP(tcpRoute("infra", "old", 5, nil, "old"))},
	})
	tables := map[int32]*Table{20000: table}
	var snap atomic.Pointer[Snapshot]
	snap.Store(&Snapshot{Tables: tables, TCP: map[int32]bool{20000: true}, Endpoints: ResolveEndpoints(tables, svcs, slices)})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := SplitPassthrough(inner, 20000, snap.Load, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
			err = errors.New("a connection was handed on from a TCP listener's port")
		}
		accepted <- err
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "one\ntwo\n")
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if want := "hello from old\nold: one\nold: two\nold: bye\n"; err != nil || string(got) != want {
			t.Errorf("through the TCP data port: %q, %v; want %q", got, err, want)
		}
	}
	// No route attached: closed without a byte.
	empty, _ := BuildTable(w, nil)
	snap.Store(&Snapshot{Tables: map[int32]*Table{20000: empty}, TCP: map[int32]bool{20000: true}})
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || len(got) != 0 {
		t.Errorf("without a route: read %q, %v; want the connection closed unanswered", got, err)
	}
	ln.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept returned %v, want the listener closed", err)
	}
}

// A Service may have a TCP and a UDP port of one number (kube-dns's 53): a
// UDPRoute's backend is served by the UDP port's endpoints, a TCPRoute's by
// the TCP port's.
func TestL4BackendPortProtocol(t *testing.T) {
	k := types.NamespacedName{Namespace: "infra", Name: "dns"}
	w := World{Services: map[types.NamespacedName]*corev1.Service{k: {Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}}}}}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{k: {{
		Ports:     []discoveryv1.EndpointPort{{Name: ptr("dns"), Port: ptr(int32(5353))}, {Name: ptr("dns-tcp"), Port: ptr(int32(5354))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}}}}}}
	withPort := func(refs []gatewayv1.BackendRef) []gatewayv1.BackendRef {
		refs[0].Port = ptr(gatewayv1.PortNumber(53))
		return refs
	}
	udp := udpRoute("infra", "u", 0, nil, "dns")
	udp.Spec.Rules[0].BackendRefs = withPort(udp.Spec.Rules[0].BackendRefs)
	tcp := tcpRoute("infra", "t", 0, nil, "dns")
	tcp.Spec.Rules[0].BackendRefs = withPort(tcp.Spec.Rules[0].BackendRefs)
	ut, _ := BuildTable(w, []Attachment{{Route: udpAsHTTP(udp)}})
	tt, _ := BuildTable(w, []Attachment{{Route: tcpAsHTTP(tcp)}})
	tables := map[int32]*Table{20001: ut, 20000: tt}
	snap := &Snapshot{Tables: tables, Endpoints: ResolveEndpoints(tables, w.Services, slices)}
	for dp, want := range map[int32]string{20001: "10.0.0.9:5353", 20000: "10.0.0.9:5354"} {
		if ep, err := L4Endpoint(snap, dp, func(int) int { return 0 }); err != nil || ep != want {
			t.Errorf("data port %d: %q, %v; want %s", dp, ep, err, want)
		}
	}
}
