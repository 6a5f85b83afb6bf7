package trace

import (
	"net/netip"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// A trace follows one address family, the destination's: in a dual-stack
// cluster an IPv6 packet meets only the IPv6 proxier's rules (ip6tables, or
// nftables' table ip6 kube-proxy), the node's IPv6 addresses and routes and
// the IPv6 conntrack table, and FROM sends from its address of that family.

// family is the address family a trace follows.
type family struct{ v6 bool }

var (
	ipv4 = family{}
	ipv6 = family{v6: true}
)

// familyOf is a's family (an IPv4-mapped IPv6 address is IPv4).
func familyOf(a netip.Addr) family { return family{v6: a.Is6() && !a.Is4In6()} }

// String is the family as Result.Family and --ip-family say it.
func (f family) String() string {
	if f.v6 {
		return "IPv6"
	}
	return "IPv4"
}

// nft is the nftables family of the proxy's table: ip or ip6.
func (f family) nft() string {
	if f.v6 {
		return "ip6"
	}
	return "ip"
}

// netlinkFamily is the family for netlink address and conntrack dumps.
func (f family) netlinkFamily() int {
	if f.v6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// net is Go's network suffix: "tcp"+f.net() dials only this family.
func (f family) net() string {
	if f.v6 {
		return "6"
	}
	return "4"
}

// has says a belongs to the family.
func (f family) has(a netip.Addr) bool { return a.IsValid() && familyOf(a) == f }

// first is the first of addrs in the family (a pod's podIPs, a Service's
// clusterIPs), or the zero Addr.
func (f family) first(addrs ...string) netip.Addr {
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil && f.has(a) {
			return a
		}
	}
	return netip.Addr{}
}

// podIPs are a pod's addresses, primary first (status.podIPs, else podIP).
func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		out = append(out, p.Status.PodIP)
	}
	return out
}

// clusterIPs are a Service's cluster IPs, primary first.
func clusterIPs(s *corev1.Service) []string {
	if len(s.Spec.ClusterIPs) > 0 {
		return s.Spec.ClusterIPs
	}
	if s.Spec.ClusterIP != "" {
		return []string{s.Spec.ClusterIP}
	}
	return nil
}

// internalIPs are a node's InternalIP addresses, in the order it reports them.
func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

// parseFamily reads Config.Family: "" (the destination's or the primary
// family), ipv4 or ipv6.
func parseFamily(s string) (f family, set bool, ok bool) {
	switch s {
	case "":
		return ipv4, false, true
	case "ipv4", "IPv4":
		return ipv4, true, true
	case "ipv6", "IPv6":
		return ipv6, true, true
	}
	return ipv4, false, false
}
