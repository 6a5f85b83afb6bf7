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

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ARP on an Ethernet interface, from user space, with mdlayher/arp on an
// AF_PACKET socket, as MetalLB's layer-2 speaker does. The kernel never owns
// the addresses announced here (they are on no interface), so it neither
// answers ARP for them nor delivers them locally; the proxier's rules take the
// packets in PREROUTING. When the process dies the socket goes with it, and so
// do the answers: there is nothing to clean up.
//
// The socket also sees the frames this host sends on the interface; a BPF
// filter attached before bind drops them in the kernel, so a responder never
// reads its own answers and a probe sees only other hosts' (the AF_PACKET
// library does not report the packet type). arp.New needs an IPv4 address on
// the interface; the responder's interface is the one holding the node's
// InternalIP, and a probe needs one as its source anyway.

// notOutgoing is a classic BPF program accepting every frame but those of
// type PACKET_OUTGOING.
var notOutgoing = func() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic(err)
	}
	return prog
}()

// dialARP opens an ARP client on ifname of the calling thread's network
// namespace.
func dialARP(ifname string) (*arp.Client, *net.Interface, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, nil, fmt.Errorf("opening ARP socket on %s: %w", ifname, err)
	}
	if len(iface.HardwareAddr) != 6 {
		return nil, nil, fmt.Errorf("opening ARP socket on %s: not an Ethernet interface (hardware address %q)", ifname, iface.HardwareAddr)
	}
	p, err := packet.Listen(iface, packet.Raw, unix.ETH_P_ARP, &packet.Config{Filter: notOutgoing})
	if err != nil {
		return nil, nil, fmt.Errorf("opening ARP socket on %s: %w", ifname, err)
	}
	c, err := arp.New(iface, p)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("opening ARP socket on %s: %w", ifname, err)
	}
	return c, iface, nil
}

// readARP returns the next IPv4-over-Ethernet ARP packet received. Frames
// that are not one are skipped; the error is the socket's (closed, deadline).
func readARP(c *arp.Client) (*arp.Packet, error) {
	for {
		p, _, err := c.Read()
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) {
				return nil, err
			}
			continue // a malformed frame
		}
		if p.HardwareType == 1 && p.ProtocolType == uint16(ethernet.EtherTypeIPv4) &&
			p.HardwareAddrLength == 6 && p.IPLength == 4 {
			return p, nil
		}
	}
}

// ARPResponder answers ARP requests for a set of addresses on one interface,
// as MetalLB's layer-2 speaker does, and sends gratuitous ARP for addresses
// it starts answering for, so neighbours update their caches at once on a
// failover instead of after their entries go stale.
type ARPResponder struct {
	ifname string
	client *arp.Client
	mac    net.HardwareAddr
	log    *slog.Logger

	mu     sync.Mutex
	ips    map[netip.Addr]bool
	closed bool

	done chan struct{}
}

// ListenARP starts a responder on the interface ifname of the calling
// thread's network namespace. It answers for no address until Set.
func ListenARP(ifname string, log *slog.Logger) (*ARPResponder, error) {
	if log == nil {
		log = slog.Default()
	}
	c, iface, err := dialARP(ifname)
	if err != nil {
		return nil, err
	}
	r := &ARPResponder{ifname: ifname, client: c, mac: iface.HardwareAddr, log: log, ips: map[netip.Addr]bool{}, done: make(chan struct{})}
	go r.serve()
	return r, nil
}

// Interface is the name of the interface the responder answers on.
func (r *ARPResponder) Interface() string { return r.ifname }

// HardwareAddr is the MAC address the responder answers with.
func (r *ARPResponder) HardwareAddr() net.HardwareAddr { return r.mac }

