package cni

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newVXLANTestNode is a node namespace with an underlay link ("eth1"
// holding 192.168.56.10/24, MTU 1500) and the cni0 bridge of 10.244.0.0/24.
func newVXLANTestNode(t *testing.T) *Network {
	t.Helper()
	n := newTestNode(t, "10.244.0.0/24")
	inNode(t, n, func(h *netlink.Handle) {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = "eth1", 1500
		// A veth pair, both ends in the node namespace (the dummy driver may
		// be missing): eth1 is the underlay link, its peer goes nowhere.
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth1p"}); err != nil {
			t.Fatal(err)
		}
		l, _ := h.LinkByName("eth1")
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNetOf(netip.MustParsePrefix("192.168.56.10/24"))}); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	})
	return n
}

func peer(subnet, mac, ip string) VXLANPeer {
	m, _ := net.ParseMAC(mac)
	return VXLANPeer{Subnet: netip.MustParsePrefix(subnet), VtepMAC: m, PublicIP: netip.MustParseAddr(ip)}
}

// minikitRoutes renders the node's minikit routes as `ip route` would.
func minikitRoutes(t *testing.T, n *Network) []string {
	t.Helper()
	var out []string
	inNode(t, n, func(h *netlink.Handle) {
		rs, err := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			l, _ := h.LinkByIndex(r.LinkIndex)
			s := r.Dst.String() + " via " + r.Gw.String() + " dev " + l.Attrs().Name
			if r.Flags&unix.RTNH_F_ONLINK != 0 {
				s += " onlink"
			}
			out = append(out, s)
		}
	})
	slices.Sort(out)
	return out
}

