package trace

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/nft/nftsim"
)

// nftRulesetFixture is nft/nftsim's testdata/overall.json: the kernel's
// JSON listing of upstream's TestOverallNFTablesRules services with
// minikit's addresses (node 192.168.0.2, service CIDR 10.96.0.0/12).
func nftRulesetFixture(t *testing.T) *nftsim.Ruleset {
	t.Helper()
	b, err := os.ReadFile("../nft/nftsim/testdata/overall.json")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := nftsim.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// nftResult traces pkt through the fixture the way Run does in nftables
// mode, with the routes a node with one local pod subnet (10.244.0.0/24 on
// cni0) and node2 (10.244.1.0/24 via 192.168.0.3) would have.
func nftResult(t *testing.T, from Source, to Target, pkt iptsim.Packet) *Result {
	t.Helper()
	pkt.Proto = "tcp"
	outs, err := nftRulesetFixture(t).Trace(iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}, pkt)
	if err != nil {
		t.Fatal(err)
	}
	hook := "prerouting"
	if pkt.Local {
		hook = "output"
	}
	res := &Result{From: from, To: to, Proto: "tcp", Node: "node1", Netns: "lab-node1", Mode: ModeNFTables, Hook: hook, Paths: Paths(outs, to, "node1")}
	for i := range res.Paths {
		p := &res.Paths[i]
		switch {
		case p.Verdict != "ACCEPT":
		case strings.HasPrefix(p.Dst, "10.244.0."):
			p.Route = &Route{Kind: "bridge", Dev: "cni0", Src: "10.244.0.1", Veth: "veth01234567"}
			p.Endpoint = &Pod{Namespace: "ns", Name: "web-" + strings.TrimSuffix(strings.TrimPrefix(p.Dst, "10.244.0."), ":80"), Node: "node1"}
		case strings.HasPrefix(p.Dst, "10.244.1."):
			p.Route = &Route{Kind: "node", Dev: "eth1", Via: "192.168.0.3", Node: "node2"}
			p.Endpoint = &Pod{Namespace: "ns", Name: "web-" + strings.TrimSuffix(strings.TrimPrefix(p.Dst, "10.244.1."), ":80"), Node: "node2"}
		}
	}
	return res
}

var (
	client    = Source{Kind: "client", Name: "client", IP: netip.MustParseAddr("192.168.0.100")}
	podSource = Source{Kind: "pod", Name: "ns/client", IP: netip.MustParseAddr("10.244.0.9"), Node: "node1"}
)

func nftNodePort(t *testing.T) *Result {
	return nftResult(t, client, Target{Addr: netip.MustParseAddrPort("192.168.99.33:80"), Service: "ns4/svc4:p80", Kind: "external IP"},
		iptsim.Packet{Src: client.IP, Dst: netip.MustParseAddrPort("192.168.99.33:80")})
}

func TestNFTTreeGolden(t *testing.T) {
	for name, res := range map[string]*Result{
		"nft-external-ip.tree": nftNodePort(t),
		"nft-no-endpoints.tree": nftResult(t, podSource, Target{Addr: netip.MustParseAddrPort("10.96.0.46:80"), Service: "ns6/svc6:p80", Kind: "cluster IP"},
			iptsim.Packet{Src: podSource.IP, Dst: netip.MustParseAddrPort("10.96.0.46:80")}),
	} {
		var b bytes.Buffer
		res.Tree(&b)
		golden(t, name, b.Bytes())
	}
}

