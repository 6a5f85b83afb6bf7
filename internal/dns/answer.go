package dns

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// errNameError is the one "no such name" outcome of a lookup: it becomes
// NXDOMAIN (SERVFAIL before the first sync).
var errNameError = errors.New("no such name")

// Pod record modes, as CoreDNS's `pods` option.
const (
	PodsDisabled = "disabled"
	PodsInsecure = "insecure"
	PodsVerified = "verified"
)

// DNSSchemaVersion is the version of the Kubernetes DNS specification served
// at dns-version.<zone>.
const DNSSchemaVersion = "1.1.0"

// maxCNAMEChain bounds ExternalName chasing inside the zone, as CoreDNS does.
const maxCNAMEChain = 8

// rec is one record source found for a name: an address (with a port for
// SRV), or an ExternalName target. key is the owner relative to the zone
// ("svc.ns.svc", "ep.svc.ns.svc"), used for SRV targets.
type rec struct {
	addr   netip.Addr
	target string
	port   int32
	key    string
}

// upstreamFunc resolves a name outside the zone (ExternalName targets).
type upstreamFunc func(ctx context.Context, name string, qtype uint16) (*dns.Msg, error)

// answerer is the answering rules: the records of the Kubernetes DNS
// specification for the cluster zone and the reverse zones, and the decision
// to forward everything else. It holds only configuration; every call gets the
// snapshot it answers from, so answering is a function of (question, snapshot,
// client address) and needs no sockets. The one way out is upstream, the lookup
// of names outside the zone that ExternalName targets and autopath need (the
// server's forwarder; nil: such names have no answer).
type answerer struct {
	zone         string // lowercase, fully qualified
	ttl          uint32
	reverseZones []string
	fallThrough  []string
	pods         string
	exposed      map[string]bool // nil: every existing namespace
	ignoreEmpty  bool
	nsAddrs      []netip.Addr
	autopath     bool
	hostSearch   []string // lowercase, fully qualified
	upstream     upstreamFunc
}

// newAnswerer returns the rules cfg (with its defaults filled in) asks for.
func newAnswerer(cfg Config, upstream upstreamFunc) *answerer {
	a := &answerer{zone: dns.Fqdn(strings.ToLower(cfg.Zone)), ttl: cfg.TTL, pods: cfg.Pods,
		ignoreEmpty: cfg.IgnoreEmptyService, nsAddrs: cfg.NSAddrs, autopath: cfg.Autopath, upstream: upstream}
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
	for _, d := range cfg.HostSearch {
		if d = dns.Fqdn(strings.ToLower(strings.TrimSpace(d))); d != "." {
			a.hostSearch = append(a.hostSearch, d)
		}
	}
	return a
}

// outcome is what the rules decide for one question: forward the request
// upstream, or reply with these sections and flags.
type outcome struct {
	forward           bool // not ours: the transport forwards the request
	rcode             int
	authoritative     bool
	answer, ns, extra []dns.RR
	truncated         bool // an upstream answer inside ours was truncated
	memoisable        bool // depends only on the snapshot (not upstream data, not the client)
}

// result is an authoritative answer from the zone before it becomes an outcome.
type result struct {
	rcode     int
	answer    []dns.RR
	extra     []dns.RR
	soaZone   string // zone in query case: SOA goes in authority when answer is empty
	truncated bool
	upstream  bool // carries data from upstream: not memoisable
}

