package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// Config configures a cluster DNS server. The zero value serves cluster.local
// with CoreDNS's defaults and forwards nowhere.
type Config struct {
	// Zone is the cluster domain, default "cluster.local".
	Zone string
	// TTL of cluster records, default 5 (CoreDNS's default; kubeadm uses 30).
	TTL uint32
	// ServiceCIDR and ClusterCIDR give the default reverse zones, in which the
	// server is authoritative (unknown addresses are NXDOMAIN). Other
	// in-addr.arpa/ip6.arpa names are answered when they are a ClusterIP or an
	// endpoint, and forwarded otherwise (kubeadm's "fallthrough in-addr.arpa").
	ServiceCIDR, ClusterCIDR netip.Prefix
	// ReverseZones replaces the zones derived from the CIDRs.
	ReverseZones []string
	// Pods is the pod-record mode: PodsDisabled (default), PodsInsecure or PodsVerified.
	Pods string
	// Namespaces limits the exposed namespaces (empty: all).
	Namespaces []string
	// IgnoreEmptyService answers NXDOMAIN for ClusterIP services without
	// ready endpoints (CoreDNS "ignore empty_service").
	IgnoreEmptyService bool
	// Fallthrough lists zones whose NXDOMAIN answers go upstream instead.
	Fallthrough []string
	// Upstreams get every name outside the zones. Empty: such names get
	// SERVFAIL. Use Upstreams() to derive them from a resolv.conf.
	Upstreams []netip.AddrPort
	// UpstreamTimeout per upstream attempt, default 2s.
	UpstreamTimeout time.Duration
	// CacheSize is the number of upstream answers cached (default 2048; <0 disables).
	CacheSize int
	// CacheMaxTTL caps how long an upstream answer is cached, default 30s.
	CacheMaxTTL time.Duration
	// NSAddrs are the glue of the apex NS record when kube-system/kube-dns
	// does not exist (normally the listen address).
	NSAddrs []netip.Addr
	// Autopath answers a query for the first search expansion of a pod's
	// search path (<name>.<its ns>.svc.<zone>) that would be NXDOMAIN with
	// the first search expansion that exists, as a CNAME from the asked name
	// (CoreDNS "autopath @kubernetes"): one round trip instead of up to six
	// for names outside the namespace. It watches Pods to know the client's
	// namespace from its address, which works only when queries reach us
	// unmasqueraded (the proxy DNATs the kube-dns VIP without SNAT).
	Autopath bool
	// HostSearch are the node's search domains, which follow the cluster's
	// in a ClusterFirst pod's search path (for autopath).
	HostSearch []string
	// Debounce is how long changes are gathered before a rebuild, default 20ms.
	Debounce time.Duration
	// NoMemo turns off the per-snapshot memo of packed authoritative replies
	// (for measuring the uncached path).
	NoMemo bool
	Logger *slog.Logger
}

// Server is a cluster DNS server. Create it with New, then Serve.
type Server struct {
	cfg    Config
	log    *slog.Logger
	src    Source
	ans    *answerer
	fwd    *forwarder
	cur    atomic.Pointer[state]
	kick   chan struct{}
	synced chan struct{}
	// slow bounds the UDP requests being answered off the reader goroutines
	// (memo misses, forwarding): a flood of random names must not pile up
	// goroutines waiting for an upstream.
	slow       chan struct{}
	hostSearch []string
	once       sync.Once
}

// state is one snapshot and the memo of replies computed from it.
type state struct {
	snap *snapshot
	memo *memo
}

// Validate checks the options a user can get wrong.
func (c Config) Validate() error {
	if c.TTL > 3600 {
		return fmt.Errorf("dns: ttl %d is above 3600", c.TTL)
	}
	switch c.Pods {
	case "", PodsDisabled, PodsInsecure, PodsVerified:
	default:
		return fmt.Errorf("dns: pods mode %q is not one of disabled, insecure, verified", c.Pods)
	}
	if c.Zone != "" {
		if _, ok := dns.IsDomainName(dns.Fqdn(c.Zone)); !ok {
			return fmt.Errorf("dns: zone %q is not a domain name", c.Zone)
		}
	}
	return nil
}

