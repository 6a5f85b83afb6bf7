package dualstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestIPv6OnlyLab: an IPv6 single-stack lab (lab up --ip-family ipv6), in
// either proxy mode (a subtest and a lab each). Nodes have an IPv6
// InternalIP and podCIDR alone, pods one IPv6 podIP; a Service defaults to
// IPv6 SingleStack (the first service CIDR's family); a pod on node1
// reaches a Service's IPv6 ClusterIP answered by the backend on node2,
// which sees the pod's own address, and the API through the kubernetes
// Service; the client host reaches the NodePort on node1's IPv6 address;
// dig AAAA answers from kube-dns on the tenth address of the IPv6 service
// range; a NetworkPolicy ipBlock with an IPv6 except refuses the client pod;
// the rules are in the mode's IPv6 place; and lab down leaves the
// root namespace as it was.
func TestIPv6OnlyLab(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) { testIPv6OnlyLab(t, mode) })
	}
}

func testIPv6OnlyLab(t *testing.T, mode string) {
	var name string
	mine := func(n string) bool { return name != "" && strings.HasPrefix(n, name+"-") }
	before := testenv.RootSnapshot(t, mine)
	t.Cleanup(func() { // runs after the lab's own cleanup (lab down)
		if after := testenv.RootSnapshot(t, mine); after != before {
			t.Errorf("lab down left the root namespace changed:\n--- before\n%s\n--- after\n%s", before, after)
		}
	})
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyIPv6, ProxyMode: mode})
	name = l.Name()
	c := testenv.Client(t, l)
	ctx := context.Background()

	// Nodes: one IPv6 InternalIP and one IPv6 podCIDR each.
	podCIDR := map[string]netip.Prefix{}
	for _, h := range []string{"node1", "node2"} {
		n, err := c.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Spec.PodCIDRs) != 1 || !lab.PodCIDR6.Overlaps(netip.MustParsePrefix(n.Spec.PodCIDRs[0])) {
			t.Fatalf("%s podCIDRs %v, want one /64 of %s", h, n.Spec.PodCIDRs, lab.PodCIDR6)
		}
		podCIDR[h] = netip.MustParsePrefix(n.Spec.PodCIDRs[0])
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if want := l.Addr6(h).String(); strings.Join(internal, ",") != want {
			t.Errorf("%s InternalIPs %v, want %s alone", h, internal, want)
		}
	}

	// The kubernetes Service and its endpoint, and kube-dns, are IPv6.
	k, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || k.Spec.ClusterIP != "fd00:10:96::1" {
		t.Fatalf("kubernetes Service %v (%v), want ClusterIP fd00:10:96::1", k.Spec.ClusterIPs, err)
	}
	ks, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || ks.AddressType != discoveryv1.AddressTypeIPv6 || len(ks.Endpoints) != 1 ||
		ks.Endpoints[0].Addresses[0] != l.Addr6("node1").String() {
		t.Fatalf("kubernetes EndpointSlice %+v (%v), want node1's IPv6 address", ks, err)
	}
	testutil.Eventually(t, wait, "kube-dns on the tenth address of the IPv6 service range", func() error {
		dns, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil || dns.Spec.ClusterIP != lab.ClusterDNS6().String() {
			return fmt.Errorf("kube-dns %v (%v), want %s", dns.Spec.ClusterIPs, err, lab.ClusterDNS6())
		}
		return nil
	})

	backend := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
			Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(8080)}}}}}}}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Command: []string{"sleep", "infinity"}}}}}
	for _, p := range []*corev1.Pod{backend, client} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitPodReady(t, c, "default", "web")
	cp := testenv.WaitPodReady(t, c, "default", "client")
	if len(cp.Status.PodIPs) != 1 || !podCIDR["node1"].Contains(netip.MustParseAddr(cp.Status.PodIP)) {
		t.Fatalf("client podIPs %v, want one address of node1's %s", cp.Status.PodIPs, podCIDR["node1"])
	}
	client6 := cp.Status.PodIP

	// A Service that names no family: IPv6 SingleStack.
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 1 || !lab.ServiceCIDR6.Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) ||
		len(svc.Spec.IPFamilies) != 1 || svc.Spec.IPFamilies[0] != corev1.IPv6Protocol ||
		svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		t.Fatalf("service web clusterIPs %v families %v policy %v, want one IPv6 of %s, SingleStack",
			svc.Spec.ClusterIPs, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy, lab.ServiceCIDR6)
	}
	vip6, np := svc.Spec.ClusterIP, svc.Spec.Ports[0].NodePort

	get := func(what string, run func(url string) (string, error), url, want string) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := run(url)
			if err != nil || out != want {
				return fmt.Errorf("curl %s: %q (%v), want %q", url, out, err, want)
			}
			return nil
		})
	}
	fromPod := func(url string) (string, error) {
		return testenv.Exec(t, l, "client", "curl", "-sS", "-g", "-k", "--max-time", "2", url)
	}
	fromClientHost := func(url string) (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-sS", "-g", "--max-time", "2", url)
	}

	t.Run("IPv6 ClusterIP from a pod", func(t *testing.T) {
		base := "http://[" + vip6 + "]:80"
		get("the backend's name through the IPv6 ClusterIP", fromPod, base+"/hostname", "web")
		get("the client pod's own address at the backend", func(url string) (string, error) { return hostOf(fromPod, url) },
			base+"/clientip", client6)
	})
	t.Run("the API through the kubernetes Service over IPv6", func(t *testing.T) {
		testutil.Eventually(t, wait, "GET /version on [fd00:10:96::1]:443", func() error {
			out, err := fromPod("https://[fd00:10:96::1]:443/version")
			if err != nil || !strings.Contains(out, `"gitVersion"`) {
				return fmt.Errorf("%q (%v)", out, err)
			}
			return nil
		})
	})
	t.Run("NodePort on node1's IPv6 address from the client host", func(t *testing.T) {
		base := fmt.Sprintf("http://[%s]:%d", l.Addr6("node1"), np)
		get("the backend's name through node1's NodePort", fromClientHost, base+"/hostname", "web")
		// node1 has no endpoint: it forwards to node2, masqueraded to its
		// own address there.
		get("node1's address at the backend", func(url string) (string, error) { return hostOf(fromClientHost, url) },
			base+"/clientip", l.Addr6("node1").String())
	})
	t.Run("dig AAAA from the IPv6 kube-dns", func(t *testing.T) {
		testutil.Eventually(t, wait, "dig AAAA web", func() error {
			out, err := testenv.Exec(t, l, "client", "dig", "+short", "+time=2", "+tries=2", "+search", "web", "AAAA")
			if err != nil || strings.TrimSpace(out) != vip6 {
				return fmt.Errorf("%q (%v), want %s", out, err, vip6)
			}
			return nil
		})
		out, err := testenv.Exec(t, l, "client", "cat", "/etc/resolv.conf")
		if err != nil || !strings.Contains(out, "nameserver "+lab.ClusterDNS6().String()+"\n") {
			t.Errorf("client's resolv.conf: %v\n%s", err, out)
		}
	})
	t.Run("a NetworkPolicy ipBlock refuses the client pod over IPv6", func(t *testing.T) {
		// Ingress to web only from node1's pod range but the client's /128.
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web-from-block"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
					CIDR: podCIDR["node1"].String(), Except: []string{client6 + "/128"}}}}}}}}
		if _, err := c.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		web := "http://[" + vip6 + "]:80/hostname"
		testutil.Eventually(t, wait, "the client pod refused by the policy", func() error {
			if out, err := fromPod(web); err == nil {
				return fmt.Errorf("curl %s answered %q", web, out)
			}
			return nil
		})
		if err := c.NetworkingV1().NetworkPolicies("default").Delete(ctx, "web-from-block", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		get("the client pod let through once the policy is gone", fromPod, web, "web")
	})
	if mode == "nftables" {
		t.Run("the rules are in the ip6 kube-proxy table", func(t *testing.T) {
			out6, err := testenv.Run(l, "node1", "nft", "list", "table", "ip6", "kube-proxy")
			if err != nil || !strings.Contains(out6, vip6+" . tcp . 80 : goto service-") ||
				!strings.Contains(out6, "ip6 daddr "+lab.ServiceCIDR6.String()+" drop") {
				t.Errorf("node1's ip6 kube-proxy table lacks the service or the service CIDR's drop: %v\n%s", err, out6)
			}
			// An unallocated address of the service CIDR is dropped: no
			// answer, where an allocated one's unserved port is rejected.
			if out, err := fromPod("http://[fd00:10:96::fffe]:80/"); err == nil {
				t.Errorf("an unallocated ClusterIP answered: %s", out)
			}
			if out4, err := testenv.Run(l, "node1", "nft", "list", "table", "ip", "kube-proxy"); err == nil {
				t.Errorf("node1 has an ip kube-proxy table in an IPv6 lab:\n%s", out4)
			}
		})
		return
	}
	t.Run("the rules are in ip6tables", func(t *testing.T) {
		out6, err := testenv.Run(l, "node1", "ip6tables-save", "-t", "nat")
		if err != nil || !strings.Contains(out6, `"default/web:http cluster IP"`) || !strings.Contains(out6, "-d "+vip6+"/128") {
			t.Errorf("node1's ip6tables nat lacks the service: %v\n%s", err, out6)
		}
		out4, err := testenv.Run(l, "node1", "iptables-save", "-t", "nat")
		if err != nil || strings.Contains(out4, "KUBE-SERVICES") {
			t.Errorf("node1's iptables nat holds service rules in an IPv6 lab: %v\n%s", err, out4)
		}
	})
}
