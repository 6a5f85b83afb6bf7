package topology

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

func ptr[T any](v T) *T { return &v }

// gatewayFixture is a Gateway with two listeners and a route of each kind.
func gatewayFixture() gatewayState {
	accepted := []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted"}, {Type: "ResolvedRefs", Status: "True", Reason: "ResolvedRefs"}}
	gw := gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "minikit", Listeners: []gatewayv1.Listener{
			{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80},
			{Name: "tls", Protocol: gatewayv1.TLSProtocolType, Port: 443, Hostname: ptr(gatewayv1.Hostname("*.example.com"))},
		}},
		Status: gatewayv1.GatewayStatus{Addresses: []gatewayv1.GatewayStatusAddress{{Value: "192.168.56.200"}},
			Conditions: []metav1.Condition{{Type: "Programmed", Status: "True"}},
			Listeners:  []gatewayv1.ListenerStatus{{Name: "http", AttachedRoutes: 2}, {Name: "tls", AttachedRoutes: 1}}}}
	parent := gatewayv1.ParentReference{Name: "web", SectionName: ptr(gatewayv1.SectionName("http"))}
	http := gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
			Hostnames: []gatewayv1.Hostname{"shop.example.com"},
			Rules: []gatewayv1.HTTPRouteRule{
				{Name: ptr(gatewayv1.SectionName("api")), Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchPathPrefix), Value: ptr("/api")},
					Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-env", Value: "canary"}}, Method: ptr(gatewayv1.HTTPMethodGet)}},
					BackendRefs: []gatewayv1.HTTPBackendRef{
						{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "api", Port: ptr(gatewayv1.PortNumber(8080))}, Weight: ptr(int32(90))}},
						{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "api-next", Port: ptr(gatewayv1.PortNumber(8080))}, Weight: ptr(int32(10))}},
					}},
				{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: ptr("/healthz")}}},
					BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: ptr(gatewayv1.PortNumber(80))}}}}},
			}},
		Status: gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{ParentRef: parent, Conditions: accepted}}}}}
	grpc := gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
		Spec: gatewayv1.GRPCRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "web"}}},
			Rules: []gatewayv1.GRPCRouteRule{{Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: ptr("echo.Echo"), Method: ptr("Say")}}},
				BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "missing", Port: ptr(gatewayv1.PortNumber(9000))}}}}}}},
		Status: gatewayv1.GRPCRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{ParentRef: gatewayv1.ParentReference{Name: "web"},
			Conditions: []metav1.Condition{{Type: "Accepted", Status: "True"}, {Type: "ResolvedRefs", Status: "False", Reason: "BackendNotFound"}}}}}}}
	tls := gatewayv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pass"},
		Spec: gatewayv1.TLSRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "web", Namespace: ptr(gatewayv1.Namespace("default"))}}},
			Hostnames: []gatewayv1.Hostname{"secure.example.com"},
			Rules:     []gatewayv1.TLSRouteRule{{BackendRefs: []gatewayv1.BackendRef{{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "vault", Port: ptr(gatewayv1.PortNumber(8443))}}}}}},
		Status: gatewayv1.TLSRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{ParentRef: gatewayv1.ParentReference{Name: "web", Namespace: ptr(gatewayv1.Namespace("default"))},
			Conditions: []metav1.Condition{{Type: "Accepted", Status: "False", Reason: "NotAllowedByListeners"}}}}}}}
	return gatewayState{gateways: []gatewayv1.Gateway{gw}, http: []gatewayv1.HTTPRoute{http}, grpc: []gatewayv1.GRPCRoute{grpc}, tls: []gatewayv1.TLSRoute{tls}}
}

func TestGatewaysFromTheAPI(t *testing.T) {
	s := gatewayFixture()
	gws := gateways(s)
	want := []Gateway{{ID: "gw:default/web", Namespace: "default", Name: "web", Class: "minikit", Addresses: []string{"192.168.56.200"}, Programmed: "True",
		Listeners: []GatewayListener{{Name: "http", Protocol: "HTTP", Port: 80, AttachedRoutes: 2}, {Name: "tls", Protocol: "TLS", Port: 443, Hostname: "*.example.com", AttachedRoutes: 1}}}}
	if !reflect.DeepEqual(gws, want) {
		t.Errorf("gateways:\n got %+v\nwant %+v", gws, want)
	}
	rs := gatewayRoutes(s)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, " ") != "grpcroute:default/echo httproute:default/shop tlsroute:shop/pass" {
		t.Fatalf("route IDs %v", ids)
	}
	grpc, http, tls := rs[0], rs[1], rs[2]
	if want := []RouteRule{
		{Name: "api", Matches: []string{"/api, header x-env=canary, method GET"}, Backends: []RouteBackend{{Service: "svc:default/api", Port: 8080, Weight: 90}, {Service: "svc:default/api-next", Port: 8080, Weight: 10}}},
		{Matches: []string{"=/healthz"}, Backends: []RouteBackend{{Service: "svc:default/web", Port: 80, Weight: 1}}},
	}; !reflect.DeepEqual(http.Rules, want) {
		t.Errorf("HTTPRoute rules:\n got %+v\nwant %+v", http.Rules, want)
	}
	if want := []RouteParent{{Gateway: "gw:default/web", SectionName: "http", Accepted: "True", ResolvedRefs: "True"}}; !reflect.DeepEqual(http.Parents, want) {
		t.Errorf("HTTPRoute parents %+v, want %+v", http.Parents, want)
	}
	if p := grpc.Parents[0]; p.Accepted != "True" || p.ResolvedRefs != "False" || p.Reason != "BackendNotFound" || grpc.Rules[0].Matches[0] != "echo.Echo/Say" {
		t.Errorf("GRPCRoute %+v", grpc)
	}
	if p := tls.Parents[0]; p.Gateway != "gw:default/web" || p.Accepted != "False" || p.Reason != "NotAllowedByListeners" || tls.Rules[0].Backends[0].Service != "svc:shop/vault" {
		t.Errorf("TLSRoute %+v", tls)
	}
}

