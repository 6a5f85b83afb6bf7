package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// runCoreDNS is the CoreDNS binary as the agnhost image bundles it
// (/coredns) and the coredns/coredns image runs it: `-conf FILE` (default
// ./Corefile) with the plugins a test's own DNS server uses: hosts (inline
// entries and a hosts file, fallthrough), forward (to upstream servers, in
// order), whoami (the Gateway API conformance suite's DNS backend), log and
// errors. Other directives stop the server as CoreDNS does on
// a Corefile it cannot parse. It serves UDP and TCP on each server block's
// port (53 unless the block says `.:PORT`).
func runCoreDNS(ctx context.Context, c *container, args []string) error {
	fs := c.flags("coredns")
	conf := fs.String("conf", "Corefile", "Corefile to load")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := *conf
	if !filepath.IsAbs(path) {
		path = filepath.Join("/", path)
	}
	text, err := os.ReadFile(filepath.Join(c.root, path))
	if err != nil {
		return fmt.Errorf("loading Corefile: %w", err)
	}
	blocks, err := parseCorefile(string(text), func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(c.root, p)) })
	if err != nil {
		fmt.Fprintf(c.stderr, "Error during parsing: %v\n", err)
		return err
	}
	byPort := map[int]*corednsServer{}
	for _, b := range blocks {
		s := byPort[b.port]
		if s == nil {
			s = &corednsServer{c: c}
			byPort[b.port] = s
		}
		s.zones = append(s.zones, b)
	}
	var servers []*dns.Server
	for port, s := range byPort {
		udp, err := c.listenUDP(c.listenHost, port)
		if err != nil {
			return fmt.Errorf("listening on udp port %d: %w", port, err)
		}
		tcp, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return fmt.Errorf("listening on tcp port %d: %w", port, err)
		}
		servers = append(servers, &dns.Server{PacketConn: udp, Handler: s}, &dns.Server{Listener: tcp, Handler: s})
		fmt.Fprintf(c.stdout, ".:%d\n", port)
	}
	fmt.Fprintf(c.stdout, "CoreDNS-1.12.0\nlinux/amd64, go1.24, minikit\n")
	errs := make(chan error, len(servers))
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ActivateAndServe(); err != nil {
				errs <- err
			}
		}()
	}
	if c.ready != nil {
		c.readyOnce.Do(c.ready)
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	for _, s := range servers {
		_ = s.Shutdown()
	}
	wg.Wait()
	return err
}

// corefileBlock is one server block: the zone it answers and its plugins.
type corefileBlock struct {
	zone    string // fully qualified, "." for the root
	port    int
	hosts   *corednsHosts
	forward []string // upstream host:port, tried in order
	whoami  bool
	log     bool
}

type corednsHosts struct {
	names       map[string][]netip.Addr // fully qualified lowercase name -> addresses
	fallThrough bool
}

// parseCorefile reads the Caddyfile syntax CoreDNS uses: `ZONE[:PORT] {`,
// one directive per line, a directive's own block in braces, # comments.
func parseCorefile(text string, readFile func(string) ([]byte, error)) ([]corefileBlock, error) {
	var lines [][]string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		// Braces are tokens of their own even when glued to a word.
		line = strings.ReplaceAll(strings.ReplaceAll(line, "{", " { "), "}", " } ")
		if f := strings.Fields(line); len(f) > 0 {
			lines = append(lines, f)
		}
	}
	var blocks []corefileBlock
	for i := 0; i < len(lines); i++ {
		head := lines[i]
		if head[len(head)-1] != "{" || len(head) != 2 {
			return nil, fmt.Errorf("Corefile:%d - Error during parsing: expected a server block, got %q", i+1, strings.Join(head, " "))
		}
		b, err := newCorefileBlock(head[0])
		if err != nil {
			return nil, err
		}
		for i++; ; i++ {
			if i >= len(lines) {
				return nil, errors.New("Corefile: unexpected EOF, missing }")
			}
			l := lines[i]
			if len(l) == 1 && l[0] == "}" {
				break
			}
			var body [][]string
			if l[len(l)-1] == "{" {
				l = l[:len(l)-1]
				for i++; i < len(lines) && !(len(lines[i]) == 1 && lines[i][0] == "}"); i++ {
					body = append(body, lines[i])
				}
				if i >= len(lines) {
					return nil, errors.New("Corefile: unexpected EOF, missing }")
				}
			}
			if err := b.directive(l, body, readFile); err != nil {
				return nil, fmt.Errorf("Corefile:%d - %w", i+1, err)
			}
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		return nil, errors.New("Corefile: no server blocks")
	}
	return blocks, nil
}

