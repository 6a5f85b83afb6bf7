package cni

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestSecondaryPodIP(t *testing.T) {
	p, s := netip.MustParsePrefix, netip.MustParseAddr
	for _, tc := range []struct {
		primary, secondary, ip, want string
	}{
		{"10.244.1.0/24", "fd00:10:244:1::/64", "10.244.1.5", "fd00:10:244:1::5"},
		{"10.244.1.0/24", "fd00:10:244:1::/64", "10.244.1.254", "fd00:10:244:1::fe"},
		{"10.100.0.64/26", "fd00:1::/120", "10.100.0.70", "fd00:1::6"},
		{"10.244.1.0/24", "fd00:1::/124", "10.244.1.5", "invalid IP"},       // too small
		{"10.244.1.0/24", "fd00:10:244:1::/64", "10.244.2.5", "invalid IP"}, // not in primary
		{"10.244.1.0/24", "10.245.1.0/24", "10.244.1.5", "invalid IP"},      // not IPv6
	} {
		var sec netip.Prefix
		if tc.secondary != "" {
			sec = p(tc.secondary)
		}
		if got := SecondaryPodIP(p(tc.primary), sec, s(tc.ip)).String(); got != tc.want {
			t.Errorf("SecondaryPodIP(%s, %s, %s) = %s, want %s", tc.primary, tc.secondary, tc.ip, got, tc.want)
		}
	}
}

// TestDualStackPods: on a node with pod CIDRs of both families the bridge
// has both gateways and every pod both addresses on its one eth0, with a
// default route of each family; pods reach each other and the node over
// IPv6; a deleted IPv6 address is noticed and repaired.
func TestDualStackPods(t *testing.T) {
	requireRoot(t)
	n := &Network{
		HostNS:           newNamedNS(t, "node"),
		Bridge:           "cni0",
		PodCIDR:          netip.MustParsePrefix("10.244.1.0/24"),
		SecondaryPodCIDR: netip.MustParsePrefix("fd00:10:244:1::/64"),
	}
	if err := n.EnsureBridge(); err != nil {
		t.Fatalf("EnsureBridge: %v", err)
	}
	a := newTestPod(t, n, "10.244.1.2")
	b := newTestPod(t, n, "10.244.1.3")
	a6, b6 := netip.MustParseAddr("fd00:10:244:1::2"), netip.MustParseAddr("fd00:10:244:1::3")

	requirePing(t, a.NetNS, b.IP)
	requirePing(t, a.NetNS, b6)
	requirePing(t, b.NetNS, a6)
	requirePing(t, a.NetNS, n.SecondaryGateway())

	out, err := run("ip", "netns", "exec", n.HostNS, "ip", "-6", "-o", "addr", "show", "dev", "cni0")
	if err != nil || !strings.Contains(out, "inet6 fd00:10:244:1::1/64") {
		t.Errorf("cni0 IPv6 gateway: %v\n%s", err, out)
	}
	out, err = run("ip", "netns", "exec", a.NetNS, "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "inet 10.244.1.2/24") || !strings.Contains(out, "inet6 fd00:10:244:1::2/64") {
		t.Errorf("pod eth0 addresses: %v\n%s", err, out)
	}
	out, err = run("ip", "netns", "exec", a.NetNS, "ip", "-6", "route", "show", "default")
	if err != nil || !strings.Contains(out, "default via fd00:10:244:1::1 dev eth0") {
		t.Errorf("pod IPv6 default route: %v\n%s", err, out)
	}
	if v := readSysctlIn(t, n.HostNS, "net/ipv6/conf/all/forwarding"); v != "1" {
		t.Errorf("node IPv6 forwarding = %q, want 1", v)
	}

	inPod(t, a, func(h *netlink.Handle) {
		eth0 := mustLink(t, h, PodIfName)
		if err := h.AddrDel(eth0, &netlink.Addr{IPNet: ipNetOf(netip.PrefixFrom(a6, 64))}); err != nil {
			t.Fatal(err)
		}
	})
	if ok, why := n.PodOK(a); ok || why != "IPv6 address missing" {
		t.Errorf("PodOK after deleting the IPv6 address = %v, %q", ok, why)
	}
	if _, err := n.SetupPod(a); err != nil {
		t.Fatalf("SetupPod repair: %v", err)
	}
	requirePodOK(t, n, a)
	requirePing(t, b.NetNS, a6)
}

// TestVXLANDualStackPeers: on a dual-stack node the VXLAN device also holds
// its IPv6 subnet's network address, and a peer with an IPv6 subnet gets a
// permanent IPv6 neighbour (its VTEP MAC) and an onlink IPv6 route through
// the same IPv4 tunnel; a second sync changes nothing, and a peer that
// loses its IPv6 subnet loses them.
func TestVXLANDualStackPeers(t *testing.T) {
	requireRoot(t)
	n := newVXLANTestNode(t)
	n.SecondaryPodCIDR = netip.MustParsePrefix("fd00:10:244::/64")
	if err := n.EnsureBridge(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.EnsureVXLAN(netip.MustParseAddr("192.168.56.10"), 1450); err != nil {
		t.Fatal(err)
	}
	inNode(t, n, func(h *netlink.Handle) {
		l := mustLink(t, h, VXLANDevice)
		if ok, _ := hasAddr(h, l, netip.MustParsePrefix("fd00:10:244::/128")); !ok {
			t.Errorf("%s lacks fd00:10:244::/128", VXLANDevice)
		}
	})
	p := peer("10.244.1.0/24", "0a:00:00:00:01:01", "192.168.56.11")
	p.Subnet6 = netip.MustParsePrefix("fd00:10:244:1::/64")
	changed, err := n.SyncVXLANPeers([]VXLANPeer{p})
	if err != nil || len(changed) != 5 {
		t.Fatalf("SyncVXLANPeers: %v, changed %q; want 2 neighbours, 1 FDB entry, 2 routes", err, changed)
	}
	out, err := run("ip", "netns", "exec", n.HostNS, "ip", "-6", "route", "show", "proto", "77")
	if err != nil || !strings.Contains(out, "fd00:10:244:1::/64 via fd00:10:244:1:: dev flannel.1") || !strings.Contains(out, "onlink") {
		t.Errorf("IPv6 route over the tunnel: %v\n%s", err, out)
	}
	out, err = run("ip", "netns", "exec", n.HostNS, "ip", "-6", "neigh", "show", "dev", VXLANDevice)
	if err != nil || !strings.Contains(out, "fd00:10:244:1:: lladdr 0a:00:00:00:01:01 PERMANENT") {
		t.Errorf("IPv6 neighbour of the peer: %v\n%s", err, out)
	}
	if changed, err := n.SyncVXLANPeers([]VXLANPeer{p}); err != nil || len(changed) != 0 {
		t.Fatalf("a second sync changed %q (%v)", changed, err)
	}
	p.Subnet6 = netip.Prefix{}
	if changed, err := n.SyncVXLANPeers([]VXLANPeer{p}); err != nil || len(changed) != 2 {
		t.Fatalf("dropping the peer's IPv6 subnet changed %q (%v); want its neighbour and route deleted", changed, err)
	}
}
