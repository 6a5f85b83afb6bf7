package dns

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestTruncation: UDP answers fit 512 bytes or the EDNS0 size and set TC when
// records had to go; TCP carries everything (docs/dns-conformance.md §6).
func TestTruncation(t *testing.T) {
	up := fakeUpstream(t)
	_, addr := startServer(t, Config{Upstreams: []netip.AddrPort{up}}, NewStaticSource(handlerFixture(), true))
	const big = "big-headless.testns.svc.cluster.local."
	for _, tc := range []struct {
		name    string
		netw    string
		bufsize uint16
		tc      bool
		n       int // answers, -1: fewer than all
	}{
		{"udp, no EDNS", "udp", 0, true, -1},
		{"udp, EDNS 1232", "udp", 1232, true, -1},
		{"udp, EDNS 4096", "udp", 4096, false, 100},
		{"tcp", "tcp", 0, false, 100},
	} {
		for range 2 { // the second from the memo
			r := exchange(t, addr, tc.netw, big, dns.TypeA, tc.bufsize)
			if r.Truncated != tc.tc || (tc.n >= 0 && len(r.Answer) != tc.n) || (tc.n < 0 && len(r.Answer) >= 100) {
				t.Errorf("%s: TC=%v with %d answers, want TC=%v and %d", tc.name, r.Truncated, len(r.Answer), tc.tc, tc.n)
			}
			if tc.bufsize > 0 && (r.IsEdns0() == nil || r.IsEdns0().UDPSize() != tc.bufsize) {
				t.Errorf("%s: EDNS0 OPT not echoed: %v", tc.name, r.IsEdns0())
			}
			if tc.bufsize == 0 && r.IsEdns0() != nil {
				t.Errorf("%s: OPT in the answer to a request without one", tc.name)
			}
			r.Compress = true
			if l := r.Len(); tc.netw == "udp" && l > max(512, int(tc.bufsize)) {
				t.Errorf("%s: %d bytes over UDP", tc.name, l)
			}
		}
	}
	// An ExternalName whose upstream answer does not fit: CNAME first, TC over UDP.
	r := exchange(t, addr, "udp", "external-big.testns.svc.cluster.local.", dns.TypeA, 0)
	if !r.Truncated || len(r.Answer) == 0 || r.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Errorf("external-big over udp: TC=%v answer %v", r.Truncated, rrText(r.Answer))
	}
	r = exchange(t, addr, "tcp", "external-big.testns.svc.cluster.local.", dns.TypeA, 0)
	if r.Truncated || len(r.Answer) != 61 || r.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Errorf("external-big over tcp: TC=%v, %d answers, want the CNAME and 60 A", r.Truncated, len(r.Answer))
	}
}

// TestMalformed: requests the server must refuse rather than answer.
func TestMalformed(t *testing.T) {
	_, addr := startServer(t, Config{}, NewStaticSource(handlerFixture(), true))
	ask := func(m *dns.Msg) *dns.Msg {
		t.Helper()
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr.String())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m := new(dns.Msg)
	m.SetQuestion(tsvc1, dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if r := ask(m); r.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %s, want FORMERR", dns.RcodeToString[r.Rcode])
	}
	m = new(dns.Msg)
	m.SetNotify(zone)
	if r := ask(m); r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %s, want NOTIMP", dns.RcodeToString[r.Rcode])
	}
	m = new(dns.Msg)
	m.SetQuestion(tsvc1, dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	if r := ask(m); r.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: %s, want BADVERS", dns.RcodeToString[r.Rcode])
	}
	m = new(dns.Msg)
	m.SetQuestion(tsvc1, dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r := ask(m); r.Rcode != dns.RcodeRefused {
		t.Errorf("class CH: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	// Garbage with a query header gets FORMERR; a datagram too short for a
	// header gets nothing.
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 'x'})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil || r.Id != 0xabcd || r.Rcode != dns.RcodeFormatError {
		t.Errorf("garbage: %v %v, want FORMERR with the request's ID", r, err)
	}
}

