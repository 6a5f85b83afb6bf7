package cni

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/minikit/minikit/internal/netns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Flannel's VXLAN backend, as flannel's pkg/backend/vxlan builds it: one VXLAN
// device per node, named flannel.<VNI>, UDP port 8472 (the kernel's historical
// default, which flannel documents), learning off, MTU 50 below the underlay's
// (20 outer IPv4 + 8 UDP + 8 VXLAN + 14 inner Ethernet header), and the node's
// pod subnet's network address as a /32, so that each node's subnet .0 is its
// tunnel endpoint's address. Nothing is learnt: for every other node the agent
// writes a permanent neighbour entry (its .0 to its VTEP MAC), a permanent FDB
// entry (that MAC to its public IP) and the route to its pod subnet via its .0,
// onlink, on the device.
const (
	VXLANDevice   = "flannel.1"
	VXLANVNI      = 1
	VXLANPort     = 8472
	VXLANOverhead = 50
	// VXLANOverhead6 is the overhead over an IPv6 underlay (an IPv6-only
	// node's): the outer IPv6 header is 40 bytes, flannel's 70 for its
	// IPv6 device.
	VXLANOverhead6 = 70
)

// VXLANOverheadOf is the VXLAN overhead for the underlay address local.
func VXLANOverheadOf(local netip.Addr) int {
	if local.Is6() && !local.Is4In6() {
		return VXLANOverhead6
	}
	return VXLANOverhead
}

// VXLANPeer is what a node needs to know about another node to reach its pods
// through the overlay: its pod subnet, the MAC of its VXLAN device and the
// underlay address the device's packets go to.
type VXLANPeer struct {
	Subnet   netip.Prefix
	VtepMAC  net.HardwareAddr
	PublicIP netip.Addr
	// Subnet6 is the peer's IPv6 pod subnet on a dual-stack node (zero
	// otherwise): its IPv6 frames cross the same IPv4 tunnel, to the same
	// VTEP MAC, via Gateway6.
	Subnet6 netip.Prefix
}

// Gateway is the peer's tunnel endpoint address: its subnet's network address.
func (p VXLANPeer) Gateway() netip.Addr { return p.Subnet.Masked().Addr() }

// Gateway6 is the peer's IPv6 tunnel endpoint address, its IPv6 subnet's
// network address (invalid without one).
func (p VXLANPeer) Gateway6() netip.Addr {
	if !p.Subnet6.IsValid() {
		return netip.Addr{}
	}
	return p.Subnet6.Masked().Addr()
}

// String describes the peer for logs: subnet, gateway, VTEP MAC and public IP.
func (p VXLANPeer) String() string {
	return fmt.Sprintf("%s via %s (%s at %s)", p.Subnet, p.Gateway(), p.VtepMAC, p.PublicIP)
}

