package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

const wait = 30 * time.Second

// startControlPlane starts an API server with the bundle and the control plane.
func startControlPlane(t *testing.T) (kubernetes.Interface, gwclient.Interface) {
	t.Helper()
	api := apiservertest.Start(t)
	ext, err := apiextensionsclient.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := Install(ctx, ext.ApiextensionsV1().CustomResourceDefinitions(), ChannelStandard, nil); err != nil {
		t.Fatal(err)
	}
	gw, err := gwclient.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the Gateway API served", func() error {
		if _, err := gw.GatewayV1().GatewayClasses().List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("gatewayclasses: %w", err)
		}
		if _, err := gw.GatewayV1().Gateways("default").List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("gateways: %w", err)
		}
		if _, err := gw.GatewayV1().HTTPRoutes("default").List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("httproutes: %w", err)
		}
		if _, err := gw.GatewayV1().ReferenceGrants("default").List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("referencegrants: %w", err)
		}
		return nil
	})
	cp, err := NewControlPlane(ControlPlaneConfig{Client: api.Client, Gateway: gw, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return api.Client, gw
}

func condIs(cs []metav1.Condition, typ string, status metav1.ConditionStatus, reason string, gen int64) error {
	c := meta.FindStatusCondition(cs, typ)
	if c == nil {
		return fmt.Errorf("no %s condition in %+v", typ, cs)
	}
	if c.Status != status || c.Reason != reason || c.ObservedGeneration != gen {
		return fmt.Errorf("%s = %s/%s at generation %d, want %s/%s at %d (%s)", typ, c.Status, c.Reason, c.ObservedGeneration, status, reason, gen, c.Message)
	}
	return nil
}

// The whole control-plane path on a real API server, with the LoadBalancer
// stub's and a node data plane's parts played by the test: the class is
// created and Accepted, a Gateway gets its Service (listener port → data
// port, spec.addresses as the stub's request) and EndpointSlice, stays
// Programmed=False until it has an address and a serving node, and its
// route's parents and attachedRoutes follow.
func TestControlPlaneProgramsAGateway(t *testing.T) {
	kube, gw := startControlPlane(t)
	ctx := context.Background()
	testutil.Eventually(t, wait, "GatewayClass minikit Accepted", func() error {
		gc, err := gw.GatewayV1().GatewayClasses().Get(ctx, ClassName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if gc.Spec.ControllerName != ControllerName {
			return fmt.Errorf("controllerName %q", gc.Spec.ControllerName)
		}
		var names []string
		for _, f := range gc.Status.SupportedFeatures {
			names = append(names, string(f.Name))
		}
		if got, want := strings.Join(names, ","), "GRPCRoute,Gateway,HTTPRoute,"+
			"HTTPRoute303RedirectStatusCode,HTTPRoute307RedirectStatusCode,HTTPRoute308RedirectStatusCode,"+
			"HTTPRouteBackendRequestHeaderModification,HTTPRouteBackendTimeout,HTTPRouteCORS,HTTPRouteHostRewrite,HTTPRouteMethodMatching,"+
			"HTTPRouteNamedRouteRule,HTTPRouteParentRefPort,HTTPRoutePathRedirect,HTTPRoutePathRewrite,HTTPRoutePortRedirect,"+
			"HTTPRouteQueryParamMatching,HTTPRouteRequestMirror,HTTPRouteRequestMultipleMirrors,HTTPRouteRequestPercentageMirror,"+
			"HTTPRouteRequestTimeout,HTTPRouteResponseHeaderModification,HTTPRouteSchemeRedirect,"+
			"ReferenceGrant,TCPRoute,TLSRoute,UDPRoute"; got != want {
			return fmt.Errorf("status.supportedFeatures %s, want %s", got, want)
		}
		return condIs(gc.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", gc.Generation)
	})

	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: ClassName,
			Addresses: []gatewayv1.GatewaySpecAddress{{Type: ptr(gatewayv1.IPAddressType), Value: "192.168.56.245"}},
			Listeners: []gatewayv1.Listener{
				{Name: "a", Port: 80, Protocol: gatewayv1.HTTPProtocolType, Hostname: ptr(gatewayv1.Hostname("a.test"))},
				{Name: "b", Port: 80, Protocol: gatewayv1.HTTPProtocolType, Hostname: ptr(gatewayv1.Hostname("b.test"))},
				{Name: "alt", Port: 8080, Protocol: gatewayv1.HTTPProtocolType},
			}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "edge"}}},
			Hostnames: []gatewayv1.Hostname{"a.test"},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: ptr(gatewayv1.PortNumber(8080))}}}}}}}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var svc *corev1.Service
	testutil.Eventually(t, wait, "the Gateway's Service", func() error {
		var err error
		svc, err = kube.CoreV1().Services("default").Get(ctx, "edge"+ServiceSuffix, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Selector) != 0 {
			return fmt.Errorf("type %s selector %v", svc.Spec.Type, svc.Spec.Selector)
		}
		got := ""
		for _, p := range svc.Spec.Ports {
			got += fmt.Sprintf("%s:%d→%d ", p.Name, p.Port, p.TargetPort.IntVal)
		}
		if want := "tcp-80:80→20000 tcp-8080:8080→20001 "; got != want {
			return fmt.Errorf("ports %q, want %q", got, want)
		}
		if svc.Annotations[lbRequestAnnotation] != "192.168.56.245" || svc.Labels[GatewayNameLabel] != "edge" {
			return fmt.Errorf("annotations %v labels %v", svc.Annotations, svc.Labels)
		}
		if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].Kind != "Gateway" {
			return fmt.Errorf("owners %+v", svc.OwnerReferences)
		}
		return nil
	})
	testutil.Eventually(t, wait, "Programmed=False AddressNotAssigned, route attached", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := condIs(g.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", g.Generation); err != nil {
			return err
		}
		if err := condIs(g.Status.Conditions, "Programmed", metav1.ConditionFalse, "AddressNotAssigned", g.Generation); err != nil {
			return err
		}
		if len(g.Status.Listeners) != 3 || g.Status.Listeners[0].AttachedRoutes != 1 || g.Status.Listeners[1].AttachedRoutes != 0 || g.Status.Listeners[2].AttachedRoutes != 1 {
			return fmt.Errorf("listeners %+v", g.Status.Listeners)
		}
		r, err := gw.GatewayV1().HTTPRoutes("default").Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(r.Status.Parents) != 1 {
			return fmt.Errorf("route parents %+v", r.Status.Parents)
		}
		if err := condIs(r.Status.Parents[0].Conditions, "Accepted", metav1.ConditionTrue, "Accepted", r.Generation); err != nil {
			return err
		}
		return condIs(r.Status.Parents[0].Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", r.Generation)
	})

	// The stub's part: an address. A node's part: a serving data plane.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.56.245"}}
	if _, err := kube.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{DataPlaneAnnotation: "serving"}}}
	node, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the EndpointSlice names the node's data ports", func() error {
		es, err := kube.DiscoveryV1().EndpointSlices("default").Get(ctx, "edge"+ServiceSuffix, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if es.Labels[discoveryv1.LabelServiceName] != "edge"+ServiceSuffix || es.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
			return fmt.Errorf("labels %v", es.Labels)
		}
		if len(es.Endpoints) != 1 || es.Endpoints[0].Addresses[0] != "10.0.0.11" || len(es.Ports) != 2 || *es.Ports[0].Port != 20000 || *es.Ports[0].Name != "tcp-80" {
			return fmt.Errorf("endpoints %+v ports %+v", es.Endpoints, es.Ports)
		}
		return nil
	})
	testutil.Eventually(t, wait, "Programmed=True with the address", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(g.Status.Addresses) != 1 || g.Status.Addresses[0].Value != "192.168.56.245" || *g.Status.Addresses[0].Type != gatewayv1.IPAddressType {
			return fmt.Errorf("addresses %+v", g.Status.Addresses)
		}
		for _, l := range g.Status.Listeners {
			if err := condIs(l.Conditions, "Programmed", metav1.ConditionTrue, "Programmed", g.Generation); err != nil {
				return fmt.Errorf("listener %s: %w", l.Name, err)
			}
		}
		return condIs(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed", g.Generation)
	})

	// A second Gateway gets the next data port, and a spec change is seen
	// at its new generation.
	g2 := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: ClassName, Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the second Gateway's data port", func() error {
		s, err := kube.CoreV1().Services("default").Get(ctx, "second"+ServiceSuffix, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.IntVal != 20002 {
			return fmt.Errorf("ports %+v", s.Spec.Ports)
		}
		return nil
	})
	// The control plane writes the Gateway's status meanwhile: read, change
	// and write again on a conflict, as a client does.
	var cur *gatewayv1.Gateway
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		g.Spec.Listeners = append(g.Spec.Listeners, gatewayv1.Listener{Name: "udp", Port: 8080, Protocol: gatewayv1.UDPProtocolType})
		cur, err = gw.GatewayV1().Gateways("default").Update(ctx, g, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "the new generation's conditions", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if g.Generation != cur.Generation || g.Generation < 2 {
			return fmt.Errorf("generation %d, want %d (>1)", g.Generation, cur.Generation)
		}
		if err := condIs(g.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", g.Generation); err != nil {
			return err
		}
		if len(g.Status.Listeners) != 4 {
			return fmt.Errorf("listeners %+v", g.Status.Listeners)
		}
		return condIs(g.Status.Listeners[3].Conditions, "Accepted", metav1.ConditionTrue, "Accepted", g.Generation)
	})
	// A UDP listener on a TCP listener's port number: the Service mixes
	// protocols, the UDP port has a data port of its own, and the
	// EndpointSlice carries it with its protocol (what the service proxy
	// DNATs UDP by).
	testutil.Eventually(t, wait, "the UDP listener's port", func() error {
		svc, err := kube.CoreV1().Services("default").Get(ctx, "edge"+ServiceSuffix, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := ""
		for _, p := range svc.Spec.Ports {
			got += fmt.Sprintf("%s %s:%d→%d ", p.Name, p.Protocol, p.Port, p.TargetPort.IntVal)
		}
		if want := "tcp-80 TCP:80→20000 tcp-8080 TCP:8080→20001 udp-8080 UDP:8080→20003 "; got != want {
			return fmt.Errorf("ports %q, want %q", got, want)
		}
		es, err := kube.DiscoveryV1().EndpointSlices("default").Get(ctx, "edge"+ServiceSuffix, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = ""
		for _, p := range es.Ports {
			got += fmt.Sprintf("%s %s %d ", *p.Name, *p.Protocol, *p.Port)
		}
		if want := "tcp-80 TCP 20000 tcp-8080 TCP 20001 udp-8080 UDP 20003 "; got != want {
			return fmt.Errorf("EndpointSlice ports %q, want %q", got, want)
		}
		return nil
	})
}

// A Gateway's Service name is a valid Service name for every valid Gateway
// name, and two Gateways never share one.
func TestServiceName(t *testing.T) {
	long := "gateway-with-one-not-matching-port-and-section-name-route" // 57: with the suffix, 65
	for _, tc := range []struct{ gateway, want string }{
		{"edge", "edge-minikit"},
		{long, long[:46] + "-" + hash8(long) + "-minikit"},
		{"edge.example", "edge-example-" + hash8("edge.example") + "-minikit"},
		{"1st", "gw-1st-" + hash8("1st") + "-minikit"},
	} {
		got := ServiceName(tc.gateway)
		if got != tc.want {
			t.Errorf("ServiceName(%q) = %q, want %q", tc.gateway, got, tc.want)
		}
		if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
			t.Errorf("ServiceName(%q) = %q is not a Service name: %v", tc.gateway, got, errs)
		}
	}
	if a, b := ServiceName(long+"-a"), ServiceName(long+"-b"); a == b {
		t.Errorf("Gateways %q and %q share the Service %q", long+"-a", long+"-b", a)
	}
	if a, b := ServiceName("edge.example"), ServiceName("edge-example"); a == b {
		t.Errorf("Gateways edge.example and edge-example share the Service %q", a)
	}
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// The API asks for supportedFeatures sorted by name, without duplicates.
func TestSupportedFeaturesSorted(t *testing.T) {
	if !slices.IsSorted(SupportedFeatures) || len(slices.Compact(slices.Clone(SupportedFeatures))) != len(SupportedFeatures) {
		t.Errorf("SupportedFeatures %v: not sorted or has duplicates", SupportedFeatures)
	}
}
