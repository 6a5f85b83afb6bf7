package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// newAPI starts an in-process API server (the real one, with validation,
// defaulting, node-port allocation and the status subresource) and returns a
// client of it over loopback HTTP.
func newAPI(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, _ := newAPIServer(t)
	return c
}

// newAPIServer is newAPI that also returns a function that takes the API
// down, as a dead control plane.
func newAPIServer(t *testing.T) (kubernetes.Interface, func()) {
	t.Helper()
	api := apiservertest.Start(t)
	cfg := rest.CopyConfig(api.Config)
	cfg.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, api.Close
}

const waitTimeout = 15 * time.Second

// lbService is a LoadBalancer Service on port 80 selecting app=name.
func lbService(name string, mod ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376), Protocol: corev1.ProtocolTCP}}},
	}
	for _, m := range mod {
		m(svc)
	}
	return svc
}

func createSvc(t *testing.T, c kubernetes.Interface, svc *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := c.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s: %v", svc.Name, err)
	}
	return out
}

func getSvc(t *testing.T, c kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	svc, err := c.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// externalIP is what `kubectl get svc` shows as EXTERNAL-IP, "<pending>" when none.
func externalIP(svc *corev1.Service) string {
	var ips []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, ing.IP)
	}
	if len(ips) == 0 {
		return "<pending>"
	}
	return strings.Join(ips, ",")
}

// waitIP waits until Service name shows want as its EXTERNAL-IP.
func waitIP(t *testing.T, c kubernetes.Interface, name, want string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "Service "+name+" has EXTERNAL-IP "+want, func() error {
		if got := externalIP(getSvc(t, c, name)); got != want {
			return fmt.Errorf("EXTERNAL-IP %s", got)
		}
		return nil
	})
}

// events lists "Type Reason: Message" of the Events about Service name, oldest first.
func events(t *testing.T, c kubernetes.Interface, name string) []string {
	t.Helper()
	list, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Service", "involvedObject.name": name}.String()})
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool { return list.Items[i].LastTimestamp.Before(&list.Items[j].LastTimestamp) })
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Type+" "+e.Reason+": "+e.Message)
	}
	return out
}

// waitEvent waits for an Event about Service name containing all of parts.
func waitEvent(t *testing.T, c kubernetes.Interface, name string, parts ...string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("Service %s has an Event with %q", name, parts), func() error {
		evs := events(t, c, name)
	next:
		for _, e := range evs {
			for _, p := range parts {
				if !strings.Contains(e, p) {
					continue next
				}
			}
			return nil
		}
		return fmt.Errorf("events: %q", evs)
	})
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// newDualStackAPI is newAPI with service CIDRs of both families, so Services
// get ipFamilies and ClusterIPs as on a dual-stack cluster.
func newDualStackAPI(t *testing.T) kubernetes.Interface {
	t.Helper()
	vcfg := validation.DefaultConfig()
	vcfg.SecondaryServiceCIDR = netip.MustParsePrefix("fd00:10:96::/112")
	api := apiservertest.StartConfig(t, apiserver.Config{Validation: vcfg})
	cfg := rest.CopyConfig(api.Config)
	cfg.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// families sets a Service's ipFamilyPolicy and ipFamilies (nil: defaulted).
func families(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &policy, fams }
}