// EnsureVXLAN creates or repairs the node's VXLAN device: VNI 1, port 8472,
// learning off, its local address local (the node's public IP, IPv4 or on an
// IPv6-only node IPv6) on the link that holds it, MTU mtu, address
// PodCIDR.0/32 (/128 for an IPv6 pod CIDR), up. A device of that name with other
// parameters (another VNI or port, learning on) is replaced. It returns the
// device's MAC, which the node publishes on its Node object, and whether it
// created the device (whose MAC is then new).
func (n *Network) EnsureVXLAN(local netip.Addr, mtu int) (mac net.HardwareAddr, created bool, err error) {
	if err := n.validate(); err != nil {
		return nil, false, fmt.Errorf("ensuring %s: %w", VXLANDevice, err)
	}
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s %s in node netns %q: %w", what, VXLANDevice, n.HostNS, err)
	}
	hs, err := n.openHost()
	if err != nil {
		return nil, false, wrap("ensuring", err)
	}
	defer hs.Close()
	parent, err := linkWithAddr(hs.h, local)
	if err != nil {
		return nil, false, wrap("finding the underlay link for", err)
	}
	l, err := hs.h.LinkByName(VXLANDevice)
	if err == nil {
		if v, ok := l.(*netlink.Vxlan); !ok || v.VxlanId != VXLANVNI || v.Port != VXLANPort || v.Learning ||
			!v.SrcAddr.Equal(net.IP(local.AsSlice())) || v.VtepDevIndex != parent.Attrs().Index {
			n.log().Info("replacing a VXLAN device with other parameters", "device", VXLANDevice, "type", l.Type())
			if err := hs.h.LinkDel(l); err != nil {
				return nil, false, wrap("deleting the mismatched", err)
			}
			err = netlink.LinkNotFoundError{}
		}
	}
	if isLinkNotFound(err) {
		la := netlink.NewLinkAttrs()
		la.Name = VXLANDevice
		la.MTU = mtu
		v := &netlink.Vxlan{LinkAttrs: la, VxlanId: VXLANVNI, Port: VXLANPort, Learning: false,
			SrcAddr: net.IP(local.AsSlice()), VtepDevIndex: parent.Attrs().Index}
		if err := hs.h.LinkAdd(v); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, false, wrap("creating", err)
		}
		created = true
		n.log().Info("created VXLAN device", "device", VXLANDevice, "vni", VXLANVNI, "port", VXLANPort, "mtu", mtu, "local", local)
		l, err = hs.h.LinkByName(VXLANDevice)
	}
	if err != nil {
		return nil, false, wrap("looking up", err)
	}
	if mtu > 0 && l.Attrs().MTU != mtu {
		if err := hs.h.LinkSetMTU(l, mtu); err != nil {
			return nil, false, wrap("setting MTU of", err)
		}
	}
	// The VTEP address is a host address of the pod CIDR's family: an
	// IPv6-only node's pod CIDR is IPv6, its .0 a /128.
	vtep := n.PodCIDR.Masked().Addr()
	if err := ensureOnlyAddr(hs.h, l, netip.PrefixFrom(vtep, vtep.BitLen())); err != nil {
		return nil, false, wrap("addressing", err)
	}
	if p := n.SecondaryPodCIDR; p.IsValid() {
		if err := ensureOnlyAddr(hs.h, l, netip.PrefixFrom(p.Masked().Addr(), 128)); err != nil {
			return nil, false, wrap("addressing (IPv6)", err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := hs.h.LinkSetUp(l); err != nil {
			return nil, false, wrap("bringing up", err)
		}
	}
	return l.Attrs().HardwareAddr, created, nil
}

// DeleteVXLAN removes the node's VXLAN device, and with it every neighbour,
// FDB entry and route on it (host-gw mode and minikit down); a missing device
// is not an error.
func (n *Network) DeleteVXLAN() (bool, error) {
	hs, err := n.openHost()
	if err != nil {
		return false, err
	}
	defer hs.Close()
	l, err := hs.h.LinkByName(VXLANDevice)
	if isLinkNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("finding %s: %w", VXLANDevice, err)
	}
	if err := hs.h.LinkDel(l); err != nil {
		return false, fmt.Errorf("deleting %s: %w", VXLANDevice, err)
	}
	return true, nil
}

// UnderlayMTU is the MTU of the node namespace's link that holds addr (the
// node's public IP): the MTU the VXLAN device's is derived from.
func (n *Network) UnderlayMTU(addr netip.Addr) (int, error) {
	hs, err := n.openHost()
	if err != nil {
		return 0, err
	}
	defer hs.Close()
	l, err := linkWithAddr(hs.h, addr)
	if err != nil {
		return 0, err
	}
	if l.Attrs().Flags&net.FlagLoopback != 0 {
		return 0, fmt.Errorf("%s is on the loopback link, not an underlay", addr)
	}
	return l.Attrs().MTU, nil
}

// ConnectedPrefixes lists the IPv4 subnets the node namespace reaches directly
// (the prefixes of its addresses), without the pod bridge's and the VXLAN
// device's: the segments on which host-gw can use another node as a gateway.
func (n *Network) ConnectedPrefixes() ([]netip.Prefix, error) {
	hs, err := n.openHost()
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	links, err := RetryDump(hs.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var out []netip.Prefix
	for _, l := range links {
		name := l.Attrs().Name
		if name == n.Bridge || name == VXLANDevice || l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := RetryDump(func() ([]netlink.Addr, error) { return hs.h.AddrList(l, netlink.FAMILY_ALL) })
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", name, err)
		}
		for _, a := range addrs {
			if p, ok := prefixOf(a.IPNet); ok && !p.Addr().IsLinkLocalUnicast() {
				out = append(out, p.Masked())
			}
		}
	}
	return out, nil
}

func linkWithAddr(h *netlink.Handle, addr netip.Addr) (netlink.Link, error) {
	// The address's family: an IPv6-only node's underlay address is IPv6.
	addrs, err := RetryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, familyOf(addr.Unmap())) })
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			return h.LinkByIndex(a.LinkIndex)
		}
	}
	return nil, fmt.Errorf("no link has the address %s", addr)
}

