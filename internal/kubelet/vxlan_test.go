package kubelet

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testNode is a Node as an agent publishes it: pod CIDR, InternalIP and the
// flannel annotations.
func testNode(name, cidr, ip string, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec:   corev1.NodeSpec{PodCIDR: cidr},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

func vxlanAnn(mac string) map[string]string {
	return map[string]string{AnnotationBackendType: "vxlan", AnnotationBackendData: `{"VNI":1,"VtepMAC":"` + mac + `"}`}
}

func TestParseBackendData(t *testing.T) {
	for _, tc := range []struct {
		in, mac, err string
	}{
		{`{"VNI":1,"VtepMAC":"2e:5e:d2:b6:49:54"}`, "2e:5e:d2:b6:49:54", ""},
		{`{"VtepMAC":"2e:5e:d2:b6:49:54","VNI":1}`, "2e:5e:d2:b6:49:54", ""},
		{``, "", "parsing flannel.alpha.coreos.com/backend-data"},
		{`null`, "", "VNI 0"},
		{`{"VNI":"1","VtepMAC":"2e:5e:d2:b6:49:54"}`, "", "parsing"},
		{`{"VNI":2,"VtepMAC":"2e:5e:d2:b6:49:54"}`, "", "VNI 2, this node uses VNI 1"},
		{`{"VNI":1}`, "", `VtepMAC "", not an Ethernet address`},
		{`{"VNI":1,"VtepMAC":"zz:5e:d2:b6:49:54"}`, "", "not an Ethernet address"},
		{`{"VNI":1,"VtepMAC":"00:00:5e:00:53:01:00:01"}`, "", "not an Ethernet address"},
		{`{"VNI":1,"VtepMAC":"ff:ff:ff:ff:ff:ff"}`, "", "not a unicast address"},
		{`{"VNI":1,"VtepMAC":"00:00:00:00:00:00"}`, "", "not a unicast address"},
		{`{"VNI":1,"VtepMAC":"2e:5e:d2:b6:49:54"`, "", "parsing"},
	} {
		mac, err := parseBackendData(tc.in)
		switch {
		case tc.err == "" && (err != nil || mac.String() != tc.mac):
			t.Errorf("parseBackendData(%q) = %s, %v; want %s", tc.in, mac, err, tc.mac)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseBackendData(%q) = %s, %v; want an error with %q", tc.in, mac, err, tc.err)
		}
	}
	// What a node writes, another reads.
	mac, _ := parseBackendData(`{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}`)
	if got := backendData(mac); got != `{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}` {
		t.Errorf("backendData = %s", got)
	}
}

func TestVXLANPeers(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("node3", "10.244.2.0/24", "192.168.57.12", vxlanAnn("0a:00:00:00:00:03")),
		testNode("node1", "10.244.0.0/24", "192.168.56.10", vxlanAnn("0a:00:00:00:00:01")),
		testNode("node2", "10.244.1.0/24", "192.168.57.11", vxlanAnn("0a:00:00:00:00:02")),
		testNode("joining", "", "192.168.56.20", nil),
		testNode("fresh", "10.244.5.0/24", "192.168.56.21", nil),
		testNode("hostgw", "10.244.6.0/24", "192.168.56.22", map[string]string{AnnotationBackendType: "host-gw", AnnotationBackendData: "null"}),
		testNode("badmac", "10.244.7.0/24", "192.168.56.23", vxlanAnn("nope")),
		testNode("badcidr", "10.244.8.0/33", "192.168.56.24", vxlanAnn("0a:00:00:00:00:08")),
		testNode("noip", "10.244.9.0/24", "", vxlanAnn("0a:00:00:00:00:09")),
		testNode("overwrite", "10.244.10.0/24", "192.168.56.25", maps.Collect(func(yield func(string, string) bool) {
			for k, v := range vxlanAnn("0a:00:00:00:00:0a") {
				yield(k, v)
			}
			yield(AnnotationPublicIP, "192.168.56.25")
			yield(AnnotationPublicIPOver, "203.0.113.7")
		})),
		testNode("badpublic", "10.244.11.0/24", "192.168.56.26", maps.Collect(func(yield func(string, string) bool) {
			for k, v := range vxlanAnn("0a:00:00:00:00:0b") {
				yield(k, v)
			}
			yield(AnnotationPublicIP, "fe80::1")
		})),
	}
	peers, skipped := vxlanPeers("node1", nodes)
	var got []string
	for _, p := range peers {
		got = append(got, p.String())
	}
	want := []string{
		"10.244.1.0/24 via 10.244.1.0 (0a:00:00:00:00:02 at 192.168.57.11)",
		"10.244.2.0/24 via 10.244.2.0 (0a:00:00:00:00:03 at 192.168.57.12)",
		"10.244.10.0/24 via 10.244.10.0 (0a:00:00:00:00:0a at 203.0.113.7)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("peers:\n got %q\nwant %q", got, want)
	}
	wantSkipped := []string{
		`node "badcidr": podCIDR "10.244.8.0/33" is not a prefix`,
		`node "badmac": flannel.alpha.coreos.com/backend-data has VtepMAC "nope", not an Ethernet address`,
		`node "badpublic": flannel.alpha.coreos.com/public-ip "fe80::1" is not an IPv4 address`,
		`node "fresh": has not published its pod network yet (flannel.alpha.coreos.com/backend-type)`,
		`node "hostgw": its pod network is host-gw, not vxlan (flannel.alpha.coreos.com/backend-type)`,
		`node "noip": node has no IPv4 InternalIP`,
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped:\n got %q\nwant %q", skipped, wantSkipped)
	}
}