// New returns a server answering from src.
func New(cfg Config, src Source) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Zone == "" {
		cfg.Zone = "cluster.local"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 5
	}
	if cfg.Pods == "" {
		cfg.Pods = PodsDisabled
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = 2 * time.Second
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 2048
	}
	if cfg.CacheMaxTTL == 0 {
		cfg.CacheMaxTTL = 30 * time.Second
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	zone := dns.Fqdn(strings.ToLower(cfg.Zone))
	a := &answerer{zone: zone, ttl: cfg.TTL, pods: cfg.Pods, ignoreEmpty: cfg.IgnoreEmptyService, nsAddrs: cfg.NSAddrs}
	rz := cfg.ReverseZones
	if rz == nil {
		rz = append(reverseZones(cfg.ServiceCIDR), reverseZones(cfg.ClusterCIDR)...)
	}
	for _, z := range rz {
		a.reverseZones = append(a.reverseZones, dns.Fqdn(strings.ToLower(z)))
	}
	for _, z := range cfg.Fallthrough {
		a.fallThrough = append(a.fallThrough, dns.Fqdn(strings.ToLower(z)))
	}
	if len(cfg.Namespaces) > 0 {
		a.exposed = map[string]bool{}
		for _, ns := range cfg.Namespaces {
			a.exposed[strings.ToLower(ns)] = true
		}
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "dns"), src: src, ans: a,
		kick: make(chan struct{}, 1), synced: make(chan struct{}), slow: make(chan struct{}, maxSlowRequests)}
	s.fwd = newForwarder(cfg.Upstreams, cfg.UpstreamTimeout, cfg.CacheSize, cfg.CacheMaxTTL)
	a.upstream = s.fwd.lookup
	for _, d := range cfg.HostSearch {
		if d = dns.Fqdn(strings.ToLower(strings.TrimSpace(d))); d != "." {
			s.hostSearch = append(s.hostSearch, d)
		}
	}
	s.cur.Store(&state{snap: buildSnapshot(objects{}, false, time.Now(), false), memo: newMemo()})
	return s, nil
}

// Synced is closed once the server answers from a complete first list of the
// cluster (before that, would-be NXDOMAIN answers are SERVFAIL).
func (s *Server) Synced() <-chan struct{} { return s.synced }

// Run keeps the zone in step with the source until ctx ends: every change
// notification leads, after Debounce, to a full rebuild.
func (s *Server) Run(ctx context.Context) {
	go s.src.Run(ctx, func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		t := time.NewTimer(s.cfg.Debounce)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.rebuild()
	}
}

// watchesPods says whether the source must list Pods: in verified pod mode
// and for autopath.
func (s *Server) watchesPods() bool { return s.cfg.Pods == PodsVerified || s.cfg.Autopath }

func (s *Server) rebuild() {
	start := time.Now()
	synced := s.src.Synced()
	o := s.src.Objects()
	snap := buildSnapshot(objects{services: o.Services, slices: o.EndpointSlices, namespaces: o.Namespaces, pods: o.Pods},
		synced, start, s.watchesPods())
	s.cur.Store(&state{snap: snap, memo: newMemo()})
	s.log.Debug("zone rebuilt", "services", len(snap.services), "slices", len(o.EndpointSlices),
		"namespaces", len(snap.namespaces), "synced", synced, "duration", time.Since(start))
	if synced {
		s.once.Do(func() {
			s.log.Info("zone synced", "services", len(snap.services), "zone", s.ans.zone)
			close(s.synced)
		})
	}
}

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