func TestNFTWhy(t *testing.T) {
	tests := []struct {
		name string
		to   Target
		pkt  iptsim.Packet
		want string
	}{
		{"no endpoints", Target{Addr: netip.MustParseAddrPort("10.96.0.46:80"), Service: "ns6/svc6:p80", Kind: "cluster IP"},
			iptsim.Packet{Src: podSource.IP, Dst: netip.MustParseAddrPort("10.96.0.46:80")},
			"the Service ns6/svc6:p80 has no endpoints: no service chain serves it, and kube-proxy/service-endpoints-check rule 1 sends it to reject-chain, which rejects it (icmp port unreachable: connection refused)"},
		{"externalTrafficPolicy Local", Target{Addr: netip.MustParseAddrPort("192.168.0.2:3001"), Service: "ns2/svc2:p80", Kind: "NodePort"},
			iptsim.Packet{Src: client.IP, Dst: netip.MustParseAddrPort("192.168.0.2:3001")},
			"externalTrafficPolicy Local: node node1 has no ready endpoint of ns2/svc2:p80, so external-42NFTM6N-ns2/svc2/tcp/p80 has no rule for this packet and nat leaves it un-DNATed; the element of kube-proxy/nodeport-endpoints-check rule 1 drops it"},
		{"loadBalancerSourceRanges", Target{Addr: netip.MustParseAddrPort("5.6.7.8:80"), Service: "ns5/svc5:p80", Kind: "loadbalancer IP"},
			iptsim.Packet{Src: client.IP, Dst: netip.MustParseAddrPort("5.6.7.8:80")},
			"the source is outside loadBalancerSourceRanges: kube-proxy/firewall-HVFWP5L3-ns5/svc5/tcp/p80 rule 1 drops it before nat sees it"},
		{"wrong port", Target{Addr: netip.MustParseAddrPort("10.96.0.41:8080"), Kind: "address"},
			iptsim.Packet{Src: podSource.IP, Dst: netip.MustParseAddrPort("10.96.0.41:8080")},
			"10.96.0.41 is a cluster IP, but no Service serves this port and protocol on it: kube-proxy/cluster-ips-check rule 1 rejects it"},
		{"unallocated", Target{Addr: netip.MustParseAddrPort("10.96.0.99:80"), Kind: "address"},
			iptsim.Packet{Src: podSource.IP, Dst: netip.MustParseAddrPort("10.96.0.99:80")},
			"10.96.0.99 is in the service CIDR but no Service has it: kube-proxy/cluster-ips-check rule 2 drops it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := nftResult(t, client, tc.to, tc.pkt)
			if len(res.Paths) != 1 || res.Paths[0].Why != tc.want {
				t.Errorf("why:\n%q\nwant:\n%q", res.Paths[0].Why, tc.want)
			}
		})
	}
}

// JSON of an nftables-mode trace has the same shape as iptables mode's, with
// mode and the nft steps.
func TestNFTJSON(t *testing.T) {
	var b bytes.Buffer
	if err := nftNodePort(t).JSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Mode  string
		Hook  string
		Paths []struct {
			Verdict     string
			Probability float64
			Dst         string
			Masquerade  bool
			Steps       []struct {
				Table, Chain, Target, DNAT string
				Rule                       int
			}
		}
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != "nftables" || got.Hook != "prerouting" || len(got.Paths) != 2 {
		t.Fatalf("mode %q hook %q, %d paths:\n%s", got.Mode, got.Hook, len(got.Paths), b.String())
	}
	for _, p := range got.Paths {
		if p.Verdict != "ACCEPT" || p.Probability != 0.5 || !p.Masquerade {
			t.Errorf("path %+v, want ACCEPT p=0.5 masqueraded", p)
		}
		dnat := ""
		for _, s := range p.Steps {
			if s.Table != "kube-proxy" {
				t.Errorf("step table %q", s.Table)
			}
			if s.Target == "DNAT" {
				dnat = s.DNAT
			}
		}
		if dnat != p.Dst {
			t.Errorf("DNAT step says %q, path %q", dnat, p.Dst)
		}
	}
}

