package trace

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// result traces pkt through iptables/iptsim's testdata/node2.save (iptables-save
// -c of a lab's node2; see iptables/iptsim's tests for its services) the way Run
// does, with the routes a lab's node2 has.
func result(t *testing.T, from Source, to Target, pkt iptsim.Packet) *Result {
	t.Helper()
	b, err := os.ReadFile("../iptables/iptsim/testdata/node2.save")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := iptsim.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	pkt.Proto = "tcp"
	outs, err := rules.Trace(iptsim.Node{Addrs: []netip.Addr{netip.MustParseAddr("192.168.56.11"), netip.MustParseAddr("10.244.1.1")}}, pkt)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{From: from, To: to, Proto: "tcp", Node: "node2", Netns: "lab-node2", Hook: "PREROUTING", Paths: Paths(outs, to, "node2")}
	for i := range res.Paths {
		p := &res.Paths[i]
		switch {
		case p.Verdict != "ACCEPT":
		case strings.HasPrefix(p.Dst, "10.244.1."):
			p.Route = &Route{Kind: "bridge", Dev: "cni0", Src: "10.244.1.1", Veth: "veth0a1b2c3d"}
			p.Endpoint = &Pod{Namespace: "default", Name: "echo-b", Node: "node2"}
		case strings.HasPrefix(p.Dst, "10.244.0."):
			p.Route = &Route{Kind: "node", Dev: "eth1", Via: "192.168.56.10", Node: "node1"}
			p.Endpoint = &Pod{Namespace: "default", Name: "echo-a", Node: "node1"}
		}
	}
	return res
}

func hairpin(t *testing.T) *Result {
	return result(t, Source{Kind: "pod", Name: "default/echo-b", IP: netip.MustParseAddr("10.244.1.2"), Node: "node2"},
		Target{Addr: netip.MustParseAddrPort("10.111.22.24:80"), Service: "default/echo:http", Kind: "cluster IP"},
		iptsim.Packet{Src: netip.MustParseAddr("10.244.1.2"), Dst: netip.MustParseAddrPort("10.111.22.24:80")})
}

func localDrop(t *testing.T) *Result {
	return result(t, Source{Kind: "client", Name: "client", IP: netip.MustParseAddr("192.168.56.100")},
		Target{Addr: netip.MustParseAddrPort("192.168.56.11:30080"), Service: "default/local:http", Kind: "NodePort"},
		iptsim.Packet{Src: netip.MustParseAddr("192.168.56.100"), Dst: netip.MustParseAddrPort("192.168.56.11:30080")})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

func TestTreeGolden(t *testing.T) {
	for name, res := range map[string]*Result{"hairpin.tree": hairpin(t), "local-drop.tree": localDrop(t)} {
		var b bytes.Buffer
		res.Tree(&b)
		golden(t, name, b.Bytes())
	}
}

// The tree branches exactly once for a two-endpoint service, at KUBE-SVC,
// in rule order, and ends every branch with its verdict and destination.
func TestTreeShape(t *testing.T) {
	var b bytes.Buffer
	hairpin(t).Tree(&b)
	lines := strings.Split(b.String(), "\n")
	var branches []string
	for _, l := range lines {
		if strings.HasPrefix(l, "├─ ") || strings.HasPrefix(l, "└─ ") {
			branches = append(branches, l)
		}
	}
	if len(branches) != 2 || !strings.Contains(branches[0], "KUBE-SVC-ZJMBFACUQCTMIK2C #4") ||
		!strings.Contains(branches[0], "random p=0.5000, this branch 50.0%") || !strings.Contains(branches[1], "KUBE-SVC-ZJMBFACUQCTMIK2C #5") {
		t.Errorf("branches: %q", branches)
	}
	out := b.String()
	for _, want := range []string{
		"rules: iptables-save on node node2 (lab-node2), packet enters nat PREROUTING",
		"nat KUBE-MARK-MASQ #1: -j MARK --set-xmark 0x4000/0x4000   [mark now 0x4000]",
		"[SNAT to the outgoing interface's address]",
		"=> ACCEPT 10.244.1.2:8080 (50.0%), source masqueraded, out cni0 (bridge) via veth veth0a1b2c3d, reaches pod default/echo-b on node2",
		"=> ACCEPT 10.244.0.2:8080 (50.0%), source kept, out eth1 via 192.168.56.10 (node node1), reaches pod default/echo-a on node1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tree lacks %q:\n%s", want, out)
		}
	}
	// Plain returns from helper chains are left out of the tree.
	if strings.Contains(out, "KUBE-MARK-MASQ: end of chain") {
		t.Errorf("tree shows KUBE-MARK-MASQ's return:\n%s", out)
	}
}