// reply computes the reply to req. memoisable says whether it depends only on
// the snapshot (not on upstream data).
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
	lname := lowerASCII(q.Name)
	zone := s.ans.zoneOf(lname)
	memoisable = true
	switch {
	case zone != "":
		res := s.ans.answer(ctx, st.snap, q, zone)
		if res.rcode == dns.RcodeNameError && s.fallsThrough(lname) {
			return s.forward(ctx, req, tr), false
		}
		if res.rcode == dns.RcodeNameError && s.cfg.Autopath && zone == s.ans.zone && st.snap.synced {
			// The answer depends on who asks: never memoised.
			memoisable = false
			if ap, ok := s.autopath(ctx, st, q, lname, client); ok {
				res = ap
			}
		}
		if res.rcode == dns.RcodeNameError && !st.snap.synced {
			res.rcode = dns.RcodeServerFailure
		}
		m.Authoritative = res.rcode != dns.RcodeRefused
		m.Rcode = res.rcode
		m.Truncated = res.truncated
		m.Answer, m.Extra = res.answer, res.extra
		if len(m.Answer) == 0 && res.rcode != dns.RcodeRefused {
			m.Ns = []dns.RR{s.ans.soa(st.snap, res.soaZone)}
		}
		memoisable = memoisable && !res.upstream
	case q.Qtype == dns.TypePTR && isReverse(lname):
		// Outside our reverse zones an address may still be a ClusterIP or an
		// endpoint (selector-less services); everything else goes upstream.
		ptrs := s.ans.ptr(st.snap, lname)
		if len(ptrs) == 0 {
			return s.forward(ctx, req, tr), false
		}
		m.Authoritative = true
		m.Answer = s.ans.ptrRRs(q.Name, ptrs)
	default:
		return s.forward(ctx, req, tr), false
	}
	if opt != nil {
		m.SetEdns0(opt.UDPSize(), opt.Do())
	}
	truncate(m, req, tr)
	return m, memoisable
}

func (s *Server) fallsThrough(lname string) bool {
	for _, z := range s.ans.fallThrough {
		if dns.IsSubDomain(z, lname) {
			return true
		}
	}
	return false
}

func isReverse(lname string) bool {
	return strings.HasSuffix(lname, ".in-addr.arpa.") || strings.HasSuffix(lname, ".ip6.arpa.")
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

// autopath walks the client pod's search path server-side (CoreDNS's
// autopath plugin): q, an NXDOMAIN in the zone, must be the first expansion
// <base>.<ns>.svc.<zone> for the client's namespace; then <base>.svc.<zone>,
// <base>.<zone>, <base>.<host search...> and <base> itself are tried, and the
// first answer that is not NXDOMAIN is returned, with a CNAME from the asked
// name to the found one in front. ok is false when autopath does not apply
// or every expansion is NXDOMAIN.
func (s *Server) autopath(ctx context.Context, st *state, q dns.Question, lname string, client netip.Addr) (result, bool) {
	ns, found := st.snap.podNS[client]
	if !found {
		return result{}, false
	}
	zone := s.ans.zone
	base, found := strings.CutSuffix(lname, "."+ns+".svc."+zone)
	if !found || base == "" {
		return result{}, false
	}
	search := append([]string{"svc." + zone, zone}, s.hostSearch...)
	search = append(search, ".")
	for _, sp := range search {
		name := base + "." + sp
		if sp == "." {
			name = base + "."
		}
		var res result
		if z := s.ans.zoneOf(name); z != "" {
			res = s.ans.answer(ctx, st.snap, dns.Question{Name: name, Qtype: q.Qtype, Qclass: q.Qclass}, z)
			if res.rcode == dns.RcodeNameError {
				continue
			}
			if res.rcode != dns.RcodeSuccess {
				return result{}, false
			}
		} else {
			m, err := s.fwd.lookup(ctx, name, q.Qtype)
			if err != nil {
				return result{}, false
			}
			if m.Rcode == dns.RcodeNameError {
				continue
			}
			if m.Rcode != dns.RcodeSuccess {
				return result{}, false
			}
			res = result{answer: m.Answer, truncated: m.Truncated, upstream: true}
		}
		res.soaZone = q.Name[len(q.Name)-len(zone):]
		if len(res.answer) > 0 {
			first := res.answer[0].Header()
			cname := &dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME, first.Ttl), Target: first.Name}
			res.answer = append([]dns.RR{cname}, res.answer...)
		}
		return res, true
	}
	return result{}, false
}