// respond applies the rules to q, a well-formed IN question, asked by client:
// names in the cluster zone and the reverse zones are answered from s (with
// fallthrough, autopath, and SERVFAIL for NXDOMAIN before the first sync),
// PTR names elsewhere are answered when the address is a ClusterIP or an
// endpoint, and everything else is forwarded.
func (a *answerer) respond(ctx context.Context, s *snapshot, q dns.Question, client netip.Addr) outcome {
	lname := lowerASCII(q.Name)
	zone := a.zoneOf(lname)
	switch {
	case zone != "":
		memoisable := true
		res := a.answer(ctx, s, q, zone)
		if res.rcode == dns.RcodeNameError && a.fallsThrough(lname) {
			return outcome{forward: true}
		}
		if res.rcode == dns.RcodeNameError && a.autopath && zone == a.zone && s.synced {
			// The answer depends on who asks: never memoised.
			memoisable = false
			if ap, ok := a.searchPath(ctx, s, q, lname, client); ok {
				res = ap
			}
		}
		if res.rcode == dns.RcodeNameError && !s.synced {
			res.rcode = dns.RcodeServerFailure
		}
		o := outcome{rcode: res.rcode, authoritative: res.rcode != dns.RcodeRefused, truncated: res.truncated,
			answer: res.answer, extra: res.extra, memoisable: memoisable && !res.upstream}
		if len(o.answer) == 0 && res.rcode != dns.RcodeRefused {
			o.ns = []dns.RR{a.soa(s, res.soaZone)}
		}
		return o
	case q.Qtype == dns.TypePTR && isReverse(lname):
		// Outside our reverse zones an address may still be a ClusterIP or an
		// endpoint (selector-less services); everything else goes upstream.
		ptrs := a.ptr(s, lname)
		if len(ptrs) == 0 {
			return outcome{forward: true}
		}
		return outcome{authoritative: true, answer: a.ptrRRs(q.Name, ptrs), memoisable: true}
	default:
		return outcome{forward: true}
	}
}

func (a *answerer) fallsThrough(lname string) bool {
	for _, z := range a.fallThrough {
		if dns.IsSubDomain(z, lname) {
			return true
		}
	}
	return false
}

func isReverse(lname string) bool {
	return strings.HasSuffix(lname, ".in-addr.arpa.") || strings.HasSuffix(lname, ".ip6.arpa.")
}

// zoneOf returns the authoritative zone (lowercase) lname falls in, or "".
func (a *answerer) zoneOf(lname string) string {
	if dns.IsSubDomain(a.zone, lname) {
		return a.zone
	}
	for _, z := range a.reverseZones {
		if dns.IsSubDomain(z, lname) {
			return z
		}
	}
	return ""
}

func (a *answerer) exposedNS(s *snapshot, ns string) bool {
	if a.exposed != nil && !a.exposed[ns] {
		return false
	}
	return s.namespaces[ns]
}

// answer answers q for a name inside zone (lowercase, as returned by zoneOf).
func (a *answerer) answer(ctx context.Context, s *snapshot, q dns.Question, zone string) result {
	lname := lowerASCII(q.Name)
	zoneQ := q.Name[len(q.Name)-len(zone):]
	res := result{soaZone: zoneQ}
	if zone != a.zone {
		a.reverse(s, q, lname, zone, &res)
		return res
	}
	base := strings.TrimSuffix(strings.TrimSuffix(lname, zone), ".")
	var err error
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA:
		res.answer, res.truncated, res.upstream, err = a.addresses(ctx, s, q.Name, base, q.Qtype, nil)
	case dns.TypeSRV:
		res.answer, res.extra, err = a.srv(s, q.Name, base, zoneQ)
	case dns.TypeTXT:
		if base == "dns-version" {
			res.answer = []dns.RR{&dns.TXT{Hdr: hdr(q.Name, dns.TypeTXT, 28800), Txt: []string{DNSSchemaVersion}}}
			break
		}
		_, err = a.records(s, base)
	case dns.TypeCNAME:
		var recs []rec
		recs, err = a.records(s, base)
		for _, r := range recs {
			if r.target != "" {
				res.answer = append(res.answer, &dns.CNAME{Hdr: hdr(q.Name, dns.TypeCNAME, a.ttl), Target: r.target})
			}
		}
	case dns.TypeSOA:
		if base == "" {
			res.answer = []dns.RR{a.soa(s, zoneQ)}
			break
		}
		_, err = a.records(s, base)
	case dns.TypeNS:
		if base == "" {
			res.answer, res.extra = a.ns(s, zoneQ)
			break
		}
		_, err = a.records(s, base)
	case dns.TypeAXFR, dns.TypeIXFR:
		res.rcode = dns.RcodeRefused
		return res
	default:
		// Any other type: the name's existence decides NODATA or NXDOMAIN.
		_, err = a.records(s, base)
	}
	if err != nil {
		res.rcode = dns.RcodeNameError
		res.answer, res.extra = nil, nil
	}
	return res
}

