package loadbalancer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// NDP, IPv6's ARP (RFC 4861), from user space with mdlayher/ndp, as
// MetalLB's layer-2 speaker does. The socket is a raw ICMPv6 socket bound
// to the interface's link-local address, so it sees only that link's
// packets, and answers come from that address. The kernel never owns the
// announced addresses, so:
//
//   - a neighbour solicitation for one is sent to its solicited-node
//     multicast group (ff02::1:ffXX:XXXX), which the kernel delivers only if
//     a socket joined it: the responder joins the group of each address it
//     answers for (two addresses can share one group, hence the counts) and
//     leaves it when it stops;
//   - the kernel ignores such a solicitation itself (it answers only for its
//     own addresses, or proxies with proxy_ndp, which is off), so the
//     responder's answer is the only one;
//   - a neighbour's unicast re-check of a cached entry (NUD probe) is sent
//     to the announced address itself and never reaches the socket; the
//     neighbour then falls back to multicast solicitation, which does.
//
// As with ARP, nothing is configured in the kernel, and a dead process
// takes its answers (and its group memberships) with it.

// ndpHopLimit is the hop limit every NDP message has; one with any other was
// forwarded by a router and must be ignored (RFC 4861 7.1.1).
const ndpHopLimit = 255

// NDPResponder answers neighbour solicitations for a set of IPv6 addresses
// on one interface, and sends unsolicited neighbour advertisements (with the
// override flag) for addresses it starts answering for, so neighbours
// replace a cached entry at once on a failover.
type NDPResponder struct {
	ifname string
	conn   *ndp.Conn
	mac    net.HardwareAddr
	log    *slog.Logger

	mu     sync.Mutex
	ips    map[netip.Addr]bool
	groups map[netip.Addr]int // solicited-node group -> addresses in it
	closed bool

	done chan struct{}
}

// dialNDP opens an NDP socket on ifname of the calling thread's network
// namespace that reads only messages of type only.
func dialNDP(ifname string, only ipv6.ICMPType) (*ndp.Conn, *net.Interface, netip.Addr, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, nil, netip.Addr{}, fmt.Errorf("opening NDP socket on %s: %w", ifname, err)
	}
	if len(iface.HardwareAddr) != 6 {
		return nil, nil, netip.Addr{}, fmt.Errorf("opening NDP socket on %s: not an Ethernet interface (hardware address %q)", ifname, iface.HardwareAddr)
	}
	// Binding fails while the link-local address is tentative (duplicate
	// address detection, a second or so after the link comes up): the
	// callers retry.
	c, src, err := ndp.Listen(iface, ndp.LinkLocal)
	if err != nil {
		return nil, nil, netip.Addr{}, fmt.Errorf("opening NDP socket on %s: %w", ifname, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(only)
	if err := errors.Join(c.SetICMPFilter(&f), c.SetControlMessage(ipv6.FlagHopLimit, true)); err != nil {
		c.Close()
		return nil, nil, netip.Addr{}, fmt.Errorf("opening NDP socket on %s: %w", ifname, err)
	}
	return c, iface, src, nil
}

// readNDP returns the next message received with the hop limit NDP requires,
// and its source. The error is the socket's (closed, deadline).
func readNDP(c *ndp.Conn) (ndp.Message, netip.Addr, error) {
	for {
		m, cm, src, err := c.ReadFrom()
		if err != nil {
			return nil, netip.Addr{}, err
		}
		if cm == nil || cm.HopLimit != ndpHopLimit {
			continue
		}
		return m, src, nil
	}
}

// ListenNDP starts a responder on the interface ifname of the calling
// thread's network namespace. It answers for no address until Set.
func ListenNDP(ifname string, log *slog.Logger) (*NDPResponder, error) {
	if log == nil {
		log = slog.Default()
	}
	c, iface, _, err := dialNDP(ifname, ipv6.ICMPTypeNeighborSolicitation)
	if err != nil {
		return nil, err
	}
	r := &NDPResponder{ifname: ifname, conn: c, mac: iface.HardwareAddr, log: log,
		ips: map[netip.Addr]bool{}, groups: map[netip.Addr]int{}, done: make(chan struct{})}
	go r.serve()
	return r, nil
}

// Interface is the name of the interface the responder answers on.
func (r *NDPResponder) Interface() string { return r.ifname }

// HardwareAddr is the MAC address the responder answers with.
func (r *NDPResponder) HardwareAddr() net.HardwareAddr { return r.mac }

func (r *NDPResponder) serve() {
	defer close(r.done)
	for {
		m, src, err := readNDP(r.conn)
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if !closed {
				r.log.Error("reading NDP", "interface", r.ifname, "err", err)
			}
			return
		}
		ns, ok := m.(*ndp.NeighborSolicitation)
		if !ok {
			continue
		}
		target := ns.TargetAddress.WithZone("")
		r.mu.Lock()
		ours := r.ips[target]
		r.mu.Unlock()
		if !ours {
			continue
		}
		// A solicitation from the unspecified address is another host's
		// duplicate address detection: the answer goes to all nodes, not
		// solicited (RFC 4861 7.2.4), and tells it the address is taken.
		dst, solicited := src, true
		if src.WithZone("").IsUnspecified() {
			dst, solicited = netip.IPv6LinkLocalAllNodes(), false
		}
		if err := r.advertise(dst, target, solicited); err != nil {
			r.log.Warn("answering NDP", "interface", r.ifname, "ip", target, "to", src, "err", err)
		} else {
			r.log.Debug("answered NDP", "interface", r.ifname, "ip", target, "to", src)
		}
	}
}

