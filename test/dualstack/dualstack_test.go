// Package dualstack_test runs dual-stack labs (issue 33): the API, node
// IPAM and the pod network here; the service proxy in both modes
// (proxy_test.go), cluster DNS (dns_test.go) and NetworkPolicy
// (netpol_test.go) beside. This file, in both pod networks, checks nodes with podCIDRs and
// InternalIPs of both families, pods with podIPs of both on one eth0 that
// reach each other over IPv6 across nodes through host-gw routes, the
// downward API's status.podIPs, a dual-stack Service with a ClusterIP and
// an EndpointSlice per family; and lab down leaves the root namespace as it
// was.
package dualstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const wait = 30 * time.Second

func TestDualStackPodNetwork(t *testing.T) {
	for _, tc := range []struct {
		podNetwork string
		// route is node1's route to node2's IPv6 pod range.
		route func(l *lab.Lab, cidr netip.Prefix) string
	}{
		{"host-gw", func(l *lab.Lab, cidr netip.Prefix) string {
			return cidr.String() + " via " + l.Addr6("node2").String() + " dev eth1 proto 77"
		}},
		// IPv6 frames cross flannel.1's IPv4 tunnel to node2's VTEP.
		{"vxlan", func(l *lab.Lab, cidr netip.Prefix) string {
			return cidr.String() + " via " + cidr.Addr().String() + " dev flannel.1 proto 77"
		}},
	} {
		t.Run(tc.podNetwork, func(t *testing.T) { dualStackPodNetwork(t, tc.podNetwork, tc.route) })
	}
}

func dualStackPodNetwork(t *testing.T, podNetwork string, wantRoute func(*lab.Lab, netip.Prefix) string) {
	testenv.RequireRoot(t)
	var name string
	mine := func(n string) bool { return name != "" && strings.HasPrefix(n, name+"-") }
	before := testenv.RootSnapshot(t, mine)
	t.Cleanup(func() { // runs after the lab's own cleanup (lab down)
		if after := testenv.RootSnapshot(t, mine); after != before {
			t.Errorf("lab down left the root namespace changed:\n--- before\n%s\n--- after\n%s", before, after)
		}
	})
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual, PodNetwork: podNetwork})
	name = l.Name()
	c := testenv.Client(t, l)
	ctx := context.Background()

	// Nodes: a podCIDR and an InternalIP of each family, IPv4 first.
	v6CIDR := map[string]netip.Prefix{}
	for _, h := range []string{"node1", "node2"} {
		n, err := c.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Spec.PodCIDRs) != 2 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
			t.Fatalf("%s podCIDRs %v (podCIDR %s), want one of each family", h, n.Spec.PodCIDRs, n.Spec.PodCIDR)
		}
		p6 := netip.MustParsePrefix(n.Spec.PodCIDRs[1])
		if !p6.Addr().Is6() || !lab.PodCIDR6.Overlaps(p6) {
			t.Errorf("%s IPv6 podCIDR %s, want a /64 of %s", h, p6, lab.PodCIDR6)
		}
		v6CIDR[h] = p6
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if want := []string{l.Addr(h).String(), l.Addr6(h).String()}; strings.Join(internal, ",") != strings.Join(want, ",") {
			t.Errorf("%s InternalIPs %v, want %v", h, internal, want)
		}
	}

	// Pods: both families on eth0, the downward API listing both.
	mk := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "ds"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Command: []string{"sh", "-c", `echo "POD_IPS=$POD_IPS"; exec sleep infinity`},
				Env: []corev1.EnvVar{{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}}}}}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return testenv.WaitPodReady(t, c, "default", name)
	}
	a, b := mk("a", "node1"), mk("b", "node2")
	ip6 := func(p *corev1.Pod) string {
		t.Helper()
		if len(p.Status.PodIPs) != 2 || p.Status.PodIPs[0].IP != p.Status.PodIP {
			t.Fatalf("pod %s podIPs %v, want IPv4 then IPv6", p.Name, p.Status.PodIPs)
		}
		addr := netip.MustParseAddr(p.Status.PodIPs[1].IP)
		if !v6CIDR[p.Spec.NodeName].Contains(addr) {
			t.Fatalf("pod %s IPv6 %s not in %s's %s", p.Name, addr, p.Spec.NodeName, v6CIDR[p.Spec.NodeName])
		}
		return addr.String()
	}
	a6, b6 := ip6(a), ip6(b)
	out, err := testenv.Exec(t, l, "a", "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "inet "+a.Status.PodIP+"/") || !strings.Contains(out, "inet6 "+a6+"/64") {
		t.Errorf("pod a's eth0: %v\n%s", err, out)
	}
	want := "POD_IPS=" + a.Status.PodIP + "," + a6
	testutil.Eventually(t, wait, "pod a logs its downward API status.podIPs", func() error {
		b, err := c.CoreV1().Pods("default").GetLogs("a", &corev1.PodLogOptions{}).Do(ctx).Raw()
		if err != nil || strings.TrimSpace(string(b)) != want {
			return fmt.Errorf("log %q (%v), want %q", b, err, want)
		}
		return nil
	})

	// Across nodes over IPv6: host-gw routes each node's IPv6 pod range via
	// the other's IPv6 InternalIP, vxlan through the IPv4 tunnel.
	route := wantRoute(l, v6CIDR["node2"])
	if out, err := testenv.Run(l, "node1", "ip", "-6", "route"); err != nil || !strings.Contains(out, route) {
		t.Errorf("node1 lacks the route %q: %v\n%s", route, err, out)
	}
	for _, tc := range []struct{ from, to string }{{"a", b6}, {"b", a6}} {
		testutil.Eventually(t, wait, fmt.Sprintf("pod %s pings %s over IPv6", tc.from, tc.to), func() error {
			out, err := testenv.Exec(t, l, tc.from, "ping", "-6", "-c", "1", "-W", "1", tc.to)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}

	// A dual-stack Service: a ClusterIP and an EndpointSlice per family.
	prefer := corev1.IPFamilyPolicyPreferDualStack
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ds"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: &prefer, Selector: map[string]string{"app": "ds"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 || !lab.ServiceCIDR6.Contains(netip.MustParseAddr(svc.Spec.ClusterIPs[1])) {
		t.Errorf("service ds clusterIPs %v families %v, want an IPv4 and an IPv6 of %s", svc.Spec.ClusterIPs, svc.Spec.IPFamilies, lab.ServiceCIDR6)
	}
	testutil.Eventually(t, wait, "an EndpointSlice per family with both pods", func() error {
		l, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=ds"})
		if err != nil {
			return err
		}
		got := map[discoveryv1.AddressType][]string{}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				got[s.AddressType] = append(got[s.AddressType], e.Addresses...)
			}
		}
		if len(got) != 2 || len(got[discoveryv1.AddressTypeIPv4]) != 2 || !sameSet(got[discoveryv1.AddressTypeIPv6], []string{a6, b6}) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}