func TestVXLANDeviceAndPeers(t *testing.T) {
	requireRoot(t)
	n := newVXLANTestNode(t)
	local := netip.MustParseAddr("192.168.56.10")
	mtu, err := n.UnderlayMTU(local)
	if err != nil || mtu != 1500 {
		t.Fatalf("UnderlayMTU = %d, %v; want 1500", mtu, err)
	}
	mac, created, err := n.EnsureVXLAN(local, mtu-VXLANOverhead)
	if err != nil || !created {
		t.Fatalf("EnsureVXLAN = %v, %v; want a new device", created, err)
	}
	st, err := n.ReadVXLAN()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.VNI != 1 || st.Port != 8472 || st.Learning || st.MTU != 1450 || st.MAC.String() != mac.String() {
		t.Fatalf("device = %+v, want VNI 1, port 8472, learning off, MTU 1450, MAC %s", st, mac)
	}
	inNode(t, n, func(h *netlink.Handle) {
		l, _ := h.LinkByName(VXLANDevice)
		if ok, _ := hasAddr(h, l, netip.MustParsePrefix("10.244.0.0/32")); !ok {
			t.Errorf("%s lacks the address 10.244.0.0/32 (its pod subnet's .0)", VXLANDevice)
		}
	})
	again, created, err := n.EnsureVXLAN(local, 1450)
	if err != nil || created || again.String() != mac.String() {
		t.Fatalf("second EnsureVXLAN = %s, created %v, %v; want the same device", again, created, err)
	}

	two := []VXLANPeer{peer("10.244.1.0/24", "0a:00:00:00:01:01", "192.168.56.11"), peer("10.244.2.0/24", "0a:00:00:00:02:02", "192.168.57.12")}
	changed, err := n.SyncVXLANPeers(two)
	if err != nil || len(changed) != 6 {
		t.Fatalf("SyncVXLANPeers: %v, changed %q; want 6 additions", err, changed)
	}
	wantRoutes := []string{"10.244.1.0/24 via 10.244.1.0 dev flannel.1 onlink", "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"}
	if got := minikitRoutes(t, n); !slices.Equal(got, wantRoutes) {
		t.Fatalf("routes = %q, want %q", got, wantRoutes)
	}
	st, _ = n.ReadVXLAN()
	if st.Neigh[netip.MustParseAddr("10.244.2.0")] != "0a:00:00:00:02:02" || st.FDB["0a:00:00:00:02:02"] != netip.MustParseAddr("192.168.57.12") || len(st.Neigh) != 2 || len(st.FDB) != 2 {
		t.Fatalf("neigh %v, fdb %v; want both peers", st.Neigh, st.FDB)
	}
	if changed, err := n.SyncVXLANPeers(two); err != nil || len(changed) != 0 {
		t.Fatalf("a second sync changed %q (%v); want nothing", changed, err)
	}

	// An FDB entry deleted by hand comes back with the next sync.
	inNode(t, n, func(h *netlink.Handle) {
		l, _ := h.LinkByName(VXLANDevice)
		e := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			IP: net.ParseIP("192.168.56.11"), HardwareAddr: two[0].VtepMAC}
		if err := h.NeighDel(e); err != nil {
			t.Fatal(err)
		}
	})
	if changed, err := n.SyncVXLANPeers(two); err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], "added fdb 0a:00:00:00:01:01") {
		t.Fatalf("repair changed %q (%v); want the FDB entry back", changed, err)
	}

	// A peer that left takes its neighbour, FDB entry and route with it; one
	// whose MAC changed (its device was recreated) is rewritten.
	moved := peer("10.244.1.0/24", "0a:00:00:00:01:99", "192.168.56.11")
	if _, err := n.SyncVXLANPeers([]VXLANPeer{moved}); err != nil {
		t.Fatal(err)
	}
	st, _ = n.ReadVXLAN()
	if len(st.Neigh) != 1 || st.Neigh[netip.MustParseAddr("10.244.1.0")] != "0a:00:00:00:01:99" || len(st.FDB) != 1 || st.FDB["0a:00:00:00:01:99"] != netip.MustParseAddr("192.168.56.11") {
		t.Fatalf("neigh %v, fdb %v; want node 1's new MAC only", st.Neigh, st.FDB)
	}
	if got := minikitRoutes(t, n); !slices.Equal(got, wantRoutes[:1]) {
		t.Fatalf("routes = %q, want %q", got, wantRoutes[:1])
	}

	// Switching to host-gw: its routes replace the VXLAN ones, and the
	// device goes with its entries.
	if _, err := n.SyncRoutes(map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.244.1.0/24"): netip.MustParseAddr("192.168.56.11")}); err != nil {
		t.Fatal(err)
	}
	if got, want := minikitRoutes(t, n), []string{"10.244.1.0/24 via 192.168.56.11 dev eth1"}; !slices.Equal(got, want) {
		t.Fatalf("host-gw routes = %q, want %q", got, want)
	}
	if removed, err := n.DeleteVXLAN(); err != nil || !removed {
		t.Fatalf("DeleteVXLAN = %v, %v", removed, err)
	}
	if st, _ := n.ReadVXLAN(); st.Exists {
		t.Fatalf("%s still exists", VXLANDevice)
	}
	if removed, err := n.DeleteVXLAN(); err != nil || removed {
		t.Fatalf("DeleteVXLAN of no device = %v, %v; want nothing to do", removed, err)
	}
}

// A device named flannel.1 with other parameters (another VNI, learning on)
// is replaced, as flannel replaces an incompatible one.
func TestVXLANReplacesMismatchedDevice(t *testing.T) {
	requireRoot(t)
	n := newVXLANTestNode(t)
	inNode(t, n, func(h *netlink.Handle) {
		la := netlink.NewLinkAttrs()
		la.Name = VXLANDevice
		if err := h.LinkAdd(&netlink.Vxlan{LinkAttrs: la, VxlanId: 2, Port: 4789, Learning: true}); err != nil {
			t.Fatal(err)
		}
	})
	if _, created, err := n.EnsureVXLAN(netip.MustParseAddr("192.168.56.10"), 1450); err != nil || !created {
		t.Fatalf("EnsureVXLAN = created %v, %v; want the device replaced", created, err)
	}
	st, _ := n.ReadVXLAN()
	if st.VNI != 1 || st.Port != 8472 || st.Learning {
		t.Fatalf("device = %+v, want VNI 1, port 8472, learning off", st)
	}
	if _, _, err := n.EnsureVXLAN(netip.MustParseAddr("192.168.99.1"), 1450); err == nil || !strings.Contains(err.Error(), "no link has the address 192.168.99.1") {
		t.Fatalf("EnsureVXLAN with an address on no link: %v", err)
	}
}