func (r *ARPResponder) serve() {
	defer close(r.done)
	for {
		p, err := readARP(r.client)
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if !closed {
				r.log.Error("reading ARP", "interface", r.ifname, "err", err)
			}
			return
		}
		if p.Operation != arp.OperationRequest || p.SenderIP == p.TargetIP {
			continue // not a question: a gratuitous ARP is another host's announcement
		}
		r.mu.Lock()
		ours := r.ips[p.TargetIP]
		r.mu.Unlock()
		if !ours {
			continue
		}
		if err := r.client.Reply(p, r.mac, p.TargetIP); err != nil {
			r.log.Warn("answering ARP", "interface", r.ifname, "ip", p.TargetIP, "to", p.SenderIP, "err", err)
		} else {
			r.log.Debug("answered ARP", "interface", r.ifname, "ip", p.TargetIP, "to", p.SenderIP, "mac", p.SenderHardwareAddr)
		}
	}
}

// Set makes the responder answer for exactly ips, and sends gratuitous ARP
// for those it did not answer for before.
func (r *ARPResponder) Set(ips []netip.Addr) error {
	r.mu.Lock()
	var added []netip.Addr
	next := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		next[ip] = true
		if !r.ips[ip] {
			added = append(added, ip)
		}
	}
	r.ips = next
	r.mu.Unlock()
	var errs []error
	for _, ip := range added {
		errs = append(errs, r.Gratuitous(ip))
	}
	return errors.Join(errs...)
}

// Gratuitous broadcasts that ip is at this interface, as an ARP request and
// an ARP reply (MetalLB sends both: hosts differ in which they heed).
func (r *ARPResponder) Gratuitous(ip netip.Addr) error {
	for _, op := range []arp.Operation{arp.OperationRequest, arp.OperationReply} {
		p, err := arp.NewPacket(op, r.mac, ip, ethernet.Broadcast, ip)
		if err == nil {
			err = r.client.WriteTo(p, ethernet.Broadcast)
		}
		if err != nil {
			return fmt.Errorf("sending gratuitous ARP for %s on %s: %w", ip, r.ifname, err)
		}
	}
	return nil
}

// Close stops answering.
func (r *ARPResponder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.client.Close()
	<-r.done
	return err
}

// ProbeARP asks, from interface ifname of the calling thread's network
// namespace, who has ip, and returns the distinct hardware addresses that
// answered within wait: one when exactly one node announces ip. The source
// address of the request is the interface's first IPv4 address. It is what
// `arping -D` shows, for tests and for debugging a lab.
func ProbeARP(ctx context.Context, ifname string, ip netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	var src netip.Addr
	addrs, _ := iface.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if s, ok := netip.AddrFromSlice(n.IP); ok && s.Unmap().Is4() {
				src = s.Unmap()
				break
			}
		}
	}
	if !src.IsValid() {
		return nil, fmt.Errorf("probing ARP for %s: %s has no IPv4 address", ip, ifname)
	}
	c, _, err := dialARP(ifname)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// A probe's target hardware address is unknown: zero, as the kernel's
	// own requests have it (Client.Request would send the broadcast address).
	req, err := arp.NewPacket(arp.OperationRequest, iface.HardwareAddr, src, make(net.HardwareAddr, 6), ip)
	if err == nil {
		err = c.WriteTo(req, ethernet.Broadcast)
	}
	if err != nil {
		return nil, fmt.Errorf("probing ARP for %s: %w", ip, err)
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetReadDeadline(deadline)
	var macs []net.HardwareAddr
	for {
		p, err := readARP(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return macs, nil
		}
		if err != nil {
			return macs, err
		}
		if p.Operation != arp.OperationReply || p.SenderIP != ip || !bytes.Equal(p.TargetHardwareAddr, iface.HardwareAddr) {
			continue
		}
		if !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return bytes.Equal(m, p.SenderHardwareAddr) }) {
			macs = append(macs, slices.Clone(p.SenderHardwareAddr))
		}
	}
}

// InterfaceWith returns the name of the interface that holds ip in the
// calling thread's network namespace: the node's underlay, where its
// InternalIP lives.
func InterfaceWith(ip netip.Addr) (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, iface := range ifaces {
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if s, ok := netip.AddrFromSlice(n.IP); ok && s.Unmap() == ip {
					return iface.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", ip)
}
