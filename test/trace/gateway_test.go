package trace_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// TestTraceThroughAGateway makes a Gateway with an HTTPRoute to an echo
// pod and checks what a student sees of it: `minikit lab graph -o json`
// lists the Gateway, its listener and the route with its backend, and
// `minikit trace client ADDRESS:80` names the Gateway, the listener, the
// route and the backend pod, after the kernel's rules for the Gateway's
// Service.
func TestTraceThroughAGateway(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gwclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, l: l, c: c, ips: map[string]string{}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod("echo-a", "node2", "minikit/echo", map[string]string{"app": "echo"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, service("echo", map[string]string{"app": "echo"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "cafe", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "minikit",
			Listeners: []gatewayv1.Listener{{Name: "web", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := gatewayv1.PortNumber(80)
	prefix := gatewayv1.PathMatchPathPrefix
	path := "/coffee"
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "coffee", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "cafe"}}},
			Hostnames: []gatewayv1.Hostname{"cafe.example.com"},
			Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "echo", Port: &port}}}}}}}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "echo-a")

	// The picture: the Gateway with its address and listener, the route
	// Accepted on it, its rule and backend.
	var addr string
	testutil.Eventually(t, 120*time.Second, "lab graph lists Gateway cafe, Programmed with an address, and HTTPRoute coffee Accepted", func() error {
		out, err := exec.Command(testenv.Minikit(t), "lab", "graph", "--name", l.Name(), "-o", "json").CombinedOutput()
		if err != nil {
			return fmt.Errorf("minikit lab graph: %v: %s", err, out)
		}
		var gr topology.Graph
		if err := json.Unmarshal(out, &gr); err != nil {
			return fmt.Errorf("decoding the graph: %v", err)
		}
		if len(gr.Gateways) != 1 || len(gr.GatewayRoutes) != 1 {
			return fmt.Errorf("gateways %+v, routes %+v", gr.Gateways, gr.GatewayRoutes)
		}
		gg, r := gr.Gateways[0], gr.GatewayRoutes[0]
		if gg.ID != "gw:default/cafe" || gg.Class != "minikit" || gg.Programmed != "True" || len(gg.Addresses) != 1 ||
			len(gg.Listeners) != 1 || gg.Listeners[0] != (topology.GatewayListener{Name: "web", Protocol: "HTTP", Port: 80, AttachedRoutes: 1}) {
			return fmt.Errorf("gateway %+v", gg)
		}
		if r.ID != "httproute:default/coffee" || len(r.Parents) != 1 || r.Parents[0].Gateway != gg.ID || r.Parents[0].Accepted != "True" || r.Parents[0].ResolvedRefs != "True" ||
			len(r.Rules) != 1 || strings.Join(r.Rules[0].Matches, ",") != "/coffee" ||
			len(r.Rules[0].Backends) != 1 || r.Rules[0].Backends[0] != (topology.RouteBackend{Service: "svc:default/echo", Port: 80, Weight: 1}) {
			return fmt.Errorf("route %+v", r)
		}
		addr = gg.Addresses[0]
		return nil
	})

	// The trace: the kernel's rules for the Gateway's Service DNAT to a
	// node's data port; the Gateway part names the listener, the route
	// and the backend pod.
	res := e.until("trace to the Gateway names its listener, route and backend pod", func(res *trace.Result) error {
		gt := res.Gateway
		if gt == nil {
			return fmt.Errorf("no gateway section (to %s %s)", res.To.Kind, res.To.Service)
		}
		if gt.Name != "default/cafe" || len(gt.Listeners) != 1 || gt.Listeners[0].Name != "web" || len(gt.DataPlanes) == 0 || len(gt.Announcers) != 1 {
			return fmt.Errorf("gateway %+v", gt)
		}
		if len(gt.Routes) != 1 || gt.Routes[0].Name != "default/coffee" || gt.Routes[0].Accepted != "True" {
			return fmt.Errorf("routes %+v", gt.Routes)
		}
		bs := gt.Routes[0].Rules[0].Backends
		if len(bs) != 1 || len(bs[0].Endpoints) != 1 || bs[0].Endpoints[0].Pod == nil || bs[0].Endpoints[0].Pod.Name != "echo-a" {
			return fmt.Errorf("backends %+v", bs)
		}
		// The kernel's part: every accepted path ends at a data plane.
		for _, p := range res.Paths {
			if p.Verdict != "ACCEPT" {
				return fmt.Errorf("path %s to %s: %s", p.Verdict, p.Dst, p.Why)
			}
			found := false
			for _, d := range gt.DataPlanes {
				found = found || d.Addr == p.Dst
			}
			if !found {
				return fmt.Errorf("path to %s, not a data plane of %+v", p.Dst, gt.DataPlanes)
			}
		}
		return nil
	}, lab.Client, addr+":80")
	if res.To.Kind != "loadbalancer IP" {
		t.Errorf("to %+v", res.To)
	}
	out, err := e.text(lab.Client, addr+":80")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("minikit trace client %s:80:\n%s", addr, out)
	for _, want := range []string{"gateway default/cafe (class minikit) at " + addr + ":80", "listener web HTTP/80",
		"delivered to the Gateway data plane (user space, not a kernel rule)", "HTTPRoute default/coffee, cafe.example.com: Accepted",
		"rule 0 /coffee", "pod default/echo-a on node2"} {
		if !strings.Contains(out, want) {
			t.Errorf("minikit trace lacks %q:\n%s", want, out)
		}
	}
	// The picture of the trace ends at the data plane, not at a pod.
	out2, err := exec.Command(testenv.Minikit(t), "lab", "graph", "--name", l.Name(), "--trace", lab.Client, addr+":80", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("minikit lab graph --trace: %v: %s", err, out2)
	}
	var traced struct {
		Hops []topology.Hop `json:"hops"`
	}
	if err := json.Unmarshal(out2, &traced); err != nil || len(traced.Hops) == 0 {
		t.Fatalf("lab graph --trace: %v: %s", err, out2)
	}
	// Path 0 ends at a node: the announcing node itself ("local: ") or another.
	if last := traced.Hops[len(traced.Hops)-1]; !strings.HasPrefix(strings.TrimPrefix(last.Label, "local: "), "Gateway default/cafe data plane, user space") {
		t.Errorf("last hop %+v", last)
	}
	// The route is the one a request takes: curl from the client host.
	testutil.Eventually(t, 60*time.Second, "curl through the Gateway reaches echo-a", func() error {
		out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "-H", "Host: cafe.example.com", "http://"+addr+"/coffee")
		if err != nil || !strings.Contains(out, "pod=echo-a") {
			return fmt.Errorf("curl: %v: %q", err, out)
		}
		return nil
	})
}
