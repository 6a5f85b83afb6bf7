package proxy

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Flow is the part of a UDP conntrack entry the cleanup looks at.
type Flow struct {
	OrigSrc  netip.AddrPort
	OrigDst  netip.AddrPort // the service frontend the client sent to
	ReplySrc netip.Addr     // the backend that answers (the DNAT target)
}

// Conntrack is the proxy's view of the kernel connection tracking table.
type Conntrack interface {
	// ListUDP lists the IPv4 UDP flows.
	ListUDP() ([]Flow, error)
	// Delete removes the given flows and reports how many it removed.
	Delete(flows []Flow) (int, error)
}

// netlinkConntrack talks to nf_conntrack over netlink, in the calling
// process's network namespace; no conntrack binary is needed.
type netlinkConntrack struct{}

func toAddrPort(ip []byte, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func (netlinkConntrack) ListUDP() ([]Flow, error) {
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("listing conntrack flows: %w", err)
	}
	var out []Flow
	for _, f := range flows {
		if f.Forward.Protocol != unix.IPPROTO_UDP {
			continue
		}
		out = append(out, Flow{
			OrigSrc:  toAddrPort(f.Forward.SrcIP, f.Forward.SrcPort),
			OrigDst:  toAddrPort(f.Forward.DstIP, f.Forward.DstPort),
			ReplySrc: toAddrPort(f.Reverse.SrcIP, 0).Addr(),
		})
	}
	return out, nil
}

// flowSet matches conntrack flows by their original tuple and reply source.
type flowSet map[Flow]bool

func (s flowSet) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	if f.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	return s[Flow{
		OrigSrc:  toAddrPort(f.Forward.SrcIP, f.Forward.SrcPort),
		OrigDst:  toAddrPort(f.Forward.DstIP, f.Forward.DstPort),
		ReplySrc: toAddrPort(f.Reverse.SrcIP, 0).Addr(),
	}]
}

func (netlinkConntrack) Delete(flows []Flow) (int, error) {
	set := flowSet{}
	for _, f := range flows {
		set[f] = true
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, set)
	if err != nil {
		return int(n), fmt.Errorf("deleting conntrack flows: %w", err)
	}
	return int(n), nil
}

// staleUDPFlows is kube-proxy's conntrack reconciler (pkg/proxy/conntrack,
// v1.32+ with the zero-endpoint fix of #139629): a UDP flow is stale when it
// was sent to a service frontend (cluster IP, external IP, LB IP, or a
// NodePort on this node) and its reply does not come from a serving endpoint
// of that service. Services with no endpoints count with an empty set, so
// flows created while a service had no backends (REJECTed, un-NATed) go too.
// Traffic policy and topology are ignored, as in kube-proxy.
func staleUDPFlows(flows []Flow, frontends map[netip.AddrPort]map[netip.Addr]bool, nodePorts map[uint16]map[netip.Addr]bool, nodeIP netip.Addr) []Flow {
	var stale []Flow
	for _, f := range flows {
		if serving, ok := frontends[f.OrigDst]; ok {
			if !serving[f.ReplySrc] {
				stale = append(stale, f)
			}
			continue
		}
		if f.OrigDst.Addr() == nodeIP {
			if serving, ok := nodePorts[f.OrigDst.Port()]; ok && !serving[f.ReplySrc] {
				stale = append(stale, f)
			}
		}
	}
	return stale
}
