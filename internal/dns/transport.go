package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// This file is the server's transport: the sockets, the UDP fast path of
// memoised replies, TCP framing (miekg/dns's server), message-level checks,
// truncation to the client's buffer and forwarding upstream. What a question
// is answered with is decided in answer.go (answerer.respond), once per
// query, from the current snapshot.

// maxSlowRequests is how many UDP requests may be in the slow path at once,
// as kubeadm's "forward . /etc/resolv.conf { max_concurrent 1000 }".
const maxSlowRequests = 1000

// transport says how a reply travels: UDP replies are truncated to the
// client's buffer size.
type transport byte

const (
	overUDP transport = iota
	overTCP
)

// reply computes the reply to req: the checks of the message (opcode, one
// question, EDNS version, class, name syntax), then the answering rules for
// the question, then forwarding or truncation. memoisable says whether the
// reply depends only on the snapshot (not on upstream data or the client).
// A nil reply means none is sent (req was a response).
func (s *Server) reply(ctx context.Context, st *state, req *dns.Msg, tr transport, client netip.Addr) (m *dns.Msg, memoisable bool) {
	m = new(dns.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	if req.Response {
		return nil, false
	}
	if req.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeNotImplemented
		return m, true
	}
	m.RecursionDesired = req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m, true
	}
	m.Question = []dns.Question{req.Question[0]}
	opt := req.IsEdns0()
	if opt != nil && opt.Version() != 0 {
		m.Rcode = dns.RcodeBadVers
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
		m.IsEdns0().SetExtendedRcode(dns.RcodeBadVers)
		return m, true
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return m, true
	}
	if _, ok := dns.IsDomainName(q.Name); !ok || !dns.IsFqdn(q.Name) {
		m.Rcode = dns.RcodeFormatError
		return m, true
	}
	var after func(*dns.Msg)
	if s.cfg.Before != nil {
		var r *dns.Msg
		if r, after = s.cfg.Before(ctx, req, client); r != nil {
			r.Id = req.Id
			truncate(r, req, tr)
			return r, false
		}
		q = req.Question[0]
		if after != nil {
			defer func() {
				if m != nil {
					after(m)
				}
			}()
		}
	}
	o := s.ans.respond(ctx, st.snap, q, client)
	if o.forward {
		return s.forward(ctx, req, tr), false
	}
	m.Authoritative = o.authoritative
	m.Rcode = o.rcode
	m.Truncated = o.truncated
	m.Answer, m.Ns, m.Extra = o.answer, o.ns, o.extra
	if opt != nil {
		m.SetEdns0(opt.UDPSize(), opt.Do())
	}
	truncate(m, req, tr)
	return m, o.memoisable
}

// truncate fits m into the client's buffer: 512 bytes or the EDNS0 size over
// UDP (TC set when records were dropped), 64 KiB over TCP.
func truncate(m, req *dns.Msg, tr transport) {
	size := dns.MaxMsgSize
	if tr == overUDP {
		size = dns.MinMsgSize
		if o := req.IsEdns0(); o != nil && int(o.UDPSize()) > size {
			size = int(o.UDPSize())
		}
	}
	m.Truncate(size)
	m.Compress = true
}

// forward sends a request for a name outside the zones upstream; failures
// become SERVFAIL (the one place upstream errors turn into a response).
func (s *Server) forward(ctx context.Context, req *dns.Msg, tr transport) *dns.Msg {
	resp, err := s.fwd.exchange(ctx, req)
	if err != nil {
		s.log.Debug("forwarding", "name", req.Question[0].Name, "type", dns.TypeToString[req.Question[0].Qtype], "err", err)
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		m.RecursionAvailable = true
		if o := req.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), o.Do())
		}
		return m
	}
	resp.Id = req.Id
	resp.Question = []dns.Question{req.Question[0]}
	for _, sec := range [][]dns.RR{resp.Answer, resp.Ns} {
		for _, rr := range sec {
			if h := rr.Header(); strings.EqualFold(h.Name, req.Question[0].Name) {
				h.Name = req.Question[0].Name
			}
		}
	}
	// The upstream's OPT was for us; the client gets its own.
	extra := resp.Extra[:0]
	for _, rr := range resp.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	resp.Extra = extra
	if o := req.IsEdns0(); o != nil {
		resp.SetEdns0(o.UDPSize(), o.Do())
	}
	truncate(resp, req, tr)
	return resp
}

// Listeners are the sockets a server answers on: one UDP socket per CPU
// (SO_REUSEPORT spreads clients over them) and one TCP listener, all on the
// same address and port.
type Listeners struct {
	UDP  []*net.UDPConn
	TCP  net.Listener
	Addr netip.AddrPort
}