// searchPath walks the client pod's search path server-side (CoreDNS's
// autopath plugin): q, an NXDOMAIN in the zone, must be the first expansion
// <base>.<ns>.svc.<zone> for the client's namespace; then <base>.svc.<zone>,
// <base>.<zone>, <base>.<host search...> and <base> itself are tried, and the
// first answer that is not NXDOMAIN is returned, with a CNAME from the asked
// name to the found one in front. ok is false when autopath does not apply
// or every expansion is NXDOMAIN.
func (a *answerer) searchPath(ctx context.Context, s *snapshot, q dns.Question, lname string, client netip.Addr) (result, bool) {
	ns, found := s.podNS[client]
	if !found {
		return result{}, false
	}
	zone := a.zone
	base, found := strings.CutSuffix(lname, "."+ns+".svc."+zone)
	if !found || base == "" {
		return result{}, false
	}
	search := append([]string{"svc." + zone, zone}, a.hostSearch...)
	search = append(search, ".")
	for _, sp := range search {
		name := base + "." + sp
		if sp == "." {
			name = base + "."
		}
		var res result
		if z := a.zoneOf(name); z != "" {
			res = a.answer(ctx, s, dns.Question{Name: name, Qtype: q.Qtype, Qclass: q.Qclass}, z)
			if res.rcode == dns.RcodeNameError {
				continue
			}
			if res.rcode != dns.RcodeSuccess {
				return result{}, false
			}
		} else {
			if a.upstream == nil {
				return result{}, false
			}
			m, err := a.upstream(ctx, name, q.Qtype)
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

// records finds what a name (relative to the zone, lowercase, no trailing
// dot) refers to: CoreDNS's parseRequest + findServices/findPods. A nil error
// with no records means the name exists without data (NODATA).
func (a *answerer) records(s *snapshot, base string) ([]rec, error) {
	if base == "" {
		return nil, nil
	}
	if base == "ns.dns" {
		var recs []rec
		for _, ip := range a.nameserverIPs(s) {
			recs = append(recs, rec{addr: ip, key: "ns.dns"})
		}
		return recs, nil
	}
	labels := strings.Split(base, ".")
	n := len(labels)
	kind := labels[n-1]
	if kind != "svc" && kind != "pod" {
		return nil, errNameError
	}
	if n == 1 {
		return nil, nil
	}
	if kind == "pod" && a.pods == PodsDisabled {
		return nil, errNameError
	}
	ns := labels[n-2]
	if !a.exposedNS(s, ns) {
		return nil, errNameError
	}
	if n == 2 {
		return nil, nil
	}
	name := labels[n-3]
	var endpoint, port, proto string
	switch n - 3 {
	case 0:
	case 1:
		endpoint = labels[0]
	case 2:
		port, proto = strings.TrimPrefix(labels[0], "_"), strings.TrimPrefix(labels[1], "_")
	default:
		return nil, errNameError
	}
	if kind == "pod" {
		if endpoint != "" || port != "" {
			return nil, errNameError
		}
		return a.pod(s, ns, name)
	}
	svc := s.service(ns, name)
	if svc == nil {
		return nil, errNameError
	}
	key := svc.name + "." + svc.ns + ".svc"
	var recs []rec
	switch {
	case svc.kind == kindExternal:
		// No endpoints and no ports below an ExternalName.
		if endpoint != "" || port != "" {
			return nil, errNameError
		}
		return []rec{{target: svc.external, key: key}}, nil
	case svc.kind == kindHeadless || endpoint != "":
		for _, ep := range svc.endpoints {
			if endpoint != "" && ep.name != endpoint {
				continue
			}
			for _, p := range ep.ports {
				if matchPort(port, proto, p) {
					recs = append(recs, rec{addr: ep.addr, port: p.port, key: ep.name + "." + key})
				}
			}
		}
	default:
		if a.ignoreEmpty && len(svc.endpoints) == 0 {
			return nil, errNameError
		}
		for _, p := range svc.ports {
			if matchPort(port, proto, p) {
				for _, ip := range svc.clusterIPs {
					recs = append(recs, rec{addr: ip, port: p.port, key: key})
				}
				if len(svc.clusterIPs) == 0 {
					// A ClusterIP service whose IP is not allocated yet
					// exists but has no data.
					recs = append(recs, rec{port: p.port, key: key})
				}
			}
		}
	}
	if len(recs) == 0 {
		return nil, errNameError
	}
	return recs, nil
}

func matchPort(port, proto string, p svcPort) bool {
	return (port == "" || port == p.name) && (proto == "" || proto == p.proto)
}

// pod answers <ip-with-dashes>.<ns>.pod.<zone> in insecure and verified mode.
func (a *answerer) pod(s *snapshot, ns, name string) ([]rec, error) {
	ipText := strings.ReplaceAll(name, "-", ":")
	if strings.Count(name, "-") == 3 && !strings.Contains(name, "--") {
		ipText = strings.ReplaceAll(name, "-", ".")
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil || ip.Zone() != "" {
		return nil, errNameError
	}
	if a.pods == PodsVerified && !s.podIPs[ns][ip] {
		return nil, errNameError
	}
	return []rec{{addr: ip, key: name + "." + ns + ".pod"}}, nil
}

func (a *answerer) nameserverIPs(s *snapshot) []netip.Addr {
	if len(s.dnsIPs) > 0 {
		return s.dnsIPs
	}
	return a.nsAddrs
}

// addresses answers A or AAAA for base, following ExternalName CNAMEs: inside
// the zone by looking the target up again, outside through the upstream,
// whose answer is appended with its own TTLs (CoreDNS plugin.A).
func (a *answerer) addresses(ctx context.Context, s *snapshot, owner, base string, qtype uint16, chain []dns.RR) (rrs []dns.RR, truncated, upstream bool, err error) {
	recs, err := a.records(s, base)
	if err != nil {
		return nil, false, false, err
	}
	seen := map[netip.Addr]bool{}
	for _, r := range recs {
		if r.target != "" {
			if lowerASCII(owner) == r.target || len(chain) >= maxCNAMEChain {
				continue
			}
			cname := &dns.CNAME{Hdr: hdr(owner, dns.TypeCNAME, a.ttl), Target: r.target}
			loop := false
			for _, c := range chain {
				if c.(*dns.CNAME).Target == r.target {
					loop = true
				}
			}
			if loop {
				continue
			}
			if dns.IsSubDomain(a.zone, r.target) {
				tbase := strings.TrimSuffix(strings.TrimSuffix(r.target, a.zone), ".")
				next, tc, up, err := a.addresses(ctx, s, r.target, tbase, qtype, append(chain, cname))
				if err == nil && len(next) > 0 {
					rrs = append(rrs, cname)
					rrs = append(rrs, next...)
				}
				truncated = truncated || tc
				upstream = upstream || up
				continue
			}
			if a.upstream == nil {
				continue
			}
			upstream = true
			// The CNAME stands whatever the upstream makes of its target
			// (SERVFAIL, REFUSED, no answer): CoreDNS's upstream.Lookup runs
			// the server's own chain, whose forward writes those as replies,
			// never an error, and plugin.A appends the CNAME before them.
			rrs = append(rrs, cname)
			m, err := a.upstream(ctx, r.target, qtype)
			if err != nil {
				continue
			}
			truncated = truncated || m.Truncated
			rrs = append(rrs, m.Answer...)
			continue
		}
		if !r.addr.IsValid() || seen[r.addr] {
			continue
		}
		if qtype == dns.TypeA && r.addr.Is4() {
			seen[r.addr] = true
			rrs = append(rrs, &dns.A{Hdr: hdr(owner, dns.TypeA, a.ttl), A: net.IP(r.addr.AsSlice())})
		} else if qtype == dns.TypeAAAA && r.addr.Is6() {
			seen[r.addr] = true
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(owner, dns.TypeAAAA, a.ttl), AAAA: net.IP(r.addr.AsSlice())})
		}
	}
	return rrs, truncated, upstream, nil
}

// srv answers SRV like CoreDNS's plugin.SRV: priority 0, weight
// floor(100/N) (at least 1) with N counted before de-duplication by
// (target, port), ports of -1 skipped, A/AAAA of each target in Additional.
// ExternalName services have no SRV (NODATA).
func (a *answerer) srv(s *snapshot, owner, base, zoneQ string) (answer, extra []dns.RR, err error) {
	recs, err := a.records(s, base)
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for _, r := range recs {
		if r.target == "" {
			n++
		}
	}
	if n == 0 {
		return nil, nil, nil
	}
	weight := uint16(math.Floor(100.0 / float64(n*100) * 100))
	if weight == 0 {
		weight = 1
	}
	type dup struct {
		target string
		port   int32
		addr   netip.Addr
	}
	seen := map[dup]bool{}
	for _, r := range recs {
		if r.target != "" || r.port == -1 {
			continue
		}
		target := r.key + "." + zoneQ
		if k := (dup{target: target, port: r.port}); !seen[k] {
			seen[k] = true
			answer = append(answer, &dns.SRV{Hdr: hdr(owner, dns.TypeSRV, a.ttl), Priority: 0, Weight: weight, Port: uint16(r.port), Target: target})
		}
		if k := (dup{target: target, addr: r.addr}); r.addr.IsValid() && !seen[k] {
			seen[k] = true
			extra = append(extra, addrRR(target, r.addr, a.ttl))
		}
	}
	return answer, extra, nil
}

// reverse answers a name in an authoritative reverse zone.
func (a *answerer) reverse(s *snapshot, q dns.Question, lname, zone string, res *result) {
	if lname == zone {
		switch q.Qtype {
		case dns.TypeSOA:
			res.answer = []dns.RR{a.soa(s, res.soaZone)}
		case dns.TypeNS:
			res.answer, res.extra = a.ns(s, res.soaZone)
		}
		return
	}
	ptrs := a.ptr(s, lname)
	if len(ptrs) == 0 {
		res.rcode = dns.RcodeNameError
		return
	}
	if q.Qtype == dns.TypePTR {
		res.answer = a.ptrRRs(q.Name, ptrs)
	}
}

// ptr finds the PTR targets of a reverse name: the ClusterIP's service first
// (only that one), otherwise every (endpoint, service) pair of the address.
func (a *answerer) ptr(s *snapshot, lname string) []ptrTarget {
	ip, ok := reverseAddr(lname)
	if !ok {
		return nil
	}
	if t, ok := s.clusterIP[ip]; ok {
		return []ptrTarget{t}
	}
	return s.endpointIP[ip]
}

func (a *answerer) ptrRRs(owner string, ptrs []ptrTarget) []dns.RR {
	rrs := make([]dns.RR, 0, len(ptrs))
	for _, t := range ptrs {
		rrs = append(rrs, &dns.PTR{Hdr: hdr(owner, dns.TypePTR, a.ttl), Ptr: string(t) + "." + a.zone})
	}
	return rrs
}

func (a *answerer) soa(s *snapshot, zoneQ string) *dns.SOA {
	ttl := a.ttl
	if ttl > 300 {
		ttl = 300
	}
	return &dns.SOA{Hdr: hdr(zoneQ, dns.TypeSOA, ttl), Ns: "ns.dns." + a.zone, Mbox: "hostmaster." + a.zone,
		Serial: s.serial, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: a.ttl}
}

// ns is the apex NS: the kube-dns Service's name and ClusterIPs when it
// exists (as in a real cluster), otherwise ns.dns.<zone> and our listeners.
func (a *answerer) ns(s *snapshot, zoneQ string) (answer, extra []dns.RR) {
	name, ips := "ns.dns."+a.zone, a.nsAddrs
	if len(s.dnsIPs) > 0 {
		name, ips = "kube-dns.kube-system.svc."+a.zone, s.dnsIPs
	}
	answer = []dns.RR{&dns.NS{Hdr: hdr(zoneQ, dns.TypeNS, a.ttl), Ns: name}}
	for _, ip := range ips {
		extra = append(extra, addrRR(name, ip, a.ttl))
	}
	return answer, extra
}

func addrRR(name string, ip netip.Addr, ttl uint32) dns.RR {
	if ip.Is4() {
		return &dns.A{Hdr: hdr(name, dns.TypeA, ttl), A: net.IP(ip.AsSlice())}
	}
	return &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA, ttl), AAAA: net.IP(ip.AsSlice())}
}

