package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A node's data plane beside the control plane on a real API server: it
// announces itself, opens the Gateway's data port (on loopback here) and
// serves the route to a selector-less Service's hand-written endpoint; a
// route change is served without reopening anything.
func TestNodeServesTheGatewaysRoutes(t *testing.T) {
	kube, gw := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	backend := echo(t, "web")
	// The API refuses loopback endpoints, as Kubernetes does: the slice
	// names a pod-like address and the data plane's dialer maps it to the
	// test's backend.
	svc, es := svcWithSlice("web", backend, "10.244.1.7")
	_, backendPort, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	if _, err := kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es.Name, es.Labels, es.AddressType = "web-1", map[string]string{discoveryv1.LabelServiceName: "web"}, discoveryv1.AddressTypeIPv4
	if _, err := kube.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	addrs := map[int32]string{}
	n, err := NewNode(NodeConfig{Client: kube, Gateway: gw, NodeName: "node1", Logger: testutil.Logger(t),
		DialUpstream: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "10.244.1.7:"+backendPort {
				return nil, fmt.Errorf("dial %s: not the test's endpoint", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(backend.URL, "http://"))
		},
		Listen: func(port int32) (net.Listener, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				mu.Lock()
				addrs[port] = ln.Addr().String()
				mu.Unlock()
			}
			return ln, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: ClassName, Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := httpRoute("r", 0, []string{"cafe.test"}, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/coffee")}, backends: []string{"web"}})
	rt.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "edge"}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(host, p string) (int, string, error) {
		mu.Lock()
		a := addrs[DataPortMin]
		mu.Unlock()
		if a == "" {
			return 0, "", fmt.Errorf("data port %d not open", DataPortMin)
		}
		req, _ := http.NewRequest("GET", "http://"+a+p, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	testutil.Eventually(t, wait, "the route served on the data port", func() error {
		code, body, err := get("cafe.test", "/coffee")
		if err != nil {
			return err
		}
		if code != 200 || body != "web host=cafe.test uri=/coffee x-env=" {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	if code, _, err := get("cafe.test", "/tea"); err != nil || code != 404 {
		t.Errorf("/tea: %d %v, want 404", code, err)
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil || node.Annotations[DataPlaneAnnotation] != "serving" {
		t.Errorf("node annotations %v (%v), want %s", node.Annotations, err, DataPlaneAnnotation)
	}

	// The control plane writes the route's status meanwhile: read, change and
	// write again on a conflict, as a client does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := gw.GatewayV1().HTTPRoutes("default").Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Rules[0].Matches = append(cur.Spec.Rules[0].Matches, prefix("/tea"))
		_, err = gw.GatewayV1().HTTPRoutes("default").Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the changed route served", func() error {
		code, body, err := get("cafe.test", "/tea")
		if err != nil {
			return err
		}
		if code != 200 || body != "web host=cafe.test uri=/tea x-env=" {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
}
