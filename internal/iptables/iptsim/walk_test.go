package iptsim_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// The testdata files are iptables-save -c output of a two-node lab:
// node2.save as the proxy left it, node1-flushed.save after
// `iptables -t nat -F KUBE-SVC-3ENVKKDUT2EZ6WIE` by hand. Services:
// default/echo (LB 192.168.56.240 with source range 192.168.56.0/24, ClientIP
// affinity, endpoints 10.244.0.2 on node1 and 10.244.1.2 on node2),
// default/local (NodePort 30080, externalTrafficPolicy Local, its only
// endpoint 10.244.0.3 on node1), default/none (no endpoints).
const (
	node1IP   = "192.168.56.10"
	node2IP   = "192.168.56.11"
	client    = "192.168.56.100"
	echoVIP   = "10.111.22.24:80"
	localVIP  = "10.104.102.130:80"
	noneVIP   = "10.110.82.231:80"
	lbIP      = "192.168.56.240:80"
	echoSEP1  = "KUBE-SEP-PTH45JJVCLVTYIMY" // 10.244.0.2:8080
	echoSEP2  = "KUBE-SEP-L6VFHHP5QEPN7F6C" // 10.244.1.2:8080
	echoSVC   = "KUBE-SVC-ZJMBFACUQCTMIK2C"
	localEXT  = "KUBE-EXT-3ENVKKDUT2EZ6WIE"
	localSVC  = "KUBE-SVC-3ENVKKDUT2EZ6WIE"
	node2Pod  = "10.244.1.2"
	node2Pod2 = "10.244.1.9"
)

