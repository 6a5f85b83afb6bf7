// Package podnet_test runs labs in both pod networks, host-gw and vxlan
// (flannel's VXLAN backend), and checks what a student would: pods on
// different nodes reach each other, a Service and a NodePort forward across
// nodes, each node holds the routes (and for vxlan the neighbour and FDB
// entries) of every other node, added and removed as nodes join and leave and
// repaired when deleted by hand; on the routed topology host-gw refuses to
// start while vxlan works; in an IPv6-only lab vxlan runs over the IPv6
// underlay; and lab down leaves the root namespace as it was.
package podnet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	wait    = 30 * time.Second
	agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
)

func TestHostGW(t *testing.T) {
	l := newLab(t, lab.Config{Nodes: 3, PodNetwork: "host-gw"})
	c := testenv.Client(t, l)
	crossNode(t, l, c)
	n2 := getNode(t, c, "node2")
	if got := n2.Annotations[kubelet.AnnotationBackendType]; got != "host-gw" {
		t.Errorf("node2's %s = %q, want host-gw", kubelet.AnnotationBackendType, got)
	}
	hasLine(t, l, "node1", "10.244.1.0/24 via 192.168.56.11 dev eth1 proto 77", "ip", "route")
	if out, err := testenv.Run(l, "node1", "ip", "link", "show", "flannel.1"); err == nil {
		t.Errorf("host-gw node1 has a VXLAN device: %s", out)
	}
	joinAndLeave(t, l, c, func(host string) []string {
		return []string{"route: 10.244.2.0/24 via 192.168.56.12 dev eth1 proto 77"}
	})
}

