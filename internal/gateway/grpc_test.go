package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
)

// namedEcho is a gRPC echo server that names itself in the response's
// pod context and echoes the method and metadata it received.
type namedEcho struct {
	pb.UnimplementedGrpcEchoServer
	name string
}

func (s *namedEcho) answer(ctx context.Context, method string) (*pb.EchoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var hs []*pb.Header
	for k, vs := range md {
		for _, v := range vs {
			hs = append(hs, &pb.Header{Key: k, Value: v})
		}
	}
	return &pb.EchoResponse{Assertions: &pb.Assertions{FullyQualifiedMethod: method, Headers: hs, Context: &pb.Context{Pod: s.name}}}, nil
}

func (s *namedEcho) Echo(ctx context.Context, _ *pb.EchoRequest) (*pb.EchoResponse, error) {
	return s.answer(ctx, "Echo")
}

func (s *namedEcho) EchoTwo(ctx context.Context, _ *pb.EchoRequest) (*pb.EchoResponse, error) {
	return s.answer(ctx, "EchoTwo")
}

// grpcBackend serves a namedEcho over h2c on loopback and returns its
// Service (port 8080) and EndpointSlice.
func grpcBackend(t *testing.T, name string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGrpcEchoServer(srv, &namedEcho{name: name})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, AppProtocol: ptr("kubernetes.io/h2c")}}}}
	es := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}}
	return svc, es
}

func grpcRoute(name string, rules ...gatewayv1.GRPCRouteRule) *gatewayv1.GRPCRoute {
	return &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: gatewayv1.GRPCRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "g"}}}, Rules: rules}}
}

func grpcRule(backend string, m ...gatewayv1.GRPCRouteMatch) gatewayv1.GRPCRouteRule {
	return gatewayv1.GRPCRouteRule{Matches: m, BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(backend), Port: ptr(gatewayv1.PortNumber(8080))}}}}}
}

func methodMatch(typ gatewayv1.GRPCMethodMatchType, svc, method string) gatewayv1.GRPCRouteMatch {
	m := &gatewayv1.GRPCMethodMatch{Type: &typ}
	if svc != "" {
		m.Service = &svc
	}
	if method != "" {
		m.Method = &method
	}
	return gatewayv1.GRPCRouteMatch{Method: m}
}

const echoService = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"

// gRPC calls from a real gRPC client, over h2c, through the data plane to
// h2c backends: the method and header matches of a GRPCRoute pick the
// backend, and a call no rule matches is Unimplemented.
func TestHandlerServesGRPC(t *testing.T) {
	svcA, esA := grpcBackend(t, "a")
	svcB, esB := grpcBackend(t, "b")
	exact, re := gatewayv1.GRPCMethodMatchExact, gatewayv1.GRPCMethodMatchRegularExpression
	rt := grpcRoute("r",
		grpcRule("a", methodMatch(exact, echoService, "Echo")),
		grpcRule("b", methodMatch(re, `.*\.GrpcEcho`, "EchoT.o")),
		grpcRule("b", gatewayv1.GRPCRouteMatch{Method: methodMatch(exact, echoService, "Echo").Method,
			Headers: []gatewayv1.GRPCHeaderMatch{{Name: "version", Value: "two"}}}),
	)
	svcs := map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA, {Namespace: "default", Name: "b"}: svcB}
	w := World{Services: svcs}
	table, errs := BuildTable(w, []Attachment{{Route: grpcAsHTTP(rt)}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20000: table}
	snap := &Snapshot{Tables: tables, Ports: map[int32]int32{20000: 80}, Endpoints: ResolveEndpoints(tables, svcs,
		map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "default", Name: "a"}: {esA}, {Namespace: "default", Name: "b"}: {esB}})}
	gw := httptest.NewUnstartedServer(Handler(20000, func() *Snapshot { return snap }, nil))
	gw.Config.Protocols = new(http.Protocols)
	gw.Config.Protocols.SetHTTP1(true)
	gw.Config.Protocols.SetUnencryptedHTTP2(true)
	gw.Start()
	defer gw.Close()
	conn, err := grpc.NewClient(gw.Listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGrpcEchoClient(conn)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		call    func(context.Context) (*pb.EchoResponse, error)
		md      []string
		backend string
		code    codes.Code
	}{
		{"Echo: the exact method", func(ctx context.Context) (*pb.EchoResponse, error) { return client.Echo(ctx, &pb.EchoRequest{}) }, nil, "a", codes.OK},
		{"EchoTwo: the expression", func(ctx context.Context) (*pb.EchoResponse, error) { return client.EchoTwo(ctx, &pb.EchoRequest{}) }, nil, "b", codes.OK},
		{"Echo with version: two: the method and header match has more headers",
			func(ctx context.Context) (*pb.EchoResponse, error) { return client.Echo(ctx, &pb.EchoRequest{}) }, []string{"version", "two"}, "b", codes.OK},
		{"EchoThree: no rule", func(ctx context.Context) (*pb.EchoResponse, error) { return client.EchoThree(ctx, &pb.EchoRequest{}) }, nil, "", codes.Unimplemented},
	} {
		resp, err := tc.call(metadata.AppendToOutgoingContext(ctx, tc.md...))
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: code %s (%v), want %s", tc.name, got, err, tc.code)
			continue
		}
		if tc.code != codes.OK {
			continue
		}
		if got := resp.GetAssertions().GetContext().GetPod(); got != tc.backend {
			t.Errorf("%s: served by %q, want %q", tc.name, got, tc.backend)
		}
	}
}

