package trace_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTraceNFTables traces a lab whose nodes run the nftables proxy mode:
// minikit trace must find the mode itself, walk table ip kube-proxy, predict
// the endpoint set, and have the kernel's own nftrace confirm the path a
// live probe takes (a NodePort through the node without the endpoint,
// masqueraded; externalTrafficPolicy Local dropped; a Service without
// endpoints rejected), leaving the root namespace and no table of its own
// behind. minikit proxy rules prints the table.
func TestTraceNFTables(t *testing.T) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, ProxyMode: "nftables"})
	c := testenv.Client(t, l)
	e := &env{t: t, l: l, c: c, ips: map[string]string{}}
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	defer func() {
		if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
			t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
		}
	}()
	for _, p := range []*corev1.Pod{
		pod("echo-a", "node1", "minikit/echo", map[string]string{"app": "echo", "where": "node1"}),
		pod("echo-b", "node2", "minikit/echo", map[string]string{"app": "echo", "where": "node2"}),
		pod("probe", "node1", "busybox", nil, "sleep", "infinity"),
	} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svcs := map[string]*corev1.Service{}
	for _, s := range []*corev1.Service{
		service("np", map[string]string{"app": "echo"}, func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }),
		service("npl", map[string]string{"where": "node1"}, func(s *corev1.ServiceSpec) {
			s.Type, s.ExternalTrafficPolicy = corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal
		}),
		service("empty", map[string]string{"app": "nothing"}, nil),
	} {
		created, err := c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcs[s.Name] = created
	}
	for _, name := range []string{"echo-a", "echo-b", "probe"} {
		e.ips[name] = testenv.WaitPodReady(t, c, "default", name).Status.PodIP
	}

	// A NodePort through node2, both endpoints, masqueraded.
	np := fmt.Sprintf("node2:%d", svcs["np"].Spec.Ports[0].NodePort)
	res := e.until("client -> "+np+" confirmed through nftables", func(res *trace.Result) error {
		if res.Mode != trace.ModeNFTables || res.Hook != "prerouting" {
			return fmt.Errorf("mode %q hook %q", res.Mode, res.Hook)
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
	}, "client", np, "--live")
	var marked, masqueraded, sawTrace bool
	steps := res.Paths[res.Live.Path].Steps
	for i, s := range steps {
		// kube-proxy's table, then minikit's own iptables rules (network
		// policy, pod masquerade).
		if s.Table != "kube-proxy" && (i == 0 || (s.Table != "nat" && s.Table != "filter")) {
			t.Errorf("step %d in table %q: %+v", i, s.Table, s)
		}
		if i > 0 && s.Table == "kube-proxy" && steps[i-1].Table != "kube-proxy" {
			t.Errorf("kube-proxy step %d after minikit's iptables steps: %+v", i, s)
		}
		marked = marked || (strings.HasPrefix(s.Chain, "external-") && s.Mark == "0x4000")
		masqueraded = masqueraded || (s.Chain == "masquerading" && s.Masquerade)
	}
	for _, ev := range res.Live.Trace {
		sawTrace = sawTrace || (ev.Table == "kube-proxy" && ev.Chain == "masquerading" && ev.Rule == 1)
	}
	if !marked || !masqueraded || !sawTrace {
		t.Errorf("NodePort path: mark 0x4000 in external- %v, masquerading %v, kernel trace of masquerading #1 %v", marked, masqueraded, sawTrace)
	}

	// externalTrafficPolicy Local through the node without the endpoint.
	npl := fmt.Sprintf("node2:%d", svcs["npl"].Spec.Ports[0].NodePort)
	e.until("client -> "+npl+" dropped (Local, no endpoint on node2)", func(res *trace.Result) error {
		p, err := taken(res)
		if err != nil {
			return err
		}
		if p.Verdict != "DROP" || !strings.Contains(p.Why, "externalTrafficPolicy Local") {
			return fmt.Errorf("took %s: %s", p.Verdict, p.Why)
		}
		return nil
	}, "client", npl, "--live")

	// No endpoints: rejected on the pod's node.
	e.until("probe -> svc/empty rejected", func(res *trace.Result) error {
		p, err := taken(res)
		if err != nil {
			return err
		}
		if p.Verdict != "REJECT" || !strings.Contains(p.Why, "has no endpoints") {
			return fmt.Errorf("took %s: %s", p.Verdict, p.Why)
		}
		return nil
	}, "pod/probe", "svc/empty", "--live")

	for _, node := range []string{"node1", "node2"} {
		if out, err := testenv.Run(l, node, "nft", "list", "tables"); err != nil || strings.Contains(out, "minikit-trace") {
			t.Errorf("%s after the live probes: %v: %s", node, err, out)
		}
	}
	out, err := exec.Command(testenv.Minikit(t), "proxy", "rules", "--lab", l.Name(), "node1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "# node node1 ("+lab.NS(l.Name(), "node1")+"): proxy mode nftables\ntable ip kube-proxy {") ||
		!strings.Contains(string(out), "vmap @service-nodeports") {
		t.Errorf("minikit proxy rules node1: %v:\n%s", err, out)
	}
}
