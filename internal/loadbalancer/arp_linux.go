package loadbalancer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ARP on an Ethernet interface, from user space, with an AF_PACKET socket:
// the only place in minikit that builds link-layer frames. The kernel never
// owns the addresses announced here (they are on no interface), so it neither
// answers ARP for them nor delivers them locally; the proxier's rules take the
// packets in PREROUTING. When the process dies the socket goes with it, and so
// do the answers: there is nothing to clean up.

const (
	ethHeaderLen = 14
	arpLen       = 28
	frameLen     = ethHeaderLen + arpLen
	arpRequest   = 1
	arpReply     = 2
)

var ethBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetConn is an AF_PACKET socket for ARP on one interface, pollable so
// Close wakes a blocked reader.
type packetConn struct {
	ifindex int
	mac     net.HardwareAddr
	f       *os.File
	rc      syscall.RawConn
}

func openPacketConn(ifname string) (*packetConn, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("opening ARP socket on %s: %w", ifname, err)
	}
	if len(iface.HardwareAddr) != 6 {
		return nil, fmt.Errorf("opening ARP socket on %s: not an Ethernet interface (hardware address %q)", ifname, iface.HardwareAddr)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, fmt.Errorf("opening ARP socket on %s: %w", ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: iface.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding ARP socket to %s: %w", ifname, err)
	}
	f := os.NewFile(uintptr(fd), "arp:"+ifname)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &packetConn{ifindex: iface.Index, mac: iface.HardwareAddr, f: f, rc: rc}, nil
}

// read returns the next ARP frame received (not sent) on the interface.
func (c *packetConn) read(buf []byte) (int, error) {
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return 0, err
		}
		if rerr != nil {
			return 0, rerr
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return n, nil
	}
}

func (c *packetConn) write(frame []byte, dst net.HardwareAddr) error {
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: c.ifindex, Halen: 6}
	copy(to.Addr[:], dst)
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		werr = unix.Sendto(int(fd), frame, 0, to)
		return werr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return werr
}

func (c *packetConn) close() error { return c.f.Close() }

// arpFrame builds an Ethernet frame carrying one ARP packet.
func arpFrame(op uint16, ethDst, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := make([]byte, frameLen)
	copy(b[0:6], ethDst)
	copy(b[6:12], sha)
	binary.BigEndian.PutUint16(b[12:14], unix.ETH_P_ARP)
	a := b[ethHeaderLen:]
	binary.BigEndian.PutUint16(a[0:2], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:4], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], op)
	copy(a[8:14], sha)
	s4, t4 := spa.As4(), tpa.As4()
	copy(a[14:18], s4[:])
	copy(a[18:24], tha)
	copy(a[24:28], t4[:])
	return b
}

// arpPacket is the part of a received ARP packet we use.
type arpPacket struct {
	op       uint16
	sha, tha net.HardwareAddr
	spa, tpa netip.Addr
}

func parseARP(b []byte) (arpPacket, bool) {
	if len(b) < frameLen || binary.BigEndian.Uint16(b[12:14]) != unix.ETH_P_ARP {
		return arpPacket{}, false
	}
	a := b[ethHeaderLen:]
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return arpPacket{}, false
	}
	return arpPacket{
		op:  binary.BigEndian.Uint16(a[6:8]),
		sha: net.HardwareAddr(bytes.Clone(a[8:14])),
		spa: netip.AddrFrom4([4]byte(a[14:18])),
		tha: net.HardwareAddr(bytes.Clone(a[18:24])),
		tpa: netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}

// ARPResponder answers ARP requests for a set of addresses on one interface,
// as MetalLB's layer-2 speaker does, and sends gratuitous ARP for addresses
// it starts answering for, so neighbours update their caches at once on a
// failover instead of after their entries go stale.
type ARPResponder struct {
	ifname string
	conn   *packetConn
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
	c, err := openPacketConn(ifname)
	if err != nil {
		return nil, err
	}
	r := &ARPResponder{ifname: ifname, conn: c, log: log, ips: map[netip.Addr]bool{}, done: make(chan struct{})}
	go r.serve()
	return r, nil
}

// Interface is the name of the interface the responder answers on.
func (r *ARPResponder) Interface() string { return r.ifname }

// HardwareAddr is the MAC address the responder answers with.
func (r *ARPResponder) HardwareAddr() net.HardwareAddr { return r.conn.mac }

func (r *ARPResponder) serve() {
	defer close(r.done)
	buf := make([]byte, 1600)
	for {
		n, err := r.conn.read(buf)
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if !closed {
				r.log.Error("reading ARP", "interface", r.ifname, "err", err)
			}
			return
		}
		p, ok := parseARP(buf[:n])
		if !ok || p.op != arpRequest || p.spa == p.tpa {
			continue // not a question: a gratuitous ARP is another host's announcement
		}
		r.mu.Lock()
		ours := r.ips[p.tpa]
		r.mu.Unlock()
		if !ours {
			continue
		}
		reply := arpFrame(arpReply, p.sha, r.conn.mac, p.tpa, p.sha, p.spa)
		if err := r.conn.write(reply, p.sha); err != nil {
			r.log.Warn("answering ARP", "interface", r.ifname, "ip", p.tpa, "to", p.spa, "err", err)
		} else {
			r.log.Debug("answered ARP", "interface", r.ifname, "ip", p.tpa, "to", p.spa, "mac", p.sha)
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
	for _, op := range []uint16{arpRequest, arpReply} {
		if err := r.conn.write(arpFrame(op, ethBroadcast, r.conn.mac, ip, ethBroadcast, ip), ethBroadcast); err != nil {
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
	err := r.conn.close()
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
	c, err := openPacketConn(ifname)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.write(arpFrame(arpRequest, ethBroadcast, c.mac, src, make(net.HardwareAddr, 6), ip), ethBroadcast); err != nil {
		return nil, fmt.Errorf("probing ARP for %s: %w", ip, err)
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.f.SetReadDeadline(deadline)
	var macs []net.HardwareAddr
	buf := make([]byte, 1600)
	for {
		n, err := c.read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return macs, nil
		}
		if err != nil {
			return macs, err
		}
		p, ok := parseARP(buf[:n])
		if !ok || p.op != arpReply || p.spa != ip || !bytes.Equal(p.tha, c.mac) {
			continue
		}
		if !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return bytes.Equal(m, p.sha) }) {
			macs = append(macs, p.sha)
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