func TestConnectedPrefixes(t *testing.T) {
	requireRoot(t)
	n := newVXLANTestNode(t)
	if _, _, err := n.EnsureVXLAN(netip.MustParseAddr("192.168.56.10"), 1450); err != nil {
		t.Fatal(err)
	}
	got, err := n.ConnectedPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}; !slices.Equal(got, want) {
		t.Fatalf("ConnectedPrefixes = %v, want %v (not cni0's, not flannel.1's, not lo's)", got, want)
	}
}

// TestWatchPodNetwork: deleting the VXLAN device, an FDB entry or neighbour on
// it, or one of minikit's routes by hand wakes the agent at once.
func TestWatchPodNetwork(t *testing.T) {
	requireRoot(t)
	n := newVXLANTestNode(t)
	if _, _, err := n.EnsureVXLAN(netip.MustParseAddr("192.168.56.10"), 1450); err != nil {
		t.Fatal(err)
	}
	p := peer("10.244.1.0/24", "0a:00:00:00:01:01", "192.168.56.11")
	if _, err := n.SyncVXLANPeers([]VXLANPeer{p}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	kicks := make(chan struct{}, 16)
	// The subscriptions report their own end (Receive failed) after done: not
	// logged, the test may be over by then.
	if err := n.WatchPodNetwork(done, func() { kicks <- struct{}{} }, func(error) {}); err != nil {
		t.Fatal(err)
	}
	kicked := func(what string) {
		t.Helper()
		select {
		case <-kicks:
		case <-time.After(10 * time.Second):
			t.Fatalf("no kick after %s", what)
		}
		for len(kicks) > 0 {
			<-kicks
		}
	}
	inNode(t, n, func(h *netlink.Handle) {
		l, _ := h.LinkByName(VXLANDevice)
		idx := l.Attrs().Index
		if err := h.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			IP: net.ParseIP("192.168.56.11"), HardwareAddr: p.VtepMAC}); err != nil {
			t.Fatal(err)
		}
		kicked("deleting the FDB entry")
		if err := h.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, IP: net.ParseIP("10.244.1.0")}); err != nil {
			t.Fatal(err)
		}
		kicked("deleting the neighbour")
		if err := h.RouteDel(&netlink.Route{Dst: ipNetOf(netip.MustParsePrefix("10.244.1.0/24")), LinkIndex: idx, Protocol: RouteProtocol}); err != nil {
			t.Fatal(err)
		}
		kicked("deleting the route")
		if err := h.LinkDel(l); err != nil {
			t.Fatal(err)
		}
		kicked("deleting the device")
	})
}