// No Gateway API (the CRDs absent: the lists answer 404; or no client):
// a graph with empty lists, never an error. Another error is one.
func TestNoGatewayAPI(t *testing.T) {
	absent := gwfake.NewSimpleClientset()
	absent.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: gatewayv1.GroupName, Resource: a.GetResource().Resource}, "")
	})
	for name, c := range map[string]gwclient.Interface{"no client": nil, "CRDs absent": absent} {
		s, err := readGateways(t.Context(), c, "lab")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := json.Marshal(Graph{Gateways: gateways(s), GatewayRoutes: gatewayRoutes(s)})
		if !strings.Contains(string(b), `"gateways":[],"gatewayRoutes":[]`) {
			t.Errorf("%s: graph %s", name, b)
		}
	}
	broken := gwfake.NewSimpleClientset()
	broken.PrependReactor("list", "gateways", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: gatewayv1.GroupName, Resource: "gateways"}, "", nil)
	})
	if _, err := readGateways(t.Context(), broken, "lab"); err == nil || !strings.Contains(err.Error(), `reading lab "lab": listing gateways`) {
		t.Errorf("a forbidden list: %v", err)
	}
	// With the CRDs, what is stored is read. (Created through the client:
	// the fake's tracker files objects given to NewSimpleClientset under
	// the first version the scheme knows the type by, v1beta1 for a
	// Gateway.)
	fix := gatewayFixture()
	c := gwfake.NewSimpleClientset()
	v1 := c.GatewayV1()
	for _, err := range []error{
		func() error {
			_, err := v1.Gateways("default").Create(t.Context(), &fix.gateways[0], metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := v1.HTTPRoutes("default").Create(t.Context(), &fix.http[0], metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := v1.GRPCRoutes("default").Create(t.Context(), &fix.grpc[0], metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := v1.TLSRoutes("shop").Create(t.Context(), &fix.tls[0], metav1.CreateOptions{})
			return err
		}(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := readGateways(t.Context(), c, "lab")
	if err != nil || len(s.gateways) != 1 || len(s.http) != 1 || len(s.grpc) != 1 || len(s.tls) != 1 {
		t.Errorf("read %+v: %v", s, err)
	}
}

func TestRenderGatewaysGolden(t *testing.T) {
	g := loadGraph(t)
	s := gatewayFixture()
	g.Gateways, g.GatewayRoutes = gateways(s), gatewayRoutes(s)
	g.Ingresses = []Ingress{{ID: "ing:default/web", Namespace: "default", Name: "web", Class: "minikit", Rules: []IngressRule{{Path: "/", Service: "svc:default/web", Port: "80"}}}}
	for _, tc := range []struct {
		file  string
		write func(io.Writer, *Graph, []Hop) error
	}{
		{"gateway.dot", WriteDot},
		{"gateway.mmd", WriteMermaid},
		{"gateway.svg", WriteSVG},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b, g, nil); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, b.Bytes())
			for _, line := range []string{"default/web (Gateway minikit) 192.168.56.200", "listener tls TLS/443 *.example.com (1 routes)",
				"HTTPRoute default/shop on http shop.example.com", "/api, header x-env=canary, method GET → default/api:8080 w90, default/api-next:8080 w10",
				"GRPCRoute default/echo (refs unresolved: BackendNotFound)", "TLSRoute shop/pass secure.example.com (not Accepted: NotAllowedByListeners)"} {
				if tc.file != "gateway.svg" && !strings.Contains(b.String(), line) {
					t.Errorf("%s lacks %q", tc.file, line)
				}
			}
		})
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, g, nil); err != nil {
		t.Fatal(err)
	}
	if cls := parseSVG(t, b.Bytes())["gw:default/web"]; cls != "gateway" {
		t.Errorf("the Gateway's group in the SVG has class %q, want gateway", cls)
	}
}