// SyncVXLANPeers makes the VXLAN device's permanent neighbours, FDB entries
// and minikit's routes exactly those of peers, in flannel's order for each
// (neighbour, FDB, route), and removes minikit's routes elsewhere (host-gw's,
// after a switch). It returns what it changed. The device must exist.
func (n *Network) SyncVXLANPeers(peers []VXLANPeer) (changed []string, err error) {
	hs, err := n.openHost()
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	dev, err := hs.h.LinkByName(VXLANDevice)
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", VXLANDevice, err)
	}
	idx := dev.Attrs().Index
	neighs, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(idx, unix.AF_INET) })
	if err != nil {
		return nil, fmt.Errorf("listing neighbours of %s: %w", VXLANDevice, err)
	}
	neighs6, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(idx, unix.AF_INET6) })
	if err != nil {
		return nil, fmt.Errorf("listing IPv6 neighbours of %s: %w", VXLANDevice, err)
	}
	neighs = append(neighs, neighs6...)
	fdb, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(idx, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("listing FDB of %s: %w", VXLANDevice, err)
	}
	wantNeigh := map[netip.Addr]string{}
	wantFDB := map[string]netip.Addr{}
	for _, p := range peers {
		wantNeigh[p.Gateway()] = p.VtepMAC.String()
		if gw6 := p.Gateway6(); gw6.IsValid() {
			wantNeigh[gw6] = p.VtepMAC.String()
		}
		wantFDB[p.VtepMAC.String()] = p.PublicIP
	}
	// Stale entries go first, so a peer whose MAC moved is rewritten cleanly.
	haveNeigh := map[netip.Addr]bool{}
	for _, e := range neighs {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsMulticast() || ip.IsLinkLocalUnicast() {
			continue // the kernel's own (IPv6 multicast groups, NOARP)
		}
		if mac, want := wantNeigh[ip]; want && mac == e.HardwareAddr.String() && e.State&netlink.NUD_PERMANENT != 0 && !haveNeigh[ip] {
			haveNeigh[ip] = true
			continue
		}
		if e.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) == 0 && !wantHasKey(wantNeigh, ip) {
			continue // the kernel's own entries (none with learning off) age out by themselves
		}
		if err := hs.h.NeighDel(&e); err != nil && !errors.Is(err, unix.ENOENT) {
			return changed, fmt.Errorf("deleting neighbour %s on %s: %w", ip, VXLANDevice, err)
		}
		changed = append(changed, fmt.Sprintf("deleted neigh %s lladdr %s", ip, e.HardwareAddr))
	}
	haveFDB := map[string]bool{}
	for _, e := range fdb {
		mac := e.HardwareAddr.String()
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok || isZeroMAC(e.HardwareAddr) {
			continue // the device's own all-zeros default destination, if any
		}
		if want, ok := wantFDB[mac]; ok && want == ip.Unmap() && !haveFDB[mac] {
			haveFDB[mac] = true
			continue
		}
		if err := hs.h.NeighDel(&e); err != nil && !errors.Is(err, unix.ENOENT) {
			return changed, fmt.Errorf("deleting FDB entry %s on %s: %w", mac, VXLANDevice, err)
		}
		changed = append(changed, fmt.Sprintf("deleted fdb %s dst %s", mac, ip.Unmap()))
	}
	for _, p := range peers {
		for _, gw := range []netip.Addr{p.Gateway(), p.Gateway6()} {
			if !gw.IsValid() || haveNeigh[gw] {
				continue
			}
			fam := unix.AF_INET
			if gw.Is6() {
				fam = unix.AF_INET6
			}
			e := &netlink.Neigh{LinkIndex: idx, Family: fam, State: netlink.NUD_PERMANENT,
				IP: net.IP(gw.AsSlice()), HardwareAddr: p.VtepMAC}
			if err := hs.h.NeighSet(e); err != nil {
				return changed, fmt.Errorf("adding neighbour %s lladdr %s on %s: %w", gw, p.VtepMAC, VXLANDevice, err)
			}
			changed = append(changed, fmt.Sprintf("added neigh %s lladdr %s", gw, p.VtepMAC))
		}
		if !haveFDB[p.VtepMAC.String()] {
			e := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
				Flags: netlink.NTF_SELF, IP: net.IP(p.PublicIP.AsSlice()), HardwareAddr: p.VtepMAC}
			if err := hs.h.NeighSet(e); err != nil {
				return changed, fmt.Errorf("adding FDB entry %s dst %s on %s: %w", p.VtepMAC, p.PublicIP, VXLANDevice, err)
			}
			changed = append(changed, fmt.Sprintf("added fdb %s dst %s", p.VtepMAC, p.PublicIP))
		}
	}
	want := map[netip.Prefix]routeSpec{}
	for _, p := range peers {
		want[p.Subnet.Masked()] = routeSpec{gw: p.Gateway(), dev: idx, onlink: true}
		if gw6 := p.Gateway6(); gw6.IsValid() {
			want[p.Subnet6.Masked()] = routeSpec{gw: gw6, dev: idx, onlink: true}
		}
	}
	more, err := syncRoutes(hs, want)
	return append(changed, more...), err
}

