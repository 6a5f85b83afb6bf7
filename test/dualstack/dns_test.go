package dualstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDualStackDNS: on a dual-stack lab a pod resolves through its
// resolv.conf (the IPv4 kube-dns VIP) as in a kubeadm cluster running
// CoreDNS: a dual-stack Service's name gives its IPv4 ClusterIP for A and
// its IPv6 one for AAAA; a headless dual-stack Service gives its pods'
// addresses of each family, and their hostname records too; the IPv6
// ClusterIP's ip6.arpa name points back at the Service; and curl -6 by the
// Service's name reaches the backend over IPv6, which sees the client pod's
// own IPv6 address.
func TestDualStackDNS(t *testing.T) {
	testenv.RequireRoot(t)
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual})
	c := testenv.Client(t, l)
	ctx := context.Background()

	web := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: node, Hostname: name, Subdomain: "hdls",
				Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
					Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/hostname", Port: intstr.FromInt32(8080)}}}}}}}
	}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Command: []string{"sleep", "infinity"}}}}}
	for _, p := range []*corev1.Pod{web("web-0", "node2"), web("web-1", "node1"), client} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"web-0", "web-1", "client"} {
		p := testenv.WaitPodReady(t, c, "default", n)
		if len(p.Status.PodIPs) != 2 {
			t.Fatalf("pod %s podIPs %v, want one of each family", n, p.Status.PodIPs)
		}
		pods[n] = p
	}
	ipOf := func(pod string, family int) string { return pods[pod].Status.PodIPs[family].IP }

	prefer := corev1.IPFamilyPolicyPreferDualStack
	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &prefer, Selector: map[string]string{"app": "web"}, Ports: port}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 || !netip.MustParseAddr(svc.Spec.ClusterIPs[1]).Is6() {
		t.Fatalf("service web clusterIPs %v, want an IPv4 and an IPv6", svc.Spec.ClusterIPs)
	}
	vip4, vip6 := svc.Spec.ClusterIPs[0], svc.Spec.ClusterIPs[1]
	hdls, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hdls"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: &prefer, Selector: map[string]string{"app": "web"}, Ports: port}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hdls.Spec.IPFamilies) != 2 {
		t.Fatalf("headless service hdls ipFamilies %v, want both", hdls.Spec.IPFamilies)
	}
	testutil.Eventually(t, wait, "an EndpointSlice per family for both services", func() error {
		for _, name := range []string{"web", "hdls"} {
			sl, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
			if err != nil {
				return err
			}
			ready := map[discoveryv1.AddressType]int{}
			for _, s := range sl.Items {
				for _, e := range s.Endpoints {
					if e.Conditions.Ready == nil || *e.Conditions.Ready {
						ready[s.AddressType]++
					}
				}
			}
			if ready[discoveryv1.AddressTypeIPv4] != 2 || ready[discoveryv1.AddressTypeIPv6] != 2 {
				return fmt.Errorf("service %s: ready endpoints per family %v", name, ready)
			}
		}
		return nil
	})

	// dig asks through the client pod's resolv.conf (its search path and
	// the kube-dns VIP) and expects the +short lines, in any order.
	dig := func(want []string, args ...string) {
		t.Helper()
		slices.Sort(want)
		testutil.Eventually(t, wait, "dig "+strings.Join(args, " "), func() error {
			out, err := testenv.Exec(t, l, "client", append([]string{"dig", "+short", "+time=2", "+tries=2"}, args...)...)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			var got []string
			for _, line := range strings.Split(out, "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, ";") {
					got = append(got, line)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("got %q, want %q", got, want)
			}
			return nil
		})
	}
	const webName = "web.default.svc.cluster.local."
	t.Run("a dual-stack Service's A and AAAA", func(t *testing.T) {
		dig([]string{vip4}, "+search", "web", "A")
		dig([]string{vip6}, "+search", "web", "AAAA")
		dig([]string{vip6}, webName, "AAAA")
	})
	t.Run("a headless dual-stack Service's pods of each family", func(t *testing.T) {
		dig([]string{ipOf("web-0", 0), ipOf("web-1", 0)}, "+search", "hdls", "A")
		dig([]string{ipOf("web-0", 1), ipOf("web-1", 1)}, "+search", "hdls", "AAAA")
		dig([]string{ipOf("web-0", 1)}, "web-0.hdls.default.svc.cluster.local.", "AAAA")
		dig([]string{ipOf("web-0", 0)}, "web-0.hdls.default.svc.cluster.local.", "A")
	})
	t.Run("the IPv6 ClusterIP's PTR names the Service", func(t *testing.T) {
		dig([]string{webName}, "-x", vip6)
	})
	t.Run("curl -6 by name reaches the backend over IPv6", func(t *testing.T) {
		get := func(path string, check func(string) error) {
			t.Helper()
			url := "http://web.default.svc.cluster.local:80" + path
			testutil.Eventually(t, wait, "curl -6 "+url, func() error {
				out, err := testenv.Exec(t, l, "client", "curl", "-6", "-sS", "--max-time", "3", url)
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				return check(strings.TrimSpace(out))
			})
		}
		get("/hostname", func(out string) error {
			if out != "web-0" && out != "web-1" {
				return fmt.Errorf("hostname %q, want web-0 or web-1", out)
			}
			return nil
		})
		// Pod traffic is not masqueraded: the backend sees the client pod's
		// own IPv6 address, inside the IPv6 cluster CIDR, which node1's
		// IPv6 proxier knows: off-cluster sources are masqueraded.
		out, err := testenv.Run(l, "node1", "ip6tables-save", "-t", "nat")
		masq := func(line string) bool {
			return strings.HasPrefix(line, "-A KUBE-SVC-") && strings.Contains(line, "! -s "+lab.PodCIDR6.String()+" ") &&
				strings.Contains(line, "-d "+vip6+"/128 ") && strings.HasSuffix(line, "-j KUBE-MARK-MASQ")
		}
		if err != nil || !slices.ContainsFunc(strings.Split(out, "\n"), masq) {
			t.Errorf("node1's ip6tables nat does not masquerade sources outside %s to %s: %v\n%s", lab.PodCIDR6, vip6, err, out)
		}
		get("/clientip", func(out string) error {
			ap, err := netip.ParseAddrPort(out)
			if err != nil {
				return fmt.Errorf("clientip %q: %v", out, err)
			}
			if ap.Addr().String() != ipOf("client", 1) {
				return fmt.Errorf("client address at the backend %s, want the client pod's %s", ap.Addr(), ipOf("client", 1))
			}
			return nil
		})
	})
}
