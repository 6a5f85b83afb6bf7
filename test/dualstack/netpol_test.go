package dualstack_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDualStackNetworkPolicy: on a dual-stack lab every node enforces
// NetworkPolicy over both families. Under a default deny of ingress and an
// allow from pods labelled access=true, the labelled clients reach the
// server over IPv6 and IPv4 (the server answers with its name and sees the
// client's own address of each family), from the other node (routed) and
// from the server's node (bridged, where IPv6 neighbour discovery crosses
// the policy chains), while the unlabelled client, which reached it before
// the policies, is refused over both. An ipBlock of node1's IPv6 pod range
// with the unlabelled client's IPv6 address as an except then admits the
// labelled client on node1 over IPv6 alone: the unlabelled client (the
// except), the client on node2 (outside the block) and every IPv4
// connection (an IPv6 ipBlock says nothing of IPv4) are refused. Egress
// last, with the ingress policies gone: the labelled client on node1 may
// send only to the server's IPv6 address (an ipBlock /128), the one on
// node2 only to pods labelled app=none and then app=server (a podSelector:
// refused over both families, then admitted over both). Both then reach
// the server over IPv6; over IPv4 the first is refused (its IPv6 ipBlock
// says nothing of IPv4) while the second reaches it (a podSelector admits
// both of the server's addresses); the unlabelled client, which no egress
// policy selects, reaches the server over both.
func TestDualStackNetworkPolicy(t *testing.T) {
	testenv.RequireRoot(t)
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual})
	c := testenv.Client(t, l)
	ctx := context.Background()

	server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server", Labels: map[string]string{"app": "server"}},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
			Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(8080)}}}}}}}
	client := func(name, node string, lbl map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Command: []string{"sleep", "infinity"}}}}}
	}
	access := map[string]string{"access": "true"}
	for _, p := range []*corev1.Pod{server, client("allowed", "node1", access), client("other", "node1", nil), client("local", "node2", access)} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// addrs holds each pod's IPv4 and IPv6 address.
	addrs := map[string][2]string{}
	for _, name := range []string{"server", "allowed", "other", "local"} {
		p := testenv.WaitPodReady(t, c, "default", name)
		if len(p.Status.PodIPs) != 2 || !netip.MustParseAddr(p.Status.PodIPs[1].IP).Is6() {
			t.Fatalf("pod %s podIPs %v, want IPv4 then IPv6", name, p.Status.PodIPs)
		}
		addrs[name] = [2]string{p.Status.PodIPs[0].IP, p.Status.PodIPs[1].IP}
	}
	family := [2]string{"IPv4", "IPv6"}

	// reaches checks that from reaches the server over family i: the server
	// answers with its name and saw from's own address of that family.
	reaches := func(from string, i int) {
		t.Helper()
		base := "http://" + net.JoinHostPort(addrs["server"][i], "8080")
		testutil.Eventually(t, wait, fmt.Sprintf("%s reaches the server over %s", from, family[i]), func() error {
			name, err := testenv.Exec(t, l, from, "curl", "-sS", "-g", "--max-time", "2", base+"/hostname")
			if err != nil || name != "server" {
				return fmt.Errorf("/hostname: %q (%v)", name, err)
			}
			out, err := testenv.Exec(t, l, from, "curl", "-sS", "-g", "--max-time", "2", base+"/clientip")
			if err != nil {
				return fmt.Errorf("/clientip: %q (%v)", out, err)
			}
			if ap, err := netip.ParseAddrPort(out); err != nil || ap.Addr().String() != addrs[from][i] {
				return fmt.Errorf("/clientip: %q, want %s's own address %s", out, from, addrs[from][i])
			}
			return nil
		})
	}
	// refused checks that from's connections to the server over family i are
	// refused: curl fails to connect (exit 7, the reset or ICMP port
	// unreachable of a REJECT), not with a timeout (28, a lost packet).
	refused := func(from string, i int) {
		t.Helper()
		url := "http://" + net.JoinHostPort(addrs["server"][i], "8080") + "/hostname"
		testutil.Eventually(t, wait, fmt.Sprintf("%s is refused by the server over %s", from, family[i]), func() error {
			out, err := testenv.Exec(t, l, from, "curl", "-sS", "-g", "--max-time", "2", url)
			if err == nil || !strings.Contains(out, "curl: (7)") {
				return fmt.Errorf("curl %s: %q (%v), want refused", url, out, err)
			}
			return nil
		})
	}
	apply := func(p *networkingv1.NetworkPolicy) {
		t.Helper()
		if _, err := c.NetworkingV1().NetworkPolicies("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("without policies every client reaches the server", func(t *testing.T) {
		for i := range family {
			for _, from := range []string{"allowed", "other", "local"} {
				reaches(from, i)
			}
		}
	})

	apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default-deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}})
	apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "from-access"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: access}}}}}}})
	t.Run("a podSelector admits a pod by both of its addresses", func(t *testing.T) {
		for i := range family {
			refused("other", i)
			reaches("allowed", i)
			reaches("local", i)
		}
	})

	t.Run("the IPv6 rules are in ip6tables and the IPv4 ones in iptables", func(t *testing.T) {
		out6, err := testenv.Run(l, "node2", "ip6tables-save", "-t", "filter")
		if err != nil || !strings.Contains(out6, "-j KUBE-NWPLCY-FORWARD") || !strings.Contains(out6, "-d "+addrs["server"][1]+"/128") {
			t.Errorf("node2's ip6tables filter lacks the server's chain: %v\n%s", err, out6)
		}
		out4, err := testenv.Run(l, "node2", "iptables-save", "-t", "filter")
		if err != nil || strings.Contains(out4, addrs["server"][1]) || !strings.Contains(out4, "-d "+addrs["server"][0]+"/32") {
			t.Errorf("node2's iptables filter: %v\n%s", err, out4)
		}
	})

	node1, err := c.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node1.Spec.PodCIDRs) != 2 {
		t.Fatalf("node1 podCIDRs %v", node1.Spec.PodCIDRs)
	}
	if err := c.NetworkingV1().NetworkPolicies("default").Delete(ctx, "from-access", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "from-node1-v6"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: node1.Spec.PodCIDRs[1], Except: []string{addrs["other"][1] + "/128"}}}}}}}})
	t.Run("an IPv6 ipBlock with an except admits its own family only", func(t *testing.T) {
		reaches("allowed", 1)
		refused("other", 1) // the except
		refused("local", 1) // node2's pods are outside the block
		for _, from := range []string{"allowed", "other", "local"} {
			refused(from, 0)
		}
	})

	for _, name := range []string{"default-deny", "from-node1-v6"} {
		if err := c.NetworkingV1().NetworkPolicies("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each labelled client gets an egress label of its own.
	for name, value := range map[string]string{"allowed": "ipblock", "local": "podselector"} {
		patch := []byte(`{"metadata":{"labels":{"egress":"` + value + `"}}}`)
		if _, err := c.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	egress := func(value string, to networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "egress-" + value},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": value}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{to}}}}}
	}
	apply(egress("ipblock", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: addrs["server"][1] + "/128"}}))
	toApp := func(app string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
	}
	apply(egress("podselector", toApp("none")))
	t.Run("egress to an IPv6 ipBlock and to a podSelector", func(t *testing.T) {
		refused("allowed", 0) // an IPv6 ipBlock says nothing of IPv4
		reaches("allowed", 1)
		for i := range family {
			refused("local", i) // no pod is app=none
			reaches("other", i) // no egress policy selects it
		}
		if _, err := c.NetworkingV1().NetworkPolicies("default").Update(ctx, egress("podselector", toApp("server")), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range family {
			reaches("local", i) // a podSelector admits both of the server's addresses
		}
	})
}
