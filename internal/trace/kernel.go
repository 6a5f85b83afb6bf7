package trace

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/minikit/minikit/internal/netns"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Reading a node's kernel state. Everything here is read-only: iptables-save,
// address, route and link dumps, the conntrack table and xt_recent lists.
// netns "" is the machine's own namespace (a VM that is itself the node).

// in runs fn inside the named network namespace (through sandbox, the one
// package that enters namespaces), or right here for the root namespace.
func in(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	return netns.DoPath(netns.NetNSPath(ns), fn)
}

// saveRules is `iptables-save -c` (ip6tables-save for IPv6) of the nat and
// filter tables, read inside the node's namespace (iptables.SaveCounters).
func saveRules(ns string, f family) (string, error) {
	save := iptables.SaveCounters
	if f.v6 {
		save = iptables.SaveCountersIPv6
	}
	var out strings.Builder
	path := ""
	if ns != "" {
		path = netns.NetNSPath(ns)
	}
	for _, table := range []string{"nat", "filter"} {
		b, err := save(path, table)
		if err != nil {
			return "", fmt.Errorf("reading the %s %s table of %s: %w", f, table, nsName(ns), err)
		}
		out.Write(b)
	}
	return out.String(), nil
}

func nsName(ns string) string {
	if ns == "" {
		return "the root namespace"
	}
	return "netns " + ns
}

// addrs lists the namespace's addresses of the family (addrtype LOCAL).
func addrs(ns string, f family) ([]netip.Addr, error) {
	var out []netip.Addr
	err := in(ns, func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		as, err := cni.RetryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, f.netlinkFamily()) })
		if err != nil {
			return err
		}
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", nsName(ns), err)
	}
	return out, nil
}

// hostAddr is the namespace's first global address of the family (a lab
// host's underlay address).
func hostAddr(ns string, f family) (netip.Addr, error) {
	as, err := addrs(ns, f)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range as {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no %s address", nsName(ns), f)
}

// kernelRoute is `ip route get DST` in the namespace, plus, when the route
// leads onto a bridge, the bridge's ports with their aliases.
type kernelRoute struct {
	Dev   string
	Via   netip.Addr
	Src   netip.Addr
	Local bool
	// Bridge ports (when Dev is a bridge): name -> alias.
	Ports map[string]string
	// PortIndex: name -> ifindex, for matching a pod's eth0 peer.
	PortIndex map[string]int
}

func routeGet(ns string, dst netip.Addr) (*kernelRoute, error) {
	r := &kernelRoute{}
	err := in(ns, func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		rs, err := h.RouteGet(net.IP(dst.AsSlice()))
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return errors.New("no route")
		}
		rt := rs[0]
		r.Local = rt.Type == unix.RTN_LOCAL
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok {
			r.Via = gw.Unmap()
		}
		if src, ok := netip.AddrFromSlice(rt.Src); ok {
			r.Src = src.Unmap()
		}
		link, err := h.LinkByIndex(rt.LinkIndex)
		if err != nil {
			return err
		}
		r.Dev = link.Attrs().Name
		if link.Type() == "bridge" {
			links, err := cni.RetryDump(h.LinkList)
			if err != nil {
				return err
			}
			r.Ports, r.PortIndex = map[string]string{}, map[string]int{}
			for _, l := range links {
				if l.Attrs().MasterIndex == link.Attrs().Index {
					r.Ports[l.Attrs().Name] = l.Attrs().Alias
					r.PortIndex[l.Attrs().Name] = l.Attrs().Index
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ip route get %s in %s: %w", dst, nsName(ns), err)
	}
	return r, nil
}

// eth0Peer is the ifindex, in the node's namespace, of the host side of a
// pod's eth0 veth.
func eth0Peer(podNetns string) (int, error) {
	var idx int
	err := in(podNetns, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		idx = l.Attrs().ParentIndex
		return nil
	})
	return idx, err
}

// conntrackFlows lists the namespace's conntrack table of the family.
func conntrackFlows(ns string, f family) ([]*netlink.ConntrackFlow, error) {
	var flows []*netlink.ConntrackFlow
	err := in(ns, func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		flows, err = cni.RetryDump(func() ([]*netlink.ConntrackFlow, error) {
			return h.ConntrackTableList(netlink.ConntrackTable, netlink.InetFamily(f.netlinkFamily()))
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing conntrack entries of %s: %w", nsName(ns), err)
	}
	return flows, nil
}

// recentLists returns the xt_recent lists of the namespace that hold src:
// session affinity's memory, which decides the first packet's endpoint.
func recentLists(ns string, src netip.Addr) ([]string, error) {
	var lists []string
	err := in(ns, func() error {
		// thread-self: /proc/self/net shows the main thread's namespace.
		dir := "/proc/thread-self/net/xt_recent"
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 0 && f[0] == "src="+src.String() {
					lists = append(lists, e.Name())
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading xt_recent lists of %s: %w", nsName(ns), err)
	}
	return lists, nil
}
