package trace

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/nft/nftsim"
)

// liveNodes builds a node namespace holding nft/nftsim's overall.nft
// table, forwarding, with 192.168.0.2 on a veth to a client namespace
// (192.168.0.100) that routes everything through the node; pod addresses
// are routed back to the client, so a DNATed probe is forwarded and
// masqueraded like a real one. Both are removed when the test ends.
func liveNodes(t *testing.T) (node, clientNS string) {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	node, clientNS = "mkt-nfttrace-n"+id, "mkt-nfttrace-c"+id
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{node, clientNS} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
	}
	run("ip", "link", "add", "mkn"+id, "netns", node, "type", "veth", "peer", "name", "mkc"+id, "netns", clientNS)
	in := func(ns string, args ...string) { run(append([]string{"ip", "netns", "exec", ns}, args...)...) }
	in(node, "ip", "link", "set", "mkn"+id, "up")
	in(node, "ip", "addr", "add", "192.168.0.2/24", "dev", "mkn"+id)
	in(node, "ip", "route", "add", "10.244.0.0/16", "via", "192.168.0.100")
	in(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	in(node, "nft", "-f", "../nft/nftsim/testdata/overall.nft")
	in(clientNS, "ip", "link", "set", "mkc"+id, "up")
	in(clientNS, "ip", "addr", "add", "192.168.0.100/24", "dev", "mkc"+id)
	in(clientNS, "ip", "route", "add", "default", "via", "192.168.0.2")
	return node, clientNS
}

func traceTablePresent(t *testing.T, ns string) bool {
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	return strings.Contains(string(out), traceTable)
}

// TestNFTLiveProbe sends a real probe through a node's nftables rules and
// checks that the kernel's trace confirms the predicted path, rule by
// rule, and that our trace table is gone afterwards, a stale one included.
func TestNFTLiveProbe(t *testing.T) {
	node, clientNS := liveNodes(t)
	// A table left by a killed run is replaced, then removed.
	if out, err := exec.Command("ip", "netns", "exec", node, "nft", "add", "table", "ip", traceTable).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	js, err := nftRules(node, ipv4)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := nftsim.Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	from := Source{Kind: "client", Name: "client", IP: netip.MustParseAddr("192.168.0.100"), Netns: clientNS}
	to := Target{Addr: netip.MustParseAddrPort("10.96.0.41:80"), Service: "ns1/svc1:p80", Kind: "cluster IP"}
	outs, err := rs.Trace(iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}, iptsim.Packet{Src: from.IP, Dst: to.Addr, Proto: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{From: from, To: to, Proto: "tcp", Node: "node", Netns: node, Mode: ModeNFTables, Hook: "prerouting", Paths: Paths(outs, to, "node")}
	r := &run{o: Config{Timeout: 500 * time.Millisecond}, nftRuleset: rs}
	// Several probes in a row: each must find the monitor ready and read
	// its own packet's trace, not a neighbour's.
	for i := 0; i < 3; i++ {
		pr, events, err := r.nftLive(res, clientNS)
		if err != nil {
			t.Fatal(err)
		}
		if traceTablePresent(t, node) {
			t.Errorf("table ip %s is still there after the probe", traceTable)
		}
		flows, err := conntrackFlows(node, ipv4)
		if pr.conn != nil {
			pr.conn.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		l := &Live{Conntrack: findFlow(flows, "tcp", pr.local, to.Addr)}
		if l.Conntrack == nil || l.Conntrack.ReplySrc != "10.244.0.1:80" || !l.Conntrack.SNAT() {
			t.Fatalf("probe %d: conntrack entry %v, want DNAT to 10.244.0.1:80 and SNAT", i, l.Conntrack)
		}
		ConfirmTrace(l, res.Paths, events)
		var ev, chains []string
		for _, e := range events {
			ev = append(ev, e.String())
			if e.Rule > 0 {
				chains = append(chains, e.Chain)
			}
		}
		if !l.Confirmed {
			t.Fatalf("probe %d not confirmed: %q\nkernel trace:\n%s", i, l.Notes, strings.Join(ev, "\n"))
		}
		want := "filter-prerouting-pre-dnat nat-prerouting services services service-ULMVA6XW-ns1/svc1/tcp/p80 filter-forward filter-forward nat-postrouting masquerading"
		if strings.Join(chains, " ") != want {
			t.Errorf("probe %d: rules the kernel saw matched in chains:\n%s\nwant:\n%s", i, strings.Join(chains, " "), want)
		}
	}
}

// TestNFTLiveProbeFailsCleanly: a probe match nft rejects fails before the
// probe, and leaves no table behind.
func TestNFTLiveProbeFailsCleanly(t *testing.T) {
	node, _ := liveNodes(t)
	probed := false
	_, err := nftTraceProbe(node, nftProbeMatch{Src: netip.MustParseAddr("192.168.0.100"), Dst: netip.MustParseAddrPort("10.96.0.41:80"), Proto: "nosuchproto"},
		func() { probed = true }, 2*time.Second)
	if err == nil || probed {
		t.Fatalf("err %v, probed %v; want an error before the probe", err, probed)
	}
	if traceTablePresent(t, node) {
		t.Errorf("table ip %s is still there after a failed run", traceTable)
	}
}