// TestUpdates: answers follow the API (the e2e ExternalName test's changes
// and a headless service's pods coming and going) once the debounce passed,
// and memoised answers never outlive the snapshot they came from.
func TestUpdates(t *testing.T) {
	up := fakeUpstream(t)
	objs := handlerFixture()
	src := NewStaticSource(objs, true)
	_, addr := startServer(t, Config{Upstreams: []netip.AddrPort{up}}, src)
	const ext = "dns-test-service-3.e2e.svc.cluster.local."
	const hl = "dns-test-service.e2e.svc.cluster.local."
	eventually := func(name string, qtype uint16, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := exchange(t, addr, "udp", name, qtype, 0)
			got := rrText(r.Answer)
			if matchSet(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: got %q, want %q", name, dns.TypeToString[qtype], got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	eventually(ext, dns.TypeCNAME, ext+" 5 IN CNAME foo.example.com.")
	eventually(hl, dns.TypeA, hl+" 5 IN A 10.244.1.5")

	replace := func(mutate func(o *Objects)) {
		o := src.Objects()
		o.Services = slices.Clone(o.Services)
		o.EndpointSlices = slices.Clone(o.EndpointSlices)
		mutate(&o)
		src.Set(o)
	}
	setService := func(o *Objects, s *corev1.Service) {
		for i, old := range o.Services {
			if old.Namespace == s.Namespace && old.Name == s.Name {
				o.Services[i] = s
			}
		}
	}
	replace(func(o *Objects) { setService(o, externalSvc("e2e", "dns-test-service-3", "bar.example.com")) })
	eventually(ext, dns.TypeCNAME, ext+" 5 IN CNAME bar.example.com.")
	eventually(ext, dns.TypeA, ext+" 5 IN CNAME bar.example.com.", "bar.example.com. * IN A 192.0.2.124")
	replace(func(o *Objects) {
		setService(o, clusterIPSvc("e2e", "dns-test-service-3", []string{"10.96.3.3"}, httpPort))
	})
	eventually(ext, dns.TypeA, ext+" 5 IN A 10.96.3.3")
	eventually(ext, dns.TypeCNAME)

	// Pods come and go behind the headless service.
	setSlice := func(o *Objects, s *discoveryv1.EndpointSlice) {
		for i, old := range o.EndpointSlices {
			if old.Namespace == s.Namespace && old.Name == s.Name {
				o.EndpointSlices[i] = s
			}
		}
	}
	replace(func(o *Objects) {
		setSlice(o, slice("e2e", "dns-test-service", "dns-test-service-x", discoveryv1.AddressTypeIPv4,
			v4(epSpec{ip: "10.244.1.5", hostname: "dns-querier-1"}, epSpec{ip: "10.244.2.9"}, epSpec{ip: "10.244.2.10", notReady: true}), httpPort))
	})
	eventually(hl, dns.TypeA, hl+" 5 IN A 10.244.1.5", hl+" 5 IN A 10.244.2.9")
	replace(func(o *Objects) {
		setSlice(o, slice("e2e", "dns-test-service", "dns-test-service-x", discoveryv1.AddressTypeIPv4, nil, httpPort))
	})
	eventually(hl, dns.TypeA)
	if r := exchange(t, addr, "udp", hl, dns.TypeA, 0); r.Rcode != dns.RcodeNameError {
		t.Errorf("headless service without ready endpoints: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
}

// TestForwardCache: upstream answers are cached up to their TTL (capped),
// with TTLs counting down; negative answers for the SOA minimum; the cache
// stays bounded.
func TestForwardCache(t *testing.T) {
	c := &fwdCache{max: 2, maxTTL: 30 * time.Second, m: map[fwdKey]*fwdEntry{}}
	now := time.Unix(1000, 0)
	pos := new(dns.Msg)
	pos.SetQuestion("a.example.", dns.TypeA)
	rr, _ := dns.NewRR("a.example. 300 IN A 192.0.2.1")
	pos.Answer = []dns.RR{rr}
	k := fwdKey{name: "a.example.", qtype: dns.TypeA}
	c.put(k, pos, now)
	if m := c.get(k, now.Add(10*time.Second)); m == nil || m.Answer[0].Header().Ttl != 290 {
		t.Errorf("after 10s: %v, want the answer with TTL 290", m)
	}
	if m := c.get(k, now.Add(30*time.Second)); m != nil {
		t.Errorf("after 30s (the cap): still cached")
	}
	neg := new(dns.Msg)
	neg.SetQuestion("b.example.", dns.TypeA)
	neg.Rcode = dns.RcodeNameError
	soa, _ := dns.NewRR("example. 60 IN SOA ns.example. h.example. 1 2 3 4 7")
	neg.Ns = []dns.RR{soa}
	kn := fwdKey{name: "b.example.", qtype: dns.TypeA}
	c.put(kn, neg, now)
	if c.get(kn, now.Add(6*time.Second)) == nil || c.get(kn, now.Add(7*time.Second)) != nil {
		t.Errorf("NXDOMAIN should be cached for the SOA minimum (7s)")
	}
	sf := new(dns.Msg)
	sf.Rcode = dns.RcodeServerFailure
	c.put(fwdKey{name: "c."}, sf, now)
	if c.get(fwdKey{name: "c."}, now) != nil {
		t.Errorf("SERVFAIL cached")
	}
	for i := range 5 {
		c.put(fwdKey{name: "x.", qtype: uint16(i)}, pos, now)
	}
	if len(c.m) > 2 {
		t.Errorf("cache holds %d entries, max 2", len(c.m))
	}
}

func TestUpstreams(t *testing.T) {
	rc := []byte("nameserver 127.0.0.53\nnameserver 10.244.1.1\nnameserver 192.168.56.200\nnameserver ::1\nnameserver 2001:db8::53\nnameserver 10.96.0.10\n")
	got := Upstreams(rc, netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("10.96.0.10"))
	want := []netip.AddrPort{netip.MustParseAddrPort("192.168.56.200:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	if !slices.Equal(got, want) {
		t.Errorf("Upstreams = %v, want %v", got, want)
	}
	for in, want := range map[string]string{"192.168.56.200": "192.168.56.200:53", "192.168.56.200:5353": "192.168.56.200:5353", "2001:db8::1": "[2001:db8::1]:53"} {
		if got, err := ParseUpstream(in); err != nil || got.String() != want {
			t.Errorf("ParseUpstream(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ParseUpstream("dns.example"); err == nil {
		t.Errorf("ParseUpstream accepted a name")
	}
}

func TestReverseZones(t *testing.T) {
	for in, want := range map[string][]string{
		"10.244.0.0/16": {"244.10.in-addr.arpa."},
		"10.96.0.0/12": {"96.10.in-addr.arpa.", "97.10.in-addr.arpa.", "98.10.in-addr.arpa.", "99.10.in-addr.arpa.",
			"100.10.in-addr.arpa.", "101.10.in-addr.arpa.", "102.10.in-addr.arpa.", "103.10.in-addr.arpa.",
			"104.10.in-addr.arpa.", "105.10.in-addr.arpa.", "106.10.in-addr.arpa.", "107.10.in-addr.arpa.",
			"108.10.in-addr.arpa.", "109.10.in-addr.arpa.", "110.10.in-addr.arpa.", "111.10.in-addr.arpa."},
		"192.168.1.0/24":   {"1.168.192.in-addr.arpa."},
		"fd00:10:96::/112": {"0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa."},
		"fd00::/6":         {"c.f.ip6.arpa.", "d.f.ip6.arpa.", "e.f.ip6.arpa.", "f.f.ip6.arpa."},
	} {
		got := reverseZones(netip.MustParsePrefix(in))
		if in == "fd00::/6" {
			// /6 is two bits short of a nibble boundary below /8: four zones at /8
			want = []string{"c.f.ip6.arpa.", "d.f.ip6.arpa.", "e.f.ip6.arpa.", "f.f.ip6.arpa."}
		}
		if !slices.Equal(got, want) {
			t.Errorf("reverseZones(%s) = %v, want %v", in, got, want)
		}
	}
	for name, want := range map[string]string{
		"1.0.0.10.in-addr.arpa.": "10.0.0.1",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.": "1234:abcd::1",
		"0.0.10.in-addr.arpa.":     "invalid IP",
		"1.0.0.300.in-addr.arpa.":  "invalid IP",
		"x.0.0.10.in-addr.arpa.":   "invalid IP",
		"1.0.0.10.0.in-addr.arpa.": "invalid IP",
	} {
		if got, _ := reverseAddr(name); got.String() != want {
			t.Errorf("reverseAddr(%s) = %s, want %s", name, got, want)
		}
	}
}

func TestMemoKey(t *testing.T) {
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	q := new(dns.Msg)
	q.SetQuestion(tsvc1, dns.TypeA)
	plain := pack(q)
	qUpper := new(dns.Msg)
	qUpper.SetQuestion("SVC1.testns.svc.cluster.local.", dns.TypeA)
	qEDNS := q.Copy()
	qEDNS.SetEdns0(1232, false)
	qDO := q.Copy()
	qDO.SetEdns0(1232, true)
	qCookie := qEDNS.Copy()
	qCookie.IsEdns0().Option = append(qCookie.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	keys := map[string]bool{}
	for name, b := range map[string][]byte{"plain": plain, "upper": pack(qUpper), "edns": pack(qEDNS), "do": pack(qDO)} {
		k, ok := memoKey(nil, b, overUDP)
		if !ok {
			t.Errorf("%s: no memo key", name)
		}
		keys[string(k)] = true
	}
	if len(keys) != 4 {
		t.Errorf("keys collide: %d distinct of 4", len(keys))
	}
	for name, b := range map[string][]byte{"cookie": pack(qCookie), "trailing": append(plain, 0), "short": plain[:15], "response": pack(new(dns.Msg).SetReply(q))} {
		if _, ok := memoKey(nil, b, overUDP); ok {
			t.Errorf("%s: memo key for a request the slow path must see", name)
		}
	}
	kt, _ := memoKey(nil, plain, overTCP)
	ku, _ := memoKey(nil, plain, overUDP)
	if string(kt) == string(ku) {
		t.Errorf("UDP and TCP share a key (truncation differs)")
	}
}

// TestFastPathAllocs: a memoised answer costs no allocation.
func TestFastPathAllocs(t *testing.T) {
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, NewStaticSource(handlerFixture(), true))
	if err != nil {
		t.Fatal(err)
	}
	s.rebuild()
	q := new(dns.Msg)
	q.SetQuestion(tsvc1, dns.TypeA)
	pkt, _ := q.Pack()
	sc := &udpScratch{key: make([]byte, 0, 512), out: make([]byte, 0, 4096)}
	ctx := context.Background()
	_, slow := s.handleUDP(ctx, pkt, sc, netip.Addr{})
	if slow == nil || slow() == nil {
		t.Fatal("first query did not take the slow path")
	}
	allocs := testing.AllocsPerRun(100, func() {
		if out, _ := s.handleUDP(ctx, pkt, sc, netip.Addr{}); out == nil {
			t.Fatal("memo miss")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per memoised answer", allocs)
	}
}

func BenchmarkAnswer(b *testing.B) {
	for _, memo := range []bool{true, false} {
		name := "memo"
		if !memo {
			name = "nomemo"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := New(Config{NoMemo: !memo, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, NewStaticSource(handlerFixture(), true))
			s.rebuild()
			q := new(dns.Msg)
			q.SetQuestion(tsvc1, dns.TypeA)
			pkt, _ := q.Pack()
			sc := &udpScratch{key: make([]byte, 0, 512), out: make([]byte, 0, 4096)}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if out, slow := s.handleUDP(ctx, pkt, sc, netip.Addr{}); out == nil {
					slow()
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Pods: "sometimes"}, {TTL: 3601}, {Zone: "bad..zone"}} {
		if _, err := New(c, NewStaticSource(Objects{}, true)); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if err := (Config{Zone: "cluster.example", TTL: 30, Pods: PodsInsecure}).Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}

// TestBefore: the hook (a Corefile's rewrite, hosts and stub domains) answers
// a query itself, or rewrites the question and has the server's reply
// restored; queries it passes on are answered as usual.
func TestBefore(t *testing.T) {
	cfg := Config{Before: func(_ context.Context, req *dns.Msg, _ netip.Addr) (*dns.Msg, func(*dns.Msg)) {
		q := req.Question[0]
		switch strings.ToLower(q.Name) {
		case "pinned.example.":
			m := new(dns.Msg)
			m.SetReply(req)
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(10, 9, 9, 9)})
			return m, nil
		case "alias.example.":
			req.Question[0].Name = "dns-test-service-3.e2e.svc.cluster.local."
			return nil, func(m *dns.Msg) {
				m.Question[0].Name = q.Name
				for _, rr := range m.Answer {
					rr.Header().Name = q.Name
				}
			}
		}
		return nil, nil
	}}
	_, addr := startServer(t, cfg, NewStaticSource(handlerFixture(), true))
	for _, c := range []struct {
		name string
		want []string
	}{
		{"pinned.example.", []string{"pinned.example. 60 IN A 10.9.9.9"}},
		{"alias.example.", []string{"alias.example. 5 IN CNAME foo.example.com."}},
		{"dns-test-service-3.e2e.svc.cluster.local.", []string{"dns-test-service-3.e2e.svc.cluster.local. 5 IN CNAME foo.example.com."}},
	} {
		for range 2 { // the second time from the memo, if memoised
			r := exchange(t, addr, "udp", c.name, dns.TypeCNAME, 0)
			if got := rrText(r.Answer); !matchSet(got, c.want) || r.Question[0].Name != c.name {
				t.Errorf("%s: got %q (question %s), want %q", c.name, got, r.Question[0].Name, c.want)
			}
		}
	}
}