func wantHasKey(m map[netip.Addr]string, k netip.Addr) bool { _, ok := m[k]; return ok }

func isZeroMAC(m net.HardwareAddr) bool {
	return len(m) == 0 || strings.Trim(m.String(), "0:") == ""
}

// VXLANState is what the node namespace holds for the overlay, as `ip -d
// link`, `ip neigh` and `bridge fdb` show it; tests and tools read it.
type VXLANState struct {
	Exists   bool
	VNI      int
	Port     int
	Learning bool
	MTU      int
	MAC      net.HardwareAddr
	Neigh    map[netip.Addr]string // permanent neighbours: IP -> MAC
	FDB      map[string]netip.Addr // permanent FDB entries: MAC -> remote IP
}

// ReadVXLAN reads the VXLAN device's state in the node namespace.
func (n *Network) ReadVXLAN() (VXLANState, error) {
	var st VXLANState
	hs, err := n.openHost()
	if err != nil {
		return st, err
	}
	defer hs.Close()
	l, err := hs.h.LinkByName(VXLANDevice)
	if isLinkNotFound(err) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	v, ok := l.(*netlink.Vxlan)
	if !ok {
		return st, fmt.Errorf("%s is a %s, not a vxlan device", VXLANDevice, l.Type())
	}
	st = VXLANState{Exists: true, VNI: v.VxlanId, Port: v.Port, Learning: v.Learning, MTU: v.MTU, MAC: v.HardwareAddr,
		Neigh: map[netip.Addr]string{}, FDB: map[string]netip.Addr{}}
	neighs, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(v.Index, unix.AF_INET) })
	if err != nil {
		return st, err
	}
	// IPv6 VTEPs (dual-stack and IPv6-only nodes') too.
	neighs6, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(v.Index, unix.AF_INET6) })
	if err != nil {
		return st, err
	}
	for _, e := range append(neighs, neighs6...) {
		if ip, ok := netip.AddrFromSlice(e.IP); ok && e.State&netlink.NUD_PERMANENT != 0 {
			st.Neigh[ip.Unmap()] = e.HardwareAddr.String()
		}
	}
	fdb, err := RetryDump(func() ([]netlink.Neigh, error) { return hs.h.NeighList(v.Index, unix.AF_BRIDGE) })
	if err != nil {
		return st, err
	}
	for _, e := range fdb {
		if ip, ok := netip.AddrFromSlice(e.IP); ok && !isZeroMAC(e.HardwareAddr) {
			st.FDB[e.HardwareAddr.String()] = ip.Unmap()
		}
	}
	return st, nil
}

// WatchPodNetwork calls kick whenever something of the pod network minikit
// owns in the node namespace disappears: the VXLAN device, a neighbour or
// FDB entry on it, or a route of RouteProtocol. The node agent
// then syncs at once instead of at its next resync. Our own removals kick too;
// the sync they cause finds nothing to do. The subscriptions end when done is
// closed; a subscription that fails is reported to onErr, and the periodic
// resync still repairs everything.
func (n *Network) WatchPodNetwork(done <-chan struct{}, kick func(), onErr func(error)) error {
	hs, err := n.openHost()
	if err != nil {
		return err
	}
	links := make(chan netlink.LinkUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	// The sockets are opened inside the node namespace and stay bound to it.
	err = netns.Do(hs.ns, func() error {
		if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("subscribing to link changes: %w", err)
		}
		if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("subscribing to neighbour changes: %w", err)
		}
		if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("subscribing to route changes: %w", err)
		}
		return nil
	})
	if err != nil {
		hs.Close()
		return err
	}
	go func() {
		defer hs.Close()
		for links != nil || neighs != nil || routes != nil {
			select {
			case u, ok := <-links:
				if !ok {
					links = nil
				} else if u.Header.Type == unix.RTM_DELLINK && u.Attrs().Name == VXLANDevice {
					kick()
				}
			case u, ok := <-neighs:
				if !ok {
					neighs = nil
				} else if u.Type == unix.RTM_DELNEIGH {
					// (A deleted neighbour is reported NUD_FAILED, not with the
					// state it had.) The device of the entry may be gone
					// already: that is a link deletion, kicked above.
					if l, err := hs.h.LinkByIndex(u.LinkIndex); err == nil && l.Attrs().Name == VXLANDevice {
						kick()
					}
				}
			case u, ok := <-routes:
				if !ok {
					routes = nil
				} else if u.Type == unix.RTM_DELROUTE && u.Protocol == RouteProtocol {
					kick()
				}
			}
		}
	}()
	return nil
}
