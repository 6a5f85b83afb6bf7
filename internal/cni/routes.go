package cni

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes minikit installs (host-gw routes to other nodes'
// pod CIDRs, or the VXLAN ones via flannel.1), so it only ever replaces or
// deletes its own.
const RouteProtocol netlink.RouteProtocol = 77

// routeSpec is one wanted route: via gw, and when dev is set on that link,
// onlink (the VXLAN routes, whose gateway is on no subnet of the link).
type routeSpec struct {
	gw     netip.Addr
	dev    int
	onlink bool
}

// SyncRoutes makes the node namespace's minikit routes exactly want: for each pod
// CIDR, a route via the owning node's address (host-gw). It returns what it
// changed. A VXLAN route of the same CIDR is replaced: switching modes leaves only
// the new mode's routes.
func (n *Network) SyncRoutes(want map[netip.Prefix]netip.Addr) (changed []string, err error) {
	hs, err := n.openHost()
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	specs := map[netip.Prefix]routeSpec{}
	for dst, gw := range want {
		specs[dst] = routeSpec{gw: gw}
	}
	return syncRoutes(hs, specs)
}

// syncRoutes converges the routes of protocol RouteProtocol in the main table
// to want: a route with another gateway, link or onlink flag is replaced.
func syncRoutes(hs *host, want map[netip.Prefix]routeSpec) (changed []string, err error) {
	have, err := RetryDump(func() ([]netlink.Route, error) {
		// Both families: a dual-stack node routes other nodes' IPv6 pod CIDRs too.
		return hs.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	seen := map[netip.Prefix]bool{}
	for _, r := range have {
		dst, ok := prefixOf(r.Dst)
		gw, gwOK := netip.AddrFromSlice(r.Gw)
		w, wanted := want[dst]
		if ok && gwOK && wanted && w.gw == gw.Unmap() && !seen[dst] &&
			(w.dev == 0 || (w.dev == r.LinkIndex && w.onlink == (r.Flags&unix.RTNH_F_ONLINK != 0))) {
			seen[dst] = true
			continue
		}
		if err := hs.h.RouteDel(&r); err != nil {
			return changed, fmt.Errorf("deleting route %v: %w", r.Dst, err)
		}
		changed = append(changed, fmt.Sprintf("deleted %v via %v%s", r.Dst, r.Gw, devSuffix(hs, r.LinkIndex)))
	}
	for dst, w := range want {
		if seen[dst] {
			continue
		}
		r := &netlink.Route{Dst: ipNetOf(dst), Gw: net.IP(w.gw.AsSlice()), Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
		if w.dev != 0 {
			r.LinkIndex = w.dev
		}
		if w.onlink {
			r.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := hs.h.RouteReplace(r); err != nil {
			return changed, fmt.Errorf("adding route %s via %s%s: %w", dst, w.gw, devSuffix(hs, w.dev), err)
		}
		changed = append(changed, fmt.Sprintf("added %s via %s%s", dst, w.gw, devSuffix(hs, w.dev)))
	}
	return changed, nil
}

func devSuffix(hs *host, idx int) string {
	if idx == 0 {
		return ""
	}
	l, err := hs.h.LinkByIndex(idx)
	if err != nil {
		return ""
	}
	s := " dev " + l.Attrs().Name
	if l.Attrs().Name == VXLANDevice {
		s += " onlink"
	}
	return s
}
