package images

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// boom-server is registry.k8s.io/e2e-test-images/regression-issue-74839, the
// Conntrack spec's "invalid conntrack state" probe (kubernetes#74839): it
// accepts TCP connections on port 9000 and, watching its pod IPs with a raw
// socket (NET_RAW), answers each completed handshake with one data segment
// whose sequence number is far out of the window. Conntrack on the client's
// node marks that segment INVALID; unless the proxy drops it (iptables mode's
// KUBE-FORWARD rule) or conntrack is liberal, it reaches the client without
// the reverse NAT, from the pod IP rather than the service IP, and the client
// answers with a RST, which the raw socket sees and logs as "ERROR: RST
// received" — the spec's verdict.

const boomPort = 9000

// TCP flags, as in the image's tcp.go.
const (
	tcpFIN uint16 = 1 << iota
	tcpSYN
	tcpRST
	tcpPSH
	tcpACK
)

// tcpHeader is the fixed 20-byte TCP header.
type tcpHeader struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint16 // data offset (4 bits), reserved, flags
	Window           uint16
	Checksum         uint16
	Urgent           uint16
}

// decodeTCP parses a segment's header and returns its payload.
func decodeTCP(b []byte) (tcpHeader, []byte, error) {
	if len(b) < 20 {
		return tcpHeader{}, nil, fmt.Errorf("tcp segment of %d bytes is shorter than a header", len(b))
	}
	h := tcpHeader{
		SrcPort: binary.BigEndian.Uint16(b), DstPort: binary.BigEndian.Uint16(b[2:]),
		Seq: binary.BigEndian.Uint32(b[4:]), Ack: binary.BigEndian.Uint32(b[8:]),
		Flags: binary.BigEndian.Uint16(b[12:]), Window: binary.BigEndian.Uint16(b[14:]),
		Checksum: binary.BigEndian.Uint16(b[16:]), Urgent: binary.BigEndian.Uint16(b[18:]),
	}
	off := int(h.Flags>>12) * 4
	if off < 20 || off > len(b) {
		return tcpHeader{}, nil, fmt.Errorf("tcp data offset %d out of range", off)
	}
	return h, b[off:], nil
}

// encodeTCP writes a 20-byte header and data with the checksum over the
// IPv4 or IPv6 pseudo-header of src and dst.
func encodeTCP(h tcpHeader, src, dst netip.Addr, data []byte) []byte {
	b := make([]byte, 20, 20+len(data))
	binary.BigEndian.PutUint16(b, h.SrcPort)
	binary.BigEndian.PutUint16(b[2:], h.DstPort)
	binary.BigEndian.PutUint32(b[4:], h.Seq)
	binary.BigEndian.PutUint32(b[8:], h.Ack)
	binary.BigEndian.PutUint16(b[12:], h.Flags)
	binary.BigEndian.PutUint16(b[14:], h.Window)
	binary.BigEndian.PutUint16(b[18:], h.Urgent)
	b = append(b, data...)
	binary.BigEndian.PutUint16(b[16:], tcpChecksum(src, dst, b))
	return b
}

// tcpChecksum is the Internet checksum of the pseudo-header and segment
// (RFC 793, RFC 8200 §8.1).
func tcpChecksum(src, dst netip.Addr, segment []byte) uint16 {
	var pseudo []byte
	pseudo = append(pseudo, src.AsSlice()...)
	pseudo = append(pseudo, dst.AsSlice()...)
	if src.Is4() {
		pseudo = append(pseudo, 0, 6, byte(len(segment)>>8), byte(len(segment)))
	} else {
		pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(segment)))
		pseudo = append(pseudo, 0, 0, 0, 6)
	}
	var sum uint32
	for _, part := range [][]byte{pseudo, segment} {
		for i := 0; i+1 < len(part); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(part[i:]))
		}
		if len(part)%2 == 1 {
			// Only the segment can be odd, and it comes last.
			sum += uint32(part[len(part)-1]) << 8
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func flagString(f uint16) string {
	var out []string
	for _, x := range []struct {
		bit  uint16
		name string
	}{{tcpFIN, "FIN"}, {tcpSYN, "SYN"}, {tcpRST, "RST"}, {tcpPSH, "PSH"}, {tcpACK, "ACK"}} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return strings.Join(out, " ")
}

// runBoomServer is the image's main: one raw-socket probe per pod IP, and
// the listener on 0.0.0.0:9000 that holds each connection for 10 s.
func runBoomServer(ctx context.Context, c *container, _ []string) error {
	var ips []netip.Addr
	list := c.env["POD_IPS"]
	if list == "" {
		list = c.env["POD_IP"]
	}
	for _, s := range strings.Split(list, ",") {
		if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return c.panic("No valid IP found")
	}
	logger := c.logger()
	for _, ip := range ips {
		logger.Printf("external ip: %v", ip)
		network := "ip4:tcp"
		if ip.Is6() {
			network = "ip6:tcp"
		}
		conn, err := net.ListenIP(network, &net.IPAddr{IP: ip.AsSlice()})
		if err != nil {
			return c.panic(err.Error())
		}
		c.track(conn)
		go boomProbe(c, conn, ip)
	}
	logger.Printf("listen on %v:%d", "0.0.0.0", boomPort)
	ln, err := c.listenTCP(c.listenHost, boomPort)
	if err != nil {
		return c.panic(err.Error())
	}
	return c.serve(ctx, newTCPServer(ln, func(conn net.Conn) {
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}))
}

// boomProbe watches the TCP segments to ip:9000: it remembers each SYN's
// sequence number, answers the handshake's final ACK with the out-of-window
// segment, and logs any RST.
func boomProbe(c *container, conn *net.IPConn, ip netip.Addr) {
	logger := c.logger()
	logger.Printf("probing %v", ip)
	pending := map[string]uint32{}
	buf := make([]byte, 4096)
	for {
		n, from, err := conn.ReadFromIP(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			logger.Printf("conn.ReadFrom() error: %v", err)
			continue
		}
		h, data, err := decodeTCP(buf[:n])
		if err != nil {
			logger.Printf("tcp packet parse error: %v", err)
			continue
		}
		if h.DstPort != boomPort {
			continue
		}
		logger.Printf("tcp packet: %+v, flag: %v, data: %v, addr: %v", h, flagString(h.Flags), data, from)
		key := fmt.Sprintf("%s:%d-%s:%d", from, h.SrcPort, ip, h.DstPort)
		if h.Flags&tcpSYN != 0 {
			pending[key] = h.Seq + 1
			continue
		}
		if h.Flags&tcpRST != 0 {
			logger.Println("ERROR: RST received")
		}
		if h.Flags&tcpACK == 0 {
			continue
		}
		seq, ok := pending[key]
		if !ok {
			continue
		}
		logger.Println("connection established")
		delete(pending, key)
		remote, _ := netip.AddrFromSlice(from.IP)
		bad := tcpHeader{
			SrcPort: h.DstPort, DstPort: h.SrcPort,
			Ack:    seq,
			Seq:    h.Ack - 100000, // out of the window
			Flags:  5<<12 | tcpPSH | tcpACK,
			Window: h.Window,
		}
		if _, err := conn.WriteToIP(encodeTCP(bad, ip, remote.Unmap(), []byte("boom!!!")), from); err != nil {
			logger.Printf("conn.WriteTo() error: %v", err)
		} else {
			logger.Println("boom packet injected")
		}
	}
}
