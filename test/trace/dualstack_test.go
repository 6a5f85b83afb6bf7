package trace_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTraceIPv6 traces IPv6 in a dual-stack lab, in both proxy modes (a
// subtest and a lab each): a pod to a RequireDualStack Service's IPv6
// cluster IP (svc/NAME with --ip-family ipv6, and the address itself) must
// predict the backends' IPv6 addresses, unmasqueraded, and the live probe
// from the pod's IPv6 address must reach the pod the path names; the
// client host to a NodePort on node2's IPv6 address must be masqueraded
// on the way to both backends, confirmed by conntrack (and in nftables
// mode by the kernel's trace of table ip6 kube-proxy). The IPv4 trace of
// the same Service still reads the IPv4 rules, and no trace table is left.
func TestTraceIPv6(t *testing.T) {
	testenv.RequireRoot(t)
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) { traceIPv6(t, mode) })
	}
}

func traceIPv6(t *testing.T, mode string) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyDual, ProxyMode: mode})
	c := testenv.Client(t, l)
	e := &env{t: t, l: l, c: c, ips: map[string]string{}}
	for _, p := range []*corev1.Pod{
		pod("echo-a", "node1", "minikit/echo", map[string]string{"app": "echo"}),
		pod("echo-b", "node2", "minikit/echo", map[string]string{"app": "echo"}),
		pod("probe", "node1", "busybox", nil, "sleep", "infinity"),
	} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	require := corev1.IPFamilyPolicyRequireDualStack
	svc, err := c.CoreV1().Services("default").Create(ctx, service("ds", map[string]string{"app": "echo"}, func(s *corev1.ServiceSpec) {
		s.Type, s.IPFamilyPolicy = corev1.ServiceTypeNodePort, &require
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("clusterIPs %v, want both families", svc.Spec.ClusterIPs)
	}
	vip6 := svc.Spec.ClusterIPs[1]
	ip6 := map[string]string{}
	for _, name := range []string{"echo-a", "echo-b", "probe"} {
		p := testenv.WaitPodReady(t, c, "default", name)
		for _, ip := range p.Status.PodIPs {
			if netip.MustParseAddr(ip.IP).Is6() {
				ip6[name] = ip.IP
			}
		}
		if ip6[name] == "" {
			t.Fatalf("pod %s has no IPv6 address: %v", name, p.Status.PodIPs)
		}
		e.ips[name] = "[" + ip6[name] + "]"
	}
	wantRules := "ip6tables-save"
	if mode == "nftables" {
		wantRules = "nft list table ip6 kube-proxy"
	}

	// Pod to the IPv6 cluster IP, by name and by address.
	for _, to := range []string{"svc/ds", "[" + vip6 + "]:80"} {
		e.until("probe -> "+to+" over IPv6", func(res *trace.Result) error {
			if res.Family != "IPv6" || res.From.IP.String() != ip6["probe"] || res.To.Addr.Addr().String() != vip6 {
				return fmt.Errorf("traced %s %s -> %s", res.Family, res.From.IP, res.To.Addr)
			}
			if got, want := endpoints(res), e.eps("echo-a", "echo-b"); got != want {
				return fmt.Errorf("endpoints %s, want %s", got, want)
			}
			p, err := taken(res)
			if err != nil {
				return err
			}
			if p.Verdict != "ACCEPT" || p.Masquerade || p.Endpoint == nil || res.Live.Conntrack == nil || res.Live.Conntrack.SNAT() {
				return fmt.Errorf("took %s to %s, masquerade %v, conntrack %v", p.Verdict, p.Dst, p.Masquerade, res.Live.Conntrack)
			}
			if !strings.Contains(res.Live.Reply, "pod="+p.Endpoint.Name+"\n") {
				return fmt.Errorf("path names pod %s, the reply came from elsewhere: %q", p.Endpoint.Name, res.Live.Reply)
			}
			return nil
		}, "pod/probe", to, "--ip-family", "ipv6", "--live")
	}
	out, err := e.text("pod/probe", "svc/ds", "--ip-family", "ipv6")
	if err != nil || !strings.Contains(out, "rules: "+wantRules+" on node node1") {
		t.Errorf("tree of the IPv6 trace does not name %s: %v\n%s", wantRules, err, out)
	}

	// The client host to the NodePort on node2's IPv6 address: masqueraded.
	np := fmt.Sprintf("node2:%d", svc.Spec.Ports[0].NodePort)
	res := e.until("client -> "+np+" over IPv6", func(res *trace.Result) error {
		if res.Family != "IPv6" || !res.To.Addr.Addr().Is6() || res.To.Kind != "NodePort" || !res.From.IP.Is6() {
			return fmt.Errorf("traced %s %s -> %s (%s)", res.Family, res.From.IP, res.To.Addr, res.To.Kind)
		}
		if got, want := endpoints(res), e.eps("echo-a", "echo-b"); got != want {
			return fmt.Errorf("endpoints %s, want %s", got, want)
		}
		p, err := taken(res)
		if err != nil {
			return err
		}
		if p.Verdict != "ACCEPT" || !p.Masquerade || res.Live.Conntrack == nil || !res.Live.Conntrack.SNAT() {
			return fmt.Errorf("took %s to %s, masquerade %v, conntrack %v", p.Verdict, p.Dst, p.Masquerade, res.Live.Conntrack)
		}
		if !strings.Contains(res.Live.Reply, "pod="+p.Endpoint.Name+"\n") {
			return fmt.Errorf("path names pod %s, the reply came from elsewhere: %q", p.Endpoint.Name, res.Live.Reply)
		}
		return nil
	}, "client", np, "--ip-family", "ipv6", "--live")
	if mode == "nftables" {
		saw := false
		for _, ev := range res.Live.Trace {
			saw = saw || (ev.Table == "kube-proxy" && strings.HasPrefix(ev.Chain, "external-"))
		}
		if !saw {
			t.Errorf("the kernel's trace of the NodePort probe shows no external- chain: %v", res.Live.Trace)
		}
	}

	// The same Service's IPv4 cluster IP still traces through the IPv4 rules.
	e.until("probe -> svc/ds over IPv4", func(res *trace.Result) error {
		if res.Family != "IPv4" || res.To.Addr.Addr().String() != svc.Spec.ClusterIPs[0] || !res.From.IP.Is4() {
			return fmt.Errorf("traced %s %s -> %s", res.Family, res.From.IP, res.To.Addr)
		}
		_, err := taken(res)
		return err
	}, "pod/probe", "svc/ds", "--live")

	if mode == "nftables" {
		for _, node := range []string{"node1", "node2"} {
			if out, err := testenv.Run(l, node, "nft", "list", "tables"); err != nil || strings.Contains(out, "minikit-trace") {
				t.Errorf("%s after the live probes: %v: %s", node, err, out)
			}
		}
	}
}
