package trace

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// netpolResult traces pkt through iptables/iptsim's testdata/node2-netpol.save
// and its ipsets (node2-netpol.sets; see iptables/iptsim's netpol_test.go for
// the pods and policies) the way Run does on the traced node.
func netpolResult(t *testing.T, from Source, to Target, pkt iptsim.Packet) *Result {
	t.Helper()
	b, err := os.ReadFile("../iptables/iptsim/testdata/node2-netpol.save")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := iptsim.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.ReadFile("../iptables/iptsim/testdata/node2-netpol.sets")
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string]iptsim.IPSet{}
	for _, l := range strings.Split(string(sb), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "create" {
			sets[f[1]] = iptsim.IPSet{Type: f[2]}
		} else if len(f) == 3 && f[0] == "add" {
			s := sets[f[1]]
			s.Entries = append(s.Entries, f[2])
			sets[f[1]] = s
		}
	}
	pkt.Proto, pkt.In = "tcp", "cni0"
	node := iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.56.11"), netip.MustParseAddr("10.244.1.1")}, Sets: sets}
	outs, err := rules.Trace(node, pkt)
	if err != nil {
		t.Fatal(err)
	}
	return &Result{From: from, To: to, Proto: "tcp", Node: "node2", Netns: "lab-node2", Hook: "PREROUTING", Paths: Paths(outs, to, "node2")}
}

// cli2 to srv's Service on the same node: cli2's egress policy allows it,
// srv's ingress rejects it; the tree says both where the FORWARD walk takes
// them, and JSON carries them.
func TestPolicyVerdictGolden(t *testing.T) {
	res := netpolResult(t, Source{Kind: "pod", Name: "default/cli2", IP: netip.MustParseAddr("10.244.1.3"), Node: "node2"},
		Target{Addr: netip.MustParseAddrPort("10.96.227.41:80"), Service: "default/srv", Kind: "cluster IP"},
		iptsim.Packet{Src: netip.MustParseAddr("10.244.1.3"), Dst: netip.MustParseAddrPort("10.96.227.41:80")})
	var b bytes.Buffer
	res.Tree(&b)
	golden(t, "netpol-reject.tree", b.Bytes())
	b.Reset()
	if err := res.JSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Paths []struct {
			Verdict string          `json:"verdict"`
			Policy  []PolicyVerdict `json:"policy"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []PolicyVerdict{
		{Node: "node2", Direction: "egress", Pod: "default/cli2", Verdict: "allowed", By: "default/cli2-out egress rule 0", Chain: "KUBE-NWPLCY-WCTQJW4KVGI2TCLM", Rule: 1},
		{Node: "node2", Direction: "ingress", Pod: "default/srv", Verdict: "rejected", By: "default/srv ingress: no NetworkPolicy allows", Chain: "KUBE-POD-FW-JKZ7FQR6K22LGU4P", Rule: 5},
	}
	if len(got.Paths) != 1 || got.Paths[0].Verdict != "REJECT" || len(got.Paths[0].Policy) != 2 ||
		got.Paths[0].Policy[0] != want[0] || got.Paths[0].Policy[1] != want[1] {
		t.Errorf("json paths = %+v, want one REJECT with %+v", got.Paths, want)
	}
}

// Live confirmation: a verdict is confirmed when its rule's counter moved
// on its node.
func TestConfirmPolicy(t *testing.T) {
	paths := []Path{{Policy: []PolicyVerdict{
		{Node: "node2", Chain: "KUBE-POD-FW-X", Rule: 4},
		{Node: "node1", Chain: "KUBE-NWPLCY-Y", Rule: 1},
	}}}
	l := &Live{Path: 0, Confirmed: true}
	confirmPolicy(l, paths, map[string][]iptsim.Counter{"node2": {{Table: "filter", Chain: "KUBE-POD-FW-X", Rule: 4, Packets: 1}}})
	if c := paths[0].Policy[0].Confirmed; c == nil || !*c {
		t.Errorf("node2 verdict not confirmed")
	}
	if c := paths[0].Policy[1].Confirmed; c == nil || *c {
		t.Errorf("node1 verdict confirmed without a counter")
	}
	if l.Confirmed || len(l.Notes) != 1 {
		t.Errorf("live still confirmed (%v) with notes %q", l.Confirmed, l.Notes)
	}
}

// A path this node accepts but the destination node's policy rejects is the
// one a probe without a conntrack entry took.
func TestConfirmRejectedFurther(t *testing.T) {
	paths := []Path{{Verdict: "ACCEPT", Dst: "10.244.0.2:8080", Policy: []PolicyVerdict{{Node: "node1", Verdict: "rejected"}}}}
	l := &Live{}
	Confirm(l, paths, nil)
	if l.Path != 0 || l.Reached != "REJECT on node1" || !l.Confirmed {
		t.Errorf("live = %+v", l)
	}
}