func TestVXLAN(t *testing.T) {
	l := newLab(t, lab.Config{Nodes: 3, PodNetwork: "vxlan"})
	c := testenv.Client(t, l)
	target := crossNode(t, l, c)

	// The device, as flannel builds it, and the pods' MTU to match.
	link, _ := testenv.Run(l, "node1", "ip", "-d", "link", "show", "flannel.1")
	for _, want := range []string{"mtu 1450", "vxlan id 1 local 192.168.56.10 dev eth1", "dstport 8472", "nolearning"} {
		if !strings.Contains(link, want) {
			t.Errorf("node1's flannel.1 lacks %q:\n%s", want, link)
		}
	}
	hasLine(t, l, "node1", "10.244.0.0/32", "ip", "-4", "addr", "show", "dev", "flannel.1")
	if out, err := testenv.Exec(t, l, "client", "ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(out, " mtu 1450 ") {
		t.Errorf("the client pod's eth0 MTU = %q (%v), want 1450 (the underlay's 1500 less 50)", out, err)
	}
	// node1 holds node2's entries, with the MAC node2 published.
	mac2 := vtepMAC(t, c, "node2")
	if dev := devMAC(t, l, "node2"); dev != mac2 {
		t.Errorf("node2 publishes VtepMAC %s, its flannel.1 has %s", mac2, dev)
	}
	for _, e := range vxlanEntries("node2", mac2, "10.244.1", "192.168.56.11") {
		hasEntry(t, l, "node1", e)
	}
	// The packet to the other node's pod is encapsulated: flannel.1 sends it.
	tx := func() int {
		out, _ := testenv.Run(l, "node1", "ip", "-s", "-j", "link", "show", "dev", "flannel.1")
		var links []struct {
			Stats struct {
				TX struct{ Packets int } `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
			t.Fatalf("ip -s -j link show dev flannel.1: %v: %s", err, out)
		}
		return links[0].Stats.TX.Packets
	}
	before := tx()
	if out, err := testenv.Exec(t, l, "client", "ping", "-c", "3", "-W", "2", target.Status.PodIP); err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
	if after := tx(); after < before+3 {
		t.Errorf("flannel.1 on node1 sent %d packets during 3 pings to node2's pod, want at least 3", after-before)
	}

	joinAndLeave(t, l, c, func(host string) []string {
		return vxlanEntries(host, vtepMAC(t, c, host), "10.244.2", "192.168.56.12")
	})

	// Chaos: a hand-deleted FDB entry, neighbour or route comes back within
	// one sync; so does the device, whose new MAC every other node then uses.
	pingsTarget := func(what string) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := testenv.Exec(t, l, "client", "ping", "-c", "1", "-W", "1", target.Status.PodIP)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}
	for _, tc := range []struct {
		name  string
		argv  []string
		entry string
	}{
		{"fdb entry deleted", []string{"bridge", "fdb", "del", mac2, "dev", "flannel.1", "dst", "192.168.56.11", "self"}, "fdb: " + mac2 + " dst 192.168.56.11 self permanent"},
		{"neighbour deleted", []string{"ip", "neigh", "del", "10.244.1.0", "dev", "flannel.1"}, "neigh: 10.244.1.0 lladdr " + mac2 + " PERMANENT"},
		{"route deleted", []string{"ip", "route", "del", "10.244.1.0/24"}, "route: 10.244.1.0/24 via 10.244.1.0 dev flannel.1 proto 77 onlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := testenv.Run(l, "node1", tc.argv...); err != nil {
				t.Fatalf("%v: %v: %s", tc.argv, err, out)
			}
			testutil.Eventually(t, wait, tc.entry+" back on node1", func() error { return entry(l, "node1", tc.entry) })
			pingsTarget("client pod pings node2's pod after " + tc.name)
		})
	}
	t.Run("device deleted", func(t *testing.T) {
		if out, err := testenv.Run(l, "node2", "ip", "link", "del", "flannel.1"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		testutil.Eventually(t, wait, "node2's flannel.1 back, its new MAC published and on node1", func() error {
			dev, mac := devMAC(t, l, "node2"), vtepMAC(t, c, "node2")
			if dev == "" || dev != mac {
				return fmt.Errorf("node2's device has MAC %q, its Node says %q", dev, mac)
			}
			for _, e := range vxlanEntries("node2", mac, "10.244.1", "192.168.56.11") {
				if err := entry(l, "node1", e); err != nil {
					return err
				}
			}
			return nil
		})
		pingsTarget("client pod pings node2's pod after node2's device was deleted")
		if log, _ := os.ReadFile(filepath.Join(l.Dir(), "node2.log")); !strings.Contains(string(log), "repaired the VXLAN device") {
			t.Error("node2's log does not say it repaired the VXLAN device")
		}
	})

	// Switching a node to host-gw removes its device and entries; the
	// vxlan nodes name it as unreachable through the overlay.
	switchMode(t, l, "node3", "host-gw")
	testutil.Eventually(t, wait, "node3 without flannel.1, node1 without node3's entries", func() error {
		if out, err := testenv.Run(l, "node3", "ip", "link", "show", "flannel.1"); err == nil {
			return fmt.Errorf("node3 still has flannel.1: %s", out)
		}
		for _, e := range vxlanEntries("node3", "", "10.244.2", "192.168.56.12") {
			if entry(l, "node1", e) == nil {
				return fmt.Errorf("node1 still has %s", e)
			}
		}
		return nil
	})
}

// TestVXLANIPv6: an IPv6-only lab with the vxlan pod network: VXLAN over
// the IPv6 underlay, as flannel's IPv6 device. Each node's flannel.1 sends
// from its IPv6 address (MTU 70 below the underlay's), publishes its VTEP
// MAC in backend-v6-data and its address in public-ipv6; the other node
// holds the neighbour (its VTEP, its /64's network address), the FDB entry
// (that MAC to its IPv6 address) and the route to its /64; a pod on node1
// reaches a pod on node2, which sees the client pod's own IPv6 address.
func TestVXLANIPv6(t *testing.T) {
	l := newLab(t, lab.Config{Nodes: 2, IPFamily: lab.IPFamilyIPv6, PodNetwork: "vxlan"})
	c := testenv.Client(t, l)
	ctx := context.Background()

	link, _ := testenv.Run(l, "node1", "ip", "-d", "link", "show", "flannel.1")
	for _, want := range []string{"mtu 1430", "vxlan id 1 local " + l.Addr6("node1").String() + " dev eth1", "dstport 8472", "nolearning"} {
		if !strings.Contains(link, want) {
			t.Errorf("node1's flannel.1 lacks %q:\n%s", want, link)
		}
	}
	n1 := getNode(t, c, "node1")
	hasLine(t, l, "node1", strings.TrimSuffix(n1.Spec.PodCIDR, "/64")+"/128", "ip", "-6", "addr", "show", "dev", "flannel.1")
	var n2 *corev1.Node
	var mac2 string
	testutil.Eventually(t, wait, "node2 publishes its IPv6 address and its flannel.1's MAC", func() error {
		n2 = getNode(t, c, "node2")
		if got := n2.Annotations[kubelet.AnnotationPublicIPv6]; got != l.Addr6("node2").String() {
			return fmt.Errorf("node2's %s = %q, want %s", kubelet.AnnotationPublicIPv6, got, l.Addr6("node2"))
		}
		d := n2.Annotations[kubelet.AnnotationBackendV6Data]
		_, rest, _ := strings.Cut(d, `"VtepMAC":"`)
		mac2, _, _ = strings.Cut(rest, `"`)
		if dev := devMAC(t, l, "node2"); mac2 == "" || dev != mac2 {
			return fmt.Errorf("node2 publishes %s %q, its flannel.1 has MAC %q", kubelet.AnnotationBackendV6Data, d, dev)
		}
		return nil
	})
	vtep2 := strings.TrimSuffix(n2.Spec.PodCIDR, "/64")
	testutil.Eventually(t, wait, "node1 holds node2's neighbour, FDB entry and IPv6 route", func() error {
		for _, e := range []string{"neigh: " + vtep2 + " lladdr " + mac2 + " PERMANENT",
			"fdb: " + mac2 + " dst " + l.Addr6("node2").String() + " self permanent"} {
			if err := entry(l, "node1", e); err != nil {
				return err
			}
		}
		route := n2.Spec.PodCIDR + " via " + vtep2 + " dev flannel.1 proto 77"
		if out, err := testenv.Run(l, "node1", "ip", "-6", "route"); err != nil || !strings.Contains(out, route) {
			return fmt.Errorf("no %q in ip -6 route (%v):\n%s", route, err, out)
		}
		return nil
	})

	mk := func(p *corev1.Pod) *corev1.Pod {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return testenv.WaitPodReady(t, c, "default", p.Name)
	}
	server := mk(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
			Args: []string{"netexec", "--http-port=8080", "--udp-port=-1"}}}}})
	client := mk(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Command: []string{"sleep", "infinity"}}}}})
	if out, err := testenv.Exec(t, l, "client", "ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(out, " mtu 1430 ") {
		t.Errorf("the client pod's eth0 MTU = %q (%v), want 1430 (the underlay's 1500 less 70)", out, err)
	}
	url := "http://[" + server.Status.PodIP + "]:8080/clientip"
	testutil.Eventually(t, wait, "the server pod on node2 sees the client pod's IPv6 address", func() error {
		out, err := testenv.Exec(t, l, "client", "curl", "-sS", "-g", "--max-time", "2", url)
		if err != nil {
			return fmt.Errorf("curl %s: %v: %s", url, err, out)
		}
		host, _, err := net.SplitHostPort(strings.TrimSpace(out))
		if err != nil || host != client.Status.PodIP {
			return fmt.Errorf("curl %s: %q, want %s", url, out, client.Status.PodIP)
		}
		return nil
	})
}