func TestConfirmTrace(t *testing.T) {
	res := nftResult(t, podSource, Target{Addr: netip.MustParseAddrPort("10.96.0.41:80"), Service: "ns1/svc1:p80", Kind: "cluster IP"},
		iptsim.Packet{Src: podSource.IP, Dst: netip.MustParseAddrPort("10.96.0.41:80")})
	var events []TraceEvent
	for _, s := range res.Paths[0].Steps {
		if s.Rule > 0 {
			events = append(events, TraceEvent{Table: s.Table, Chain: s.Chain, Rule: s.Rule, Handle: 100 + s.Rule, Text: s.Text, Verdict: "continue"})
		}
	}
	flow := &Flow{Proto: "tcp", OrigSrc: "10.244.0.9:40000", OrigDst: "10.96.0.41:80", ReplySrc: "10.244.0.1:80", ReplyDst: "10.244.0.9:40000"}
	l := &Live{Conntrack: flow}
	ConfirmTrace(l, res.Paths, events)
	if !l.Confirmed || l.Path != 0 || len(l.Notes) > 0 {
		t.Fatalf("full trace: confirmed %v path %d notes %v", l.Confirmed, l.Path, l.Notes)
	}
	// A rule missing from the trace, and one the path does not take.
	short := append([]TraceEvent{}, events[:len(events)-1]...)
	short = append(short, TraceEvent{Table: "kube-proxy", Chain: "cluster-ips-check", Rule: 2, Text: "ip daddr 10.96.0.0/12 drop", Verdict: "drop"})
	l = &Live{Conntrack: flow}
	ConfirmTrace(l, res.Paths, short)
	if l.Confirmed || len(l.Notes) != 2 ||
		!strings.Contains(l.Notes[0], "the kernel's trace does not show it") ||
		!strings.Contains(l.Notes[1], "cluster-ips-check #2") {
		t.Fatalf("confirmed %v notes %q", l.Confirmed, l.Notes)
	}
}

func TestParseTrace(t *testing.T) {
	rs := nftRulesetFixture(t)
	lines := []string{
		`trace id 1 ip minikit-trace prerouting unknown rule handle 2 (verdict continue)`,
		`trace id 1 ip kube-proxy nat-prerouting packet: iif "eth0" ip saddr 192.168.0.100 ip daddr 10.96.0.41 tcp dport 80`,
		`trace id 1 ip kube-proxy nat-prerouting rule jump services # handle 39 (verdict jump services)`,
		`trace id 1 ip kube-proxy services rule ip daddr . meta l4proto . th dport vmap @service-ips # handle 43 (verdict goto service-ULMVA6XW-ns1/svc1/tcp/p80)`,
		`trace id 1 ip kube-proxy filter-forward policy accept meta mark 0x00004000`,
		`trace id 1 ip filter FORWARD rule  counter packets 0 bytes 0 jump KUBE-NWPLCY-FORWARD # handle 7 (verdict jump KUBE-NWPLCY-FORWARD)`,
		`trace id 2 ip kube-proxy nat-prerouting rule jump services # handle 39 (verdict jump services)`,
	}
	got := parseTrace(lines, rs)
	var s []string
	for _, e := range got {
		s = append(s, e.String())
	}
	want := []string{
		"kube-proxy nat-prerouting #1: jump services (verdict jump services)",
		"kube-proxy services #2: ip daddr . meta l4proto . th dport vmap @service-ips (verdict goto service-ULMVA6XW-ns1/svc1/tcp/p80)",
		"kube-proxy filter-forward: policy accept",
		"filter FORWARD handle 7: counter packets 0 bytes 0 jump KUBE-NWPLCY-FORWARD (verdict jump KUBE-NWPLCY-FORWARD)",
		"kube-proxy nat-prerouting #1: jump services (verdict jump services)",
	}
	if strings.Join(s, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(s, "\n"), strings.Join(want, "\n"))
	}
}

