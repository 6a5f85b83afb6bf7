package sandbox

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes minikit installs (host-gw routes to other nodes'
// pod CIDRs), so it only ever replaces or deletes its own.
const RouteProtocol netlink.RouteProtocol = 77

// SyncRoutes makes the node namespace's minikit routes exactly want: for each pod
// CIDR, a route via the owning node's address. It returns what it changed.
func (n *Node) SyncRoutes(want map[netip.Prefix]netip.Addr) (changed []string, err error) {
	hs, err := n.openHost()
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	have, err := RetryDump(func() ([]netlink.Route, error) {
		return hs.h.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	seen := map[netip.Prefix]bool{}
	for _, r := range have {
		dst, ok := prefixOf(r.Dst)
		gw, gwOK := netip.AddrFromSlice(r.Gw)
		if ok && gwOK && want[dst] == gw.Unmap() && !seen[dst] {
			seen[dst] = true
			continue
		}
		if err := hs.h.RouteDel(&r); err != nil {
			return changed, fmt.Errorf("deleting route %v: %w", r.Dst, err)
		}
		changed = append(changed, fmt.Sprintf("deleted %v via %v", r.Dst, r.Gw))
	}
	for dst, gw := range want {
		if seen[dst] {
			continue
		}
		r := &netlink.Route{Dst: ipNetOf(dst), Gw: net.IP(gw.AsSlice()), Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
		if err := hs.h.RouteReplace(r); err != nil {
			return changed, fmt.Errorf("adding route %s via %s: %w", dst, gw, err)
		}
		changed = append(changed, fmt.Sprintf("added %s via %s", dst, gw))
	}
	return changed, nil
}
