package iptsim_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// node2-netpol.save (iptables-save -c) and node2-netpol.sets (the enforcer's
// ipsets, read over netlink) are node2 of a two-node lab: default/srv
// (10.244.1.2, app=srv, port http=8080, Service 10.96.227.41:80) and
// default/cli2 (10.244.1.3, app=other) on node2, default/cli1 (10.244.0.2,
// app=cli) on node1. Policies: only-cli lets app=cli reach app=srv on port
// http; cli2-out lets app=other send to 10.244.0.0/16 except 10.244.0.0/24
// on TCP 8080 and UDP 53.
const (
	srvVIP  = "10.96.227.41:80"
	srvPod  = "10.244.1.2:8080"
	cli1Pod = "10.244.0.2"
	cli2Pod = "10.244.1.3"
)

func netpolNode(t *testing.T) (*iptsim.Rules, iptsim.Node) {
	t.Helper()
	r := load(t, "node2-netpol.save")
	b, err := os.ReadFile("testdata/node2-netpol.sets")
	if err != nil {
		t.Fatal(err)
	}
	n := node(node2IP, "10.244.1.1")
	n.Sets = map[string]iptsim.IPSet{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "create":
			n.Sets[f[1]] = iptsim.IPSet{Type: f[2]}
		case len(f) == 3 && f[0] == "add":
			s := n.Sets[f[1]]
			s.Entries = append(s.Entries, f[2])
			n.Sets[f[1]] = s
		}
	}
	return r, n
}

// cli2 to srv's Service on the same node: DNAT to srv, cli2's egress policy
// allows it (cli2-out egress rule 0), no policy lets app=other into srv, so
// srv's ingress chain rejects it with ICMP port unreachable (a TCP reset
// would skip the un-DNAT).
func TestPolicyRejectAfterDNAT(t *testing.T) {
	r, n := netpolNode(t)
	p := pkt(cli2Pod, srvVIP)
	p.In = "cni0"
	outs := trace(t, r, n, p)
	if len(outs) != 1 {
		t.Fatalf("outcomes: %v", outs)
	}
	wantPath(t, outs[0],
		"nat PREROUTING #1 -> KUBE-SERVICES",
		"nat KUBE-SERVICES #3 -> KUBE-SVC-KCGLLT7KI4UEOKCA",
		"nat KUBE-SVC-KCGLLT7KI4UEOKCA #2 -> KUBE-SEP-U74A5GNJQQWP4V4M",
		"nat KUBE-SEP-U74A5GNJQQWP4V4M #2 -> DNAT dnat=10.244.1.2:8080 verdict=ACCEPT",
		"filter FORWARD #1 -> KUBE-NWPLCY-FORWARD",
		"filter KUBE-NWPLCY-FORWARD #2 -> KUBE-POD-FW-7WVC3CQUJZFGP47S",
		"filter KUBE-POD-FW-7WVC3CQUJZFGP47S #1 -> KUBE-NWPLCY-WCTQJW4KVGI2TCLM",
		"filter KUBE-NWPLCY-WCTQJW4KVGI2TCLM #1 -> MARK mark=0x10000",
		"filter KUBE-NWPLCY-WCTQJW4KVGI2TCLM #0 -> RETURN",
		"filter KUBE-POD-FW-7WVC3CQUJZFGP47S #2 -> RETURN",
		"filter KUBE-NWPLCY-FORWARD #3 -> MARK mark=0x0",
		"filter KUBE-NWPLCY-FORWARD #4 -> KUBE-POD-FW-JKZ7FQR6K22LGU4P",
		"filter KUBE-POD-FW-JKZ7FQR6K22LGU4P #2 -> KUBE-NWPLCY-D3DTK4JODNKSXEVN",
		"filter KUBE-NWPLCY-D3DTK4JODNKSXEVN #0 -> RETURN",
		"filter KUBE-POD-FW-JKZ7FQR6K22LGU4P #5 -> REJECT verdict=REJECT",
	)
	last := outs[0].Steps[len(outs[0].Steps)-1]
	if last.Comment != "default/srv ingress: no NetworkPolicy allows" {
		t.Errorf("rejecting rule's comment = %q", last.Comment)
	}
}

// cli1's packet, DNATed and routed by node1, arrives at node2: only-cli's
// ingress rule 0 allows it (cli1 is in its peer set, port 8080).
func TestPolicyAllowOnDestinationNode(t *testing.T) {
	r, n := netpolNode(t)
	p := pkt(cli1Pod, srvPod)
	p.In, p.Proto = "eth0", "tcp"
	outs, err := r.Forward(n, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Verdict != "ACCEPT" {
		t.Fatalf("outcomes: %v", outs)
	}
	var by string
	for _, s := range outs[0].Steps {
		if s.Target == "MARK" && s.Mark&0x10000 != 0 {
			by = s.Comment
		}
	}
	if by != "default/only-cli ingress rule 0" {
		t.Errorf("allowed by %q, want default/only-cli ingress rule 0\n%s", by, strings.Join(path(outs[0]), "\n"))
	}
	// The same packet from an address outside the peer set is rejected.
	p.Src = netip.MustParseAddr("10.244.0.9")
	outs, err = r.Forward(n, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Verdict != "REJECT" {
		t.Fatalf("from 10.244.0.9: %v, want REJECT", outs)
	}
	// Not DNATed on this node: the TCP reset rule rejects it.
	if last := outs[0].Steps[len(outs[0].Steps)-1]; last.Rule != 4 {
		t.Errorf("rejected by rule %d (%s), want 4 (the TCP reset)", last.Rule, last.Text)
	}
}

// A rule naming an ipset the node does not have is an error, never a guess.
func TestPolicyUnknownSet(t *testing.T) {
	r, n := netpolNode(t)
	n.Sets = nil
	p := pkt(cli1Pod, srvPod)
	p.In, p.Proto = "eth0", "tcp"
	if _, err := r.Forward(n, p); err == nil || !strings.Contains(err.Error(), "ipset") {
		t.Errorf("err = %v, want an unknown ipset error", err)
	}
}