// TestRoutedTopology: node2 behind a router. host-gw refuses to start,
// naming the node; vxlan passes the cross-node checks; a node switched to
// host-gw there says which nodes it cannot route to.
func TestRoutedTopology(t *testing.T) {
	testenv.RequireRoot(t)
	name := "mkt-podnet-hg"
	dir := filepath.Join(t.TempDir(), name)
	_, err := lab.Up(context.Background(), lab.Config{Name: name, Dir: dir, Binary: testenv.Minikit(t), Nodes: 2,
		Topology: lab.TopologyRouted, PodNetwork: "host-gw"})
	const want = "host-gw cannot route pods between nodes that are not on one L2 segment: node2 on 192.168.57.0/24, " +
		"not on node1's segment 192.168.56.0/24; use --pod-network vxlan (or --topology flat)"
	if err == nil || err.Error() != want {
		t.Fatalf("lab up --topology routed with host-gw: %v\nwant: %s", err, want)
	}
	for _, h := range []string{"net", "router", "node1", "node2"} {
		if _, err := os.Stat("/run/netns/" + lab.NS(name, h)); err == nil {
			t.Errorf("the refused lab left namespace %s", lab.NS(name, h))
		}
	}

	l := newLab(t, lab.Config{Nodes: 2, PodNetwork: "vxlan", Topology: lab.TopologyRouted})
	if got := l.Addr("node2").String(); got != "192.168.57.11" {
		t.Fatalf("node2 is at %s, want 192.168.57.11 (the second segment)", got)
	}
	hasLine(t, l, "node1", "192.168.57.0/24 via 192.168.56.1 dev eth1", "ip", "route")
	c := testenv.Client(t, l)
	crossNode(t, l, c)
	hasEntry(t, l, "node1", "fdb: "+vtepMAC(t, c, "node2")+" dst 192.168.57.11 self permanent")

	switchMode(t, l, "node2", "host-gw")
	testutil.Eventually(t, wait, "node2 says host-gw cannot reach node1", func() error {
		log, _ := os.ReadFile(filepath.Join(l.Dir(), "node2.log"))
		for _, want := range []string{"host-gw cannot route to nodes that are not on one L2 segment with this node", `nodes="node1 (192.168.56.10)"`} {
			if !strings.Contains(string(log), want) {
				return fmt.Errorf("node2.log lacks %q", want)
			}
		}
		return nil
	})
	if out, err := testenv.Run(l, "node2", "ip", "link", "show", "flannel.1"); err == nil {
		t.Errorf("node2 switched to host-gw still has flannel.1: %s", out)
	}
}

