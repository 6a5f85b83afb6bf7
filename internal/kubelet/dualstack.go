package kubelet

import (
	"net/netip"

	"github.com/minikit/minikit/internal/cni"

	corev1 "k8s.io/api/core/v1"
)

// A dual-stack node has a podCIDR of each family (the primary IPv4 one
// first) and may have an InternalIP of each. A pod's IPv6 address is the
// one its IPv4 address maps to in the secondary range (cni.SecondaryPodIP),
// so the agent keeps one IPAM and derives the rest.

// secondaryPodCIDR is the node's IPv6 pod range when the node's primary
// range is IPv4 and it has a second one, else zero.
func secondaryPodCIDR(n *corev1.Node) netip.Prefix {
	if len(n.Spec.PodCIDRs) < 2 {
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(n.Spec.PodCIDRs[1])
	if err != nil || !p.Addr().Is6() {
		return netip.Prefix{}
	}
	return p.Masked()
}

// podIPs are the addresses of the pod whose primary address is ip, the
// primary first: a hostNetwork pod has the node's, a pod on the pod network
// its IPv4 address and, on a dual-stack node, the IPv6 one it maps to.
func (a *Agent) podIPs(ip string) []string {
	if ip == "" {
		return nil
	}
	if a.cfg.NodeIP.IsValid() && ip == a.cfg.NodeIP.String() {
		return a.hostIPs()
	}
	out := []string{ip}
	if addr, err := netip.ParseAddr(ip); err == nil {
		if v6 := cni.SecondaryPodIP(a.podCIDR, a.secondaryPodCIDR, addr); v6.IsValid() {
			out = append(out, v6.String())
		}
	}
	return out
}

// hostIPs are the node's InternalIPs, the primary first.
func (a *Agent) hostIPs() []string {
	var out []string
	if a.cfg.NodeIP.IsValid() {
		out = append(out, a.cfg.NodeIP.String())
	}
	if a.cfg.SecondaryNodeIP.IsValid() {
		out = append(out, a.cfg.SecondaryNodeIP.String())
	}
	return out
}

// statusPodIPs are the addresses in a pod's status, the primary first.
func statusPodIPs(pod *corev1.Pod) []string {
	var out []string
	for _, ip := range pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && pod.Status.PodIP != "" {
		out = []string{pod.Status.PodIP}
	}
	return out
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// internalIPv6 is the node's IPv6 InternalIP, if it has one.
func internalIPv6(n *corev1.Node) netip.Addr {
	for _, addr := range n.Status.Addresses {
		if a, err := netip.ParseAddr(addr.Address); err == nil && addr.Type == corev1.NodeInternalIP && a.Is6() && !a.Is4In6() {
			return a
		}
	}
	return netip.Addr{}
}
