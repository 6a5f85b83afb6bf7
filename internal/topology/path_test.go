package topology

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/trace"
)

// The fixtures are a real two-node lab (lab "gg1": hostnames, a Deployment
// of 3 behind NodePort Services, and a Service "empty" without endpoints)
// as `minikit lab graph -o json` read it, and `minikit trace -o json` of
// that lab.

func loadGraph(t *testing.T) *Graph {
	t.Helper()
	var g Graph
	readJSON(t, "testdata/lab.json", &g)
	return &g
}

func loadTrace(t *testing.T, name string) *trace.Result {
	t.Helper()
	var r trace.Result
	readJSON(t, "testdata/trace-"+name+".json", &r)
	return &r
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// walkOf is the hops' elements with repeats of one element in a row
// folded (a host's several rule labels are one stop).
func walkOf(hops []Hop) []string {
	var out []string
	for _, h := range hops {
		if n := len(out); n > 0 && out[n-1] == h.Kind+" "+h.Element {
			continue
		}
		out = append(out, h.Kind+" "+h.Element)
	}
	return out
}

func labelsAt(hops []Hop, element string) []string {
	var out []string
	for _, h := range hops {
		if h.Element == element {
			out = append(out, h.Label)
		}
	}
	return out
}

func TestPathOf(t *testing.T) {
	g := loadGraph(t)
	for _, tc := range []struct {
		name  string
		trace string
		path  int
		walk  []string
		// labels that must appear at the node whose rules were read, in
		// this order (each a prefix of one label)
		rules   []string
		verdict string
	}{{
		name: "client to a NodePort on node1, DNATed to a pod on node2", trace: "nodeport", path: 1,
		walk: []string{
			"host gg1-client", "interface gg1-client/eth1", "link gg1-net/p-client--gg1-client/eth1",
			"host gg1-net", "link gg1-net/p-node1--gg1-node1/eth1",
			"host gg1-node1", "interface gg1-node1/eth1", "link gg1-net/p-node1--gg1-node1/eth1",
			"host gg1-net", "link gg1-net/p-node2--gg1-node2/eth1",
			"host gg1-node2", "interface gg1-node2/cni0", "link gg1-node2/vethc81f33c5--mk-eda45b-0138919b2e/eth0",
			"host mk-eda45b-0138919b2e",
		},
		rules: []string{"mark 0x4000 (nat/KUBE-MARK-MASQ)", "DNAT to 10.244.1.2:9376 (nat/KUBE-SEP-", "MASQUERADE (nat/KUBE-POSTROUTING)"},
	}, {
		name: "pod to a ClusterIP, DNATed to a pod on the same node", trace: "clusterip", path: 0,
		walk: []string{
			"host mk-b7157e-3079490f84", "interface mk-b7157e-3079490f84/eth0", "link gg1-node1/vethc0a57aa2--mk-b7157e-3079490f84/eth0",
			"interface gg1-node1/cni0", "host gg1-node1", "interface gg1-node1/cni0",
			"link gg1-node1/veth34398ce8--mk-b7157e-4c24a34e3f/eth0", "host mk-b7157e-4c24a34e3f",
		},
		rules: []string{"DNAT to 10.244.0.2:9376 (nat/KUBE-SEP-"},
	}, {
		name: "pod to a Service without endpoints: REJECT on its node", trace: "reject", path: 0,
		walk: []string{
			"host mk-b7157e-3079490f84", "interface mk-b7157e-3079490f84/eth0", "link gg1-node1/vethc0a57aa2--mk-b7157e-3079490f84/eth0",
			"interface gg1-node1/cni0", "host gg1-node1",
		},
		verdict: "REJECT",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := loadTrace(t, tc.trace)
			hops := PathOf(g, r, tc.path)
			if got, want := strings.Join(walkOf(hops), "\n"), strings.Join(tc.walk, "\n"); got != want {
				t.Fatalf("walk:\n%s\nwant:\n%s", got, want)
			}
			ids := elementIDs(g)
			for _, h := range hops {
				if ids[h.Element] != h.Kind {
					t.Errorf("hop %+v: no %s with that ID in the graph", h, h.Kind)
				}
			}
			labels := labelsAt(hops, "gg1-node1")
			i := 0
			for _, l := range labels {
				if i < len(tc.rules) && strings.HasPrefix(l, tc.rules[i]) {
					i++
				}
			}
			if i < len(tc.rules) {
				t.Errorf("labels at gg1-node1 %q lack %q (in order)", labels, tc.rules[i:])
			}
			last := hops[len(hops)-1]
			if last.Verdict != tc.verdict {
				t.Errorf("last hop %+v, want verdict %q", last, tc.verdict)
			}
			for _, h := range hops[:len(hops)-1] {
				if h.Verdict != "" {
					t.Errorf("hop %+v before the end has a verdict", h)
				}
			}
			if tc.verdict != "" && !strings.Contains(last.Label, "has no endpoints") {
				t.Errorf("the REJECT hop does not say why: %q", last.Label)
			}
		})
	}
}

func TestPathOfBadInput(t *testing.T) {
	g := loadGraph(t)
	r := loadTrace(t, "nodeport")
	if hops := PathOf(g, r, len(r.Paths)); hops != nil {
		t.Errorf("path out of range: %v", hops)
	}
	if hops := PathOf(g, r, -1); hops != nil {
		t.Errorf("path -1: %v", hops)
	}
	gone := *r
	gone.From = trace.Source{Kind: "pod", Name: "default/gone"}
	if hops := PathOf(g, &gone, 0); hops != nil {
		t.Errorf("FROM not in the graph: %v", hops)
	}
}

// elementIDs maps every host, interface and link ID to its hop kind.
func elementIDs(g *Graph) map[string]string {
	ids := map[string]string{}
	for _, h := range g.Hosts {
		ids[h.ID] = "host"
		for _, i := range h.Interfaces {
			ids[i.ID] = "interface"
		}
	}
	for _, l := range g.Links {
		ids[l.ID] = "link"
	}
	return ids
}

// A trace to a Gateway ends at a node's data port: the last hop says the
// Gateway's user-space data plane takes it there, not which pod.
func TestPathOfGatewayEndsAtTheDataPlane(t *testing.T) {
	g := loadGraph(t)
	r := loadTrace(t, "nodeport")
	r.Gateway = &trace.Gateway{Name: "default/cafe", DataPlanes: []trace.DataPlane{{Node: "node1", Addr: r.Paths[0].Dst}}}
	hops := PathOf(g, r, 0)
	if len(hops) == 0 {
		t.Fatal("no hops")
	}
	want := "Gateway default/cafe data plane, user space (" + r.Paths[0].Dst + "): routes per request"
	if last := hops[len(hops)-1]; last.Label != want {
		t.Errorf("last hop %+v, want label %q", last, want)
	}
	r.Gateway = nil
	if last := PathOf(g, r, 0); strings.Contains(last[len(last)-1].Label, "Gateway") {
		t.Errorf("a trace to no Gateway: last hop %+v", last[len(last)-1])
	}
}