// newLab is testenv.NewLabConfig that also checks, after lab down, that the
// root namespace is as it was: no link, address, route, rule or rule set of
// the lab's there, and none of its namespaces or mounts left.
func newLab(t *testing.T, cfg lab.Config) *lab.Lab {
	t.Helper()
	testenv.RequireRoot(t)
	var prefixes []string
	mine := func(name string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	before := testenv.RootSnapshot(t, mine)
	// Registered before the lab's own cleanup, so it runs after lab down.
	t.Cleanup(func() {
		if after := testenv.RootSnapshot(t, mine); after != before {
			t.Errorf("lab down left the root namespace changed:\n--- before\n%s\n--- after\n%s", before, after)
		}
	})
	l := testenv.NewLabConfig(t, cfg)
	prefixes = append(prefixes, l.Name()+"-")
	nodes, err := testenv.Client(t, l).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		prefixes = append(prefixes, n.Annotations[kubelet.AnnotationNetNSPrefix])
	}
	return l
}

// crossNode runs the cross-node checks: a client pod on node1, an echo pod on
// node2 behind a NodePort Service; the client pod reaches the echo pod by its
// IP and through the Service, and the client host reaches it via node1's
// NodePort (node1 has no endpoint: the packet crosses to node2).
func crossNode(t *testing.T, l *lab.Lab, c kubernetes.Interface) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	mk := func(name, nodeName, image string, labels map[string]string, cmd ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: image, Command: cmd}}}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return testenv.WaitPodReady(t, c, "default", name)
	}
	mk("client", "node1", "busybox", nil, "sleep", "infinity")
	target := mk("target", "node2", "minikit/echo", map[string]string{"app": "target"})
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "target"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "target"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reaches := func(what string, get func() (string, error)) {
		t.Helper()
		testutil.Eventually(t, wait, what, func() error {
			out, err := get()
			if err != nil || !strings.Contains(out, "pod=target") || !strings.Contains(out, "node=node2") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	}
	testutil.Eventually(t, wait, "client pod on node1 pings the pod on node2", func() error {
		out, err := testenv.Exec(t, l, "client", "ping", "-c", "1", "-W", "1", target.Status.PodIP)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	reaches("client pod on node1 -> pod on node2", func() (string, error) {
		return testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+target.Status.PodIP+":8080/")
	})
	reaches("client pod on node1 -> Service -> pod on node2", func() (string, error) {
		return testenv.Exec(t, l, "client", "curl", "-s", "--max-time", "2", "http://"+svc.Spec.ClusterIP+"/")
	})
	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	reaches("client host -> node1's NodePort -> pod on node2", func() (string, error) {
		return testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "http://"+l.Addr("node1").String()+":"+np+"/")
	})
	return target
}

// joinAndLeave takes node3 out of the cluster (its process stopped, its Node
// deleted) and back (started again: it registers anew); node1 drops node3's
// entries and adds them again.
func joinAndLeave(t *testing.T, l *lab.Lab, c kubernetes.Interface, entries func(host string) []string) {
	t.Helper()
	want := entries("node3")
	for _, e := range want {
		hasEntry(t, l, "node1", e)
	}
	if err := l.Stop("node3", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Nodes().Delete(context.Background(), "node3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "node1 drops node3's entries when node3 leaves", func() error {
		for _, e := range want {
			if entry(l, "node1", e) == nil {
				return fmt.Errorf("node1 still has %s", e)
			}
		}
		return nil
	})
	if err := l.Start("node3"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "node1 adds node3's entries when node3 joins", func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), "node3", metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR != "10.244.2.0/24" {
			return fmt.Errorf("node3 not registered with 10.244.2.0/24 yet: %v", err)
		}
		for _, e := range entries("node3") {
			if err := entry(l, "node1", e); err != nil {
				return err
			}
		}
		return nil
	})
}