// Listen opens Listeners on addr (port 0 picks one free for both UDP and
// TCP). It sets IP_FREEBIND, so a node can bind its cni0 address before the
// bridge has it.
func Listen(addr netip.AddrPort) (*Listeners, error) {
	if addr.Port() != 0 {
		return listen(addr)
	}
	// The port the kernel gives the first UDP socket may be taken for TCP.
	var err error
	for range 20 {
		var l *Listeners
		if l, err = listen(addr); err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, err
}

func listen(addr netip.AddrPort) (*Listeners, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			if serr == nil {
				if addr.Addr().Is4() {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	l := &Listeners{}
	n := runtime.GOMAXPROCS(0)
	for i := 0; i < n; i++ {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("dns: listening on udp %s: %w", addr, err)
		}
		l.UDP = append(l.UDP, pc.(*net.UDPConn))
		if addr.Port() == 0 {
			addr = netip.AddrPortFrom(addr.Addr(), uint16(pc.LocalAddr().(*net.UDPAddr).Port))
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", addr.String())
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("dns: listening on tcp %s: %w", addr, err)
	}
	l.TCP, l.Addr = ln, addr
	return l, nil
}

// Close closes every socket.
func (l *Listeners) Close() {
	for _, c := range l.UDP {
		c.Close()
	}
	if l.TCP != nil {
		l.TCP.Close()
	}
}

// Serve answers on l until ctx ends, then closes l.
func (s *Server) Serve(ctx context.Context, l *Listeners) error {
	var wg sync.WaitGroup
	for _, c := range l.UDP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveUDP(ctx, c)
		}()
	}
	tcp := &dns.Server{Listener: l.TCP, Net: "tcp", ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			st := s.cur.Load()
			var client netip.Addr
			if a, ok := w.RemoteAddr().(*net.TCPAddr); ok {
				client, _ = netip.AddrFromSlice(a.IP)
			}
			m, _ := s.reply(ctx, st, r, overTCP, client.Unmap())
			if m != nil {
				w.WriteMsg(m)
			}
		})}
	errc := make(chan error, 1)
	go func() { errc <- tcp.ActivateAndServe() }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	tcp.Shutdown()
	l.Close()
	wg.Wait()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("dns: serving tcp: %w", err)
	}
	return nil
}

// udpScratch is one UDP reader's reusable buffers.
type udpScratch struct {
	key []byte
	out []byte
}

func (s *Server) serveUDP(ctx context.Context, c *net.UDPConn) {
	buf := make([]byte, 65536)
	sc := &udpScratch{key: make([]byte, 0, 512), out: make([]byte, 0, 4096)}
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		out, slow := s.handleUDP(ctx, buf[:n], sc, from.Addr().Unmap())
		if out != nil {
			c.WriteToUDPAddrPort(out, from)
		}
		if slow != nil {
			select {
			case s.slow <- struct{}{}:
				go func() {
					defer func() { <-s.slow }()
					if b := slow(); b != nil {
						c.WriteToUDPAddrPort(b, from)
					}
				}()
			default:
				// Overloaded: drop, the client retries (CoreDNS's forward
				// max_concurrent answers REFUSED; silence costs less).
			}
		}
	}
}

// handleUDP answers one datagram. A memoised reply is returned at once (the
// fast path: no unpacking, no allocation); otherwise slow computes the reply,
// and the caller runs it in its own goroutine since it may wait for an upstream.
func (s *Server) handleUDP(ctx context.Context, pkt []byte, sc *udpScratch, client netip.Addr) (out []byte, slow func() []byte) {
	st := s.cur.Load()
	key, ok := memoKey(sc.key[:0], pkt, overUDP)
	sc.key = key[:0]
	if ok && !s.cfg.NoMemo {
		if b := st.memo.get(key); b != nil {
			out = append(sc.out[:0], b...)
			out[0], out[1] = pkt[0], pkt[1]
			sc.out = out
			return out, nil
		}
	}
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		if len(pkt) < 12 || pkt[2]&0x80 != 0 {
			return nil, nil // too short to answer, or a response: drop
		}
		m := new(dns.Msg)
		m.Id = uint16(pkt[0])<<8 | uint16(pkt[1])
		m.Response = true
		m.Opcode = int(pkt[2]>>3) & 0xf
		m.Rcode = dns.RcodeFormatError
		b, _ := m.Pack()
		return b, nil
	}
	var storeKey string
	if ok && !s.cfg.NoMemo {
		storeKey = string(key)
	}
	return nil, func() []byte {
		m, memoisable := s.reply(ctx, st, req, overUDP, client)
		if m == nil {
			return nil
		}
		b, err := m.Pack()
		if err != nil {
			s.log.Error("packing reply", "question", req.Question, "err", err)
			m = new(dns.Msg)
			m.SetRcode(req, dns.RcodeServerFailure)
			if b, err = m.Pack(); err != nil {
				return nil
			}
		}
		if memoisable && storeKey != "" {
			st.memo.put(storeKey, b)
		}
		return b
	}
}