func load(t *testing.T, file string) *iptsim.Rules {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := iptsim.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func node(ips ...string) iptsim.Node {
	n := iptsim.Node{}
	for _, ip := range ips {
		n.Addrs = append(n.Addrs, netip.MustParseAddr(ip))
	}
	return n
}

func trace(t *testing.T, r *iptsim.Rules, n iptsim.Node, p iptsim.Packet) []iptsim.Outcome {
	t.Helper()
	if p.Proto == "" {
		p.Proto = "tcp"
	}
	outs, err := r.Trace(n, p)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

func pkt(src, dst string) iptsim.Packet {
	return iptsim.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddrPort(dst)}
}

// path renders an outcome's steps as "table CHAIN #rule" lines, with the
// step's effect, so a test reads as the expected walk.
func path(o iptsim.Outcome) []string {
	var out []string
	for _, s := range o.Steps {
		l := fmt.Sprintf("%s %s #%d -> %s", s.Table, s.Chain, s.Rule, s.Target)
		if s.Probability < 1 {
			l += fmt.Sprintf(" p=%.2f", s.Probability)
		}
		if s.MarkChanged {
			l += fmt.Sprintf(" mark=%#x", s.Mark)
		}
		if s.DNAT.IsValid() {
			l += " dnat=" + s.DNAT.String()
		}
		if s.Masquerade {
			l += " masq"
		}
		if s.Verdict != "" {
			l += " verdict=" + s.Verdict
		}
		out = append(out, l)
	}
	return out
}

func wantPath(t *testing.T, o iptsim.Outcome, want ...string) {
	t.Helper()
	got := path(o)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("path to %s:\n  %s\nwant:\n  %s", o.Dst, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A pod on node2 reaches its own Service (hairpin): the branch that picks
// itself is masqueraded (KUBE-SEP's -s rule, mark 0x4000, MASQUERADE in
// POSTROUTING); the other crosses to node1 unmasqueraded.
func TestStepsClusterIPHairpin(t *testing.T) {
	r := load(t, "node2.save")
	outs := trace(t, r, node(node2IP, "10.244.1.1"), pkt(node2Pod, echoVIP))
	if len(outs) != 2 {
		t.Fatalf("outcomes: %v", outs)
	}
	byDst := map[string]iptsim.Outcome{}
	for _, o := range outs {
		byDst[o.Dst.String()] = o
		if o.Probability != 0.5 || o.Verdict != "ACCEPT" || !o.DNAT {
			t.Errorf("outcome %v", o)
		}
	}
	wantPath(t, byDst["10.244.1.2:8080"],
		"nat PREROUTING #1 -> KUBE-SERVICES",
		"nat KUBE-SERVICES #1 -> "+echoSVC,
		"nat "+echoSVC+" #5 -> "+echoSEP2,
		"nat "+echoSEP2+" #1 -> KUBE-MARK-MASQ",
		"nat KUBE-MARK-MASQ #1 -> MARK mark=0x4000",
		"nat KUBE-MARK-MASQ #0 -> RETURN",
		"nat "+echoSEP2+" #2 -> DNAT dnat=10.244.1.2:8080 verdict=ACCEPT",
		"filter FORWARD #1 -> KUBE-PROXY-FIREWALL",
		"filter KUBE-PROXY-FIREWALL #0 -> RETURN",
		"filter FORWARD #2 -> KUBE-FORWARD",
		"filter KUBE-FORWARD #2 -> ACCEPT verdict=ACCEPT",
		"nat POSTROUTING #1 -> KUBE-POSTROUTING",
		"nat KUBE-POSTROUTING #2 -> MARK mark=0x0",
		"nat KUBE-POSTROUTING #3 -> MASQUERADE masq verdict=ACCEPT")
	other := byDst["10.244.0.2:8080"]
	if other.Masquerade || other.Mark != 0 {
		t.Errorf("cross-node branch masqueraded: %v", other)
	}
	// The statistic rule is taken with p=0.5; the last rule is unconditional,
	// reached with the remaining 0.5.
	for _, s := range other.Steps {
		if s.Chain == echoSVC && (s.Rule != 4 || s.Probability != 0.5 || s.Branch != 0.5) {
			t.Errorf("SVC step %+v", s)
		}
		if s.Chain == echoSEP1 && s.Rule == 2 && (len(s.Recent) != 1 || s.Recent[0] != echoSEP1) {
			t.Errorf("affinity: DNAT step should --set %s, got %v", echoSEP1, s.Recent)
		}
	}
}

// ClientIP affinity: a source already in an endpoint's xt_recent list takes
// the --rcheck rule (which iptables-save prints before --name) to it.
func TestStepsAffinityRemembered(t *testing.T) {
	r := load(t, "node2.save")
	p := pkt(node2Pod2, echoVIP)
	p.Recent = []string{echoSEP1}
	outs := trace(t, r, node(node2IP), p)
	if len(outs) != 1 || outs[0].Dst.String() != "10.244.0.2:8080" || outs[0].Probability != 1 {
		t.Fatalf("outcomes: %v", outs)
	}
	if s := outs[0].Steps[2]; s.Chain != echoSVC || s.Rule != 2 || !strings.Contains(s.Text, "--rcheck") {
		t.Errorf("third step is %+v, want the rcheck rule", s)
	}
}

// NodePort with externalTrafficPolicy Local on a node without an endpoint:
// KUBE-EXT ends without a jump, nat leaves the packet alone, and filter
// KUBE-EXTERNAL-SERVICES drops it, saying why in its comment.
func TestStepsLocalNoEndpointDrop(t *testing.T) {
	r := load(t, "node2.save")
	outs := trace(t, r, node(node2IP), pkt(client, node2IP+":30080"))
	if len(outs) != 1 || outs[0].Verdict != "DROP" || outs[0].DNAT {
		t.Fatalf("outcomes: %v", outs)
	}
	wantPath(t, outs[0],
		"nat PREROUTING #1 -> KUBE-SERVICES",
		"nat KUBE-SERVICES #9 -> KUBE-NODEPORTS",
		"nat KUBE-NODEPORTS #4 -> "+localEXT,
		"nat "+localEXT+" #0 -> RETURN",
		"nat KUBE-NODEPORTS #0 -> RETURN",
		"nat KUBE-SERVICES #0 -> RETURN",
		"nat PREROUTING #0 -> ACCEPT verdict=ACCEPT",
		"filter INPUT #1 -> KUBE-PROXY-FIREWALL",
		"filter KUBE-PROXY-FIREWALL #0 -> RETURN",
		"filter INPUT #2 -> KUBE-NODEPORTS",
		"filter KUBE-NODEPORTS #0 -> RETURN",
		"filter INPUT #3 -> KUBE-EXTERNAL-SERVICES",
		"filter KUBE-EXTERNAL-SERVICES #1 -> DROP verdict=DROP")
	if c := outs[0].Steps[len(outs[0].Steps)-1].Comment; c != "default/local:http has no local endpoints" {
		t.Errorf("drop comment %q", c)
	}
}

func TestStepsNoEndpointsReject(t *testing.T) {
	r := load(t, "node2.save")
	outs := trace(t, r, node(node2IP), pkt(node2Pod2, noneVIP))
	if len(outs) != 1 || outs[0].Verdict != "REJECT" {
		t.Fatalf("outcomes: %v", outs)
	}
	last := outs[0].Steps[len(outs[0].Steps)-1]
	if last.Table != "filter" || last.Chain != "KUBE-SERVICES" || !strings.Contains(last.Text, "--reject-with icmp-port-unreachable") {
		t.Errorf("last step %+v", last)
	}
}

// loadBalancerSourceRanges: a source outside them falls through KUBE-FW and
// is dropped by filter KUBE-PROXY-FIREWALL; inside them it is masqueraded.
func TestStepsLoadBalancerSourceRanges(t *testing.T) {
	r := load(t, "node2.save")
	outs := trace(t, r, node(node2IP), pkt("10.1.2.3", lbIP))
	if len(outs) != 1 || outs[0].Verdict != "DROP" {
		t.Fatalf("outcomes: %v", outs)
	}
	if s := outs[0].Steps[len(outs[0].Steps)-1]; s.Chain != "KUBE-PROXY-FIREWALL" {
		t.Errorf("dropped by %s, want KUBE-PROXY-FIREWALL", s.Chain)
	}
	outs = trace(t, r, node(node2IP), pkt(client, lbIP))
	if len(outs) != 2 {
		t.Fatalf("outcomes: %v", outs)
	}
	for _, o := range outs {
		if !o.Masquerade || !o.DNAT {
			t.Errorf("LB from the allowed range: %v", o)
		}
	}
}

// Rules changed by hand: KUBE-SVC flushed on node1. The tracer follows the
// kernel, not the intent: the packet falls off the empty chain and leaves
// un-DNATed, masqueraded by the node agent's pod rule.
func TestStepsFlushedChain(t *testing.T) {
	r := load(t, "node1-flushed.save")
	outs := trace(t, r, node(node1IP, "10.244.0.1"), pkt("10.244.0.3", localVIP))
	if len(outs) != 1 || outs[0].DNAT || outs[0].Dst.String() != localVIP || outs[0].Verdict != "ACCEPT" {
		t.Fatalf("outcomes: %v", outs)
	}
	found := false
	for _, s := range outs[0].Steps {
		found = found || (s.Chain == localSVC && s.Rule == 0 && s.Target == "RETURN")
	}
	if !found {
		t.Errorf("no end-of-chain step in %s: %v", localSVC, path(outs[0]))
	}
}

// A built-in chain's saved policy applies when the packet falls off it.
func TestPolicyDrop(t *testing.T) {
	r, err := iptsim.Parse("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [3:180]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	outs := trace(t, r, node(node1IP), pkt(client, "10.244.0.3:80"))
	if len(outs) != 1 || outs[0].Verdict != "DROP" {
		t.Fatalf("outcomes: %v", outs)
	}
	wantPath(t, outs[0], "nat PREROUTING #0 -> ACCEPT verdict=ACCEPT", "filter FORWARD #0 -> DROP verdict=DROP")
}

// MARK in every form iptables accepts or iptables-save prints.
func TestMarkForms(t *testing.T) {
	for _, c := range []struct {
		target string
		want   string
	}{
		{"--set-xmark 0x4000/0x4000", "mark=0x4001"}, // or
		{"--set-xmark 0x1/0x0", "mark=0x0"},          // xor
		{"--or-mark 0x4000", "mark=0x4001"},
		{"--xor-mark 0x1", "mark=0x0"},
		{"--set-mark 0x8", "mark=0x8"},
		{"--and-mark 0x0", "mark=0x0"},
	} {
		rules := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
			"-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff\n-A PREROUTING -j MARK " + c.target + "\nCOMMIT\n"
		r, err := iptsim.Parse(rules)
		if err != nil {
			t.Fatal(err)
		}
		outs := trace(t, r, node(node1IP), pkt(client, node1IP+":80"))
		if got := path(outs[0])[1]; !strings.HasSuffix(got, c.want) {
			t.Errorf("%s: step %q, want %s", c.target, got, c.want)
		}
	}
}

func TestCountersMoved(t *testing.T) {
	before, err := iptsim.Parse("*nat\n:PREROUTING ACCEPT [5:300]\n:KUBE-SERVICES - [0:0]\n" +
		"[5:300] -A PREROUTING -j KUBE-SERVICES\n[0:0] -A KUBE-SERVICES -d 10.96.0.1/32 -j RETURN\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := iptsim.Parse("*nat\n:PREROUTING ACCEPT [6:360]\n:KUBE-SERVICES - [0:0]\n" +
		"[6:360] -A PREROUTING -j KUBE-SERVICES\n[1:60] -A KUBE-SERVICES -d 10.96.0.2/32 -j RETURN\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range iptsim.Moved(before, after) {
		got = append(got, fmt.Sprintf("%s/%s#%d +%d/%d", c.Table, c.Chain, c.Rule, c.Packets, c.Bytes))
	}
	// The KUBE-SERVICES rule changed text in between: its counter is not attributable.
	if want := "[nat/PREROUTING#0 +1/60 nat/PREROUTING#1 +1/60]"; fmt.Sprint(got) != want {
		t.Errorf("moved %v, want %s", got, want)
	}
	if c, ok := after.Counter("nat", "KUBE-SERVICES", 1); !ok || c.Packets != 1 || !strings.HasPrefix(c.Text, "-A KUBE-SERVICES") {
		t.Errorf("Counter: %+v %v", c, ok)
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"-A X -j ACCEPT\n", "*nat\n[1] -A X\n", "*nat\nbogus\n"} {
		if _, err := iptsim.Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// Matches beyond kube-proxy's, as hand-written rules use them: interfaces
// (known from the packet and the node's routes), port ranges, multiport,
// LOG (continues) and SNAT (rewrites the source).
func TestHandWrittenMatches(t *testing.T) {
	rules := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		"-A PREROUTING -i eth0 -p tcp -m tcp --dport 1000:2000 -j LOG --log-prefix x\n" +
		"-A PREROUTING -i cni+ -p tcp -m multiport --dports 80,443 -j DNAT --to-destination 10.244.0.9:8080\n" +
		"-A POSTROUTING -o eth1 -j SNAT --to-source 192.168.56.10\nCOMMIT\n"
	r, err := iptsim.Parse(rules)
	if err != nil {
		t.Fatal(err)
	}
	n := node(node1IP)
	n.Out = func(dst netip.Addr) string {
		if dst == netip.MustParseAddr("10.244.0.9") {
			return "eth1"
		}
		return "cni0"
	}
	p := pkt("10.244.0.5", "10.0.0.1:443")
	p.In = "cni0"
	outs := trace(t, r, n, p)
	wantPath(t, outs[0],
		"nat PREROUTING #2 -> DNAT dnat=10.244.0.9:8080 verdict=ACCEPT",
		"filter FORWARD #0 -> ACCEPT verdict=ACCEPT",
		"nat POSTROUTING #1 -> SNAT masq verdict=ACCEPT")
	p = pkt(client, "10.0.0.1:1500")
	p.In = "eth0"
	outs = trace(t, r, n, p)
	if got := path(outs[0]); got[0] != "nat PREROUTING #1 -> LOG" || outs[0].DNAT {
		t.Errorf("LOG path %v", got)
	}
	// Without the input interface, a rule that depends on it is an error,
	// not a guess.
	if _, err := r.Trace(n, iptsim.Packet{Src: netip.MustParseAddr(client), Dst: netip.MustParseAddrPort("10.0.0.1:1500"), Proto: "tcp"}); err == nil ||
		!strings.Contains(err.Error(), "-i eth0") {
		t.Errorf("err = %v", err)
	}
	// ...but a rule that fails on another match does not need it.
	p = pkt(client, "10.0.0.1:22")
	outs = trace(t, r, iptsim.Node{Addrs: n.Addrs, Out: n.Out}, p)
	if outs[0].DNAT {
		t.Errorf("port 22 DNATed: %v", outs)
	}
}

// v6-clusterip.save is the IPv6 proxier's rules of a dual-stack node
// (kubeproxy's golden v6-clusterip): default/hostnames at
// [fd00:10:96::20]:80 with three endpoints. ip6tables rules trace as
// iptables' do: -d with an IPv6 address, ! -s with an IPv6 CIDR, DNAT to
// [ADDR]:PORT, and ! -d ::1/128.
func TestTraceIPv6ClusterIP(t *testing.T) {
	r := load(t, "v6-clusterip.save")
	n := node("fd00:56::10", "fd00:10:244:1::1")
	// From a pod: no masquerade, a third each.
	outs := trace(t, r, n, pkt("fd00:10:244:1::9", "[fd00:10:96::20]:80"))
	if len(outs) != 3 {
		t.Fatalf("outcomes: %v", outs)
	}
	for _, o := range outs {
		if o.Verdict != "ACCEPT" || !o.DNAT || o.Masquerade || o.Probability < 0.333 || o.Probability > 0.334 {
			t.Errorf("outcome %v", o)
		}
	}
	wantPath(t, outs[0],
		"nat PREROUTING #1 -> KUBE-SERVICES",
		"nat KUBE-SERVICES #1 -> KUBE-SVC-26OUV5WZ4S3VFRGA",
		"nat KUBE-SVC-26OUV5WZ4S3VFRGA #2 -> KUBE-SEP-BR7RD7UPKOKBV3FI p=0.33",
		"nat KUBE-SEP-BR7RD7UPKOKBV3FI #2 -> DNAT dnat=[fd00:10:244:1::5]:80 verdict=ACCEPT",
		"filter FORWARD #1 -> KUBE-PROXY-FIREWALL",
		"filter KUBE-PROXY-FIREWALL #0 -> RETURN",
		"filter FORWARD #2 -> KUBE-FORWARD",
		"filter KUBE-FORWARD #0 -> RETURN",
		"filter FORWARD #3 -> KUBE-SERVICES",
		"filter KUBE-SERVICES #0 -> RETURN",
		"filter FORWARD #4 -> KUBE-EXTERNAL-SERVICES",
		"filter KUBE-EXTERNAL-SERVICES #0 -> RETURN",
		"filter FORWARD #0 -> ACCEPT verdict=ACCEPT",
		"nat POSTROUTING #1 -> KUBE-POSTROUTING",
		"nat KUBE-POSTROUTING #1 -> RETURN",
		"nat POSTROUTING #0 -> ACCEPT verdict=ACCEPT")
	// From outside the pod CIDR (a client host): masqueraded.
	for _, o := range trace(t, r, n, pkt("fd00:56::100", "[fd00:10:96::20]:80")) {
		if !o.Masquerade {
			t.Errorf("from outside the cluster CIDR, not masqueraded: %v", o)
		}
	}
	// An IPv4 address in a rule never matches an IPv6 packet, nor an IPv6
	// one an IPv4 packet.
	if outs := trace(t, r, n, pkt("10.244.1.9", "10.96.0.20:80")); len(outs) != 1 || outs[0].DNAT {
		t.Errorf("an IPv4 packet through ip6tables rules: %v", outs)
	}
}

// The IPv6 network policy hook lets neighbour discovery through (-p
// ipv6-icmp -m icmp6 --icmpv6-type): those rules never match the traced
// TCP or UDP packet, which goes on to the policy's verdict.
func TestTraceIPv6ICMPRules(t *testing.T) {
	const save = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:HOOK - [0:0]
-A FORWARD -j HOOK
-A HOOK -p ipv6-icmp -m icmp6 --icmpv6-type neighbour-solicitation -m comment --comment "neighbour discovery" -j RETURN
-A HOOK -p ipv6-icmp -m icmp6 --icmpv6-type 136 -j RETURN
-A HOOK -m icmp6 --icmpv6-type 135 -j RETURN
-A HOOK -p 58 -j RETURN
-A HOOK -d fd00:10:244:2::5/128 -p tcp -j REJECT --reject-with icmp6-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
COMMIT
`
	r, err := iptsim.Parse(save)
	if err != nil {
		t.Fatal(err)
	}
	outs := trace(t, r, node("fd00:56::11"), pkt("fd00:10:244:1::9", "[fd00:10:244:2::5]:80"))
	if len(outs) != 1 || outs[0].Verdict != "REJECT" {
		t.Fatalf("outcomes: %v", outs)
	}
	wantPath(t, outs[0],
		"nat PREROUTING #0 -> ACCEPT verdict=ACCEPT",
		"filter FORWARD #1 -> HOOK",
		"filter HOOK #5 -> REJECT verdict=REJECT")
	// Another port's address: the HOOK ends, FORWARD accepts.
	if outs := trace(t, r, node("fd00:56::11"), pkt("fd00:10:244:1::9", "[fd00:10:244:2::6]:80")); len(outs) != 1 || outs[0].Verdict != "ACCEPT" {
		t.Errorf("outcomes: %v", outs)
	}
}