// A GRPCRoute's method match becomes the path match of the HTTP/2 request
// the call is.
func TestGRPCMethodAsPath(t *testing.T) {
	exact, re := gatewayv1.GRPCMethodMatchExact, gatewayv1.GRPCMethodMatchRegularExpression
	for _, tc := range []struct {
		m    gatewayv1.GRPCRouteMatch
		want string // type value
	}{
		{methodMatch(exact, "a.S", "M"), "Exact /a.S/M"},
		{methodMatch(exact, "a.S", ""), "PathPrefix /a.S"},
		{methodMatch(exact, "", "M.x"), `RegularExpression /[^/]+/M\.x`},
		{methodMatch(re, "a\\..*", ""), `RegularExpression /(?:a\..*)/(?:[^/]+)`},
		{methodMatch(re, "", "M.*"), `RegularExpression /(?:[^/]+)/(?:M.*)`},
		{gatewayv1.GRPCRouteMatch{}, "<nil>"},
	} {
		p := grpcPath(tc.m.Method)
		got := "<nil>"
		if p != nil {
			got = fmt.Sprintf("%s %s", *p.Type, *p.Value)
		}
		if got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.m.Method, got, tc.want)
		}
	}
}

// A GRPCRoute attaches to HTTP listeners unless their allowedRoutes leave
// GRPCRoute out, and a cross-namespace backend needs a ReferenceGrant from
// GRPCRoutes (one from HTTPRoutes does not do).
func TestGRPCRouteStatus(t *testing.T) {
	httpOnly := gw("h", listener("http", 80, gatewayv1.HTTPProtocolType, "", kinds("HTTPRoute")))
	rt := grpcRoute("r", grpcRule("a"))
	rt.Namespace = "infra" // the Gateways' (allowedRoutes: Same)
	rt.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "g"}, {Name: "h"}}
	rt.Spec.Rules[0].BackendRefs[0].Namespace = ptr(gatewayv1.Namespace("other"))
	grant := func(kind string) *gatewayv1.ReferenceGrant {
		return &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "other"}, Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: groupGateway, Kind: gatewayv1.Kind(kind), Namespace: "infra"}},
			To:   []gatewayv1.ReferenceGrantTo{{Kind: kindService}}}}
	}
	for _, tc := range []struct {
		grant    string
		resolved string
	}{{"HTTPRoute", "RefNotPermitted"}, {"GRPCRoute", "ResolvedRefs"}} {
		w := World{Gateways: []*gatewayv1.Gateway{gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, "")), httpOnly},
			GRPCRoutes: []*gatewayv1.GRPCRoute{rt}, Grants: []*gatewayv1.ReferenceGrant{grant(tc.grant)},
			Services: map[types.NamespacedName]*corev1.Service{{Namespace: "other", Name: "a"}: {}}}
		res := Compute(w)
		ps := res.GRPCParents[types.NamespacedName{Namespace: "infra", Name: "r"}]
		if len(ps) != 2 || len(res.Parents) != 0 {
			t.Fatalf("grant from %s: GRPC parents %+v, HTTP parents %+v", tc.grant, ps, res.Parents)
		}
		if c := findCond(ps[0].Conditions, "Accepted"); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("grant from %s: on g Accepted %+v, want True", tc.grant, c)
		}
		if c := findCond(ps[1].Conditions, "Accepted"); c == nil || c.Reason != string(gatewayv1.RouteReasonNotAllowedByListeners) {
			t.Errorf("grant from %s: on h Accepted %+v, want NotAllowedByListeners", tc.grant, c)
		}
		if c := findCond(ps[0].Conditions, "ResolvedRefs"); c == nil || c.Reason != tc.resolved {
			t.Errorf("grant from %s: ResolvedRefs %+v, want reason %s", tc.grant, c, tc.resolved)
		}
		if n := len(res.Attached[ListenerKey{types.NamespacedName{Namespace: "infra", Name: "g"}, "http"}]); n != 1 {
			t.Errorf("grant from %s: %d routes attached to g/http, want 1", tc.grant, n)
		}
	}
}
