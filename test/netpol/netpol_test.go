package netpol_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestNetworkPolicy(t *testing.T) {
	e := newEnv(t)
	in := func(ns string) func(*pod) bool { return func(p *pod) bool { return p.ns == ns } }
	is := func(ns, name string) func(*pod) bool {
		return func(p *pod) bool { return p.ns == ns && p.name == name }
	}
	xa := is("x", "a")
	ingressOnly := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}

	t.Run("no policy: every pod reaches every pod", func(t *testing.T) {
		e.expect(t, "no policy", allowAll)
	})

	t.Run("default deny ingress in x; the node still reaches its own pods", func(t *testing.T) {
		e.apply(t, policy("x", "deny-all", sel(), ingressOnly...))
		e.expect(t, "default deny in x", func(from, to *pod, _ probe) bool { return !in("x")(to) })
		for _, p := range e.pods {
			if p.ns != "x" {
				continue
			}
			out, err := testenv.Run(e.l, p.node, "curl", "-sS", "--max-time", "2", fmt.Sprintf("http://%s/", net.JoinHostPort(p.ip, "80")))
			if err != nil || out != "foo" {
				t.Errorf("%s cannot reach its own pod %s under default deny: %v: %q", p.node, p, err, out)
			}
		}
	})

	t.Run("deleting the policy restores access", func(t *testing.T) {
		if err := e.c.NetworkingV1().NetworkPolicies("x").Delete(ctx, "deny-all", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.expect(t, "default deny deleted", allowAll)
	})

	cases := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		allow    expectation
		probes   []probe
	}{
		{
			name:     "allow x/a from namespace y (namespaceSelector)",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "from-y", sel("pod", "a")), nil, nsPeer("y"))},
			allow:    func(from, to *pod, _ probe) bool { return !xa(to) || from.ns == "y" },
		},
		{
			name:     "allow x/a from x/b (podSelector)",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "from-b", sel("pod", "a")), nil, podPeer("pod", "b"))},
			allow:    func(from, to *pod, _ probe) bool { return !xa(to) || (from.ns == "x" && from.name == "b") },
		},
		{
			name: "allow x/a from pods c in namespace y (namespaceSelector and podSelector together)",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "from-y-c", sel("pod", "a")), nil,
				networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(nsLabel, "y"), PodSelector: sel("pod", "c")})},
			allow: func(from, to *pod, _ probe) bool { return !xa(to) || (from.ns == "y" && from.name == "c") },
		},
		{
			name: "allow x/a from the cluster CIDR except node2's pod CIDR (ipBlock with except)",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "from-node1-pods", sel("pod", "a")), nil,
				networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{e.podCIDR(t, "node2")}}})},
			allow: func(from, to *pod, _ probe) bool { return !xa(to) || from.node == "node1" },
		},
		{
			name: "allow x/a on the named port serve-81-udp only",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "named-port", sel("pod", "a")),
				[]networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, intstr.FromString("serve-81-udp"), 0)})},
			allow:  func(from, to *pod, pr probe) bool { return !xa(to) || pr == udp81 },
			probes: []probe{tcp80, tcp81, udp81},
		},
		{
			name: "allow x/a on TCP 81-90 only (endPort)",
			policies: []*networkingv1.NetworkPolicy{ingress(policy("x", "port-range", sel("pod", "a")),
				[]networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, intstr.FromInt32(81), 90)})},
			allow:  func(from, to *pod, pr probe) bool { return !xa(to) || pr == tcp81 },
			probes: []probe{tcp80, tcp81, udp81},
		},
		{
			name: "deny egress from x except to y/b",
			policies: []*networkingv1.NetworkPolicy{egress(policy("x", "egress-to-y-b", sel(), networkingv1.PolicyTypeEgress), nil,
				networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(nsLabel, "y"), PodSelector: sel("pod", "b")})},
			allow: func(from, to *pod, _ probe) bool { return from.ns != "x" || (to.ns == "y" && to.name == "b") },
		},
		{
			name: "an allow-all ingress rule for x/a next to a default deny of x",
			policies: []*networkingv1.NetworkPolicy{
				policy("x", "deny-all", sel(), ingressOnly...),
				{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-all"},
					Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("pod", "a"), Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}},
			},
			allow: func(from, to *pod, _ probe) bool { return to.ns != "x" || xa(to) },
		},
		{
			name: "several policies add up: x/a from namespace z, and from x/b",
			policies: []*networkingv1.NetworkPolicy{
				ingress(policy("x", "from-z", sel("pod", "a")), nil, nsPeer("z")),
				ingress(policy("x", "from-b", sel("pod", "a")), nil, podPeer("pod", "b")),
			},
			allow: func(from, to *pod, _ probe) bool {
				return !xa(to) || from.ns == "z" || (from.ns == "x" && from.name == "b")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.clear(t)
			for _, np := range tc.policies {
				e.apply(t, np)
			}
			e.expect(t, tc.name, tc.allow, tc.probes...)
		})
	}

	t.Run("a policy updated under live traffic keeps the connection it still allows", func(t *testing.T) {
		e.clear(t)
		e.apply(t, ingress(policy("x", "live", sel("pod", "a")), nil, nsPeer("y")))
		e.expect(t, "x/a from namespace y", func(from, to *pod, _ probe) bool { return !xa(to) || from.ns == "y" }, tcp80)

		ya, xaPod := e.pod("y", "a"), e.pod("x", "a")
		conn := e.dialFrom(t, ya, net.JoinHostPort(xaPod.ip, "80"))
		defer conn.Close()
		br := bufio.NewReader(conn)
		get := func() error {
			conn.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
				return err
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != "foo" {
				return fmt.Errorf("answer %q (%v)", body, err)
			}
			return nil
		}
		if err := get(); err != nil {
			t.Fatalf("the long-lived connection y/a -> x/a does not work to begin with: %v", err)
		}
		// Narrow the policy to y/a: y/b and y/c lose access, y/a keeps it.
		e.apply(t, ingress(policy("x", "live", sel("pod", "a")), nil,
			networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(nsLabel, "y"), PodSelector: sel("pod", "a")}))
		e.expect(t, "x/a from y/a only", func(from, to *pod, _ probe) bool { return !xa(to) || (from.ns == "y" && from.name == "a") }, tcp80)
		for i := 0; i < 3; i++ {
			if err := get(); err != nil {
				t.Fatalf("request %d on the established connection y/a -> x/a after the update: %v", i+1, err)
			}
		}
	})

	t.Run("a pod label change moves it in and out of a selector", func(t *testing.T) {
		e.clear(t)
		e.apply(t, ingress(policy("x", "clients", sel("protected", "yes")), nil,
			networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(), PodSelector: sel("role", "client")}))
		e.label(t, e.pod("x", "a"), "protected", "yes")
		isClient := map[*pod]bool{}
		protected := map[*pod]bool{e.pod("x", "a"): true}
		allow := func(from, to *pod, _ probe) bool { return !protected[to] || isClient[from] }
		e.expect(t, "x/a protected, no client", allow, tcp80)

		zb := e.pod("z", "b")
		e.label(t, zb, "role", "client")
		isClient[zb] = true
		e.expect(t, "z/b labelled role=client", allow, tcp80)

		xc := e.pod("x", "c")
		e.label(t, xc, "protected", "yes")
		protected[xc] = true
		e.expect(t, "x/c labelled protected=yes", allow, tcp80)

		e.label(t, zb, "role", "")
		delete(isClient, zb)
		e.label(t, xc, "protected", "")
		delete(protected, xc)
		e.expect(t, "z/b and x/c unlabelled", allow, tcp80)

		if err := e.c.NetworkingV1().NetworkPolicies("x").Delete(ctx, "clients", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.expect(t, "policy deleted", allowAll)
	})
}

// podCIDR is a node's pod CIDR.
func (e *env) podCIDR(t *testing.T, node string) string {
	t.Helper()
	n, err := e.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || n.Spec.PodCIDR == "" {
		t.Fatalf("the pod CIDR of %s: %q (%v)", node, n.Spec.PodCIDR, err)
	}
	return n.Spec.PodCIDR
}

// dialFrom opens a TCP connection from inside a pod's network namespace: a real
// socket of the pod, kept open across policy changes.
func (e *env) dialFrom(t *testing.T, p *pod, addr string) net.Conn {
	t.Helper()
	po, err := e.c.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := lab.DialIn(ctx, testenv.SandboxName(t, e.c, po), "tcp", addr)
	if err != nil {
		t.Fatalf("connecting from %s to %s: %v", p, addr, err)
	}
	return conn
}