func newCorefileBlock(key string) (corefileBlock, error) {
	key = strings.TrimPrefix(key, "dns://")
	b := corefileBlock{port: 53}
	zone, port, ok := strings.Cut(key, ":")
	if ok {
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return b, fmt.Errorf("invalid port in server block key %q", key)
		}
		b.port = p
	}
	b.zone = dns.CanonicalName(zone)
	return b, nil
}

func (b *corefileBlock) directive(l []string, body [][]string, readFile func(string) ([]byte, error)) error {
	switch l[0] {
	case "log", "errors", "debug", "reload", "loop", "health", "ready", "loadbalance":
		// health and ready would open their own ports; the test servers
		// never probe them, so they are accepted and not served.
		b.log = b.log || l[0] == "log"
	case "hosts":
		h := &corednsHosts{names: map[string][]netip.Addr{}}
		if len(l) > 1 {
			data, err := readFile(l[1])
			if err != nil {
				return fmt.Errorf("plugin/hosts: %w", err)
			}
			for _, line := range strings.Split(string(data), "\n") {
				if i := strings.IndexByte(line, '#'); i >= 0 {
					line = line[:i]
				}
				if err := h.add(strings.Fields(line)); err != nil {
					return err
				}
			}
		}
		for _, f := range body {
			switch f[0] {
			case "fallthrough":
				h.fallThrough = true
			case "ttl", "reload", "no_reverse":
			default:
				if err := h.add(f); err != nil {
					return err
				}
			}
		}
		b.hosts = h
	case "whoami":
		if len(l) > 1 || len(body) > 0 {
			return errors.New("plugin/whoami: Wrong argument count or unexpected line ending after 'whoami'")
		}
		b.whoami = true
	case "forward":
		if len(l) < 3 {
			return errors.New("plugin/forward: wrong argument count")
		}
		for _, to := range l[2:] {
			to = strings.TrimPrefix(to, "dns://")
			if _, _, err := net.SplitHostPort(to); err != nil {
				to = net.JoinHostPort(to, "53")
			}
			b.forward = append(b.forward, to)
		}
	default:
		return fmt.Errorf("unknown directive '%s'", l[0])
	}
	return nil
}

// add takes one hosts line: an address, then its names.
func (h *corednsHosts) add(f []string) error {
	if len(f) == 0 {
		return nil
	}
	addr, err := netip.ParseAddr(f[0])
	if err != nil {
		return fmt.Errorf("plugin/hosts: parsing address %q: %w", f[0], err)
	}
	for _, n := range f[1:] {
		n = strings.ToLower(dns.CanonicalName(n))
		h.names[n] = append(h.names[n], addr.Unmap())
	}
	return nil
}

// corednsServer answers one port's zones: the longest matching zone's
// plugin chain (hosts, then forward), as CoreDNS picks a server block.
type corednsServer struct {
	c     *container
	zones []corefileBlock
}

