package kubeproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Flow is the part of a UDP conntrack entry the cleanup looks at.
type Flow struct {
	OrigSrc  netip.AddrPort
	OrigDst  netip.AddrPort // the service frontend the client sent to
	ReplySrc netip.AddrPort // the backend that answers (the DNAT target)
}

// Conntrack is the proxy's view of the kernel connection tracking table.
type Conntrack interface {
	// ListUDP lists the UDP flows of the proxier's IP family.
	ListUDP() ([]Flow, error)
	// Delete removes the given flows and reports how many it removed.
	Delete(flows []Flow) (int, error)
}

// netlinkConntrack talks to nf_conntrack over netlink, in the calling
// process's network namespace; no conntrack binary is needed. Conntrack
// dumps and deletes per address family: the IPv6 proxier's sees only IPv6
// flows.
type netlinkConntrack struct{ ipv6 bool }

func (c netlinkConntrack) family() netlink.InetFamily {
	if c.ipv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func toAddrPort(ip []byte, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func (c netlinkConntrack) ListUDP() ([]Flow, error) {
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, c.family())
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
			ReplySrc: toAddrPort(f.Reverse.SrcIP, f.Reverse.SrcPort),
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
		ReplySrc: toAddrPort(f.Reverse.SrcIP, f.Reverse.SrcPort),
	}]
}

func (c netlinkConntrack) Delete(flows []Flow) (int, error) {
	set := flowSet{}
	for _, f := range flows {
		set[f] = true
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, c.family(), set)
	if err != nil {
		return int(n), fmt.Errorf("deleting conntrack flows: %w", err)
	}
	return int(n), nil
}