func TestTreeLocalDropSaysWhy(t *testing.T) {
	var b bytes.Buffer
	localDrop(t).Tree(&b)
	out := b.String()
	for _, want := range []string{
		"nat KUBE-EXT-3ENVKKDUT2EZ6WIE: end of chain, back to the caller",
		`filter KUBE-EXTERNAL-SERVICES #1: -p tcp -m comment --comment "default/local:http has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j DROP`,
		"=> DROP (100.0%): externalTrafficPolicy Local: node node2 has no ready endpoint of default/local:http, so KUBE-EXT-3ENVKKDUT2EZ6WIE has no rule for this packet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tree lacks %q:\n%s", want, out)
		}
	}
}

func TestJSON(t *testing.T) {
	res := hairpin(t)
	var b bytes.Buffer
	if err := res.JSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct {
		From  struct{ Kind, IP string }
		To    struct{ Addr, Service, Kind string }
		Hook  string
		Paths []struct {
			Verdict     string
			Probability float64
			Dst         string
			Masquerade  bool
			Route       struct{ Kind, Veth, Node string }
			Endpoint    struct{ Name string }
			Steps       []struct {
				Table, Chain, Target, Mark, DNAT string
				Rule                             int
				Probability                      float64
			}
		}
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.From.IP != "10.244.1.2" || back.To.Addr != "10.111.22.24:80" || back.To.Kind != "cluster IP" || back.Hook != "PREROUTING" || len(back.Paths) != 2 {
		t.Fatalf("decoded %+v", back)
	}
	for _, p := range back.Paths {
		self := p.Dst == "10.244.1.2:8080"
		if p.Masquerade != self || p.Probability != 0.5 || (self && p.Route.Veth != "veth0a1b2c3d") || (!self && p.Route.Node != "node1") {
			t.Errorf("path %+v", p)
		}
		var dnat, mark string
		for _, s := range p.Steps {
			if s.DNAT != "" {
				dnat = s.DNAT
			}
			if s.Mark != "" && mark == "" {
				mark = s.Mark
			}
		}
		if dnat != p.Dst || (self && mark != "0x4000") {
			t.Errorf("path to %s: dnat %q mark %q", p.Dst, dnat, mark)
		}
	}
}

func TestDot(t *testing.T) {
	var b bytes.Buffer
	localDrop(t).Dot(&b)
	out := b.String()
	if !strings.HasPrefix(out, "digraph trace {\n") || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("not a digraph:\n%s", out)
	}
	if !strings.Contains(out, "fillcolor=salmon") || !strings.Contains(out, `label="filter KUBE-EXTERNAL-SERVICES #1\n-j DROP\ndefault/local:http has no local endpoints"`) {
		t.Errorf("dot lacks the DROP:\n%s", out)
	}
	b.Reset()
	hairpin(t).Dot(&b)
	out = b.String()
	if strings.Count(out, "fillcolor=palegreen") != 2 || !strings.Contains(out, `[label="p=0.5000"]`) {
		t.Errorf("dot lacks two accepted branches with their probability:\n%s", out)
	}
	// Every edge joins declared nodes.
	decl := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], "[label=") {
			decl[f[0]] = true
		}
		if len(f) > 2 && f[1] == "->" {
			to := strings.TrimSuffix(f[2], ";")
			if !decl[f[0]] || !decl[to] {
				t.Errorf("edge %q joins an undeclared node", l)
			}
		}
	}
}

// TestRouteStrings: each kind of route out of a node reads as a hop; the vxlan
// pod network's says where the encapsulated packet goes.
func TestRouteStrings(t *testing.T) {
	for _, tc := range []struct {
		r    Route
		want string
	}{
		{Route{Kind: "bridge", Dev: "cni0", Veth: "veth0a1b2c3d"}, "out cni0 (bridge) via veth veth0a1b2c3d"},
		{Route{Kind: "node", Dev: "eth1", Via: "192.168.56.10", Node: "node1"}, "out eth1 via 192.168.56.10 (node node1)"},
		{Route{Kind: "vxlan", Dev: "flannel.1", Via: "10.244.1.0", Node: "node2", Tunnel: "192.168.57.11"},
			"out flannel.1 via 10.244.1.0, VXLAN encapsulated to node2's 192.168.57.11:8472 (VNI 1)"},
		{Route{Kind: "local", Dev: "lo"}, "delivered locally (lo)"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.r, got, tc.want)
		}
	}
}
