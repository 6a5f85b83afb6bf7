package topology_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestLabGraphVXLAN draws labs with the VXLAN pod network, on one segment
// and on a routed underlay: every namespace as ip -j shows it (flannel.1
// with its VNI, port and `bridge fdb` entries), the router host and its
// links to both underlay bridges, one vxlan link per pair of nodes whose
// FDB sends to the other, and the path of a pod-to-pod trace across the
// tunnel as PathOf of `minikit trace -o json` gives it.
func TestLabGraphVXLAN(t *testing.T) {
	for _, topo := range []string{lab.TopologyFlat, lab.TopologyRouted} {
		t.Run(topo, func(t *testing.T) { testVXLAN(t, topo) })
	}
}

func testVXLAN(t *testing.T, topo string) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 2, PodNetwork: "vxlan", Topology: topo})
	c := testenv.Client(t, l)
	root := testenv.RootSnapshot(t, func(string) bool { return false })
	client, echo := podPair(t, c)
	// The cluster's own DNS pods are in the lab too, as in kubectl get pods -A.
	dnsPods := testenv.ClusterDNSPods(t, c)
	ns := func(h string) string { return lab.NS(l.Name(), h) }

	var status struct {
		Underlay2 string `json:"underlay2"`
		Router    *struct {
			Netns   string `json:"netns"`
			Address string `json:"address"`
		} `json:"router"`
	}
	if err := json.Unmarshal([]byte(minikit(t, "lab", "status", "--name", l.Name(), "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if (status.Router != nil) != (topo == lab.TopologyRouted) {
		t.Fatalf("lab status -o json: router %+v in a %s lab", status.Router, topo)
	}

	// The agents write each other's FDB entries from the Node objects:
	// wait until both nodes have theirs in the kernel, and only then read
	// the graph, so that the picture and ip -j read the same state (the
	// agents only add entries once both nodes are up).
	testutil.Eventually(t, 30*time.Second, "FDB entries on both nodes' flannel.1", func() error {
		for _, n := range []string{"node1", "node2"} {
			if len(fdbOf(t, ns(n), "flannel.1")) == 0 {
				return fmt.Errorf("%s has no FDB entry on flannel.1", n)
			}
			// The route is the last of neigh, fdb, route the agent adds.
			var routes []ipRoute
			ipJSON(t, ns(n), &routes, "route", "show", "dev", "flannel.1")
			if len(routes) == 0 {
				return fmt.Errorf("%s has no route via flannel.1", n)
			}
		}
		return nil
	})
	var g topology.Graph
	if err := json.Unmarshal([]byte(minikit(t, "lab", "graph", "--name", l.Name(), "-o", "json")), &g); err != nil {
		t.Fatal(err)
	}
	st, err := lab.Load(l.Name(), l.Dir())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]topology.Host{}
	for _, h := range g.Hosts {
		byID[h.ID] = h
	}

	t.Run("every namespace as ip -j and bridge fdb show it", func(t *testing.T) {
		want := slices.Clone(st.Namespaces)
		want = append(want, testenv.SandboxName(t, c, client), testenv.SandboxName(t, c, echo))
		for _, p := range dnsPods {
			want = append(want, testenv.SandboxName(t, c, &p))
		}
		compareHosts(t, g, want)
		for _, n := range []string{"node1", "node2"} {
			var vx *topology.Interface
			for i, ifc := range byID[ns(n)].Interfaces {
				if ifc.Name == "flannel.1" {
					vx = &byID[ns(n)].Interfaces[i]
				}
			}
			if vx == nil || vx.Kind != "vxlan" || vx.VXLAN == nil || vx.VXLAN.VNI != 1 || vx.VXLAN.Port != 8472 || vx.VXLAN.Local != l.Addr(n).String() {
				t.Errorf("%s's flannel.1 drawn as %+v", n, vx)
			}
		}
	})

	t.Run("the router and the underlay's segments", func(t *testing.T) {
		if topo != lab.TopologyRouted {
			for _, h := range g.Hosts {
				if h.Kind == topology.KindRouter {
					t.Errorf("a router host %s in a flat lab", h.ID)
				}
			}
			return
		}
		r, ok := byID[status.Router.Netns]
		if !ok || r.Kind != topology.KindRouter || r.Name != lab.Router || r.Address != status.Router.Address {
			t.Fatalf("router %s drawn as %+v, want kind router, address %s (lab status)", status.Router.Netns, r, status.Router.Address)
		}
		if u := byID[ns("net")]; u.Address != st.Subnet+","+status.Underlay2 {
			t.Errorf("underlay address %q, want both segments %s,%s", u.Address, st.Subnet, status.Underlay2)
		}
		// Each leg a veth to a port of its own bridge: eth1 to br0, eth2 to br1.
		peerBridge := map[string]string{}
		for _, ifc := range r.Interfaces {
			if ifc.PeerID == "" {
				continue
			}
			for _, u := range byID[ns("net")].Interfaces {
				if u.ID == ifc.PeerID {
					peerBridge[ifc.Name] = u.Master
				}
			}
		}
		if w := map[string]string{"eth1": "br0", "eth2": "br1"}; fmt.Sprint(peerBridge) != fmt.Sprint(w) {
			t.Errorf("router legs on bridges %v, want %v", peerBridge, w)
		}
		for _, leg := range []string{"eth1", "eth2"} {
			if !hasLink(g, "veth", r.ID+"/"+leg) {
				t.Errorf("no veth link to %s/%s", r.ID, leg)
			}
		}
	})

	t.Run("vxlan links from the kernel's FDB", func(t *testing.T) {
		addrHost := map[string]string{}
		for _, n := range []string{"node1", "node2"} {
			addrHost[l.Addr(n).String()] = ns(n)
		}
		want := map[string]bool{}
		for _, n := range []string{"node1", "node2"} {
			for _, e := range fdbOf(t, ns(n), "flannel.1") {
				to, ok := addrHost[e.Dst]
				if !ok {
					t.Errorf("%s's FDB sends to %s, no node of the lab", n, e.Dst)
					continue
				}
				ends := []string{ns(n) + "/flannel.1", to + "/flannel.1"}
				sort.Strings(ends)
				want[ends[0]+"--"+ends[1]] = true
			}
		}
		got := map[string]bool{}
		for _, lk := range g.Links {
			if lk.Kind == "vxlan" {
				got[lk.ID] = true
				if lk.ID != lk.A+"--"+lk.B {
					t.Errorf("link %+v", lk)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("vxlan links %v, want %v (bridge fdb show dev flannel.1 on each node)", got, want)
		}
	})

	t.Run("trace across the tunnel drawn as minikit trace gives it", func(t *testing.T) {
		to := echo.Status.PodIP + ":8080"
		args := []string{"-n", "default", "pod/" + client.Name, to}
		var res trace.Result
		testutil.Eventually(t, 30*time.Second, "a vxlan route from the client pod to "+to, func() error {
			res = trace.Result{}
			if err := json.Unmarshal([]byte(minikit(t, append([]string{"trace", "--lab", l.Name(), "-o", "json"}, args...)...)), &res); err != nil {
				return err
			}
			if len(res.Paths) != 1 || res.Paths[0].Route == nil || res.Paths[0].Route.Kind != "vxlan" {
				return fmt.Errorf("paths %+v", res.Paths)
			}
			return nil
		})
		var drawn struct {
			topology.Graph
			Hops []topology.Hop `json:"hops"`
		}
		gargs := []string{"lab", "graph", "--name", l.Name(), "-n", "default", "--trace", "pod/" + client.Name, to}
		if err := json.Unmarshal([]byte(minikit(t, append(gargs, "-o", "json")...)), &drawn); err != nil {
			t.Fatal(err)
		}
		want := topology.PathOf(&drawn.Graph, &res, 0)
		if !slices.Equal(drawn.Hops, want) {
			t.Fatalf("lab graph --trace drew\n%s\nPathOf of minikit trace -o json gives\n%s", hopsText(drawn.Hops), hopsText(want))
		}
		var hosts []string
		for _, h := range drawn.Hops {
			if h.Kind == "host" && (len(hosts) == 0 || hosts[len(hosts)-1] != h.Element) {
				hosts = append(hosts, h.Element)
			}
		}
		w := []string{testenv.SandboxName(t, c, client), ns("node1"), ns("net")}
		if topo == lab.TopologyRouted {
			w = append(w, ns(lab.Router), ns("net"))
		}
		w = append(w, ns("node2"), testenv.SandboxName(t, c, echo))
		if !slices.Equal(hosts, w) {
			t.Errorf("hosts on the path %v, want %v", hosts, w)
		}
		tunnel := ns("node1") + "/flannel.1--" + ns("node2") + "/flannel.1"
		label := fmt.Sprintf("VXLAN encapsulated to node2's %s:8472 (VNI 1)", l.Addr("node2"))
		if got := labelsAt(drawn.Hops, tunnel); !slices.Equal(got, []string{label}) {
			t.Errorf("the tunnel's hop labels %q, want %q", got, label)
		}
		for _, h := range drawn.Hops {
			if h.Element == ns("net") && !strings.HasSuffix(h.Label, "(UDP 8472 outer header)") {
				t.Errorf("the underlay hop %q does not name the outer header", h.Label)
			}
		}
		// node1's flannel.1, the tunnel, ... node2's flannel.1, its cni0.
		var els []string
		for _, h := range drawn.Hops {
			els = append(els, h.Element)
		}
		i := slices.Index(els, ns("node1")+"/flannel.1")
		j := slices.Index(els, ns("node2")+"/flannel.1")
		if i < 0 || j < i || els[i+1] != tunnel || els[j+1] != ns("node2")+"/cni0" {
			t.Errorf("the path does not go flannel.1, the tunnel, ..., node2's flannel.1, cni0:\n%s", hopsText(drawn.Hops))
		}

		// The SVG highlights exactly those elements, the tunnel among them.
		svg := minikit(t, append(gargs, "-o", "svg")...)
		hop := hopClasses(t, svg)
		for _, h := range drawn.Hops {
			if !hop[h.Element] {
				t.Errorf("hop %s (%s) is not highlighted in the SVG", h.Element, h.Kind)
			}
		}
		for id := range hop {
			if labelsAt(drawn.Hops, id) == nil {
				t.Errorf("%s is highlighted but no hop", id)
			}
		}
		if !strings.Contains(svg, ">VXLAN VNI 1</text>") {
			t.Error("the SVG does not label the tunnel")
		}
	})

	if after := testenv.RootSnapshot(t, func(string) bool { return false }); after != root {
		t.Errorf("the root network namespace changed:\n--- before\n%s\n--- after\n%s", root, after)
	}
}

// podPair starts examples/pod-network's pods: a client on node1, an echo
// server on node2, and returns them Ready.
func podPair(t *testing.T, c kubernetes.Interface) (*corev1.Pod, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "client"}, Spec: corev1.PodSpec{NodeName: "node1",
			Containers: []corev1.Container{{Name: "client", Image: "busybox", Command: []string{"sleep", "infinity"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "echo", Labels: map[string]string{"app": "echo"}}, Spec: corev1.PodSpec{NodeName: "node2",
			Containers: []corev1.Container{{Name: "echo", Image: "minikit/echo", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}},
	}
	for _, p := range pods {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range pods {
		name := p.Name
		testutil.Eventually(t, 60*time.Second, "pod "+name+" running with an IP", func() error {
			got, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
				return fmt.Errorf("phase %s, IP %q", got.Status.Phase, got.Status.PodIP)
			}
			pods[i] = got
			return nil
		})
	}
	return pods[0], pods[1]
}

func hasLink(g topology.Graph, kind, ifc string) bool {
	for _, l := range g.Links {
		if l.Kind == kind && (l.A == ifc || l.B == ifc) {
			return true
		}
	}
	return false
}