func hdr(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

// reverseAddr parses a full reverse name (lowercase): four decimal octets
// under in-addr.arpa or 32 nibbles under ip6.arpa.
func reverseAddr(lname string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(lname, ".in-addr.arpa."); ok {
		l := strings.Split(rest, ".")
		if len(l) != 4 {
			return netip.Addr{}, false
		}
		ip, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
		return ip, err == nil
	}
	if rest, ok := strings.CutSuffix(lname, ".ip6.arpa."); ok {
		l := strings.Split(rest, ".")
		if len(l) != 32 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i, nib := range l {
			if len(nib) != 1 {
				return netip.Addr{}, false
			}
			v := strings.IndexByte("0123456789abcdef", nib[0])
			if v < 0 {
				return netip.Addr{}, false
			}
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= byte(v) << 4
			} else {
				b[pos/2] |= byte(v)
			}
		}
		return netip.AddrFrom16(b).Unmap(), true
	}
	return netip.Addr{}, false
}

// reverseZones are the reverse zones covering a prefix, on octet (IPv4) or
// nibble (IPv6) boundaries: 10.96.0.0/12 gives 96.10.in-addr.arpa. through
// 111.10.in-addr.arpa.
func reverseZones(p netip.Prefix) []string {
	if !p.IsValid() {
		return nil
	}
	p = p.Masked()
	step := 8
	if p.Addr().Is6() {
		step = 4
	}
	bits := (p.Bits() + step - 1) / step * step
	if bits-p.Bits() > 8 {
		bits = p.Bits() / step * step
	}
	var out []string
	n := 1 << (bits - p.Bits())
	addr := p.Addr()
	for i := 0; i < n; i++ {
		out = append(out, reverseZoneName(addr, bits))
		addr = nextPrefixAddr(addr, bits)
	}
	return out
}

func reverseZoneName(addr netip.Addr, bits int) string {
	arpa, _ := dns.ReverseAddr(addr.String())
	labels := dns.SplitDomainName(arpa)
	unit := 8
	suffix := 2 // in-addr.arpa
	if addr.Is6() {
		unit = 4
	}
	keep := bits / unit
	total := len(labels) - suffix
	return strings.Join(labels[total-keep:], ".") + "."
}

// nextPrefixAddr is the first address of the next prefix of length bits.
func nextPrefixAddr(a netip.Addr, bits int) netip.Addr {
	b := a.AsSlice()
	i := (bits - 1) / 8
	inc := byte(1) << (7 - (bits-1)%8)
	for ; i >= 0; i-- {
		old := b[i]
		b[i] += inc
		if b[i] > old {
			break
		}
		inc = 1
	}
	r, _ := netip.AddrFromSlice(b)
	return r
}

// lowerASCII lowercases A-Z only, so the result has the length of the input
// and the zone suffix can be cut from the query name at the same offset.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
