package controllers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served and still read by kube-proxy-style consumers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testService(name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"tier": "front"}},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: ports},
	}
}

func httpPort(target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: "http", Port: 80, TargetPort: target}
}

func (tc *testCluster) createService(s *corev1.Service) *corev1.Service {
	tc.t.Helper()
	got, err := tc.client.CoreV1().Services(s.Namespace).Create(tc.ctx, s, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating service %s: %v", s.Name, err)
	}
	return got
}

// endpointPod is a pod bound to node-1 with an IP, ready or not.
func (tc *testCluster) endpointPod(name, ip string, ready bool, mutate ...func(*corev1.Pod)) {
	tc.t.Helper()
	p := testPod(name, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web"}
		p.Spec.NodeName = "node-1"
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9376}}
	})
	for _, m := range mutate {
		m(p)
	}
	tc.createPod(p)
	if ip != "" {
		tc.setPodStatus("default", name, ip, ready)
	}
}

// endpointsSummary renders an Endpoints object one address a line:
// "pod ip ready|notready node=... [host=...] ports".
func (tc *testCluster) endpointsSummary(name string) ([]string, *corev1.Endpoints) {
	ep, err := tc.client.CoreV1().Endpoints("default").Get(tc.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []string{"<none>"}, nil
	}
	if err != nil {
		tc.t.Fatal(err)
	}
	var out []string
	for _, ss := range ep.Subsets {
		var ports []string
		for _, p := range ss.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
		}
		slices.Sort(ports)
		line := func(a corev1.EndpointAddress, state string) string {
			s := fmt.Sprintf("%s %s %s", a.TargetRef.Name, a.IP, state)
			if a.NodeName != nil {
				s += " node=" + *a.NodeName
			}
			if a.Hostname != "" {
				s += " host=" + a.Hostname
			}
			return s + " " + strings.Join(ports, ",")
		}
		for _, a := range ss.Addresses {
			out = append(out, line(a, "ready"))
		}
		for _, a := range ss.NotReadyAddresses {
			out = append(out, line(a, "notready"))
		}
	}
	slices.Sort(out)
	return out, ep
}

// slicesOf returns the EndpointSlices of a service and renders their
// endpoints one a line: "pod ip r=ready s=serving t=terminating ... ports".
func (tc *testCluster) slicesOf(svc string) ([]string, []discoveryv1.EndpointSlice) {
	l, err := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		tc.t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", *p.Name, *p.Port, *p.Protocol))
		}
		slices.Sort(ports)
		if len(s.Endpoints) == 0 {
			out = append(out, "<empty> "+strings.Join(ports, ","))
		}
		for _, e := range s.Endpoints {
			target := "-"
			if e.TargetRef != nil {
				target = e.TargetRef.Name
			}
			line := fmt.Sprintf("%s %s r=%s s=%s t=%s", target, strings.Join(e.Addresses, ","),
				boolPtr(e.Conditions.Ready), boolPtr(e.Conditions.Serving), boolPtr(e.Conditions.Terminating))
			if e.NodeName != nil {
				line += " node=" + *e.NodeName
			}
			if e.Hostname != nil {
				line += " host=" + *e.Hostname
			}
			out = append(out, line+" "+strings.Join(ports, ","))
		}
	}
	slices.Sort(out)
	return out, l.Items
}

func boolPtr(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

func (tc *testCluster) waitEndpoints(svc string, wantEP, wantSlices []string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "endpoints of "+svc, func() error {
		ep, _ := tc.endpointsSummary(svc)
		sl, _ := tc.slicesOf(svc)
		if !slices.Equal(ep, wantEP) || !slices.Equal(sl, wantSlices) {
			return fmt.Errorf("\nendpoints: %q\nslices:    %q", ep, sl)
		}
		return nil
	})
}

func newEndpointsCluster(t *testing.T) *testCluster {
	tc := newTestCluster(t)
	tc.createNode("node-1", true, nil)
	tc.startControllers(Config{})
	return tc
}