// advertise sends a neighbour advertisement that target is at this
// interface's MAC. The override flag is always set: this node is the
// address's one owner, not a proxy, so a neighbour's entry must follow it
// (RFC 4861 7.2.4), most of all after a failover.
func (r *NDPResponder) advertise(dst, target netip.Addr, solicited bool) error {
	na := &ndp.NeighborAdvertisement{Solicited: solicited, Override: true, TargetAddress: target,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: r.mac}}}
	return r.conn.WriteTo(na, nil, dst)
}

// Set makes the responder answer for exactly ips (IPv6 addresses; others
// are ignored), joining and leaving their solicited-node groups, and sends
// an unsolicited advertisement for each it did not answer for before.
func (r *NDPResponder) Set(ips []netip.Addr) error {
	r.mu.Lock()
	var added []netip.Addr
	var errs []error
	next := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		if !ip.Is6() || ip.Is4In6() || next[ip] {
			continue
		}
		next[ip] = true
		if r.ips[ip] {
			continue
		}
		if err := r.join(ip); err != nil {
			errs = append(errs, err)
			delete(next, ip)
			continue
		}
		added = append(added, ip)
	}
	for ip := range r.ips {
		if !next[ip] {
			errs = append(errs, r.leave(ip))
		}
	}
	r.ips = next
	r.mu.Unlock()
	for _, ip := range added {
		errs = append(errs, r.Unsolicited(ip))
	}
	return errors.Join(errs...)
}

// join joins ip's solicited-node group unless another address already did.
// The caller holds r.mu.
func (r *NDPResponder) join(ip netip.Addr) error {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return err
	}
	if r.groups[g] == 0 {
		if err := r.conn.JoinGroup(g); err != nil {
			return fmt.Errorf("joining %s, the solicited-node group of %s, on %s: %w", g, ip, r.ifname, err)
		}
	}
	r.groups[g]++
	return nil
}

// leave leaves ip's solicited-node group once no address needs it. The
// caller holds r.mu.
func (r *NDPResponder) leave(ip netip.Addr) error {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return err
	}
	if r.groups[g]--; r.groups[g] > 0 {
		return nil
	}
	delete(r.groups, g)
	if err := r.conn.LeaveGroup(g); err != nil {
		return fmt.Errorf("leaving %s, the solicited-node group of %s, on %s: %w", g, ip, r.ifname, err)
	}
	return nil
}

// Unsolicited tells all nodes on the link that ip is at this interface: an
// unsolicited neighbour advertisement with the override flag, IPv6's
// gratuitous ARP (RFC 4861 7.2.6).
func (r *NDPResponder) Unsolicited(ip netip.Addr) error {
	if err := r.advertise(netip.IPv6LinkLocalAllNodes(), ip, false); err != nil {
		return fmt.Errorf("sending unsolicited neighbour advertisement for %s on %s: %w", ip, r.ifname, err)
	}
	return nil
}

// Close stops answering.
func (r *NDPResponder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.conn.Close()
	<-r.done
	return err
}

// ProbeNDP asks, from interface ifname of the calling thread's network
// namespace, who has the IPv6 address ip (a neighbour solicitation to its
// solicited-node group, from the interface's link-local address), and returns
// the distinct hardware addresses advertised for it within wait: one when
// exactly one node announces ip. It is what `ndisc6` shows, for tests and for
// debugging a lab.
func ProbeNDP(ctx context.Context, ifname string, ip netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	c, iface, _, err := dialNDP(ifname, ipv6.ICMPTypeNeighborAdvertisement)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, fmt.Errorf("probing NDP for %s: %w", ip, err)
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: iface.HardwareAddr}}}
	if err := c.WriteTo(ns, nil, g); err != nil {
		return nil, fmt.Errorf("probing NDP for %s: %w", ip, err)
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetReadDeadline(deadline)
	var macs []net.HardwareAddr
	for {
		m, _, err := readNDP(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return macs, nil
		}
		if err != nil {
			return macs, err
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress.WithZone("") != ip || !na.Solicited {
			continue
		}
		for _, o := range na.Options {
			lla, ok := o.(*ndp.LinkLayerAddress)
			if !ok || lla.Direction != ndp.Target {
				continue
			}
			if !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return bytes.Equal(m, lla.Addr) }) {
				macs = append(macs, slices.Clone(lla.Addr))
			}
		}
	}
}
