package trace

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

func ptr[T any](v T) *T { return &v }

// gatewayWorld is a Gateway web at 192.168.56.200 (HTTP :80, TLS :443)
// whose Service's endpoints are two nodes' data ports, an HTTPRoute on
// its http listener to Service echo (two ready pods, one not ready), and
// a TLSRoute on the tls listener.
func gatewayWorld() gatewayObjects {
	node := func(name, ip string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	slice := func(ns, svc, port string, p int32, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr(port), Port: ptr(p)}}, Endpoints: eps}
	}
	podEP := func(ip, name, node string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)}, NodeName: ptr(node),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: name}}
	}
	parent := gatewayv1.ParentReference{Name: "web", SectionName: ptr(gatewayv1.SectionName("http"))}
	return gatewayObjects{
		nodes: []corev1.Node{node("node1", "192.168.56.11"), node("node2", "192.168.56.12")},
		gateways: []gatewayv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "minikit", Listeners: []gatewayv1.Listener{
				{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80},
				{Name: "tls", Protocol: gatewayv1.TLSProtocolType, Port: 443},
			}},
			Status: gatewayv1.GatewayStatus{Addresses: []gatewayv1.GatewayStatusAddress{{Value: "192.168.56.200"}}}}},
		http: []gatewayv1.HTTPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
			Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
				Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Value: ptr("/echo")}}},
					BackendRefs: []gatewayv1.HTTPBackendRef{
						{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "echo", Port: ptr(gatewayv1.PortNumber(80))}}},
						{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "gone", Port: ptr(gatewayv1.PortNumber(80))}, Weight: ptr(int32(0))}},
					}}}},
			Status: gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{ParentRef: parent,
				Conditions: []metav1.Condition{{Type: "Accepted", Status: "True"}, {Type: "ResolvedRefs", Status: "False", Reason: "BackendNotFound"}}}}}}}},
		tls: []gatewayv1.TLSRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pass"},
			Spec: gatewayv1.TLSRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "web"}}}, Hostnames: []gatewayv1.Hostname{"secure.example.com"}}}},
		services: []corev1.Service{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-minikit"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp-80", Port: 80}, {Name: "tcp-443", Port: 443}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		},
		slices: []discoveryv1.EndpointSlice{
			slice("default", "web-minikit", "tcp-80", 20000, discoveryv1.Endpoint{Addresses: []string{"192.168.56.11"}}, discoveryv1.Endpoint{Addresses: []string{"192.168.56.12"}}),
			slice("default", "echo", "http", 8080, podEP("10.244.1.3", "echo-b", "node2", true), podEP("10.244.0.5", "echo-a", "node1", true), podEP("10.244.0.6", "echo-c", "node1", false)),
		},
	}
}

func TestGatewayHop(t *testing.T) {
	to := Target{Addr: netip.MustParseAddrPort("192.168.56.200:80"), Service: "default/web-minikit:tcp-80", Kind: "loadbalancer IP"}
	g := gatewayHop(to, gatewayWorld())
	if g == nil {
		t.Fatal("no Gateway for its address and listener port")
	}
	if g.Name != "default/web" || len(g.Listeners) != 1 || g.Listeners[0].Name != "http" {
		t.Fatalf("gateway %+v", g)
	}
	if len(g.DataPlanes) != 2 || g.DataPlanes[0] != (DataPlane{Node: "node1", Addr: "192.168.56.11:20000"}) || g.DataPlanes[1].Node != "node2" {
		t.Errorf("data planes %+v", g.DataPlanes)
	}
	// The TLSRoute is on the tls listener's port, not this one.
	if len(g.Routes) != 1 || g.Routes[0].Name != "default/echo" || g.Routes[0].Listener != "http" || g.Routes[0].Reason != "BackendNotFound" {
		t.Fatalf("routes %+v", g.Routes)
	}
	bs := g.Routes[0].Rules[0].Backends
	if len(bs) != 2 || bs[0].Service != "default/echo:80" || len(bs[0].Endpoints) != 2 ||
		bs[0].Endpoints[0].Addr != "10.244.0.5:8080" || bs[0].Endpoints[0].Pod.Name != "echo-a" || bs[0].Endpoints[1].Pod.Node != "node2" {
		t.Errorf("backend %+v", bs)
	}
	if bs[1].Weight != 0 || bs[1].Why != "no such Service" {
		t.Errorf("missing backend %+v", bs[1])
	}

	var b bytes.Buffer
	(&Result{Gateway: g}).Tree(&b)
	for _, want := range []string{
		"gateway default/web (class minikit) at 192.168.56.200:80",
		"  listener http HTTP/80",
		"delivered to the Gateway data plane (user space, not a kernel rule) of the node each path above ends at: node1 (192.168.56.11:20000), node2 (192.168.56.12:20000)",
		"each request's Host header, path, method, headers and query pick the route and rule",
		"HTTPRoute default/echo on listener http, any host: Accepted, refs unresolved (BackendNotFound)",
		"      rule 0 /echo",
		"        → default/echo:80 weight 1",
		"          10.244.0.5:8080 pod default/echo-a on node1",
		"          no such Service",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tree lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "echo-c") {
		t.Errorf("tree lists a pod that is not ready:\n%s", b.String())
	}

	// The TLS listener: SNI decides, the TLSRoute is the candidate.
	to.Addr = netip.MustParseAddrPort("192.168.56.200:443")
	g = gatewayHop(to, gatewayWorld())
	if g == nil || len(g.Routes) != 1 || g.Routes[0].Kind != "TLSRoute" || g.Routes[0].Accepted != "" {
		t.Fatalf("TLS listener: %+v", g)
	}
	b.Reset()
	g.tree(&b)
	if !strings.Contains(b.String(), "TLS server name (SNI) picks the route") || !strings.Contains(b.String(), "TLSRoute default/pass, secure.example.com: no status yet") {
		t.Errorf("tree:\n%s", b.String())
	}

	// Another port of the address, or another address: no Gateway.
	for _, a := range []string{"192.168.56.200:8080", "192.168.56.201:80"} {
		if g := gatewayHop(Target{Addr: netip.MustParseAddrPort(a)}, gatewayWorld()); g != nil {
			t.Errorf("%s: gateway %+v", a, g)
		}
	}
}