// switchMode restarts a node with another --pod-network.
func switchMode(t *testing.T, l *lab.Lab, host, mode string) {
	t.Helper()
	if err := l.Stop(host, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPodNetwork(host, mode); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(host); err != nil {
		t.Fatal(err)
	}
}

// vxlanEntries are what every other node holds for host: the neighbour (its
// subnet's .0 is its VTEP), the FDB entry (its VTEP MAC to its public IP) and
// the route, as `ip neigh`, `bridge fdb` and `ip route` print them.
func vxlanEntries(host, mac, subnet, ip string) []string {
	if mac == "" {
		mac = "[^ ]+"
	}
	return []string{
		"neigh: " + subnet + ".0 lladdr " + mac + " PERMANENT",
		"fdb: " + mac + " dst " + ip + " self permanent",
		"route: " + subnet + ".0/24 via " + subnet + ".0 dev flannel.1 proto 77 onlink",
	}
}

// entry checks that host's kernel shows e ("route: ...", "neigh: ..." or
// "fdb: ..." followed by the line, or a pattern when it holds [^ ]+).
func entry(l *lab.Lab, host, e string) error {
	kind, line, _ := strings.Cut(e, ": ")
	var argv []string
	switch kind {
	case "route":
		argv = []string{"ip", "route"}
	case "neigh":
		argv = []string{"ip", "neigh", "show", "dev", "flannel.1"}
	case "fdb":
		argv = []string{"bridge", "fdb", "show", "dev", "flannel.1"}
	}
	out, err := testenv.Run(l, host, argv...)
	if err != nil {
		return fmt.Errorf("%v: %v: %s", argv, err, out)
	}
	for _, got := range strings.Split(out, "\n") {
		if matches(strings.TrimSpace(got), line) {
			return nil
		}
	}
	return fmt.Errorf("%s has no %s line %q in:\n%s", host, kind, line, out)
}

// matches compares a line with a wanted one where [^ ]+ stands for any word.
func matches(got, want string) bool {
	gw, ww := strings.Fields(got), strings.Fields(want)
	if len(gw) != len(ww) {
		return false
	}
	for i := range ww {
		if ww[i] != "[^ ]+" && ww[i] != gw[i] {
			return false
		}
	}
	return true
}

func hasEntry(t *testing.T, l *lab.Lab, host, e string) {
	t.Helper()
	if err := entry(l, host, e); err != nil {
		t.Error(err)
	}
}

func hasLine(t *testing.T, l *lab.Lab, host, want string, argv ...string) {
	t.Helper()
	out, err := testenv.Run(l, host, argv...)
	if err != nil || !strings.Contains(out, want) {
		t.Errorf("%s: %v: no %q in (%v):\n%s", host, argv, want, err, out)
	}
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// vtepMAC is the VtepMAC a node publishes in its backend-data annotation.
func vtepMAC(t *testing.T, c kubernetes.Interface, name string) string {
	t.Helper()
	d := getNode(t, c, name).Annotations[kubelet.AnnotationBackendData]
	_, rest, _ := strings.Cut(d, `"VtepMAC":"`)
	mac, _, _ := strings.Cut(rest, `"`)
	return mac
}

// devMAC is the MAC of a node's flannel.1 ("" without the device).
func devMAC(t *testing.T, l *lab.Lab, host string) string {
	t.Helper()
	out, err := testenv.Run(l, host, "ip", "-o", "link", "show", "dev", "flannel.1")
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(out, "link/ether ")
	mac, _, _ := strings.Cut(rest, " ")
	return mac
}