// TestVXLANIPv6Underlay: an IPv6-only node's device, as flannel builds its
// IPv6 one: local address the node's IPv6 underlay address, MTU 70 below
// the underlay's, its IPv6 pod CIDR's network address as a /128; per peer an
// IPv6 neighbour (the peer's VTEP), an FDB entry whose dst is the peer's
// IPv6 node address, and the route to its /64 via its VTEP, onlink.
func TestVXLANIPv6Underlay(t *testing.T) {
	requireRoot(t)
	n := newTestNode(t, "fd00:10:244::/64")
	local := netip.MustParseAddr("fd00:56::10")
	inNode(t, n, func(h *netlink.Handle) {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = "eth1", 1500
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth1p"}); err != nil {
			t.Fatal(err)
		}
		l, _ := h.LinkByName("eth1")
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNetOf(netip.PrefixFrom(local, 64)), Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	})
	mtu, err := n.UnderlayMTU(local)
	if err != nil || mtu != 1500 {
		t.Fatalf("UnderlayMTU = %d, %v; want 1500", mtu, err)
	}
	if got := VXLANOverheadOf(local); got != 70 {
		t.Fatalf("VXLANOverheadOf(%s) = %d, want 70 (40 bytes of outer IPv6 header)", local, got)
	}
	mac, created, err := n.EnsureVXLAN(local, mtu-VXLANOverheadOf(local))
	if err != nil || !created {
		t.Fatalf("EnsureVXLAN = %v, %v; want a new device", created, err)
	}
	inNode(t, n, func(h *netlink.Handle) {
		l, _ := h.LinkByName(VXLANDevice)
		v, ok := l.(*netlink.Vxlan)
		if !ok || !v.SrcAddr.Equal(net.IP(local.AsSlice())) || v.MTU != 1430 || v.Port != 8472 || v.VxlanId != 1 || v.Learning {
			t.Fatalf("device = %+v; want local %s, MTU 1430, port 8472, VNI 1, learning off", l, local)
		}
		if ok, _ := hasAddr(h, l, netip.MustParsePrefix("fd00:10:244::/128")); !ok {
			t.Errorf("%s lacks the address fd00:10:244::/128 (its pod subnet's network address)", VXLANDevice)
		}
	})
	if again, created, err := n.EnsureVXLAN(local, 1430); err != nil || created || again.String() != mac.String() {
		t.Fatalf("second EnsureVXLAN = %s, created %v, %v; want the same device", again, created, err)
	}

	two := []VXLANPeer{peer("fd00:10:244:1::/64", "0a:00:00:00:01:01", "fd00:56::11"), peer("fd00:10:244:2::/64", "0a:00:00:00:02:02", "fd00:56::12")}
	changed, err := n.SyncVXLANPeers(two)
	if err != nil || len(changed) != 6 {
		t.Fatalf("SyncVXLANPeers: %v, changed %q; want 6 additions", err, changed)
	}
	st, _ := n.ReadVXLAN()
	if len(st.Neigh) != 2 || st.Neigh[netip.MustParseAddr("fd00:10:244:2::")] != "0a:00:00:00:02:02" ||
		len(st.FDB) != 2 || st.FDB["0a:00:00:00:02:02"] != netip.MustParseAddr("fd00:56::12") {
		t.Fatalf("neigh %v, fdb %v; want both peers' IPv6 VTEPs and IPv6 node addresses", st.Neigh, st.FDB)
	}
	routes6 := func() []string {
		var out []string
		inNode(t, n, func(h *netlink.Handle) {
			rs, err := h.RouteListFiltered(unix.AF_INET6, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				l, _ := h.LinkByIndex(r.LinkIndex)
				s := r.Dst.String() + " via " + r.Gw.String() + " dev " + l.Attrs().Name
				if r.Flags&unix.RTNH_F_ONLINK != 0 {
					s += " onlink"
				}
				out = append(out, s)
			}
		})
		slices.Sort(out)
		return out
	}
	want := []string{"fd00:10:244:1::/64 via fd00:10:244:1:: dev flannel.1 onlink", "fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel.1 onlink"}
	if got := routes6(); !slices.Equal(got, want) {
		t.Fatalf("IPv6 routes = %q, want %q", got, want)
	}
	if changed, err := n.SyncVXLANPeers(two); err != nil || len(changed) != 0 {
		t.Fatalf("a second sync changed %q (%v); want nothing", changed, err)
	}
	// A peer that left takes its entries with it.
	if _, err := n.SyncVXLANPeers(two[:1]); err != nil {
		t.Fatal(err)
	}
	st, _ = n.ReadVXLAN()
	if len(st.Neigh) != 1 || len(st.FDB) != 1 || st.FDB["0a:00:00:00:01:01"] != netip.MustParseAddr("fd00:56::11") {
		t.Fatalf("neigh %v, fdb %v; want the first peer only", st.Neigh, st.FDB)
	}
	if got := routes6(); !slices.Equal(got, want[:1]) {
		t.Fatalf("IPv6 routes = %q, want %q", got, want[:1])
	}
}
