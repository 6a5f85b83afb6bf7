// Package gateway_test is the Gateway API's lab tier: a Gateway of the
// cluster's class minikit gets an address from the lab's LoadBalancer pool,
// and the lab's client host reaches an echo-basic backend through it, as a
// student would with curl.
package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/gateway"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

func TestGatewayFromTheClientHost(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	gw := gatewayClient(t, l)
	labels := map[string]string{"app": "echo"}
	pod := echoBasicPod("echo-1", labels)
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "echo-1")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(3000)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "cafe", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName,
			Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := gatewayv1.PortNumber(8080)
	backends := []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: "echo", Port: &port}}}}
	prefix, decaf := gatewayv1.PathMatchPathPrefix, "/decaf"
	// The second rule's filter is an extension minikit does not serve: its
	// requests get 500 (never the backend without the filter) and the
	// route's ResolvedRefs says why, while the first rule serves.
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "coffee", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "cafe"}}},
			Hostnames: []gatewayv1.Hostname{"cafe.example.com"},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: backends}, {BackendRefs: backends,
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &decaf}}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterExtensionRef,
					ExtensionRef: &gatewayv1.LocalObjectReference{Group: "example.com", Kind: "Decaffeinate", Name: "d"}}}}}}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var addr netip.Addr
	testutil.Eventually(t, 120*time.Second, "Gateway cafe Programmed with an address", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "cafe", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cnd := range g.Status.Conditions {
			if cnd.Type == "Programmed" && cnd.Status != metav1.ConditionTrue {
				return fmt.Errorf("Programmed %s %s: %s", cnd.Status, cnd.Reason, cnd.Message)
			}
		}
		if len(g.Status.Addresses) == 0 {
			return fmt.Errorf("no address")
		}
		addr, err = netip.ParseAddr(g.Status.Addresses[0].Value)
		return err
	})
	first, last, _ := strings.Cut(l.LBPool(), "-")
	if lo, hi := netip.MustParseAddr(first), netip.MustParseAddr(last); addr.Less(lo) || hi.Less(addr) {
		t.Errorf("address %s is not in the lab pool %s", addr, l.LBPool())
	}
	testutil.Eventually(t, 60*time.Second, "curl from the client reaches echo-1 through the Gateway", func() error {
		out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "-H", "Host: cafe.example.com", "http://"+addr.String()+"/coffee")
		if err != nil {
			return fmt.Errorf("curl: %v: %s", err, out)
		}
		var reply struct{ Pod, Path, Host string }
		if err := json.Unmarshal([]byte(out), &reply); err != nil {
			return fmt.Errorf("reply %q: %v", out, err)
		}
		if reply.Pod != "echo-1" || reply.Path != "/coffee" || reply.Host != "cafe.example.com" {
			return fmt.Errorf("reply %s", out)
		}
		return nil
	})
	out, err := testenv.Run(l, lab.Client, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "-H", "Host: tea.example.com", "http://"+addr.String()+"/")
	if err != nil || out != "404" {
		t.Errorf("a host no route names: %q %v, want 404", out, err)
	}
	out, err = testenv.Run(l, lab.Client, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "-H", "Host: cafe.example.com", "http://"+addr.String()+"/decaf/1")
	if err != nil || out != "500" {
		t.Errorf("the rule with an unresolvable ExtensionRef: %q %v, want 500", out, err)
	}
	testutil.Eventually(t, 30*time.Second, "HTTPRoute coffee ResolvedRefs False, InvalidKind", func() error {
		rt, err := gw.GatewayV1().HTTPRoutes("default").Get(ctx, "coffee", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, p := range rt.Status.Parents {
			for _, cnd := range p.Conditions {
				if cnd.Type == "ResolvedRefs" && cnd.Status == metav1.ConditionFalse && cnd.Reason == "InvalidKind" &&
					strings.Contains(cnd.Message, "spec.rules[1].filters[0].extensionRef") {
					return nil
				}
			}
		}
		return fmt.Errorf("status.parents %+v", rt.Status.Parents)
	})
}

// gatewayClient is a Gateway API clientset for the lab's API.
func gatewayClient(t *testing.T, l *lab.Lab) gwclient.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gwclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

// echoBasicPod is a pod on node2 running the Gateway API suite's echo-basic
// image (its replies name the pod and namespace), with more environment.
func echoBasicPod(name string, labels map[string]string, env ...corev1.EnvVar) *corev1.Pod {
	env = append([]corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}, env...)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "echo",
			Image: "registry.k8s.io/gateway-api/echo-basic:v1.5.1", Env: env}}}}
}

// programmedAddress is the Gateway's first status address once it is
// Programmed, or why not yet.
func programmedAddress(ctx context.Context, gw gwclient.Interface, name string) (string, error) {
	g, err := gw.GatewayV1().Gateways("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if c := apimeta.FindStatusCondition(g.Status.Conditions, "Programmed"); c == nil || c.Status != metav1.ConditionTrue {
		return "", fmt.Errorf("Programmed %+v", c)
	}
	if len(g.Status.Addresses) == 0 {
		return "", fmt.Errorf("no address")
	}
	return g.Status.Addresses[0].Value, nil
}

// acceptedAndResolved says why a route's one parent is not yet Accepted and
// ResolvedRefs (nil when it is).
func acceptedAndResolved(ps []gatewayv1.RouteParentStatus) error {
	if len(ps) != 1 {
		return fmt.Errorf("status.parents %+v", ps)
	}
	for _, typ := range []string{"Accepted", "ResolvedRefs"} {
		if c := apimeta.FindStatusCondition(ps[0].Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s %+v", typ, c)
		}
	}
	return nil
}
