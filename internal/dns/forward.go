package dns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// forwarder sends names outside the zones to the upstream resolvers, in order,
// retrying over TCP when a UDP answer is truncated, and caches their answers
// (positive and negative) for at most the record TTL, capped.
type forwarder struct {
	upstreams []netip.AddrPort
	udp, tcp  *dns.Client
	cache     *fwdCache
}

var errNoUpstream = errors.New("no upstream resolver configured")

func newForwarder(ups []netip.AddrPort, timeout time.Duration, size int, maxTTL time.Duration) *forwarder {
	f := &forwarder{upstreams: ups,
		udp: &dns.Client{Net: "udp", Timeout: timeout, UDPSize: dns.DefaultMsgSize},
		tcp: &dns.Client{Net: "tcp", Timeout: timeout}}
	if size > 0 {
		f.cache = &fwdCache{max: size, maxTTL: maxTTL, m: map[fwdKey]*fwdEntry{}}
	}
	return f
}

// exchange forwards a client's request. The answer is the upstream's, with
// the request's ID; callers fix up the question case and OPT.
func (f *forwarder) exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	q := req.Question[0]
	do := false
	if o := req.IsEdns0(); o != nil {
		do = o.Do()
	}
	up := new(dns.Msg)
	up.Id = dns.Id()
	up.RecursionDesired = req.RecursionDesired
	up.CheckingDisabled = req.CheckingDisabled
	up.Question = []dns.Question{q}
	up.SetEdns0(dns.DefaultMsgSize, do)
	return f.resolve(ctx, up, do)
}

// lookup resolves an ExternalName target for the zone's answers.
func (f *forwarder) lookup(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	up := new(dns.Msg)
	up.SetQuestion(name, qtype)
	up.SetEdns0(dns.DefaultMsgSize, false)
	return f.resolve(ctx, up, false)
}

func (f *forwarder) resolve(ctx context.Context, up *dns.Msg, do bool) (*dns.Msg, error) {
	q := up.Question[0]
	key := fwdKey{name: strings.ToLower(q.Name), qtype: q.Qtype, do: do, cd: up.CheckingDisabled}
	if m := f.cache.get(key, time.Now()); m != nil {
		return m, nil
	}
	if len(f.upstreams) == 0 {
		return nil, errNoUpstream
	}
	var errs []error
	for _, u := range f.upstreams {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		m, _, err := f.udp.ExchangeContext(ctx, up, u.String())
		if err == nil && m.Truncated {
			m, _, err = f.tcp.ExchangeContext(ctx, up, u.String())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("asking %s: %w", u, err))
			continue
		}
		if m.Rcode == dns.RcodeServerFailure || m.Rcode == dns.RcodeRefused {
			errs = append(errs, fmt.Errorf("asking %s: %s", u, dns.RcodeToString[m.Rcode]))
			continue
		}
		f.cache.put(key, m, time.Now())
		return m, nil
	}
	return nil, fmt.Errorf("resolving %s %s upstream: %w", q.Name, dns.TypeToString[q.Qtype], errors.Join(errs...))
}

type fwdKey struct {
	name   string
	qtype  uint16
	do, cd bool
}

type fwdEntry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// fwdCache is a small TTL cache of upstream answers. When full, an arbitrary
// entry makes room (Go's map iteration order is random enough for that).
type fwdCache struct {
	mu     sync.Mutex
	max    int
	maxTTL time.Duration
	m      map[fwdKey]*fwdEntry
}

func (c *fwdCache) get(k fwdKey, now time.Time) *dns.Msg {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	e := c.m[k]
	if e != nil && !now.Before(e.expires) {
		delete(c.m, k)
		e = nil
	}
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(h.Ttl, age)
			}
		}
	}
	return m
}

func (c *fwdCache) put(k fwdKey, m *dns.Msg, now time.Time) {
	if c == nil || m.Truncated {
		return
	}
	ttl, ok := cacheTTL(m)
	if !ok {
		return
	}
	ttl = min(ttl, c.maxTTL)
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = &fwdEntry{msg: m.Copy(), stored: now, expires: now.Add(ttl)}
}

// cacheTTL is how long an answer may be cached: the smallest answer TTL, or
// for a negative answer the SOA's TTL bounded by its minimum (RFC 2308).
func cacheTTL(m *dns.Msg) (time.Duration, bool) {
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return 0, false
	}
	if len(m.Answer) > 0 && m.Rcode == dns.RcodeSuccess {
		ttl := m.Answer[0].Header().Ttl
		for _, rr := range m.Answer {
			ttl = min(ttl, rr.Header().Ttl)
		}
		return time.Duration(ttl) * time.Second, true
	}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return time.Duration(min(soa.Hdr.Ttl, soa.Minttl)) * time.Second, true
		}
	}
	return 5 * time.Second, true
}

// Upstreams reads the nameservers of a resolv.conf, on port 53, leaving out
// loopback addresses (a resolver on the node's loopback, such as
// systemd-resolved's 127.0.0.53, cannot be reached the way pods would need,
// and minikit's DNS may be what listens there) and the addresses in exclude
// (our own listeners and the cluster DNS ClusterIP): forwarding to ourselves
// would be a loop.
func Upstreams(resolvConf []byte, exclude ...netip.Addr) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || a.IsLoopback() || a.IsUnspecified() {
			continue
		}
		a = a.Unmap()
		skip := false
		for _, e := range exclude {
			if e.Unmap() == a {
				skip = true
			}
		}
		if !skip {
			out = append(out, netip.AddrPortFrom(a, 53))
		}
	}
	return out
}

// ParseUpstream parses "IP" or "IP:port" (as given to --dns-upstream).
func ParseUpstream(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("upstream %q is not an IP or IP:port", s)
	}
	return netip.AddrPortFrom(a, 53), nil
}