func TestEndpointsFollowReadiness(t *testing.T) {
	tc := newEndpointsCluster(t)
	svc := tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.endpointPod("web-b", "10.244.0.12", false)
	tc.endpointPod("web-c", "", false) // no IP yet: not an endpoint
	tc.endpointPod("other", "10.244.0.99", true, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} })

	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 notready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=false s=false t=false node=node-1 http:9376/TCP",
	})

	_, ep := tc.endpointsSummary("web")
	if ep.Labels[endpointsManagedByLabel] != endpointsManagerName || ep.Labels["tier"] != "front" {
		t.Errorf("endpoints labels = %v", ep.Labels)
	}
	if ref := ep.Subsets[0].Addresses[0].TargetRef; ref.Kind != "Pod" || ref.Namespace != "default" || ref.UID == "" {
		t.Errorf("targetRef = %+v", ref)
	}
	_, sl := tc.slicesOf("web")
	s := sl[0]
	if !strings.HasPrefix(s.Name, "web-") || s.GenerateName != "web-" || len(s.Name) != len("web-")+5 {
		t.Errorf("slice name %q generateName %q", s.Name, s.GenerateName)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 || s.Labels[discoveryv1.LabelManagedBy] != sliceManagerName ||
		s.Labels[discoveryv1.LabelServiceName] != "web" || s.Labels["tier"] != "front" {
		t.Errorf("slice addressType %s labels %v", s.AddressType, s.Labels)
	}
	if ref := metav1.GetControllerOf(&s); ref == nil || ref.Kind != "Service" || ref.UID != svc.UID || ref.APIVersion != "v1" {
		t.Errorf("slice owner = %+v", ref)
	}

	// Readiness flips both ways; a pod getting an IP joins.
	tc.setPodStatus("default", "web-a", "10.244.0.11", false)
	tc.setPodStatus("default", "web-b", "10.244.0.12", true)
	tc.setPodStatus("default", "web-c", "10.244.0.13", true)
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 notready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=false s=false t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 r=true s=true t=false node=node-1 http:9376/TCP",
	})
	if _, sl := tc.slicesOf("web"); len(sl) != 1 {
		t.Errorf("want one slice, got %d", len(sl))
	}

	// A pod relabelled out of the selector leaves.
	p := tc.getPod("web-c")
	p.Labels = map[string]string{"app": "gone"}
	if _, err := tc.client.CoreV1().Pods("default").Update(tc.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 notready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=false s=false t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
}

func TestEndpointsNamedPortsResolvePerPod(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromString("http")),
		corev1.ServicePort{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100)}))
	tc.endpointPod("web-a", "10.244.0.11", true, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8080 })
	tc.endpointPod("web-b", "10.244.0.12", true, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 9090 })
	tc.endpointPod("web-c", "10.244.0.13", true, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8080 })
	// A UDP port of the same name does not resolve a TCP service port.
	tc.endpointPod("web-d", "10.244.0.14", true, func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP
	})
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9090/TCP,metrics:9100/TCP",
		"web-c 10.244.0.13 ready node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-d 10.244.0.14 ready node=node-1 metrics:9100/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9090/TCP,metrics:9100/TCP",
		"web-c 10.244.0.13 r=true s=true t=false node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-d 10.244.0.14 r=true s=true t=false node=node-1 metrics:9100/TCP",
	})
	_, ep := tc.endpointsSummary("web")
	if len(ep.Subsets) != 3 {
		t.Errorf("want 3 subsets (one per port set), got %+v", ep.Subsets)
	}
	if _, sl := tc.slicesOf("web"); len(sl) != 3 {
		t.Errorf("want 3 slices (one per port set), got %d", len(sl))
	}

	// Pods converging on one port number merge back into one slice.
	tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-b", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
	tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-d", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-c 10.244.0.13 ready node=node-1 http:8080/TCP,metrics:9100/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:8080/TCP,metrics:9100/TCP",
		"web-c 10.244.0.13 r=true s=true t=false node=node-1 http:8080/TCP,metrics:9100/TCP",
	})
	if _, sl := tc.slicesOf("web"); len(sl) != 1 {
		t.Errorf("want 1 slice, got %d", len(sl))
	}
}

