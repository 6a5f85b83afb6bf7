package kubeproxy

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"
)

// Flow tests: the rules of one service shape, written to the stateful fake,
// walked by the packet tracer. Each case says where a packet from some source
// to some frontend ends up: which endpoints (each equally likely), whether it
// is masqueraded, or which verdict stops it.
func TestFlows(t *testing.T) {
	const (
		pod       = "10.244.1.9"     // a pod on this node, not an endpoint
		nodeIP    = "192.168.56.10"  // this node
		client    = "192.168.56.100" // the lab's client host
		allowed   = "203.0.113.5"    // inside the LB source ranges
		forbidden = "198.51.100.7"   // outside them
	)
	all := []string{"10.244.1.5:80", "10.244.2.5:80", "10.244.2.6:80"}
	local := []string{"10.244.1.5:80"}
	type flow struct {
		shape  string
		name   string
		src    string
		local  bool // sent by the node itself
		dst    string
		proto  string
		recent []string
		want   []string // endpoints reached, uniformly; nil when blocked
		masq   bool
		block  string // DROP or REJECT
	}
	sep := func(spn, ep string) string { return prefixSEP + endpointHash(spn, "tcp", ep) }
	flows := []flow{
		{shape: "clusterip", name: "pod to cluster IP", src: pod, dst: "10.96.0.20:80",
			want: []string{"10.244.1.5:9376", "10.244.2.5:9376", "10.244.2.6:9376"}},
		{shape: "clusterip", name: "node to cluster IP", src: nodeIP, local: true, dst: "10.96.0.20:80",
			want: []string{"10.244.1.5:9376", "10.244.2.5:9376", "10.244.2.6:9376"}, masq: true},
		{shape: "clusterip", name: "off-cluster to cluster IP", src: client, dst: "10.96.0.20:80",
			want: []string{"10.244.1.5:9376", "10.244.2.5:9376", "10.244.2.6:9376"}, masq: true},
		{shape: "clusterip", name: "wrong port", src: pod, dst: "10.96.0.20:81", want: []string{"10.96.0.20:81"}},
		{shape: "nodeport", name: "client to NodePort, Cluster", src: client, dst: nodeIP + ":30003", want: all, masq: true},
		{shape: "nodeport", name: "pod to NodePort, Cluster", src: pod, dst: nodeIP + ":30003", want: all, masq: true},
		{shape: "nodeport-local", name: "client to NodePort, Local, endpoint here", src: client, dst: nodeIP + ":30003", want: local},
		{shape: "nodeport-local", name: "pod to NodePort, Local: short-circuit to all", src: pod, dst: nodeIP + ":30003", want: all},
		{shape: "nodeport-local", name: "node to its NodePort, Local", src: nodeIP, local: true, dst: nodeIP + ":30003", want: all, masq: true},
		{shape: "nodeport", name: "curl localhost:NODEPORT on the node, Cluster", src: "127.0.0.1", local: true, dst: "127.0.0.1:30003", want: all, masq: true},
		{shape: "nodeport-local", name: "curl localhost:NODEPORT on the node, Local", src: "127.0.0.1", local: true, dst: "127.0.0.1:30003", want: all, masq: true},
		{shape: "nodeport-local-none-here", name: "client to NodePort, Local, no endpoint here", src: client, dst: nodeIP + ":30003", block: "DROP"},
		{shape: "nodeport-local-none-here", name: "pod to NodePort, Local, no endpoint here", src: pod, dst: nodeIP + ":30003",
			want: []string{"10.244.2.5:80", "10.244.2.6:80"}},
		{shape: "externalip", name: "client to external IP", src: client, dst: "192.168.56.150:80", want: all, masq: true},
		{shape: "loadbalancer-sourceranges-affinity", name: "LB IP from an allowed range", src: allowed, dst: "192.168.56.240:80", want: all, masq: true},
		{shape: "loadbalancer-sourceranges-affinity", name: "LB IP from outside the ranges", src: forbidden, dst: "192.168.56.240:80", block: "DROP"},
		{shape: "loadbalancer-sourceranges-affinity", name: "NodePort ignores source ranges", src: forbidden, dst: nodeIP + ":30005", want: all, masq: true},
		{shape: "loadbalancer-sourceranges-affinity", name: "affinity sticks to the remembered endpoint", src: pod, dst: "10.96.0.50:80",
			recent: []string{sep("ns5/svc5:p80", "10.244.2.6:80")}, want: []string{"10.244.2.6:80"}},
		{shape: "loadbalancer-local-hcnp", name: "client to LB IP, Local", src: client, dst: "192.168.56.241:80", want: local},
		{shape: "loadbalancer-local-hcnp", name: "client to external IP, Local", src: client, dst: "192.168.56.151:80", want: local},
		{shape: "loadbalancer-local-none-here", name: "client to LB IP, Local, none here", src: client, dst: "192.168.56.241:80", block: "DROP"},
		{shape: "internal-local", name: "pod to cluster IP, internal Local", src: pod, dst: "10.96.0.70:80", want: local},
		{shape: "internal-local-none-here", name: "pod to cluster IP, internal Local, none here", src: pod, dst: "10.96.0.70:80", block: "DROP"},
		{shape: "no-endpoints", name: "cluster IP without endpoints", src: pod, dst: "10.96.0.80:80", block: "REJECT"},
		{shape: "no-endpoints", name: "node to cluster IP without endpoints", src: nodeIP, local: true, dst: "10.96.0.80:80", block: "REJECT"},
		{shape: "no-endpoints", name: "external IP without endpoints", src: client, dst: "192.168.56.152:80", block: "REJECT"},
		{shape: "no-endpoints", name: "NodePort without endpoints", src: client, dst: nodeIP + ":30006", block: "REJECT"},
		{shape: "udp-multiport", name: "UDP DNS", src: pod, dst: "10.96.0.10:53", proto: "udp", want: []string{"10.244.1.2:53"}},
		{shape: "udp-multiport", name: "TCP DNS", src: pod, dst: "10.96.0.10:53", want: []string{"10.244.1.2:53"}},
		{shape: "terminating-fallback", name: "only a terminating endpoint", src: pod, dst: "10.96.0.90:80", want: []string{"10.244.1.7:80"}},
	}
	byName := map[string]shape{}
	for _, s := range shapes() {
		byName[s.name] = s
	}
	for _, f := range flows {
		t.Run(f.name, func(t *testing.T) {
			ipt := iptablestest.NewFake()
			p, _ := testProxier(t, ipt)
			loadShape(p, byName[f.shape])
			mustSync(t, p)
			rules, err := iptsim.Parse(saved(t, ipt))
			if err != nil {
				t.Fatal(err)
			}
			proto := f.proto
			if proto == "" {
				proto = "tcp"
			}
			outs, err := rules.Trace(iptsim.Node{Addrs: []netip.Addr{testNodeIP}}, iptsim.Packet{
				Src: netip.MustParseAddr(f.src), Dst: netip.MustParseAddrPort(f.dst), Proto: proto, Local: f.local, Recent: f.recent})
			if err != nil {
				t.Fatal(err)
			}
			if f.block != "" {
				if len(outs) != 1 || outs[0].Verdict != f.block {
					t.Fatalf("want %s, got %v", f.block, outs)
				}
				return
			}
			var got []string
			for _, o := range outs {
				if o.Verdict != "ACCEPT" {
					t.Fatalf("blocked: %v", outs)
				}
				if o.Masquerade != f.masq {
					t.Errorf("%s: masquerade %v, want %v", o.Dst, o.Masquerade, f.masq)
				}
				if math.Abs(o.Probability-1/float64(len(f.want))) > 1e-6 {
					t.Errorf("%s reached with p=%.6f, want 1/%d", o.Dst, o.Probability, len(f.want))
				}
				got = append(got, o.Dst.String())
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(f.want) {
				t.Errorf("reached %v, want %v", got, f.want)
			}
		})
	}
}

// TestLocalhostNodePorts follows a student's `curl localhost:NODEPORT` on a
// node through the rules, as kube-proxy writes them by default: KUBE-SERVICES
// hands 127.0.0.1 to KUBE-NODEPORTS, whose first rule for the port counts the
// packet into localhost_nps_accepted_pkts, the service's EXT chain marks it
// for masquerade (its source, 127.0.0.1, cannot leave the node), and
// KUBE-FIREWALL lets it through because it was DNATed; a packet from off the
// node to a loopback address that was not DNATed is dropped there. With
// localhost NodePorts off, the same curl is never DNATed.
func TestLocalhostNodePorts(t *testing.T) {
	trace := func(t *testing.T, p *Proxier, ipt *iptablestest.Fake, pkt iptsim.Packet) []iptsim.Outcome {
		t.Helper()
		loadShape(p, shapes()[1]) // nodeport: ns3/svc3:p80 on 30003
		mustSync(t, p)
		rules, err := iptsim.Parse(saved(t, ipt))
		if err != nil {
			t.Fatal(err)
		}
		outs, err := rules.Trace(iptsim.Node{Addrs: []netip.Addr{testNodeIP}}, pkt)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	curl := iptsim.Packet{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddrPort("127.0.0.1:30003"), Proto: "tcp", Local: true}

	t.Run("curl localhost:NODEPORT reaches every endpoint, counted and masqueraded", func(t *testing.T) {
		ipt := iptablestest.NewFake()
		p, _ := testProxier(t, ipt)
		outs := trace(t, p, ipt, curl)
		if len(outs) != 3 {
			t.Fatalf("outcomes %v, want the 3 endpoints", outs)
		}
		for _, o := range outs {
			if o.Verdict != "ACCEPT" || !o.DNAT || !o.Masquerade {
				t.Errorf("%v: want ACCEPT, DNATed and masqueraded", o)
			}
			var counted, firewall bool
			for _, s := range o.Steps {
				counted = counted || (s.Chain == chainNodePorts && strings.Contains(s.Text, "--nfacct-name "+CounterLocalhostNodePorts))
				firewall = firewall || s.Chain == chainFirewall
			}
			if !counted {
				t.Errorf("%v: did not pass the counted 127.0.0.0/8 rule of KUBE-NODEPORTS", o)
			}
			if !firewall {
				t.Errorf("%v: never walked KUBE-FIREWALL from filter OUTPUT", o)
			}
		}
	})
	t.Run("from off the node to a loopback port: dropped by KUBE-FIREWALL", func(t *testing.T) {
		ipt := iptablestest.NewFake()
		p, _ := testProxier(t, ipt)
		outs := trace(t, p, ipt, iptsim.Packet{Src: netip.MustParseAddr("192.168.56.100"), Dst: netip.MustParseAddrPort("127.0.0.1:22"), Proto: "tcp"})
		if len(outs) != 1 || outs[0].Verdict != "DROP" {
			t.Fatalf("outcomes %v, want one DROP", outs)
		}
		last := outs[0].Steps[len(outs[0].Steps)-1]
		if last.Chain != chainFirewall || last.Comment != "block incoming localnet connections" {
			t.Errorf("dropped by %s %q, want KUBE-FIREWALL", last.Chain, last.Text)
		}
	})
	t.Run("with localhost NodePorts off the curl is not DNATed", func(t *testing.T) {
		ipt := iptablestest.NewFake()
		p, _ := testProxier(t, ipt)
		p.cfg.NoLocalhostNodePorts = true
		outs := trace(t, p, ipt, curl)
		if len(outs) != 1 || outs[0].DNAT {
			t.Fatalf("outcomes %v, want one, not DNATed", outs)
		}
		if strings.Contains(saved(t, ipt), "127.0.0.0/8 --dport") {
			t.Errorf("a localhost NodePort rule was written")
		}
	})
	t.Run("without nfacct the rules do not count, as kube-proxy's", func(t *testing.T) {
		ipt := iptablestest.NewFake()
		p, _ := testProxier(t, ipt)
		p.acct.(*nfacct.Fake).Unavailable = true
		outs := trace(t, p, ipt, curl)
		if len(outs) != 3 || !outs[0].DNAT {
			t.Fatalf("outcomes %v, want the 3 endpoints", outs)
		}
		if s := saved(t, ipt); strings.Contains(s, "nfacct") {
			t.Errorf("rules count with a counter that does not exist:\n%s", s)
		}
	})
}

// Hairpin: a pod reaching its own service is masqueraded exactly when the
// load balancing picks the pod itself.
func TestFlowHairpin(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	loadShape(p, shapes()[0])
	mustSync(t, p)
	rules, err := iptsim.Parse(saved(t, ipt))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := rules.Trace(iptsim.Node{Addrs: []netip.Addr{testNodeIP}}, iptsim.Packet{
		Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddrPort("10.96.0.20:80"), Proto: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 {
		t.Fatalf("outcomes: %v", outs)
	}
	for _, o := range outs {
		self := o.Dst.Addr() == netip.MustParseAddr("10.244.1.5")
		if o.Masquerade != self {
			t.Errorf("%v: masquerade %v, want %v", o, o.Masquerade, self)
		}
	}
}

// The tracer refuses rules it does not understand instead of ignoring them.
func TestTracerRejectsUnknownMatches(t *testing.T) {
	r, err := iptsim.Parse("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -m owner --uid-owner 0 -j DROP\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Trace(iptsim.Node{}, iptsim.Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddrPort("10.0.0.2:80"), Proto: "tcp"})
	if err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("err = %v", err)
	}
}
