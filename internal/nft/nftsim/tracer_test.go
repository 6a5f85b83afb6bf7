package nftsim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// loadTable loads the nft files into a network namespace of its own, runs
// the extra nft commands, and returns `nft -j list table ip kube-proxy`:
// the kernel's own reading of the hand-written rules, as `minikit trace`
// reads a node's.
func loadTable(t *testing.T, files []string, extra ...string) []byte {
	t.Helper()
	return loadTableFamily(t, "ip", files, extra...)
}

func loadTableFamily(t *testing.T, family string, files []string, extra ...string) []byte {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := "mkt-nfttrace-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	nft := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	for _, f := range files {
		nft("-f", filepath.Join("testdata", f))
	}
	for _, e := range extra {
		nft(strings.Fields(e)...)
	}
	return nft("-j", "list", "table", family, "kube-proxy")
}

func parseOverall(t *testing.T, extra ...string) *Ruleset {
	t.Helper()
	r, err := Parse(loadTable(t, []string{"overall.nft"}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var node = iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}

// summary is an outcome as "VERDICT DST p=P [masq] [local]".
func summary(o iptsim.Outcome) string {
	s := fmt.Sprintf("%s %s p=%.2f", o.Verdict, o.Dst, o.Probability)
	if o.Masquerade {
		s += " masq"
	}
	if o.Local {
		s += " local"
	}
	return s
}

func TestTraceOverall(t *testing.T) {
	r := parseOverall(t)
	ext := netip.MustParseAddr("192.168.0.100")
	pod := netip.MustParseAddr("10.244.0.9")
	nodeIP := netip.MustParseAddr("192.168.0.2")
	tests := []struct {
		name  string
		src   netip.Addr
		dst   string
		proto string
		local bool
		want  []string
		// last is "chain#rule" of the last step of the first outcome.
		last    string
		comment string
	}{
		{name: "pod to cluster IP, one endpoint", src: pod, dst: "10.96.0.41:80",
			want: []string{"ACCEPT 10.244.0.1:80 p=1.00"}, last: "nat-postrouting#0"},
		{name: "outside the cluster to cluster IP is masqueraded", src: ext, dst: "10.96.0.41:80",
			want: []string{"ACCEPT 10.244.0.1:80 p=1.00 masq"}, last: "masquerading#1"},
		{name: "hairpin to itself is masqueraded", src: netip.MustParseAddr("10.244.0.1"), dst: "10.96.0.41:80",
			want: []string{"ACCEPT 10.244.0.1:80 p=1.00 masq"}, last: "masquerading#2"},
		{name: "node to cluster IP", src: nodeIP, dst: "10.96.0.41:80", local: true,
			want: []string{"ACCEPT 10.244.0.1:80 p=1.00 masq"}, last: "masquerading#1"},
		{name: "NodePort", src: ext, dst: "192.168.0.2:3003",
			want: []string{"ACCEPT 10.244.0.3:80 p=1.00 masq"}, last: "masquerading#1"},
		{name: "external IP, two endpoints", src: ext, dst: "192.168.99.33:80",
			want: []string{"ACCEPT 10.244.0.5:80 p=0.50 masq", "ACCEPT 10.244.1.4:80 p=0.50 masq"}},
		{name: "no endpoints: reject", src: pod, dst: "10.96.0.46:80",
			want: []string{"REJECT 10.96.0.46:80 p=1.00"}, last: "reject-chain#1", comment: "ns6/svc6:p80"},
		{name: "cluster IP, wrong port: reject", src: pod, dst: "10.96.0.41:81",
			want: []string{"REJECT 10.96.0.41:81 p=1.00"}, last: "cluster-ips-check#1", comment: "Reject traffic to invalid ports of ClusterIPs"},
		{name: "cluster IP, wrong protocol: reject", src: pod, dst: "10.96.0.41:80", proto: "udp",
			want: []string{"REJECT 10.96.0.41:80 p=1.00"}, last: "cluster-ips-check#1"},
		{name: "unallocated cluster IP: drop", src: pod, dst: "10.96.0.99:80",
			want: []string{"DROP 10.96.0.99:80 p=1.00"}, last: "cluster-ips-check#2", comment: "Drop traffic to unallocated ClusterIPs"},
		{name: "externalTrafficPolicy Local NodePort, no local endpoint: drop", src: ext, dst: "192.168.0.2:3001",
			want: []string{"DROP 192.168.0.2:3001 p=1.00"}, last: "nodeport-endpoints-check#1", comment: "ns2/svc2:p80"},
		{name: "externalTrafficPolicy Local LB IP, no local endpoint: drop", src: ext, dst: "1.2.3.4:80",
			want: []string{"DROP 1.2.3.4:80 p=1.00"}, last: "service-endpoints-check#1", comment: "ns2/svc2:p80"},
		{name: "externalTrafficPolicy Local LB IP from a pod: short-circuit", src: pod, dst: "1.2.3.4:80",
			want: []string{"ACCEPT 10.244.1.2:80 p=1.00"}},
		{name: "externalTrafficPolicy Local LB IP from the node: masquerade", src: nodeIP, dst: "1.2.3.4:80", local: true,
			want: []string{"ACCEPT 10.244.1.2:80 p=1.00 masq"}},
		{name: "loadBalancerSourceRanges: outside drops", src: ext, dst: "5.6.7.8:80",
			want: []string{"DROP 5.6.7.8:80 p=1.00"}, last: "firewall-HVFWP5L3-ns5/svc5/tcp/p80#1"},
		{name: "loadBalancerSourceRanges: inside reaches the endpoint", src: netip.MustParseAddr("203.0.113.5"), dst: "5.6.7.8:80",
			want: []string{"ACCEPT 10.244.0.3:80 p=1.00 masq"}},
		{name: "node's own NodePort, externalTrafficPolicy Local: short-circuit, masqueraded", src: nodeIP, dst: "192.168.0.2:3001", local: true,
			want: []string{"ACCEPT 10.244.1.2:80 p=1.00 masq"}, comment: "short-circuit local traffic"},
		{name: "node's own address, no service: delivered", src: nodeIP, dst: "192.168.0.2:22", local: true,
			want: []string{"ACCEPT 192.168.0.2:22 p=1.00 local"}, last: "filter-input#0"},
		{name: "not a service: untouched", src: pod, dst: "10.244.1.7:8080",
			want: []string{"ACCEPT 10.244.1.7:8080 p=1.00"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proto := tc.proto
			if proto == "" {
				proto = "tcp"
			}
			outs, err := r.Trace(node, iptsim.Packet{Src: tc.src, Dst: netip.MustParseAddrPort(tc.dst), Proto: proto, Local: tc.local})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range outs {
				got = append(got, summary(o))
			}
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("outcomes:\n%s\nwant:\n%s\nsteps of the first:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"), steps(outs[0]))
			}
			sum := 0.0
			for _, o := range outs {
				sum += o.Probability
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("probabilities sum to %v", sum)
			}
			last := outs[0].Steps[len(outs[0].Steps)-1]
			if tc.last != "" && fmt.Sprintf("%s#%d", last.Chain, last.Rule) != tc.last {
				t.Errorf("last step %s#%d, want %s; steps:\n%s", last.Chain, last.Rule, tc.last, steps(outs[0]))
			}
			if tc.comment != "" {
				found := false
				for _, s := range outs[0].Steps {
					found = found || s.Comment == tc.comment
				}
				if !found {
					t.Errorf("no step has comment %q; steps:\n%s", tc.comment, steps(outs[0]))
				}
			}
		})
	}
}