func TestHostGWRoutes(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("node1", "10.244.0.0/24", "192.168.56.10", nil),
		testNode("node2", "10.244.1.0/24", "192.168.56.11", nil),
		testNode("node3", "10.244.2.0/24", "192.168.57.12", nil),
		testNode("node4", "10.244.3.0/24", "192.168.57.13", nil),
		testNode("joining", "", "192.168.56.20", nil),
	}
	connected := []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}
	want, far := hostGWRoutes("node1", nodes, connected)
	if len(want) != 1 || want[netip.MustParsePrefix("10.244.1.0/24")] != netip.MustParseAddr("192.168.56.11") {
		t.Errorf("routes = %v, want only 10.244.1.0/24 via 192.168.56.11", want)
	}
	if w := []string{"node3 (192.168.57.12)", "node4 (192.168.57.13)"}; !slices.Equal(far, w) {
		t.Errorf("not adjacent = %q, want %q", far, w)
	}
	// Without knowing the connected subnets, every node is a gateway.
	if want, far := hostGWRoutes("node1", nodes, nil); len(want) != 3 || len(far) != 0 {
		t.Errorf("unchecked: routes %v, far %v", want, far)
	}
}

func TestParsePodNetwork(t *testing.T) {
	for in, want := range map[string]string{"": "host-gw", "host-gw": "host-gw", "vxlan": "vxlan"} {
		if got, err := ParsePodNetwork(in); err != nil || got != want {
			t.Errorf("ParsePodNetwork(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePodNetwork("udp"); err == nil || err.Error() != `unknown pod network "udp": want host-gw or vxlan` {
		t.Errorf("ParsePodNetwork(udp) = %v", err)
	}
}

func TestFlannelChanged(t *testing.T) {
	a := testNode("n", "10.244.1.0/24", "192.168.56.11", vxlanAnn("0a:00:00:00:00:01"))
	b := a.DeepCopy()
	b.Annotations["other"] = "x"
	if flannelChanged(a, b) {
		t.Error("a change to another annotation counts as a flannel change")
	}
	b.Annotations[AnnotationBackendData] = `{"VNI":1,"VtepMAC":"0a:00:00:00:00:02"}`
	if !flannelChanged(a, b) {
		t.Error("a new VtepMAC is not a flannel change")
	}
	c := a.DeepCopy()
	delete(c.Annotations, AnnotationBackendType)
	if !flannelChanged(a, c) {
		t.Error("a removed backend-type is not a flannel change")
	}
}

func TestNetworkAnnotations(t *testing.T) {
	a := &Agent{cfg: Config{PodNetwork: PodNetworkVXLAN, NodeIP: netip.MustParseAddr("192.168.57.11")}}
	mac, _ := parseBackendData(`{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}`)
	a.vtepMAC = mac
	want := map[string]string{
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/backend-data":        `{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}`,
		"flannel.alpha.coreos.com/public-ip":           "192.168.57.11",
	}
	if got := a.networkAnnotations(); !maps.Equal(got, want) {
		t.Errorf("vxlan annotations = %v, want %v", got, want)
	}
	a.cfg.PodNetwork = PodNetworkHostGW
	want["flannel.alpha.coreos.com/backend-type"], want["flannel.alpha.coreos.com/backend-data"] = "host-gw", "null"
	if got := a.networkAnnotations(); !maps.Equal(got, want) {
		t.Errorf("host-gw annotations = %v, want %v", got, want)
	}
}

// testNode6 is an IPv6-only node: one IPv6 podCIDR and InternalIP, and the
// IPv6 underlay's annotations as flannel's vxlan backend writes them.
func testNode6(name, cidr, ip, mac string, extra map[string]string) *corev1.Node {
	ann := map[string]string{AnnotationBackendType: "vxlan", AnnotationBackendData: "null"}
	if mac != "" {
		ann[AnnotationBackendV6Data] = `{"VNI":1,"VtepMAC":"` + mac + `"}`
	}
	maps.Copy(ann, extra)
	n := testNode(name, cidr, ip, ann)
	n.Spec.PodCIDRs = []string{cidr}
	return n
}

func TestVXLANPeersIPv6Underlay(t *testing.T) {
	nodes := []*corev1.Node{
		testNode6("node1", "fd00:10:244::/64", "fd00:56::10", "0a:00:00:00:00:01", nil),
		testNode6("node2", "fd00:10:244:1::/64", "fd00:56::11", "0a:00:00:00:00:02", nil),
		testNode6("node3", "fd00:10:244:2::/64", "fd00:56::12", "0a:00:00:00:00:03",
			map[string]string{AnnotationPublicIPv6: "fd00:56::12", AnnotationPublicIPv6Over: "fd00:57::12"}),
		// An IPv4 backend-data is not an IPv6 node's VTEP.
		testNode6("v4data", "fd00:10:244:3::/64", "fd00:56::13", "",
			map[string]string{AnnotationBackendData: `{"VNI":1,"VtepMAC":"0a:00:00:00:00:04"}`}),
		testNode6("linklocal", "fd00:10:244:4::/64", "fd00:56::14", "0a:00:00:00:00:05",
			map[string]string{AnnotationPublicIPv6: "fe80::1"}),
		testNode6("noip6", "fd00:10:244:5::/64", "192.168.56.15", "0a:00:00:00:00:06", nil),
	}
	peers, skipped := vxlanPeers("node1", nodes)
	var got []string
	for _, p := range peers {
		got = append(got, p.String())
	}
	want := []string{
		"fd00:10:244:1::/64 via fd00:10:244:1:: (0a:00:00:00:00:02 at fd00:56::11)",
		"fd00:10:244:2::/64 via fd00:10:244:2:: (0a:00:00:00:00:03 at fd00:57::12)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("peers:\n got %q\nwant %q", got, want)
	}
	for _, p := range peers {
		if p.Subnet6.IsValid() {
			t.Errorf("peer %s has a second IPv6 subnet %s; an IPv6-only node has one pod range", p, p.Subnet6)
		}
	}
	wantSkipped := []string{
		`node "linklocal": flannel.alpha.coreos.com/public-ipv6 "fe80::1" is not a global IPv6 address`,
		`node "noip6": node has no IPv6 InternalIP`,
		`node "v4data": parsing flannel.alpha.coreos.com/backend-v6-data "": unexpected end of JSON input`,
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped:\n got %q\nwant %q", skipped, wantSkipped)
	}
}

func TestNetworkAnnotationsIPv6Underlay(t *testing.T) {
	a := &Agent{cfg: Config{PodNetwork: PodNetworkVXLAN, NodeIP: netip.MustParseAddr("fd00:56::11")}}
	want := map[string]string{
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/backend-data":        "null",
		"flannel.alpha.coreos.com/backend-v6-data":     "null",
		"flannel.alpha.coreos.com/public-ipv6":         "fd00:56::11",
	}
	if got := a.networkAnnotations(); !maps.Equal(got, want) {
		t.Errorf("before the device: annotations = %v, want %v", got, want)
	}
	a.vtepMAC, _ = parseBackendData(`{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}`)
	want["flannel.alpha.coreos.com/backend-v6-data"] = `{"VNI":1,"VtepMAC":"0a:09:85:0e:1d:2e"}`
	if got := a.networkAnnotations(); !maps.Equal(got, want) {
		t.Errorf("vxlan annotations = %v, want %v", got, want)
	}
	// What this node writes, another IPv6 node reads.
	self := testNode("node2", "fd00:10:244:1::/64", "fd00:56::11", a.networkAnnotations())
	peers, skipped := vxlanPeers("node1", []*corev1.Node{self})
	if len(peers) != 1 || len(skipped) != 0 || peers[0].String() != "fd00:10:244:1::/64 via fd00:10:244:1:: (0a:09:85:0e:1d:2e at fd00:56::11)" {
		t.Errorf("peers %v, skipped %q", peers, skipped)
	}
	a.cfg.PodNetwork = PodNetworkHostGW
	delete(want, "flannel.alpha.coreos.com/backend-v6-data")
	want["flannel.alpha.coreos.com/backend-type"] = "host-gw"
	if got := a.networkAnnotations(); !maps.Equal(got, want) {
		t.Errorf("host-gw annotations = %v, want %v", got, want)
	}
}
