package gateway_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/gateway"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A GRPCRoute from the lab's client host: curl speaks HTTP/2 with prior
// knowledge (h2c) to the Gateway's address and sends a gRPC call (a POST
// of one length-prefixed, empty EchoRequest), as grpcurl -plaintext would.
// The exact method reaches echo-basic's gRPC echo (its reply names the pod),
// a method no rule matches is answered grpc-status 12 (Unimplemented), and
// the route says Accepted and ResolvedRefs.
func TestGatewayGRPCFromTheClientHost(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	gw := gatewayClient(t, l)
	labels := map[string]string{"app": "grpc-echo"}
	pod := echoBasicPod("grpc-echo-1", labels, corev1.EnvVar{Name: "GRPC_ECHO_SERVER", Value: "1"})
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "grpc-echo-1")
	h2c := "kubernetes.io/h2c"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "grpc-echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(3000), AppProtocol: &h2c}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "rpc", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName,
			Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const service = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"
	svcName, method := service, "Echo"
	port := gatewayv1.PortNumber(8080)
	rt := &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: gatewayv1.GRPCRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "rpc"}}},
			Rules: []gatewayv1.GRPCRouteRule{{
				Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: &svcName, Method: &method}}},
				BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "grpc-echo", Port: &port}}}}}}}}
	if _, err := gw.GatewayV1().GRPCRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var addr netip.Addr
	testutil.Eventually(t, 120*time.Second, "Gateway rpc Programmed with an address", func() error {
		a, err := programmedAddress(ctx, gw, "rpc")
		if err != nil {
			return err
		}
		addr, err = netip.ParseAddr(a)
		return err
	})
	testutil.Eventually(t, 60*time.Second, "GRPCRoute echo Accepted and ResolvedRefs", func() error {
		r, err := gw.GatewayV1().GRPCRoutes("default").Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return acceptedAndResolved(r.Status.Parents)
	})
	dir := t.TempDir()
	req := filepath.Join(dir, "req")
	// One gRPC message: not compressed, length 0 (an empty EchoRequest).
	if err := os.WriteFile(req, []byte{0, 0, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	call := func(method, body string) (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "--http2-prior-knowledge", "-D", "-", "-o", body,
			"-H", "Content-Type: application/grpc", "-H", "TE: trailers", "--data-binary", "@"+req,
			"http://"+addr.String()+"/"+service+"/"+method)
	}
	body := filepath.Join(dir, "body")
	testutil.Eventually(t, 60*time.Second, "the Echo call from the client reaches grpc-echo-1 over h2c", func() error {
		hdr, err := call("Echo", body)
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, hdr)
		}
		reply, err := os.ReadFile(body)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(hdr, "HTTP/2 200") || !strings.Contains(strings.ToLower(hdr), "content-type: application/grpc") {
			return fmt.Errorf("headers %q", hdr)
		}
		// The reply's protobuf carries the method and the pod's name as strings.
		if !strings.Contains(string(reply), "grpc-echo-1") || !strings.Contains(string(reply), "/"+service+"/Echo") {
			return fmt.Errorf("reply %q", reply)
		}
		return nil
	})
	hdr, err := call("EchoTwo", filepath.Join(dir, "body2"))
	if err != nil || !strings.HasPrefix(hdr, "HTTP/2 200") || !strings.Contains(strings.ToLower(hdr), "grpc-status: 12") {
		t.Errorf("a method no rule matches: %q %v, want HTTP/2 200 with grpc-status 12", hdr, err)
	}
}
