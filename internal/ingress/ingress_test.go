package ingress

//lint:file-ignore SA1019 the controller writes core/v1 Endpoints; the tests read them

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress/httpproxy"
	"github.com/minikit/minikit/internal/ingress/nginxconf"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func node(name, ip string, ready bool, annotations map[string]string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
		}}
}

func runServer(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	s, err := NewControlPlane(ControlPlaneConfig{Client: c, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestServerCreatesTheControllerObjects(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	runServer(t, c)
	testutil.Eventually(t, 5*time.Second, "service created", func() error {
		_, err := c.CoreV1().Services(Namespace).Get(ctx, ServiceName, metav1.GetOptions{})
		return err
	})
	svc, _ := c.CoreV1().Services(Namespace).Get(ctx, ServiceName, metav1.GetOptions{})
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Name != "http" ||
		svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[1].Port != 443 || len(svc.Spec.Selector) != 0 {
		t.Errorf("service = %+v", svc.Spec)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	ic, err := c.NetworkingV1().IngressClasses().Get(ctx, ClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ic.Spec.Controller != "k8s.io/ingress-nginx" || ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
		t.Errorf("ingress class = %+v", ic)
	}
	// A second start (a server restart) changes nothing.
	runServer(t, c)
	time.Sleep(200 * time.Millisecond)
	ics, _ := c.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	svcs, _ := c.CoreV1().Services(Namespace).List(ctx, metav1.ListOptions{})
	if len(ics.Items) != 1 || len(svcs.Items) != 1 {
		t.Errorf("after a restart: %d classes, %d services", len(ics.Items), len(svcs.Items))
	}
}

func TestServerDoesNotStealTheDefaultClass(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "traefik", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"}})
	runServer(t, c)
	testutil.Eventually(t, 5*time.Second, "class created", func() error {
		ic, err := c.NetworkingV1().IngressClasses().Get(ctx, ClassName, metav1.GetOptions{})
		if err == nil && ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "" {
			return fmt.Errorf("nginx claimed the default: %v", ic.Annotations)
		}
		return err
	})
}

func TestServerEndpointsAndStatus(t *testing.T) {
	ctx := context.Background()
	listening := map[string]string{ListenersAnnotation: "http=80,https=443"}
	ours := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cafe"},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "x", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
	other := ours.DeepCopy()
	other.Name = "other"
	other.Spec.IngressClassName = ptr("traefik")
	c := fake.NewClientset(
		node("node1", "192.168.56.10", true, listening),
		node("node2", "192.168.56.11", false, listening),
		node("node3", "192.168.56.12", true, nil),
		ours, other,
	)
	runServer(t, c)
	testutil.Eventually(t, 5*time.Second, "endpoints written", func() error {
		ep, err := c.CoreV1().Endpoints(Namespace).Get(ctx, ServiceName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || ep.Subsets[0].Addresses[0].IP != "192.168.56.10" ||
			len(ep.Subsets[0].NotReadyAddresses) != 1 || ep.Subsets[0].NotReadyAddresses[0].IP != "192.168.56.11" ||
			ep.Subsets[0].Ports[0].Port != 80 || ep.Subsets[0].Ports[1].Port != 443 {
			return fmt.Errorf("endpoints %+v", ep.Subsets)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "slices written", func() error {
		sl, err := c.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, s := range sl.Items {
			if s.Labels[discoveryv1.LabelServiceName] != ServiceName || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
				return fmt.Errorf("slice %s labels %v", s.Name, s.Labels)
			}
			got[s.Endpoints[0].Addresses[0]+"="+strconv.FormatBool(*s.Endpoints[0].Conditions.Ready)] = true
		}
		if len(got) != 2 || !got["192.168.56.10=true"] || !got["192.168.56.11=false"] {
			return fmt.Errorf("slices %v", got)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "status of our Ingress", func() error {
		ing, _ := c.NetworkingV1().Ingresses("default").Get(ctx, "cafe", metav1.GetOptions{})
		if lb := ing.Status.LoadBalancer.Ingress; len(lb) != 1 || lb[0].IP != "192.168.56.10" {
			return fmt.Errorf("status %+v", lb)
		}
		return nil
	})
	if ing, _ := c.NetworkingV1().Ingresses("default").Get(ctx, "other", metav1.GetOptions{}); len(ing.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("an Ingress of another class got status %+v", ing.Status.LoadBalancer.Ingress)
	}
	// node2 stops its controller: its slice goes; node2 becomes Ready with
	// listeners later: it is added to the status.
	n2, _ := c.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	n2.Annotations = nil
	c.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{})
	testutil.Eventually(t, 5*time.Second, "node2's slice removed", func() error {
		sl, _ := c.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{})
		if len(sl.Items) != 1 {
			return fmt.Errorf("%d slices", len(sl.Items))
		}
		return nil
	})
	n3, _ := c.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
	n3.Annotations = listening
	c.CoreV1().Nodes().Update(ctx, n3, metav1.UpdateOptions{})
	testutil.Eventually(t, 5*time.Second, "status lists node1 and node3", func() error {
		ing, _ := c.NetworkingV1().Ingresses("default").Get(ctx, "cafe", metav1.GetOptions{})
		if lb := ing.Status.LoadBalancer.Ingress; len(lb) != 2 || lb[1].IP != "192.168.56.12" {
			return fmt.Errorf("status %+v", lb)
		}
		return nil
	})
}

func TestNodeServesAnnouncesAndWritesNginxConf(t *testing.T) {
	ctx := context.Background()
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tea answered %s", r.URL.Path)
	})}
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bln)
	t.Cleanup(func() { backend.Close() })
	bport := int32(bln.Addr().(*net.TCPAddr).Port)
	objs := []runtime.Object{
		node("node1", "127.0.0.1", true, nil),
		&networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
			Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tea-svc"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tea-svc-1", Labels: map[string]string{discoveryv1.LabelServiceName: "tea-svc"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(bport)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}},
		&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cafe"}, Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{Host: "cafe.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/tea", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: "tea-svc", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}},
	}
	c := fake.NewClientset(objs...)
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	dir := t.TempDir()
	n, err := NewController(ControllerConfig{Client: c, NodeName: "node1", HTTPListener: hl, HTTPSListener: sl, Dir: dir, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(rctx) }()
	select {
	case <-n.Ready():
	case err := <-done:
		t.Fatalf("node controller stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("node controller not ready")
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+hl.Addr().String()+path, nil)
		req.Host = "cafe.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/tea/green"); code != 200 || body != "tea answered /tea/green" {
		t.Fatalf("/tea/green: %d %q", code, body)
	}
	want := fmt.Sprintf("http=%d,https=%d", hl.Addr().(*net.TCPAddr).Port, sl.Addr().(*net.TCPAddr).Port)
	testutil.Eventually(t, 5*time.Second, "listeners announced", func() error {
		nd, _ := c.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
		if nd.Annotations[ListenersAnnotation] != want {
			return fmt.Errorf("annotations %v", nd.Annotations)
		}
		return nil
	})
	conf, err := os.ReadFile(filepath.Join(dir, nginxconf.ConfFile))
	if err != nil || !strings.Contains(string(conf), "upstream default-tea-svc-80 {") || !strings.Contains(string(conf), "server_name cafe.example.com;") {
		t.Errorf("nginx.conf on the node: %v\n%s", err, conf)
	}
	// A change in the API is served without a restart.
	ing, _ := c.NetworkingV1().Ingresses("default").Get(ctx, "cafe", metav1.GetOptions{})
	ing.Spec.Rules[0].HTTP.Paths[0].Path = "/chai"
	c.NetworkingV1().Ingresses("default").Update(ctx, ing, metav1.UpdateOptions{})
	testutil.Eventually(t, 5*time.Second, "new path served", func() error {
		if code, body := get("/chai"); code != 200 {
			return fmt.Errorf("/chai: %d %s", code, body)
		}
		return nil
	})
	if code, _ := get("/tea"); code != 404 {
		t.Errorf("/tea after the change: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	nd, _ := c.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if _, ok := nd.Annotations[ListenersAnnotation]; ok {
		t.Errorf("listeners still announced after stop: %v", nd.Annotations)
	}
}

// A controller leaves the node's ports 80 and 443 to hostNetwork pods; its
// HTTPS redirects still name the Service's port 443, where clients come in.
func TestControllerPorts(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		cfg                        ControllerConfig
		http, https, redirectHTTPS int
	}{
		{"defaults", ControllerConfig{}, 10080, 10443, 443},
		{"moved", ControllerConfig{HTTPPort: 8080, HTTPSPort: 8443}, 8080, 8443, 443},
		{"redirect port set", ControllerConfig{Proxy: httpproxy.Config{HTTPSPort: 30443}}, 10080, 10443, 30443},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Client, tc.cfg.NodeName, tc.cfg.Logger = fake.NewClientset(), "node1", quiet()
			n, err := NewController(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if n.cfg.HTTPPort != tc.http || n.cfg.HTTPSPort != tc.https || n.cfg.Proxy.HTTPSPort != tc.redirectHTTPS {
				t.Errorf("listens on %d and %d, redirects to %d; want %d, %d, %d",
					n.cfg.HTTPPort, n.cfg.HTTPSPort, n.cfg.Proxy.HTTPSPort, tc.http, tc.https, tc.redirectHTTPS)
			}
		})
	}
}

func TestNginxConfFromTheAPI(t *testing.T) {
	c := fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{"kubernetes.io/ingress.class": "nginx"}},
			Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
	)
	out, err := NginxConf(context.Background(), c, ClassNone, nginxconf.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Conf(), "# Ingress default/web") || !strings.Contains(out.Conf(), "# default backend of Ingress default/web") {
		t.Errorf("nginx.conf:\n%s", out.Conf())
	}
}
