package topology

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// The routed fixtures are a real lab (lab "gtr": `lab up --pod-network
// vxlan --topology routed`, node1 on 192.168.56.0/24, node2 on
// 192.168.57.0/24 behind gtr-router) with examples/pod-network's pods
// (client on node1, echo on node2) and a NodePort Service echo, as `lab
// graph -o json` read it, and `minikit trace -o json` of: the client pod
// to echo's address (vxlan), the client host to node1's NodePort (DNAT on
// node1, then vxlan), the client host to node2's NodePort (across the
// router, no tunnel).

const (
	gtrClient = "mk-99a1ca-a05a7c6fae" // pod-network/client on node1
	gtrEcho   = "mk-1406c9-4ecf6b53ab" // pod-network/echo on node2
)

func loadRouted(t *testing.T) *Graph {
	t.Helper()
	var g Graph
	readJSON(t, "testdata/lab-routed.json", &g)
	return &g
}

func TestCollectedRoutedVXLAN(t *testing.T) {
	g := loadRouted(t)
	var kinds []string
	for _, h := range g.Hosts {
		if h.Kind != KindPod {
			kinds = append(kinds, h.ID+" "+h.Kind+" "+h.Address)
		}
	}
	want := []string{
		"gtr-net underlay 192.168.56.0/24,192.168.57.0/24",
		"gtr-router router 192.168.56.1,192.168.57.1",
		"gtr-node1 node 192.168.56.10",
		"gtr-node2 node 192.168.57.11",
		"gtr-client client 192.168.56.100",
		"gtr-external external 192.168.56.200",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("lab hosts\n%s\nwant\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
	var tunnels []string
	for _, l := range g.Links {
		if l.Kind == "vxlan" {
			tunnels = append(tunnels, l.ID)
		}
	}
	if w := []string{"gtr-node1/flannel.1--gtr-node2/flannel.1"}; !slices.Equal(tunnels, w) {
		t.Errorf("vxlan links %v, want %v", tunnels, w)
	}
}

// TestVXLANLinks derives tunnels from FDB entries: to the host whose
// address is the destination, one link per pair of devices, none to an
// address outside the lab or a device of another VNI, and the device whose
// MAC the entry names when a host has two.
func TestVXLANLinks(t *testing.T) {
	vx := func(host, name, mac string, vni int, fdb ...FDBEntry) Interface {
		return Interface{ID: host + "/" + name, Name: name, Kind: "vxlan", MAC: mac,
			VXLAN: &VXLAN{VNI: vni, Port: 8472, FDB: fdb}}
	}
	eth1 := func(host, addr string) Interface {
		return Interface{ID: host + "/eth1", Name: "eth1", Kind: "veth", Addrs: []string{addr + "/24"}}
	}
	hr := func(id string, ifcs ...Interface) *hostRead {
		return &hostRead{host: Host{ID: id, Kind: KindNode, Interfaces: ifcs}}
	}
	for _, tc := range []struct {
		name string
		read []*hostRead
		want []string
	}{{
		name: "both ends have an entry for the other: one link",
		read: []*hostRead{
			hr("n1", eth1("n1", "10.0.0.1"), vx("n1", "flannel.1", "aa:00:00:00:00:01", 1, FDBEntry{MAC: "aa:00:00:00:00:02", Dst: "10.0.1.2"})),
			hr("n2", eth1("n2", "10.0.1.2"), vx("n2", "flannel.1", "aa:00:00:00:00:02", 1, FDBEntry{MAC: "aa:00:00:00:00:01", Dst: "10.0.0.1"})),
		},
		want: []string{"n1/flannel.1--n2/flannel.1"},
	}, {
		name: "only the second end has the entry: A is still the host sorted first",
		read: []*hostRead{
			hr("n1", eth1("n1", "10.0.0.1"), vx("n1", "flannel.1", "aa:00:00:00:00:01", 1)),
			hr("n2", eth1("n2", "10.0.1.2"), vx("n2", "flannel.1", "aa:00:00:00:00:02", 1, FDBEntry{MAC: "aa:00:00:00:00:01", Dst: "10.0.0.1"})),
		},
		want: []string{"n1/flannel.1--n2/flannel.1"},
	}, {
		name: "no entry, an entry outside the lab, another VNI: no link",
		read: []*hostRead{
			hr("n1", eth1("n1", "10.0.0.1"), vx("n1", "flannel.1", "aa:00:00:00:00:01", 1, FDBEntry{MAC: "aa:00:00:00:00:09", Dst: "10.9.9.9"})),
			hr("n2", eth1("n2", "10.0.1.2"), vx("n2", "flannel.1", "aa:00:00:00:00:02", 2, FDBEntry{MAC: "aa:00:00:00:00:01", Dst: "10.0.0.1"})),
			hr("n3", eth1("n3", "10.0.1.3")),
		},
		want: []string{},
	}, {
		name: "three nodes, a full mesh",
		read: []*hostRead{
			hr("n1", eth1("n1", "10.0.0.1"), vx("n1", "flannel.1", "m1", 1, FDBEntry{"m2", "10.0.0.2"}, FDBEntry{"m3", "10.0.0.3"})),
			hr("n2", eth1("n2", "10.0.0.2"), vx("n2", "flannel.1", "m2", 1, FDBEntry{"m1", "10.0.0.1"}, FDBEntry{"m3", "10.0.0.3"})),
			hr("n3", eth1("n3", "10.0.0.3"), vx("n3", "flannel.1", "m3", 1, FDBEntry{"m1", "10.0.0.1"}, FDBEntry{"m2", "10.0.0.2"})),
		},
		want: []string{"n1/flannel.1--n2/flannel.1", "n1/flannel.1--n3/flannel.1", "n2/flannel.1--n3/flannel.1"},
	}, {
		name: "two devices of one VNI at the destination: the one with the entry's MAC",
		read: []*hostRead{
			hr("n1", eth1("n1", "10.0.0.1"), vx("n1", "flannel.1", "m1", 1, FDBEntry{"m2b", "10.0.0.2"})),
			hr("n2", eth1("n2", "10.0.0.2"), vx("n2", "vx-a", "m2a", 1), vx("n2", "vx-b", "m2b", 1)),
		},
		want: []string{"n1/flannel.1--n2/vx-b"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range vxlanLinks(tc.read) {
				if l.Kind != "vxlan" || l.ID != l.A+"--"+l.B {
					t.Errorf("link %+v", l)
				}
				got = append(got, l.ID)
			}
			if got == nil {
				got = []string{}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("links %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPathOfVXLAN(t *testing.T) {
	g := loadRouted(t)
	outer := " (UDP 8472 outer header)"
	// The encapsulated packet's way: node1's VXLAN device, the tunnel,
	// node1's eth1 onto br0, the router, br1, node2 decapsulating, its
	// VXLAN device, its bridge, the veth, the echo pod.
	tunnel := []string{
		"interface gtr-node1/flannel.1", "link gtr-node1/flannel.1--gtr-node2/flannel.1",
		"interface gtr-node1/eth1", "link gtr-net/p-node1--gtr-node1/eth1",
		"host gtr-net", "link gtr-net/p-router0--gtr-router/eth1",
		"host gtr-router", "interface gtr-router/eth2", "link gtr-net/p-router1--gtr-router/eth2",
		"host gtr-net", "link gtr-net/p-node2--gtr-node2/eth1",
		"host gtr-node2", "interface gtr-node2/flannel.1", "interface gtr-node2/cni0",
		"link gtr-node2/vethf8802b79--" + gtrEcho + "/eth0", "host " + gtrEcho,
	}
	for _, tc := range []struct {
		name, trace string
		walk        []string
		labels      map[string][]string // element → labels, in order
	}{{
		name: "pod to pod across the tunnel", trace: "vxlan",
		walk: append([]string{
			"host " + gtrClient, "interface " + gtrClient + "/eth0", "link gtr-node1/veth5bc21c7c--" + gtrClient + "/eth0",
			"interface gtr-node1/cni0", "host gtr-node1",
		}, tunnel...),
		labels: map[string][]string{
			"gtr-node1/flannel.1":                      {"route out flannel.1 via 10.244.1.0"},
			"gtr-node1/flannel.1--gtr-node2/flannel.1": {"VXLAN encapsulated to node2's 192.168.57.11:8472 (VNI 1)"},
			"gtr-node1/eth1":                           {"out by node1 eth1" + outer},
			"gtr-net":                                  {"underlay bridge br0" + outer, "underlay bridge br1" + outer},
			"gtr-router":                               {"router forwards" + outer},
			"gtr-router/eth2":                          {"out by router eth2" + outer},
			"gtr-node2":                                {"node2 decapsulates (VNI 1)"},
			"gtr-node2/flannel.1":                      {"in by node2 flannel.1"},
			"gtr-node2/cni0":                           {"out by node2 cni0"},
		},
	}, {
		name: "client to node1's NodePort: DNAT on node1, then the tunnel", trace: "vxlan-nodeport",
		walk: append([]string{
			"host gtr-client", "interface gtr-client/eth1", "link gtr-net/p-client--gtr-client/eth1",
			"host gtr-net", "link gtr-net/p-node1--gtr-node1/eth1", "host gtr-node1",
		}, tunnel...),
		labels: map[string][]string{
			"gtr-net": {"underlay bridge br0", "underlay bridge br0" + outer, "underlay bridge br1" + outer},
		},
	}, {
		name: "client to node2's NodePort: through the router, no tunnel", trace: "routed-nodeport",
		walk: []string{
			"host gtr-client", "interface gtr-client/eth1", "link gtr-net/p-client--gtr-client/eth1",
			"host gtr-net", "link gtr-net/p-router0--gtr-router/eth1",
			"host gtr-router", "interface gtr-router/eth2", "link gtr-net/p-router1--gtr-router/eth2",
			"host gtr-net", "link gtr-net/p-node2--gtr-node2/eth1",
			"host gtr-node2", "interface gtr-node2/cni0", "link gtr-node2/vethf8802b79--" + gtrEcho + "/eth0", "host " + gtrEcho,
		},
		labels: map[string][]string{
			"gtr-net":        {"underlay bridge br0", "underlay bridge br1"},
			"gtr-router":     {"router forwards"},
			"gtr-node2/cni0": {"route out cni0"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			hops := PathOf(g, loadTrace(t, tc.trace), 0)
			if got, want := strings.Join(walkOf(hops), "\n"), strings.Join(tc.walk, "\n"); got != want {
				t.Fatalf("walk:\n%s\nwant:\n%s", got, want)
			}
			ids := elementIDs(g)
			for _, h := range hops {
				if ids[h.Element] != h.Kind || h.Verdict != "" {
					t.Errorf("hop %+v: no %s with that ID in the graph, or a verdict", h, h.Kind)
				}
			}
			for el, want := range tc.labels {
				if got := labelsAt(hops, el); !slices.Equal(got, want) {
					t.Errorf("labels at %s: %q, want %q", el, got, want)
				}
			}
		})
	}
}

// TestPathOfNoTunnelLink: without the FDB entry (no vxlan link in the
// graph) the route out through flannel.1 is still drawn, over the
// underlay, without a tunnel hop.
func TestPathOfNoTunnelLink(t *testing.T) {
	g := loadRouted(t)
	g.Links = slices.DeleteFunc(g.Links, func(l Link) bool { return l.Kind == "vxlan" })
	hops := PathOf(g, loadTrace(t, "vxlan"), 0)
	walk := walkOf(hops)
	for _, w := range []string{"interface gtr-node1/flannel.1", "host gtr-router", "interface gtr-node2/flannel.1", "host " + gtrEcho} {
		if !slices.Contains(walk, w) {
			t.Errorf("walk lacks %s:\n%s", w, strings.Join(walk, "\n"))
		}
	}
	for _, h := range hops {
		if strings.HasPrefix(h.Label, "VXLAN encapsulated") {
			t.Errorf("a tunnel hop without a vxlan link: %+v", h)
		}
	}
}

func TestRenderRoutedGolden(t *testing.T) {
	g := loadRouted(t)
	sg, hops := Stable(g, PathOf(g, loadTrace(t, "vxlan-nodeport"), 0))
	for _, tc := range []struct {
		file  string
		write func(io.Writer, *Graph, []Hop) error
		hops  []Hop
	}{
		{"routed.dot", WriteDot, hops},
		{"routed.mmd", WriteMermaid, hops},
		{"routed.svg", WriteSVG, nil},
		{"routed-trace.svg", WriteSVG, hops},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b, sg, tc.hops); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, b.Bytes())
		})
	}
}

// TestSVGRouted: the router is drawn below the underlay, above the nodes
// and between them, overlapping no host; the tunnel is a dashed link
// labelled with its VNI; every hop is highlighted.
func TestSVGRouted(t *testing.T) {
	g := loadRouted(t)
	hops := PathOf(g, loadTrace(t, "vxlan-nodeport"), 0)
	var b bytes.Buffer
	if err := WriteSVG(&b, g, hops); err != nil {
		t.Fatal(err)
	}
	classes, boxes := parseSVGBoxes(t, b.Bytes())
	r, ul, n1, n2 := boxes["gtr-router"], boxes["gtr-net"], boxes["gtr-node1"], boxes["gtr-node2"]
	if r.w == 0 || !strings.Contains(classes["gtr-router"], "host host-router") {
		t.Fatalf("the router is not drawn: class %q", classes["gtr-router"])
	}
	if r.y < ul.y+ul.h || r.y+r.h > n1.y || r.x+r.w/2 < n1.x || r.x+r.w/2 > n2.x+n2.w {
		t.Errorf("router at %+v, want below the underlay %+v, above and between the nodes %+v %+v", r, ul, n1, n2)
	}
	for id, bx := range boxes {
		if id != "gtr-router" && bx.overlaps(r) {
			t.Errorf("the router's box overlaps %s's", id)
		}
	}
	for _, id := range []string{"gtr-router/eth1", "gtr-router/eth2", "gtr-net/br0", "gtr-net/br1", "gtr-node1/flannel.1", "gtr-node2/flannel.1"} {
		if _, ok := classes[id]; !ok {
			t.Errorf("interface %s not drawn", id)
		}
	}
	tun := "gtr-node1/flannel.1--gtr-node2/flannel.1"
	if cls := classes[tun]; cls != "link link-vxlan hop" {
		t.Errorf("the tunnel has class %q, want link link-vxlan hop", cls)
	}
	if !strings.Contains(b.String(), `<text class="tunnel-label"`) || !strings.Contains(b.String(), ">VXLAN VNI 1</text>") {
		t.Error("the tunnel is not labelled VXLAN VNI 1")
	}
	for _, h := range hops {
		if cls := classes[h.Element]; !strings.Contains(cls, "hop") {
			t.Errorf("hop %s has class %q", h.Element, cls)
		}
	}
}

func TestDotMermaidTunnel(t *testing.T) {
	g := loadRouted(t)
	var dot, mmd bytes.Buffer
	if err := WriteDot(&dot, g, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteMermaid(&mmd, g, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dot.String(), `"gtr-node1/flannel.1" -- "gtr-node2/flannel.1" [id="gtr-node1/flannel.1--gtr-node2/flannel.1" style=dashed fontcolor="`+tunnelColor) ||
		!strings.Contains(dot.String(), `label="VXLAN VNI 1"]`) {
		t.Errorf("dot lacks the tunnel:\n%s", dot.String())
	}
	if !strings.Contains(dot.String(), `label="router 192.168.56.1,192.168.57.1"`) {
		t.Error("dot lacks the router")
	}
	if !strings.Contains(mmd.String(), `-.-|"VXLAN VNI 1"|`) || !strings.Contains(mmd.String(), "stroke:"+tunnelColor) {
		t.Errorf("mermaid lacks the tunnel:\n%s", mmd.String())
	}
}
