package topology

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/topology -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (go test ./internal/topology -update rewrites it); got:\n%s", path, got)
	}
}

func TestRenderGolden(t *testing.T) {
	g := loadGraph(t)
	hops := PathOf(g, loadTrace(t, "nodeport"), 1)
	for _, tc := range []struct {
		file  string
		write func(io.Writer, *Graph, []Hop) error
		hops  []Hop
	}{
		{"lab.dot", WriteDot, nil},
		{"nodeport.dot", WriteDot, hops},
		{"lab.mmd", WriteMermaid, nil},
		{"nodeport.mmd", WriteMermaid, hops},
		{"lab.svg", WriteSVG, nil},
		{"nodeport.svg", WriteSVG, hops},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b, g, tc.hops); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, b.Bytes())
		})
	}
}

// svgDoc is what the tests read back from an SVG.
type svgElem struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
}

// parseSVG parses an SVG with encoding/xml, failing on anything not
// well-formed, and returns every element's class by data-id.
func parseSVG(t *testing.T, b []byte) map[string]string {
	t.Helper()
	classes, _ := parseSVGBoxes(t, b)
	return classes
}

type box struct{ x, y, w, h float64 }

func (a box) overlaps(b box) bool {
	return a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h
}

func (a box) inside(b box) bool {
	return a.x >= b.x && a.y >= b.y && a.x+a.w <= b.x+b.w && a.y+a.h <= b.y+b.h
}

// parseSVGBoxes is parseSVG that also returns each host's box (its
// <rect class="box">) by host ID.
func parseSVGBoxes(t *testing.T, b []byte) (map[string]string, map[string]box) {
	t.Helper()
	boxes := map[string]box{}
	var stack []string // data-id of the open groups
	d := xml.NewDecoder(bytes.NewReader(b))
	classes := map[string]string{}
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if _, ok := tok.(xml.EndElement); ok && len(stack) > 0 {
			stack = stack[:len(stack)-1]
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		stack = append(stack, attr["data-id"])
		if se.Name.Local == "rect" && attr["class"] == "box" && len(stack) > 1 {
			var bx box
			for k, p := range map[string]*float64{"x": &bx.x, "y": &bx.y, "width": &bx.w, "height": &bx.h} {
				v, err := strconv.ParseFloat(attr[k], 64)
				if err != nil {
					t.Fatalf("host %s: box %s=%q", stack[len(stack)-2], k, attr[k])
				}
				*p = v
			}
			boxes[stack[len(stack)-2]] = bx
		}
		if root == "" {
			root = se.Name.Local
		}
		var id, cls string
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "data-id":
				id = a.Value
			case "class":
				cls = a.Value
			}
		}
		if id != "" {
			classes[id] = cls
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return classes, boxes
}

func TestSVG(t *testing.T) {
	g := loadGraph(t)
	hops := PathOf(g, loadTrace(t, "nodeport"), 1)
	var b bytes.Buffer
	if err := WriteSVG(&b, g, hops); err != nil {
		t.Fatal(err)
	}
	classes := parseSVG(t, b.Bytes())
	onPath := map[string]bool{}
	for _, h := range hops {
		onPath[h.Element] = true
	}
	for _, h := range g.Hosts {
		cls, ok := classes[h.ID]
		if !ok || !strings.Contains(" "+cls+" ", " host host-"+h.Kind+" ") {
			t.Errorf("host %s drawn with class %q (present %v)", h.ID, cls, ok)
		}
		for _, i := range h.Interfaces {
			if _, ok := classes[i.ID]; drawn(i) != ok {
				t.Errorf("interface %s (%s): drawn %v", i.ID, i.Kind, ok)
			}
			if onPath[i.ID] && !strings.Contains(classes[i.ID], "hop") {
				t.Errorf("interface %s is a hop but has class %q", i.ID, classes[i.ID])
			}
		}
	}
	for _, l := range g.Links {
		cls, ok := classes[l.ID]
		if !ok {
			t.Errorf("link %s not drawn", l.ID)
		}
		if hop := strings.Contains(" "+cls+" ", " hop "); hop != onPath[l.ID] {
			t.Errorf("link %s: class %q, on the path %v", l.ID, cls, onPath[l.ID])
		}
	}
	for _, s := range g.Services {
		if _, ok := classes[s.ID]; !ok {
			t.Errorf("service %s not listed", s.ID)
		}
	}
	if !strings.Contains(b.String(), "DNAT to 10.244.1.2:9376") {
		t.Error("the hop legend lacks the DNAT")
	}
}

func TestSVGVerdict(t *testing.T) {
	g := loadGraph(t)
	hops := PathOf(g, loadTrace(t, "reject"), 0)
	var b bytes.Buffer
	if err := WriteSVG(&b, g, hops); err != nil {
		t.Fatal(err)
	}
	classes := parseSVG(t, b.Bytes())
	if cls := classes["gg1-node1"]; !strings.Contains(cls, "verdict") {
		t.Errorf("the rejecting node has class %q, want verdict", cls)
	}
	if !strings.Contains(b.String(), "REJECT: the Service default/empty") {
		t.Error("the legend does not give the REJECT and why")
	}
}

