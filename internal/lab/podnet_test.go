package lab

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRoutedTopologyAddresses(t *testing.T) {
	c := Config{Nodes: 3, Topology: TopologyRouted, Binary: "/bin/true"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	l := &Lab{cfg: c}
	for host, want := range map[string]string{
		"node1": "192.168.56.10", "node2": "192.168.57.11", "node3": "192.168.57.12",
		Client: "192.168.56.100", External: "192.168.56.200",
	} {
		if got := l.Addr(host).String(); got != want {
			t.Errorf("%s at %s, want %s", host, got, want)
		}
	}
	if got := routerAddr(c.subnet2()); got != netip.MustParseAddr("192.168.57.1") {
		t.Errorf("router on the second segment at %s, want 192.168.57.1", got)
	}
	flat := Config{Nodes: 3, Binary: "/bin/true"}
	if err := flat.defaults(); err != nil {
		t.Fatal(err)
	}
	if got := (&Lab{cfg: flat}).Addr("node3").String(); got != "192.168.56.12" {
		t.Errorf("flat node3 at %s, want 192.168.56.12", got)
	}
}

func TestCheckPodNetwork(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"flat host-gw", Config{Nodes: 3}, ""},
		{"routed vxlan", Config{Nodes: 3, Topology: TopologyRouted, PodNetwork: "vxlan"}, ""},
		{"routed single node", Config{Nodes: 1, Topology: TopologyRouted}, ""},
		{"routed host-gw", Config{Nodes: 3, Topology: TopologyRouted},
			"host-gw cannot route pods between nodes that are not on one L2 segment: node2, node3 on 192.168.57.0/24, " +
				"not on node1's segment 192.168.56.0/24; use --pod-network vxlan (or --topology flat)"},
		{"routed host-gw, another underlay", Config{Nodes: 2, Topology: TopologyRouted, Subnet: netip.MustParsePrefix("10.9.0.0/16")},
			"node2 on 10.10.0.0/16, not on node1's segment 10.9.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Binary = "/bin/true"
			if err := tc.cfg.defaults(); err != nil {
				t.Fatal(err)
			}
			err := tc.cfg.checkPodNetwork()
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("checkPodNetwork = %v, want %q", err, tc.err)
			}
		})
	}
	for _, bad := range []Config{{PodNetwork: "udp"}, {Topology: "star"}, {Topology: TopologyRouted, Subnet: netip.MustParsePrefix("192.168.56.0/28")}} {
		bad.Binary = "/bin/true"
		if err := bad.defaults(); err == nil {
			t.Errorf("defaults accepted %+v", bad)
		}
	}
}

func TestServiceRoutes(t *testing.T) {
	for _, tc := range []struct {
		family string
		want   []string
	}{
		{IPFamilyIPv4, []string{"ip -n ns1 route add 10.96.0.0/12 dev eth1"}},
		{IPFamilyDual, []string{"ip -n ns1 route add 10.96.0.0/12 dev eth1", "ip -n ns1 -6 route add fd00:10:96::/112 dev eth1"}},
	} {
		c := Config{Nodes: 2, IPFamily: tc.family, Binary: "/bin/true"}
		if err := c.defaults(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range (&Lab{cfg: c}).serviceRoutes("ns1") {
			got = append(got, strings.Join(s, " "))
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: routes %q, want %q", tc.family, got, tc.want)
		}
	}
}