func steps(o iptsim.Outcome) string {
	var b strings.Builder
	for _, s := range o.Steps {
		fmt.Fprintf(&b, "  %s #%d: %s -> %s p=%.2f mark=%#x %s\n", s.Chain, s.Rule, s.Text, s.Target, s.Probability, s.Mark, s.Comment)
	}
	return b.String()
}

// TestTraceSteps checks a whole path: the NodePort with masquerade, every
// rule in order.
func TestTraceSteps(t *testing.T) {
	r := parseOverall(t)
	outs, err := r.Trace(node, iptsim.Packet{Src: netip.MustParseAddr("192.168.0.100"), Dst: netip.MustParseAddrPort("192.168.0.2:3003"), Proto: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	want := `  filter-prerouting-pre-dnat #1: ct state new jump firewall-check -> firewall-check p=1.00 mark=0x0 
  firewall-check #0: end of chain -> RETURN p=1.00 mark=0x0 
  filter-prerouting-pre-dnat #0: policy accept -> ACCEPT p=1.00 mark=0x0 
  nat-prerouting #1: jump services -> services p=1.00 mark=0x0 
  services #3: ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports   (element tcp . 3003 : goto external-4AT6LBPK-ns3/svc3/tcp/p80) -> external-4AT6LBPK-ns3/svc3/tcp/p80 p=1.00 mark=0x0 
  external-4AT6LBPK-ns3/svc3/tcp/p80 #1: mark set mark or 0x4000 comment "masquerade" -> MARK p=1.00 mark=0x4000 masquerade
  external-4AT6LBPK-ns3/svc3/tcp/p80 #2: goto service-4AT6LBPK-ns3/svc3/tcp/p80 -> service-4AT6LBPK-ns3/svc3/tcp/p80 p=1.00 mark=0x4000 
  service-4AT6LBPK-ns3/svc3/tcp/p80 #1: meta l4proto tcp dnat to 10.244.0.3:80 -> DNAT p=1.00 mark=0x4000 
  filter-forward #1: ct state new jump service-endpoints-check -> service-endpoints-check p=1.00 mark=0x4000 
  service-endpoints-check #0: end of chain -> RETURN p=1.00 mark=0x4000 
  filter-forward #2: ct state new jump cluster-ips-check -> cluster-ips-check p=1.00 mark=0x4000 
  cluster-ips-check #0: end of chain -> RETURN p=1.00 mark=0x4000 
  filter-forward #0: policy accept -> ACCEPT p=1.00 mark=0x4000 
  nat-postrouting #1: jump masquerading -> masquerading p=1.00 mark=0x4000 
  masquerading #1: mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random -> MASQUERADE p=1.00 mark=0x0 
`
	if len(outs) != 1 {
		t.Fatalf("%d outcomes, want 1", len(outs))
	}
	if got := steps(outs[0]); got != want {
		t.Errorf("steps:\n%s\nwant:\n%s", got, want)
	}
	if !outs[0].DNAT || outs[0].Steps[7].DNAT != netip.MustParseAddrPort("10.244.0.3:80") {
		t.Errorf("DNAT not recorded: %+v", outs[0].Steps[7])
	}
}

// TestTraceAffinity: a source already in an endpoint's affinity set goes
// straight to that endpoint; a new one is added to the set.
func TestTraceAffinity(t *testing.T) {
	set := "affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.244.0.3/80"
	r := parseOverall(t, "add element ip kube-proxy "+set+" { 203.0.113.7 }")
	pkt := iptsim.Packet{Src: netip.MustParseAddr("203.0.113.7"), Dst: netip.MustParseAddrPort("10.96.0.45:80"), Proto: "tcp"}
	outs, err := r.Trace(node, pkt)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Dst.String() != "10.244.0.3:80" {
		t.Fatalf("outcomes %v", outs)
	}
	var chainRules []string
	for _, s := range outs[0].Steps {
		if strings.HasPrefix(s.Chain, "service-HVFWP5L3") {
			chainRules = append(chainRules, fmt.Sprint(s.Rule))
		}
	}
	if strings.Join(chainRules, ",") != "1" {
		t.Errorf("service chain rules matched %v, want the affinity rule 1 only:\n%s", chainRules, steps(outs[0]))
	}
	pkt.Src = netip.MustParseAddr("203.0.113.8")
	outs, err = r.Trace(node, pkt)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || len(outs[0].Recent) != 1 || outs[0].Recent[0] != set {
		t.Fatalf("a new source should be added to %s: %+v", set, outs)
	}
}

// TestTraceNumgenVmap: ClientIP affinity over three endpoints, a numgen
// vmap with a branch each.
func TestTraceNumgenVmap(t *testing.T) {
	r, err := Parse(loadTable(t, []string{"overall.nft", "affinity3.nft"}))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := r.Trace(node, iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.47:53"), Proto: "udp"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range outs {
		got = append(got, summary(o)+" "+strings.Join(o.Recent, ","))
	}
	sort.Strings(got)
	want := []string{
		"ACCEPT 10.244.0.10:5353 p=0.33 affinity-C4PUHX5F-ns7/svc7/udp/dns__10.244.0.10/5353",
		"ACCEPT 10.244.0.11:5353 p=0.33 affinity-FAAAW3NX-ns7/svc7/udp/dns__10.244.0.11/5353",
		"ACCEPT 10.244.1.12:5353 p=0.33 affinity-AJOOG3CV-ns7/svc7/udp/dns__10.244.1.12/5353",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcomes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnknownIsAnError: a statement the walker does not know fails Parse;
// a match it cannot decide fails the walk when the packet reaches it.
func TestUnknownIsAnError(t *testing.T) {
	_, err := Parse(loadTable(t, []string{"overall.nft"}, "add rule ip kube-proxy services limit rate 10/second accept"))
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Parse of a rule with limit: err %v, want an unsupported-statement error", err)
	}
	r, err := Parse(loadTable(t, []string{"overall.nft"}, "insert rule ip kube-proxy services tcp sport 1000 drop"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Trace(node, iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.41:80"), Proto: "tcp"})
	if err == nil || !strings.Contains(err.Error(), "source port") {
		t.Errorf("walk over tcp sport: err %v, want an error naming the source port", err)
	}
}

// TestPosition maps nft handles to rule positions (live traces name rules
// by handle).
func TestPosition(t *testing.T) {
	js, err := os.ReadFile("testdata/overall.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	c := r.chains["services"]
	for i, ru := range c.rules {
		if p, ok := r.Position("services", ru.handle); !ok || p != i+1 {
			t.Errorf("Position(services, %d) = %d, %v; want %d", ru.handle, p, ok, i+1)
		}
	}
	if _, ok := r.Position("services", 99999); ok {
		t.Error("Position of a missing handle succeeded")
	}
}

// TestTraceNumgenCascade: minikit's per-endpoint rules, each behind a
// "numgen random mod N-i 0" match, give every endpoint 1/N, with DNAT rules
// and with gotos to endpoint chains (ClientIP affinity).
func TestTraceNumgenCascade(t *testing.T) {
	traceNumgen(t, []string{"overall.nft", "cascade3.nft"}, []numgenCase{
		{iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.48:80"), Proto: "tcp"}, []string{
			"ACCEPT 10.244.0.20:8080 p=0.33 (numgen random mod 3: 1 in 3)",
			"ACCEPT 10.244.0.21:8080 p=0.33 (numgen random mod 2: 1 in 2)",
			"ACCEPT 10.244.1.22:8080 p=0.33 ",
		}},
		{iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.49:53"), Proto: "udp"}, []string{
			"ACCEPT 10.244.0.30:53 p=0.50 (numgen random mod 2: 1 in 2)",
			"ACCEPT 10.244.1.31:53 p=0.50 ",
		}},
	})
}

// TestTraceNumgenBlocks walks minikit's dnat-endpoints maps: each endpoint
// of a chain's block equally likely, found in the protocol's map.
func TestTraceNumgenBlocks(t *testing.T) {
	traceNumgen(t, []string{"overall.nft", "blocks.nft"}, []numgenCase{
		{iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.50:80"), Proto: "tcp"}, []string{
			"ACCEPT 10.244.0.40:8080 p=0.33 (numgen 0 of 3: element 4 : 10.244.0.40 . 8080)",
			"ACCEPT 10.244.0.41:8080 p=0.33 (numgen 1 of 3: element 5 : 10.244.0.41 . 8080)",
			"ACCEPT 10.244.1.42:8080 p=0.33 (numgen 2 of 3: element 6 : 10.244.1.42 . 8080)",
		}},
		{iptsim.Packet{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddrPort("10.96.0.51:53"), Proto: "udp"}, []string{
			"ACCEPT 10.244.0.50:53 p=0.50 (numgen 0 of 2: element 0 : 10.244.0.50 . 53)",
			"ACCEPT 10.244.1.51:53 p=0.50 (numgen 1 of 2: element 1 : 10.244.1.51 . 53)",
		}},
	})
}

type numgenCase struct {
	pkt  iptsim.Packet
	want []string
}

func traceNumgen(t *testing.T, files []string, cases []numgenCase) {
	t.Helper()
	r, err := Parse(loadTable(t, files))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		outs, err := r.Trace(node, tc.pkt)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		sum := 0.0
		for _, o := range outs {
			note := ""
			for _, s := range o.Steps {
				if strings.Contains(s.Text, "numgen") {
					note = strings.TrimSpace(s.Text[strings.LastIndex(s.Text, "("):])
				}
			}
			got = append(got, summary(o)+" "+note)
			sum += o.Probability
		}
		sort.Strings(got)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v: outcomes:\n%s\nwant:\n%s", tc.pkt.Dst, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		if sum < 0.999 || sum > 1.001 {
			t.Errorf("%v: probabilities sum to %v", tc.pkt.Dst, sum)
		}
	}
}

// TestTraceIPv6 traces IPv6 packets through a dual-stack node's `ip6
// kube-proxy` table (the IPv6 proxier's, testdata/ip6.nft: a NodePort
// service with externalTrafficPolicy Local and one without endpoints).
func TestTraceIPv6(t *testing.T) {
	r, err := Parse(loadTableFamily(t, "ip6", []string{"ip6.nft"}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Family != "ip6" {
		t.Fatalf("family %q, want ip6", r.Family)
	}
	node6 := iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("fd00:56::10")}}
	pod := netip.MustParseAddr("fd00:10:244:1::9")
	ext := netip.MustParseAddr("2001:db8::100")
	tests := []struct {
		name string
		src  netip.Addr
		dst  string
		want []string
	}{
		{"pod to the IPv6 ClusterIP, three endpoints", pod, "[fd00:10:96::30]:80",
			[]string{"ACCEPT [fd00:10:244:1::5]:80 p=0.33", "ACCEPT [fd00:10:244:2::5]:80 p=0.33", "ACCEPT [fd00:10:244:2::6]:80 p=0.33"}},
		{"outside to the NodePort on the node's IPv6 address: the local endpoint, not masqueraded", ext, "[fd00:56::10]:30003",
			[]string{"ACCEPT [fd00:10:244:1::5]:80 p=1.00"}},
		{"hairpin through the ClusterIP is masqueraded", netip.MustParseAddr("fd00:10:244:1::5"), "[fd00:10:96::30]:80",
			[]string{"ACCEPT [fd00:10:244:1::5]:80 p=0.33 masq", "ACCEPT [fd00:10:244:2::5]:80 p=0.33", "ACCEPT [fd00:10:244:2::6]:80 p=0.33"}},
		{"no endpoints: reject", pod, "[fd00:10:96::80]:80", []string{"REJECT [fd00:10:96::80]:80 p=1.00"}},
		{"NodePort without endpoints: reject", ext, "[fd00:56::10]:30006", []string{"REJECT [fd00:56::10]:30006 p=1.00"}},
		{"ClusterIP, wrong port: reject", pod, "[fd00:10:96::30]:81", []string{"REJECT [fd00:10:96::30]:81 p=1.00"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := r.Trace(node6, iptsim.Packet{Src: tc.src, Dst: netip.MustParseAddrPort(tc.dst), Proto: "tcp"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range outs {
				got = append(got, summary(o))
			}
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("outcomes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