// TestSVGBig lays out 3 nodes × 30 pods: well-formed, every pod drawn
// inside its node's column and none overlapping another.
func TestSVGBig(t *testing.T) {
	g := bigGraph(3, 30)
	var b bytes.Buffer
	if err := WriteSVG(&b, g, nil); err != nil {
		t.Fatal(err)
	}
	classes, boxes := parseSVGBoxes(t, b.Bytes())
	n := 0
	for _, h := range g.Hosts {
		if classes[h.ID] != "host host-"+h.Kind {
			t.Errorf("host %s: class %q", h.ID, classes[h.ID])
		}
		if h.Kind != KindPod {
			continue
		}
		n++
		pb := boxes[h.ID]
		if nb := boxes["big-"+h.Node]; !pb.inside(nb) {
			t.Errorf("pod %s at %v is outside its node's box %v", h.ID, pb, nb)
		}
		for _, o := range g.Hosts {
			if o.Kind == KindPod && o.ID != h.ID && pb.overlaps(boxes[o.ID]) {
				t.Errorf("pods %s and %s overlap", h.ID, o.ID)
			}
		}
	}
	if n != 90 || len(boxes) != len(g.Hosts) {
		t.Errorf("%d pods, %d host boxes drawn; want 90 and %d", n, len(boxes), len(g.Hosts))
	}
}

// bigGraph is a lab of nodes × pods like the collector reads it.
func bigGraph(nodes, pods int) *Graph {
	g := &Graph{Lab: "big", Links: []Link{}}
	g.Hosts = append(g.Hosts, Host{ID: "big-net", Kind: KindUnderlay, Name: "net", Address: "192.168.56.0/24",
		Interfaces: []Interface{{ID: "big-net/br0", Name: "br0", Kind: "bridge"}}})
	var podHosts []Host
	for n := 1; n <= nodes; n++ {
		nn := "node" + itoa(n)
		id := "big-" + nn
		port := "big-net/p-" + nn
		g.Hosts[0].Interfaces = append(g.Hosts[0].Interfaces, Interface{ID: port, Name: "p-" + nn, Kind: "veth", Master: "br0", PeerID: id + "/eth1"})
		g.Links = append(g.Links, Link{ID: port + "--big-net/br0", Kind: "bridge", A: port, B: "big-net/br0"},
			Link{ID: port + "--" + id + "/eth1", Kind: "veth", A: port, B: id + "/eth1"})
		h := Host{ID: id, Kind: KindNode, Name: nn, Address: "192.168.56.1" + itoa(n),
			Interfaces: []Interface{{ID: id + "/eth1", Name: "eth1", Kind: "veth", PeerID: port, Addrs: []string{"192.168.56.1" + itoa(n) + "/24"}},
				{ID: id + "/cni0", Name: "cni0", Kind: "bridge", Addrs: []string{"10.244." + itoa(n) + ".1/24"}}}}
		for p := 1; p <= pods; p++ {
			pid := "mk-" + nn + "-" + itoa(p)
			veth := id + "/veth" + itoa(p)
			h.Interfaces = append(h.Interfaces, Interface{ID: veth, Name: "veth" + itoa(p), Kind: "veth", Master: "cni0", PeerID: pid + "/eth0"})
			g.Links = append(g.Links, Link{ID: veth + "--" + id + "/cni0", Kind: "bridge", A: veth, B: id + "/cni0"},
				Link{ID: veth + "--" + pid + "/eth0", Kind: "veth", A: veth, B: pid + "/eth0"})
			podHosts = append(podHosts, Host{ID: pid, Kind: KindPod, Name: "default/web-" + nn + "-" + itoa(p), Node: nn,
				Address: "10.244." + itoa(n) + "." + itoa(p+1), Phase: "Running",
				Interfaces: []Interface{{ID: pid + "/eth0", Name: "eth0", Kind: "veth", PeerID: veth}}})
		}
		g.Hosts = append(g.Hosts, h)
	}
	g.Hosts = append(g.Hosts, podHosts...)
	return g
}

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkWriteSVG draws a lab of 3 nodes × 30 pods and one of 5 × 200.
func BenchmarkWriteSVG(b *testing.B) {
	for _, size := range []struct{ nodes, pods int }{{3, 30}, {5, 200}} {
		g := bigGraph(size.nodes, size.pods)
		b.Run(itoa(size.nodes)+"x"+itoa(size.pods), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := WriteSVG(io.Discard, g, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// In a dual-stack lab every picture shows both of a node's addresses and
// pod CIDRs, both of a pod's podIPs and both of a Service's cluster IPs;
// --stable names the IPv6 cluster IP by its role as it does the IPv4 one.
func TestDualStackAddresses(t *testing.T) {
	g := &Graph{Lab: "ds",
		Hosts: []Host{
			{ID: "ds-node1", Kind: KindNode, Name: "node1", Address: "192.168.56.10", Addresses: []string{"192.168.56.10", "fd00:56::10"},
				PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24", "fd00:10:244::/64"}},
			{ID: "mk-1", Kind: KindPod, Name: "default/web", Node: "node1", Phase: "Running", Address: "10.244.0.5",
				Addresses: []string{"10.244.0.5", "fd00:10:244::5"}},
		},
		Services: []Service{{ID: "svc:default/web", Namespace: "default", Name: "web", Type: "ClusterIP",
			ClusterIP: "10.96.10.20", ClusterIPs: []string{"10.96.10.20", "fd00:10:96::1020"}, Ports: []ServicePort{{Protocol: "TCP", Port: 80, TargetPort: "8080"}}}},
	}
	for _, tc := range []struct {
		name  string
		write func(io.Writer, *Graph, []Hop) error
	}{{"dot", WriteDot}, {"mermaid", WriteMermaid}, {"svg", WriteSVG}} {
		var b bytes.Buffer
		if err := tc.write(&b, g, nil); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"fd00:56::10", "fd00:10:244::/64", "fd00:10:244::5", "fd00:10:96::1020", "10.244.0.5", "10.96.10.20"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s does not show %s:\n%s", tc.name, want, b.String())
			}
		}
	}
	st, _ := Stable(g, nil)
	if got := st.Services[0].ClusterIPs; len(got) != 2 || got[0] != "clusterIP(default/web)" || got[1] != "clusterIP(default/web, IPv6)" {
		t.Errorf("stable clusterIPs %v", got)
	}
}