// staleUDPFlows is kube-proxy's conntrack reconciler (pkg/proxy/conntrack,
// v1.32+ with the zero-endpoint fix of #139629): a UDP flow is stale when it
// was sent to a service frontend (cluster IP, external IP, LB IP, or a
// NodePort on this node) and its reply does not come from a serving endpoint
// (address and port: a changed targetPort leaves the IP serving)
// of that service. Services with no endpoints count with an empty set, so
// flows created while a service had no backends (REJECTed, un-NATed) go too.
// Traffic policy and topology are ignored, as in kube-proxy.
func staleUDPFlows(flows []Flow, frontends map[netip.AddrPort]map[netip.AddrPort]bool, nodePorts map[uint16]map[netip.AddrPort]bool, nodeIP netip.Addr) []Flow {
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

// udpFrontends remembers, per service, the UDP frontends (cluster, external and
// load-balancer IP with port) and node ports the last conntrack cleanup saw,
// so the next one also purges the flows of ports deleted since. Both proxy
// modes keep one.
type udpFrontends struct {
	frontends map[types.NamespacedName][]netip.AddrPort
	nodePorts map[types.NamespacedName][]uint16
}

func newUDPFrontends() udpFrontends {
	return udpFrontends{frontends: map[types.NamespacedName][]netip.AddrPort{}, nodePorts: map[types.NamespacedName][]uint16{}}
}

// had reports whether a service had UDP frontends or node ports at the last
// cleanup (a change to it may leave stale flows).
func (u *udpFrontends) had(key types.NamespacedName) bool {
	return len(u.frontends[key]) > 0 || len(u.nodePorts[key]) > 0
}

// renderedPort is one rendered service port and the endpoints ("ip:port")
// it serves.
type renderedPort struct {
	sp      *servicePort
	serving []string
}

// cleanup deletes the UDP flows no rule leads to any more after a sync
// (staleUDPFlows decides which) and remembers ports for the next one. It
// returns how many flows it deleted.
func (u *udpFrontends) cleanup(ct Conntrack, log *slog.Logger, ports map[types.NamespacedName][]renderedPort, nodeIP netip.Addr) int {
	frontends := map[netip.AddrPort]map[netip.AddrPort]bool{}
	nodePorts := map[uint16]map[netip.AddrPort]bool{}
	newFrontends := map[types.NamespacedName][]netip.AddrPort{}
	newNodePorts := map[types.NamespacedName][]uint16{}
	for key, rs := range ports {
		for _, r := range rs {
			sp := r.sp
			if sp.protocol != "udp" {
				continue
			}
			serving := map[netip.AddrPort]bool{}
			for _, addr := range r.serving {
				if a, err := netip.ParseAddrPort(addr); err == nil {
					serving[a] = true
				}
			}
			port := uint16(sp.port)
			for _, ip := range append(append([]netip.Addr{sp.clusterIP}, sp.externalIPs...), sp.lbIPs...) {
				ap := netip.AddrPortFrom(ip, port)
				frontends[ap] = serving
				newFrontends[key] = append(newFrontends[key], ap)
			}
			if sp.nodePort != 0 {
				nodePorts[uint16(sp.nodePort)] = serving
				newNodePorts[key] = append(newNodePorts[key], uint16(sp.nodePort))
			}
		}
	}
	// Frontends of UDP services deleted since: no endpoint serves them now.
	for key, aps := range u.frontends {
		for _, ap := range aps {
			if _, ok := frontends[ap]; !ok && newFrontends[key] == nil {
				frontends[ap] = map[netip.AddrPort]bool{}
			}
		}
	}
	for key, nps := range u.nodePorts {
		for _, np := range nps {
			if _, ok := nodePorts[np]; !ok && newNodePorts[key] == nil {
				nodePorts[np] = map[netip.AddrPort]bool{}
			}
		}
	}
	u.frontends, u.nodePorts = newFrontends, newNodePorts
	flows, err := ct.ListUDP()
	if err != nil {
		log.Error("listing conntrack flows", "err", err)
		return 0
	}
	stale := staleUDPFlows(flows, frontends, nodePorts, nodeIP)
	if len(stale) == 0 {
		return 0
	}
	n, err := ct.Delete(stale)
	if err != nil {
		log.Error("deleting stale UDP conntrack flows", "err", err)
	}
	log.Info("deleted stale UDP conntrack flows", "flows", n)
	return n
}

// renderedState is what the health-check servers and the UDP conntrack
// cleanup read of a rendered service port, in either mode.
type renderedState interface {
	port() renderedPort
	local() int // endpoints on this node
}

func (r *serviceRules) port() renderedPort    { return renderedPort{r.sp, r.serving} }
func (r *serviceRules) local() int            { return r.localEndpoints }
func (r *nftServiceRules) port() renderedPort { return renderedPort{r.sp, r.serving} }
func (r *nftServiceRules) local() int         { return r.localEndpoints }

// syncHealth gives every service with a healthCheckNodePort its health-check
// server, answering with the count of its local endpoints.
func syncHealth[R renderedState](h *healthServers, checked map[types.NamespacedName]bool, rendered map[types.NamespacedName][]R) {
	want := map[types.NamespacedName]int{}
	counts := map[types.NamespacedName]int{}
	for key := range checked {
		for _, r := range rendered[key] {
			if p := r.port(); p.sp.hcNodePort != 0 {
				want[key] = p.sp.hcNodePort
			}
			counts[key] += r.local()
		}
	}
	h.sync(want, counts)
}

// renderedPorts are the ports of every rendered service, for the UDP
// conntrack cleanup.
func renderedPorts[R renderedState](rendered map[types.NamespacedName][]R) map[types.NamespacedName][]renderedPort {
	ports := make(map[types.NamespacedName][]renderedPort, len(rendered))
	for key, rs := range rendered {
		for _, r := range rs {
			ports[key] = append(ports[key], r.port())
		}
	}
	return ports
}

// ConntrackSysctls are the conntrack settings kube-proxy makes at start
// (pkg/proxy/conntrack.SetSysctls with its configuration's defaults), as
// /proc/sys paths and values: established TCP flows live a day and a
// half-closed one (CLOSE_WAIT) an hour rather than the kernel's 60 s, so a
// NATed connection whose server closed first keeps its translation while
// the client still sends. nf_conntrack_max and the hash size are global and
// read-only outside the initial namespace; kube-proxy raises them only when
// they are too small, and a lab's nodes share the machine's.
var ConntrackSysctls = []struct{ Name, Value string }{
	{"net/netfilter/nf_conntrack_tcp_timeout_established", "86400"},
	{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", "3600"},
}

// SetConntrackSysctls writes ConntrackSysctls with set (the node agent's
// recorded sysctl writer, in the node's namespace), and with beLiberal
// kube-proxy's --conntrack-tcp-be-liberal: nf_conntrack_tcp_be_liberal=1,
// so that conntrack does not mark out-of-window TCP packets INVALID (which
// would then bypass the reverse NAT and draw a RST from the client,
// kubernetes#74839). The nftables mode has no INVALID drop rule and relies
// on it, as upstream's nftables jobs configure it (test-infra#31591); the
// iptables mode drops INVALID packets in KUBE-FORWARD instead.
func SetConntrackSysctls(set func(name, value string) error, beLiberal bool) error {
	all := ConntrackSysctls
	if beLiberal {
		all = append(all[:len(all):len(all)], struct{ Name, Value string }{"net/netfilter/nf_conntrack_tcp_be_liberal", "1"})
	}
	var errs []error
	for _, s := range all {
		if err := set(s.Name, s.Value); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