// In dot, the paths that end at a data port point at the Gateway's note.
func TestGatewayDot(t *testing.T) {
	to := Target{Addr: netip.MustParseAddrPort("192.168.56.200:80"), Service: "default/web-minikit:tcp-80", Kind: "loadbalancer IP"}
	r := &Result{To: to, Gateway: gatewayHop(to, gatewayWorld()), Paths: []Path{
		{Verdict: "ACCEPT", Probability: 0.5, Dst: "192.168.56.11:20000", DNAT: true},
		{Verdict: "ACCEPT", Probability: 0.5, Dst: "192.168.56.99:20000", DNAT: true},
	}}
	var b bytes.Buffer
	r.Dot(&b)
	out := b.String()
	if !strings.Contains(out, `gateway [label="gateway default/web (class minikit) at 192.168.56.200:80\l`) || strings.Count(out, "-> gateway [style=dashed]") != 1 ||
		!strings.Contains(out, `ACCEPT 192.168.56.11:20000\nGateway default/web data plane (user space)`) {
		t.Errorf("dot:\n%s", out)
	}
}

// Run's Gateway step reads the objects through the clients: nothing for a
// cluster without the Gateway API, the Gateway's part for its address.
func TestRunGatewayStep(t *testing.T) {
	ctx := t.Context()
	w := gatewayWorld()
	to := Target{Addr: netip.MustParseAddrPort("192.168.56.200:80"), Service: "default/web-minikit:tcp-80", Kind: "loadbalancer IP"}

	absent := gwfake.NewSimpleClientset()
	absent.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: gatewayv1.GroupName, Resource: a.GetResource().Resource}, "")
	})
	r := &run{c: kfake.NewClientset(), o: Config{Gateway: absent}, nodes: w.nodes}
	res := &Result{To: to}
	if err := r.gateway(ctx, res); err != nil || res.Gateway != nil {
		t.Fatalf("without the Gateway API: %+v, %v", res.Gateway, err)
	}

	var objs []runtime.Object
	for i := range w.services {
		objs = append(objs, &w.services[i])
	}
	for i := range w.slices {
		objs = append(objs, &w.slices[i])
	}
	objs = append(objs, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-minikit.1"}, Reason: "nodeAssigned",
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Name: "web-minikit"}, Source: corev1.EventSource{Host: "node2"}})
	gw := gwfake.NewSimpleClientset()
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, &w.gateways[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, &w.http[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = &run{c: kfake.NewClientset(objs...), o: Config{Gateway: gw}, nodes: w.nodes}
	res = &Result{To: to}
	if err := r.gateway(ctx, res); err != nil {
		t.Fatal(err)
	}
	g := res.Gateway
	if g == nil || g.Name != "default/web" || len(g.Announcers) != 1 || g.Announcers[0] != "node2" || len(g.Routes) != 1 || len(g.DataPlanes) != 2 {
		t.Fatalf("gateway %+v", g)
	}
	// Another kind of TO is not looked at.
	res = &Result{To: Target{Addr: to.Addr, Kind: "cluster IP"}}
	if err := r.gateway(ctx, res); err != nil || res.Gateway != nil {
		t.Errorf("a cluster IP: %+v, %v", res.Gateway, err)
	}
}
