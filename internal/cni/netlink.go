package cni

import (
	"errors"
	"net"
	"net/netip"

	"github.com/minikit/minikit/internal/netns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// handleAt opens a rtnetlink handle inside ns. The socket stays bound to ns
// for its whole life, so the handle is used from ordinary goroutines after
// Do returns.
func handleAt(ns vnetns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := netns.Do(ns, func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	return h, err
}

// dumpRetries bounds RetryDump; a dump is interrupted only when the table
// changes under it, so a handful of retries is plenty.
const dumpRetries = 5

// RetryDump repeats a netlink dump that the kernel reports as interrupted
// (NLM_F_DUMP_INTR: the table changed during the dump and the result may be
// inconsistent). It is the only way minikit runs a dump.
func RetryDump[T any](dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpRetries {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

func prefixOf(ipn *net.IPNet) (netip.Prefix, bool) {
	if ipn == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipn.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func ipNetOf(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// familyOf is the netlink family of a's addresses.
func familyOf(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func hasAddr(h *netlink.Handle, link netlink.Link, want netip.Prefix) (bool, error) {
	addrs, err := RetryDump(func() ([]netlink.Addr, error) { return h.AddrList(link, familyOf(want.Addr())) })
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok && p == want {
			return true, nil
		}
	}
	return false, nil
}

// ensureOnlyAddr makes want the only address of its family on link (IPv6
// link-local addresses aside). The link is ours (bridge or pod eth0), so
// any other address is stale state, e.g. from a previous pod CIDR. An IPv6
// address skips duplicate address detection (nodad), as the CNI bridge
// plugin's addresses do not wait for it either: the pod CIDR is ours alone.
func ensureOnlyAddr(h *netlink.Handle, link netlink.Link, want netip.Prefix) error {
	addrs, err := RetryDump(func() ([]netlink.Addr, error) { return h.AddrList(link, familyOf(want.Addr())) })
	if err != nil {
		return err
	}
	have := false
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if ok && p == want {
			have = true
			continue
		}
		if ok && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if err := h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return err
		}
	}
	if have {
		return nil
	}
	addr := &netlink.Addr{IPNet: ipNetOf(want)}
	if want.Addr().Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	return h.AddrReplace(link, addr)
}

func hasDefaultRoute(h *netlink.Handle, link netlink.Link, gw netip.Addr) (bool, error) {
	routes, err := RetryDump(func() ([]netlink.Route, error) { return h.RouteList(link, familyOf(gw)) })
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if g, ok := netip.AddrFromSlice(r.Gw); ok && g.Unmap() == gw {
			return true, nil
		}
	}
	return false, nil
}