func TestEndpointsPublishNotReadyAndHostnames(t *testing.T) {
	tc := newEndpointsCluster(t)
	svc := testService("db", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376)))
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	svc.Spec.PublishNotReadyAddresses = true
	tc.createService(svc)
	tc.endpointPod("web-a", "10.244.0.11", false, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" })
	tc.endpointPod("web-b", "10.244.0.12", true, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-1", "elsewhere" })
	tc.waitEndpoints("db", []string{
		"web-a 10.244.0.11 ready node=node-1 host=db-0 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 host=db-0 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
	_, ep := tc.endpointsSummary("db")
	if _, ok := ep.Labels[corev1.IsHeadlessService]; !ok {
		t.Errorf("headless service's endpoints lack %s: %v", corev1.IsHeadlessService, ep.Labels)
	}
}

func TestEndpointsTerminatingPods(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.endpointPod("web-b", "10.244.0.12", true)
	tc.endpointPod("web-c", "10.244.0.13", false)
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 notready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 r=false s=false t=false node=node-1 http:9376/TCP",
	})
	// Bound to an existing node, the pods terminate gracefully and stay
	// until their agent removes them (there is none here).
	for _, name := range []string{"web-a", "web-c"} {
		if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.waitEndpoints("web", []string{
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=false s=true t=true node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 r=false s=false t=true node=node-1 http:9376/TCP",
	})
	// Once gone, they leave the slice.
	tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-a", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
	tc.waitEndpoints("web", []string{
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-c 10.244.0.13 r=false s=false t=true node=node-1 http:9376/TCP",
	})
}

func TestEndpointsLeaveSelectorlessServicesAlone(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("external-db", nil, corev1.ServicePort{Name: "pg", Port: 5432}))
	// skip-mirror keeps the mirroring controller out of it: this is about
	// the endpoints controller (mirroring.go has its own tests).
	manual, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "external-db", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}},
			Ports:     []corev1.EndpointPort{{Name: "pg", Port: 5432}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manualSlice, err := tc.client.DiscoveryV1().EndpointSlices("default").Create(tc.ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "external-db-1", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: "external-db", discoveryv1.LabelManagedBy: "staff"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A service with a selector, created afterwards, converges: by then the
	// selector-less one has been looked at too.
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.waitEndpoints("web", []string{"web-a 10.244.0.11 ready node=node-1 http:9376/TCP"},
		[]string{"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP"})

	ep, err := tc.client.CoreV1().Endpoints("default").Get(tc.ctx, "external-db", metav1.GetOptions{})
	if err != nil || ep.ResourceVersion != manual.ResourceVersion {
		t.Errorf("hand-made endpoints changed: %v %+v", err, ep)
	}
	_, sl := tc.slicesOf("external-db")
	if len(sl) != 1 || sl[0].ResourceVersion != manualSlice.ResourceVersion {
		t.Errorf("hand-made slices changed: %+v", sl)
	}
}

func TestEndpointsCleanup(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.waitEndpoints("web", nil, []string{"<empty> "})
	_, placeholder := tc.slicesOf("web")
	tc.endpointPod("web-a", "10.244.0.11", true)
	want := []string{"web-a 10.244.0.11 ready node=node-1 http:9376/TCP"}
	wantSlices := []string{"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP"}
	tc.waitEndpoints("web", want, wantSlices)
	if _, sl := tc.slicesOf("web"); sl[0].Name != placeholder[0].Name {
		t.Errorf("placeholder %s replaced by %s rather than reused", placeholder[0].Name, sl[0].Name)
	}

	// Losing the selector removes what the controller made.
	svc, err := tc.client.CoreV1().Services("default").Get(tc.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = nil
	if _, err := tc.client.CoreV1().Services("default").Update(tc.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitEndpoints("web", []string{"<none>"}, nil)

	svc, _ = tc.client.CoreV1().Services("default").Get(tc.ctx, "web", metav1.GetOptions{})
	svc.Spec.Selector = map[string]string{"app": "web"}
	if _, err := tc.client.CoreV1().Services("default").Update(tc.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitEndpoints("web", want, wantSlices)

	if err := tc.client.CoreV1().Services("default").Delete(tc.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitEndpoints("web", []string{"<none>"}, nil)
}

func TestEndpointsQuietInSteadyState(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.endpointPod("web-b", "10.244.0.12", false)
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 notready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=false s=false t=false node=node-1 http:9376/TCP",
	})
	epWrites := func() int { return tc.writes.get("PUT endpoints") + tc.writes.get("POST endpoints") }
	sliceWrites := func() int { return tc.writes.get("PUT endpointslices") + tc.writes.get("POST endpointslices") }
	ep0, sl0 := epWrites(), sliceWrites()

	// A change that matters to nobody, then one that matters: exactly one
	// write of each object follows.
	p := tc.getPod("web-a")
	p.Annotations = map[string]string{"note": "irrelevant"}
	if _, err := tc.client.CoreV1().Pods("default").Update(tc.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.setPodStatus("default", "web-b", "10.244.0.12", true)
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
	// A restart re-lists and re-syncs everything, and writes nothing.
	tc.stopControllers()
	tc.startControllers(Config{})
	tc.createService(testService("barrier", map[string]string{"app": "none"}, httpPort(intstr.FromInt32(80))))
	tc.waitEndpoints("barrier", nil, []string{"<empty> "})
	if got := epWrites() - ep0; got != 2 { // the update of web, the creation of barrier
		t.Errorf("endpoints writes = %d, want 2", got)
	}
	if got := sliceWrites() - sl0; got != 2 {
		t.Errorf("endpointslice writes = %d, want 2", got)
	}
	if _, sl := tc.slicesOf("web"); len(sl) != 1 {
		t.Errorf("restart left %d slices", len(sl))
	}
}

func TestEndpointsConvergeAfterRestart(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.createService(testService("old", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.waitEndpoints("old", []string{"web-a 10.244.0.11 ready node=node-1 http:9376/TCP"},
		[]string{"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP"})
	tc.waitEndpoints("web", []string{"web-a 10.244.0.11 ready node=node-1 http:9376/TCP"},
		[]string{"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:9376/TCP"})

	tc.stopControllers()
	// While no controller runs: readiness changes, a service goes.
	tc.setPodStatus("default", "web-a", "10.244.0.11", false)
	tc.endpointPod("web-b", "10.244.0.12", true)
	if err := tc.client.CoreV1().Services("default").Delete(tc.ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.startControllers(Config{})
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 notready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=false s=false t=false node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
	tc.waitEndpoints("old", []string{"<none>"}, nil)
}

func TestSlicesSplitAtMaxEndpoints(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	const n = maxEndpointsPerSlice + 5
	for i := range n {
		p := testPod(fmt.Sprintf("web-%03d", i), func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "web"}
			p.Spec.NodeName = "node-1"
		})
		p.Status = corev1.PodStatus{}
		tc.createPod(p)
		tc.setPodStatus("default", p.Name, fmt.Sprintf("10.244.%d.%d", i/200, i%200+10), true)
	}
	testutil.Eventually(t, waitTimeout, "all endpoints in two slices", func() error {
		lines, sl := tc.slicesOf("web")
		sizes := []int{}
		for _, s := range sl {
			sizes = append(sizes, len(s.Endpoints))
		}
		slices.Sort(sizes)
		if len(lines) != n || !slices.Equal(sizes, []int{5, maxEndpointsPerSlice}) {
			return fmt.Errorf("slice sizes %v", sizes)
		}
		return nil
	})
}

// A terminating pod of a Service with publishNotReadyAddresses stays ready
// and serving (the e2e 'connect to terminating and unready endpoints'
// specs), whatever its readiness; without it, a terminating pod is not
// ready, and serving follows its readiness.
func TestEndpointsTerminatingPublishNotReady(t *testing.T) {
	tc := newEndpointsCluster(t)
	svc := testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376)))
	svc.Spec.PublishNotReadyAddresses = true
	tc.createService(svc)
	tc.createService(testService("strict", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	tc.endpointPod("web-a", "10.244.0.11", true)
	tc.endpointPod("web-b", "10.244.0.12", true)
	if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.setPodStatus("default", "web-a", "10.244.0.11", false) // its readiness probe fails once it drains
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=true s=true t=true node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
	tc.waitEndpoints("strict", []string{
		"web-b 10.244.0.12 ready node=node-1 http:9376/TCP",
	}, []string{
		"web-a 10.244.0.11 r=false s=false t=true node=node-1 http:9376/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 http:9376/TCP",
	})
}

// A named targetPort is looked up in the main containers, then in the
// restartable init containers (sidecars), never in regular init
// containers (endpointslice utils' FindPort).
func TestEndpointsSidecarNamedPorts(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromString("side"))))
	always := corev1.ContainerRestartPolicyAlways
	tc.endpointPod("web-a", "10.244.0.11", true, func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "busybox", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 8080}}}}
	})
	tc.endpointPod("web-b", "10.244.0.12", true, func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox",
			Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 8080}}}}
	})
	tc.waitEndpoints("web", []string{
		"web-a 10.244.0.11 ready node=node-1 http:8080/TCP",
	}, []string{
		// web-b has no port of that name: its endpoint is in a slice
		// without ports, as the endpointslice controller groups it.
		"web-a 10.244.0.11 r=true s=true t=false node=node-1 http:8080/TCP",
		"web-b 10.244.0.12 r=true s=true t=false node=node-1 ",
	})
}
