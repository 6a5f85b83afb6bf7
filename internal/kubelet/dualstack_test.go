package kubelet

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDualStackPodIPs: on a node with pod CIDRs of both families a pod's
// addresses are its IPv4 one and the IPv6 one it maps to; a hostNetwork
// pod's are the node's InternalIPs; on an IPv4-only node, only the IPv4.
func TestDualStackPodIPs(t *testing.T) {
	a := &Agent{cfg: Config{NodeIP: netip.MustParseAddr("192.168.56.11"), SecondaryNodeIP: netip.MustParseAddr("fd00:56::11")}}
	a.podCIDR = netip.MustParsePrefix("10.244.1.0/24")
	a.secondaryPodCIDR = secondaryPodCIDR(&corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}}})
	for _, tc := range []struct {
		ip   string
		want []string
	}{
		{"10.244.1.7", []string{"10.244.1.7", "fd00:10:244:1::7"}},
		{"192.168.56.11", []string{"192.168.56.11", "fd00:56::11"}},
		{"", nil},
	} {
		if got := a.podIPs(tc.ip); !slices.Equal(got, tc.want) {
			t.Errorf("podIPs(%q) = %q, want %q", tc.ip, got, tc.want)
		}
	}
	single := &Agent{cfg: Config{NodeIP: netip.MustParseAddr("192.168.56.11")}, podCIDR: a.podCIDR}
	if got := single.podIPs("10.244.1.7"); !slices.Equal(got, []string{"10.244.1.7"}) {
		t.Errorf("IPv4-only node: podIPs = %q", got)
	}
}

// TestDownwardAPIPodIPs: status.podIPs and status.hostIPs are every
// address, comma-separated; the singular fields the primary.
func TestDownwardAPIPodIPs(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	spec := corev1.Container{Env: []corev1.EnvVar{
		field("POD_IP", "status.podIP"), field("POD_IPS", "status.podIPs"),
		field("HOST_IP", "status.hostIP"), field("HOST_IPS", "status.hostIPs"),
	}}
	env, _ := containerEnv(pod, spec, "node1", []string{"10.244.1.7", "fd00:10:244:1::7"}, []string{"192.168.56.11", "fd00:56::11"}, nil)
	for _, want := range []string{
		"POD_IP=10.244.1.7", "POD_IPS=10.244.1.7,fd00:10:244:1::7",
		"HOST_IP=192.168.56.11", "HOST_IPS=192.168.56.11,fd00:56::11",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %q", want, env)
		}
	}
}

// TestHostGWRoutesDualStack: a node with IPv6 pod ranges and InternalIPs
// routes each other node's IPv6 pod range via that node's IPv6 address,
// when it is on a connected subnet.
func TestHostGWRoutesDualStack(t *testing.T) {
	dual := func(name, cidr4, cidr6, ip4, ip6 string) *corev1.Node {
		n := testNode(name, cidr4, ip4, nil)
		n.Spec.PodCIDRs = []string{cidr4, cidr6}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip6})
		return n
	}
	nodes := []*corev1.Node{
		dual("node1", "10.244.0.0/24", "fd00:10:244::/64", "192.168.56.10", "fd00:56::10"),
		dual("node2", "10.244.1.0/24", "fd00:10:244:1::/64", "192.168.56.11", "fd00:56::11"),
		dual("node3", "10.244.2.0/24", "fd00:10:244:2::/64", "192.168.56.12", "fd00:57::12"),
		testNode("node4", "10.244.3.0/24", "192.168.56.13", nil), // IPv4 only
	}
	connected := []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24"), netip.MustParsePrefix("fd00:56::/64")}
	want, far := hostGWRoutes("node1", nodes, connected)
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	exp := map[netip.Prefix]netip.Addr{
		p("10.244.1.0/24"): a("192.168.56.11"), p("fd00:10:244:1::/64"): a("fd00:56::11"),
		p("10.244.2.0/24"): a("192.168.56.12"), // its IPv6 address is on no connected subnet
		p("10.244.3.0/24"): a("192.168.56.13"),
	}
	if len(want) != len(exp) || len(far) != 0 {
		t.Fatalf("routes %v (far %v), want %v", want, far, exp)
	}
	for dst, gw := range exp {
		if want[dst] != gw {
			t.Errorf("route to %s via %s, want %s", dst, want[dst], gw)
		}
	}
}