// The trace id is a hash of the packet buffer's address: a later packet of
// the probe can come back with the same id, the same packet with another
// one; the IP ID tells them apart.
func TestFirstPacket(t *testing.T) {
	all := []string{
		"add table ip minikit-trace # handle 5",
		`trace id aa ip minikit-trace output packet: oif "eth1" ip saddr 192.168.56.10 ip daddr 10.99.217.127 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 100 ip length 60 tcp sport 1 tcp dport 80 tcp flags == syn`,
		"trace id aa ip kube-proxy nat-output rule jump services # handle 39 (verdict jump services)",
		"trace id bb ip kube-proxy nat-output rule jump services # handle 39 (verdict jump services)",
		`trace id aa ip kube-proxy filter-output packet: oif "eth1" ip saddr 192.168.56.10 ip daddr 10.244.0.2 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 100 ip length 60 tcp sport 1 tcp dport 9376 tcp flags == syn`,
		"trace id aa ip kube-proxy filter-output policy accept",
		`trace id aa ip minikit-trace output packet: oif "eth1" ip saddr 192.168.56.10 ip daddr 10.99.217.127 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 101 ip length 52 tcp sport 1 tcp dport 80 tcp flags == ack`,
		"trace id aa ip kube-proxy filter-output policy accept",
		`trace id cc ip kube-proxy nat-postrouting packet: oif "eth1" ip saddr 192.168.56.10 ip daddr 10.244.0.2 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 100 ip length 60 tcp sport 1 tcp dport 9376 tcp flags == syn`,
		"trace id cc ip kube-proxy nat-postrouting rule jump masquerading # handle 22 (verdict jump masquerading)",
	}
	got := firstPacket(all)
	if len(got) != 6 || !strings.Contains(got[3], "filter-output policy accept") || !strings.Contains(got[5], "jump masquerading") {
		t.Errorf("first packet's lines:\n%s", strings.Join(got, "\n"))
	}
}

// IPv6 has no IP ID and the probe's packets share one flow label: the SYN
// is the first packet, whatever trace ids its events come under, and the
// ACK after it is not.
func TestFirstPacketIPv6(t *testing.T) {
	hdr := func(id, chain, daddr, dport, flags string) string {
		return `trace id ` + id + ` ip6 ` + chain + ` packet: oif "eth1" ip6 saddr fd00:56::10 ip6 daddr ` + daddr +
			` ip6 dscp cs0 ip6 ecn not-ect ip6 hoplimit 64 ip6 flowlabel 77 ip6 nexthdr tcp ip6 length 40 tcp sport 1 tcp dport ` + dport + ` tcp flags == ` + flags
	}
	all := []string{
		"add table ip6 minikit-trace # handle 5",
		hdr("aa", "minikit-trace output", "fd00:10:96::20", "80", "syn"),
		"trace id aa ip6 kube-proxy nat-output rule jump services # handle 39 (verdict jump services)",
		hdr("aa", "kube-proxy filter-output", "fd00:10:244:1::5", "9376", "syn"),
		"trace id aa ip6 kube-proxy filter-output policy accept",
		hdr("aa", "minikit-trace output", "fd00:10:96::20", "80", "ack"),
		"trace id aa ip6 kube-proxy filter-output policy accept",
		hdr("cc", "kube-proxy nat-postrouting", "fd00:10:244:1::5", "9376", "syn"),
		"trace id cc ip6 kube-proxy nat-postrouting rule jump masquerading # handle 22 (verdict jump masquerading)",
	}
	got := firstPacket(all)
	if len(got) != 6 || !strings.Contains(got[3], "filter-output policy accept") || !strings.Contains(got[5], "jump masquerading") {
		t.Errorf("first packet's lines:\n%s", strings.Join(got, "\n"))
	}
	m := nftProbeMatch{Src: netip.MustParseAddr("fd00:56::10"), Dst: netip.MustParseAddrPort("[fd00:10:96::20]:80"), Proto: "tcp"}
	if want := "ip6 saddr fd00:56::10 ip6 daddr fd00:10:96::20 meta l4proto tcp th dport 80 meta nftrace set 1"; m.rule() != want {
		t.Errorf("trace rule %q, want %q", m.rule(), want)
	}
	if !strings.HasPrefix(m.traceScript(), "add table ip6 minikit-trace") {
		t.Errorf("trace table:\n%s", m.traceScript())
	}
}
