package dns

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// These tests call the answering rules directly: a snapshot built from
// objects, a question, no sockets. Names outside the zone come from
// mapUpstream instead of a resolver.

// mapUpstream answers the names ExternalName targets and autopath need; every
// other name is NXDOMAIN.
func mapUpstream(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	addrs := map[string]string{
		"ext.interwebs.test.": "1.2.3.4",
		"foo.example.com.":    "192.0.2.123",
		"www.example.org.":    "192.0.2.80",
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	a, ok := addrs[strings.ToLower(name)]
	if !ok {
		m.Rcode = dns.RcodeNameError
		return m, nil
	}
	if qtype == dns.TypeA {
		rr, err := dns.NewRR(name + " 300 IN A " + a)
		if err != nil {
			return nil, err
		}
		m.Answer = []dns.RR{rr}
	}
	return m, nil
}

// rules returns the answering rules for cfg and a snapshot of objs.
func rules(t *testing.T, cfg Config, objs Objects, synced bool) (*answerer, *snapshot) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	watchPods := cfg.Pods == PodsVerified || cfg.Autopath
	return newAnswerer(cfg, mapUpstream), buildSnapshot(objs, synced, time.Unix(1700000000, 0), watchPods)
}

// asReply turns an outcome into the message the transport would send, so the
// conformance rows' checks apply to it.
func asReply(q dns.Question, o outcome) *dns.Msg {
	m := new(dns.Msg)
	m.Response, m.RecursionDesired = true, true
	m.Question = []dns.Question{q}
	m.Authoritative, m.Rcode, m.Truncated = o.authoritative, o.rcode, o.truncated
	m.Answer, m.Ns, m.Extra = o.answer, o.ns, o.extra
	return m
}

// TestRespondConformanceRows runs every row of the conformance table through
// the rules alone: the rows the server forwards must come out as "forward",
// every other row with the answer the server sends over the wire.
func TestRespondConformanceRows(t *testing.T) {
	a, snap := rules(t, Config{NSAddrs: []netip.Addr{netip.MustParseAddr("10.244.1.1")}}, handlerFixture(), true)
	for _, w := range handlerRows {
		q := dns.Question{Name: w.name, Qtype: w.qtype, Qclass: dns.ClassINET}
		o := a.respond(context.Background(), snap, q, netip.Addr{})
		forwarded := w.noAA && w.rcode != dns.RcodeRefused
		if o.forward != forwarded {
			t.Errorf("%s: %s %s: forward=%v, want %v", w.ref, w.name, dns.TypeToString[w.qtype], o.forward, forwarded)
			continue
		}
		if !o.forward {
			checkReply(t, "rules", w, asReply(q, o))
		}
	}
}

// TestRespond covers what the rules decide beyond the records: forwarding,
// fallthrough, SERVFAIL before the first sync, and which answers may be
// memoised (those from the snapshot alone).
func TestRespond(t *testing.T) {
	client := netip.MustParseAddr("10.244.9.9")
	autopathObjs := handlerFixture()
	autopathObjs.Pods = append(autopathObjs.Pods, pod("test-1", "client", client.String()))
	for _, tc := range []struct {
		name       string
		cfg        Config
		objs       Objects
		synced     bool
		qname      string
		qtype      uint16
		forward    bool
		rcode      int
		answers    int
		memoisable bool
	}{
		{name: "service A from the snapshot", objs: handlerFixture(), synced: true,
			qname: tsvc1, qtype: dns.TypeA, answers: 1, memoisable: true},
		{name: "name outside every zone is forwarded", objs: handlerFixture(), synced: true,
			qname: "www.example.org.", qtype: dns.TypeA, forward: true},
		{name: "NXDOMAIN in the zone is authoritative", objs: handlerFixture(), synced: true,
			qname: "nope.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError, memoisable: true},
		{name: "NXDOMAIN before the first sync is SERVFAIL", objs: Objects{}, synced: false,
			qname: tsvc1, qtype: dns.TypeA, rcode: dns.RcodeServerFailure, memoisable: true},
		{name: "dns-version needs no sync", objs: Objects{}, synced: false,
			qname: "dns-version.cluster.local.", qtype: dns.TypeTXT, answers: 1, memoisable: true},
		{name: "fallthrough forwards NXDOMAIN", cfg: Config{Fallthrough: []string{"cluster.local"}}, objs: handlerFixture(), synced: true,
			qname: "f.b.svc.cluster.local.", qtype: dns.TypeA, forward: true},
		{name: "fallthrough keeps existing names", cfg: Config{Fallthrough: []string{"cluster.local"}}, objs: handlerFixture(), synced: true,
			qname: tsvc1, qtype: dns.TypeA, answers: 1, memoisable: true},
		{name: "ExternalName to an outside name carries upstream data", objs: handlerFixture(), synced: true,
			qname: "external.testns.svc.cluster.local.", qtype: dns.TypeA, answers: 2},
		{name: "PTR of an endpoint outside the reverse zones", objs: handlerFixture(), synced: true,
			qname: "1.0.0.172.in-addr.arpa.", qtype: dns.TypePTR, answers: 1, memoisable: true},
		{name: "PTR of an unknown address outside the reverse zones is forwarded", objs: handlerFixture(), synced: true,
			qname: "8.8.8.8.in-addr.arpa.", qtype: dns.TypePTR, forward: true},
		{name: "PTR of an unknown address in a reverse zone is NXDOMAIN", cfg: Config{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12")},
			objs: handlerFixture(), synced: true, qname: "9.9.96.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError, memoisable: true},
		{name: "zone transfer refused", objs: handlerFixture(), synced: true,
			qname: "cluster.local.", qtype: dns.TypeAXFR, rcode: dns.RcodeRefused, memoisable: true},
		{name: "autopath finds the name one search step on", cfg: Config{Autopath: true}, objs: autopathObjs, synced: true,
			qname: "svc1.testns.test-1.svc.cluster.local.", qtype: dns.TypeA, answers: 2},
		{name: "autopath from a client that is no pod", cfg: Config{Autopath: true}, objs: handlerFixture(), synced: true,
			qname: "svc1.testns.test-1.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, snap := rules(t, tc.cfg, tc.objs, tc.synced)
			o := a.respond(context.Background(), snap, dns.Question{Name: tc.qname, Qtype: tc.qtype, Qclass: dns.ClassINET}, client)
			if o.forward != tc.forward {
				t.Fatalf("forward=%v, want %v", o.forward, tc.forward)
			}
			if tc.forward {
				return
			}
			if o.rcode != tc.rcode || len(o.answer) != tc.answers || o.memoisable != tc.memoisable {
				t.Errorf("rcode %s, %d answers %q, memoisable=%v; want %s, %d answers, memoisable=%v",
					dns.RcodeToString[o.rcode], len(o.answer), rrText(o.answer), o.memoisable,
					dns.RcodeToString[tc.rcode], tc.answers, tc.memoisable)
			}
			if wantAA := tc.rcode != dns.RcodeRefused; o.authoritative != wantAA {
				t.Errorf("AA=%v, want %v", o.authoritative, wantAA)
			}
			if len(o.answer) == 0 && tc.rcode != dns.RcodeRefused && (len(o.ns) != 1 || o.ns[0].Header().Rrtype != dns.TypeSOA) {
				t.Errorf("authority %q, want the zone's SOA", rrText(o.ns))
			}
		})
	}
}