func (s *corednsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	m := s.answer(r, w.RemoteAddr())
	_ = w.WriteMsg(m)
	if len(r.Question) == 0 {
		return
	}
	q := r.Question[0]
	if b := s.block(q.Name); b != nil && b.log {
		host, port, _ := net.SplitHostPort(w.RemoteAddr().String())
		// CoreDNS's log plugin's common log format.
		fmt.Fprintf(s.c.stdout, "[INFO] %s:%s - %d \"%s IN %s %s %d %t %d\" %s %s %d %.9fs\n",
			host, port, r.Id, dns.TypeToString[q.Qtype], q.Name, w.RemoteAddr().Network(), r.Len(),
			r.IsEdns0() != nil && r.IsEdns0().Do(), dns.MinMsgSize, dns.RcodeToString[m.Rcode], flags(m), m.Len(), time.Since(start).Seconds())
	}
}

func flags(m *dns.Msg) string {
	var f []string
	if m.Response {
		f = append(f, "qr")
	}
	if m.Authoritative {
		f = append(f, "aa")
	}
	if m.RecursionDesired {
		f = append(f, "rd")
	}
	if m.RecursionAvailable {
		f = append(f, "ra")
	}
	return strings.Join(f, ",")
}

func (s *corednsServer) block(name string) *corefileBlock {
	var best *corefileBlock
	for i := range s.zones {
		z := &s.zones[i]
		if dns.IsSubDomain(z.zone, name) && (best == nil || len(z.zone) > len(best.zone)) {
			best = z
		}
	}
	return best
}

// answer runs the chain in CoreDNS's plugin order (hosts, forward, whoami)
// for a query from client. With no plugin left to answer, CoreDNS replies
// SERVFAIL, and so does hosts for a name it does not know without
// fallthrough (it has no SOA to put in an NXDOMAIN).
func (s *corednsServer) answer(r *dns.Msg, client net.Addr) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := r.Question[0]
	b := s.block(q.Name)
	if b == nil {
		m.Rcode = dns.RcodeRefused
		return m
	}
	if h := b.hosts; h != nil {
		addrs, known := h.names[strings.ToLower(q.Name)]
		if known {
			m.Authoritative = true
			for _, a := range addrs {
				hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 3600}
				switch {
				case q.Qtype == dns.TypeA && a.Is4():
					hdr.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
				case q.Qtype == dns.TypeAAAA && a.Is6():
					hdr.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
				}
			}
			return m
		}
		if !h.fallThrough {
			m.Rcode = dns.RcodeServerFailure
			return m
		}
	}
	for _, up := range b.forward {
		for _, network := range []string{"udp", "tcp"} {
			resp, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(r, up)
			if err != nil {
				break
			}
			if resp.Truncated && network == "udp" {
				continue
			}
			resp.Id = r.Id
			return resp
		}
	}
	if b.whoami && len(b.forward) == 0 {
		return whoami(m, q, client)
	}
	m.Rcode = dns.RcodeServerFailure
	return m
}

// whoami is CoreDNS's whoami plugin: whatever the query type, an
// authoritative empty answer whose additional section holds the client's
// address (A or AAAA under the lowercased query name) and an SRV record
// _udp.NAME or _tcp.NAME with its source port and target ".", TTL 0.
func whoami(m *dns.Msg, q dns.Question, client net.Addr) *dns.Msg {
	m.Authoritative = true
	name := strings.ToLower(q.Name)
	var ip netip.AddrPort
	proto := "udp"
	switch a := client.(type) {
	case *net.UDPAddr:
		ip = a.AddrPort()
	case *net.TCPAddr:
		ip, proto = a.AddrPort(), "tcp"
	default:
		ip, _ = netip.ParseAddrPort(client.String())
	}
	addr := ip.Addr().Unmap()
	if addr.Is4() {
		m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: q.Qclass}, A: addr.AsSlice()})
	} else {
		m.Extra = append(m.Extra, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: q.Qclass}, AAAA: addr.AsSlice()})
	}
	srvName := "_" + proto + "." + name
	if name == "." {
		srvName = "_" + proto + "."
	}
	m.Extra = append(m.Extra, &dns.SRV{Hdr: dns.RR_Header{Name: srvName, Rrtype: dns.TypeSRV, Class: q.Qclass}, Port: ip.Port(), Target: "."})
	return m
}
