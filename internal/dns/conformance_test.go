package dns

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// want is one query and what must come back. Answer and Extra are record
// texts compared as sets ("*" in the TTL field matches any TTL: upstream
// records age in the cache). SOA is the owner of the SOA expected in the
// authority section ("" = authority must be empty).
type want struct {
	ref    string // section or row of docs/dns-conformance.md
	name   string
	qtype  uint16
	rcode  int
	answer []string
	extra  []string
	soa    string
	noAA   bool // forwarded answers are not authoritative
	tc     bool
}

const (
	nx    = dns.RcodeNameError
	ok    = dns.RcodeSuccess
	zone  = "cluster.local."
	tsvc1 = "svc1.testns.svc.cluster.local."
)

// handlerRows are docs/dns-conformance.md §3.5 rows 1-27, 31, 38, 39 and the
// Kubernetes e2e DNS queries of §4, against handlerFixture.
var handlerRows = []want{
	{ref: "3.5#1", name: tsvc1, qtype: dns.TypeA, answer: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.5#2", name: "svcempty.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.1"}},
	{ref: "3.5#3", name: tsvc1, qtype: dns.TypeSRV,
		answer: []string{tsvc1 + " 5 IN SRV 0 100 80 " + tsvc1}, extra: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.5#4", name: "_http._tcp." + tsvc1, qtype: dns.TypeSRV,
		answer: []string{"_http._tcp." + tsvc1 + " 5 IN SRV 0 100 80 " + tsvc1}, extra: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.5#4 (no underscore)", name: "http.tcp." + tsvc1, qtype: dns.TypeSRV,
		answer: []string{"http.tcp." + tsvc1 + " 5 IN SRV 0 100 80 " + tsvc1}, extra: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.2 quirk: _port._proto as A", name: "_http._tcp." + tsvc1, qtype: dns.TypeA, answer: []string{"_http._tcp." + tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.2: missing port", name: "_https._tcp." + tsvc1, qtype: dns.TypeSRV, rcode: nx, soa: zone},
	{ref: "3.2: port case-insensitive", name: "_HTTP._TCP." + tsvc1, qtype: dns.TypeSRV,
		answer: []string{"_HTTP._TCP." + tsvc1 + " 5 IN SRV 0 100 80 " + tsvc1}, extra: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.5#5", name: tsvc1, qtype: dns.TypeAAAA, soa: zone},
	{ref: "3.5#6", name: "svc0.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#6", name: "svc0.testns.svc.cluster.local.", qtype: dns.TypeAAAA, rcode: nx, soa: zone},
	{ref: "3.5#8", name: "svc1.nsnoexist.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#9", name: "dns-version.cluster.local.", qtype: dns.TypeTXT, answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
	{ref: "3.2: dns-version other type", name: "dns-version.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#10", name: tsvc1, qtype: dns.TypeTXT, soa: zone},
	{ref: "3.5#10", name: "svc0.svc-nons.svc.cluster.local.", qtype: dns.TypeTXT, soa: zone}, // exists here: all namespaces exposed
	{ref: "3.5#10", name: "svc9.svc-nons.svc.cluster.local.", qtype: dns.TypeTXT, rcode: nx, soa: zone},
	{ref: "3.5#11", name: "bogusendpoint.hdls1.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#11", name: "bogusendpoint.svc0.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#12", name: "svc6.testns.svc.cluster.local.", qtype: dns.TypeAAAA, answer: []string{"svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"}},
	{ref: "3.5#12", name: "_http._tcp.svc6.testns.svc.cluster.local.", qtype: dns.TypeSRV,
		answer: []string{"_http._tcp.svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."},
		extra:  []string{"svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"}},
	{ref: "3.5#13", name: "hdls1.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
		"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2", "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
		"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4", "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5"}},
	{ref: "3.5#13", name: "hdls1.testns.svc.cluster.local.", qtype: dns.TypeAAAA, answer: []string{
		"hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1", "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2"}},
	{ref: "3.5#14", name: "_http._tcp.hdls1.testns.svc.cluster.local.", qtype: dns.TypeSRV, answer: []string{
		"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-2.hdls1.testns.svc.cluster.local.",
		"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-3.hdls1.testns.svc.cluster.local.",
		"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 dup-name.hdls1.testns.svc.cluster.local.",
		"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--1.hdls1.testns.svc.cluster.local.",
		"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--2.hdls1.testns.svc.cluster.local.",
	}, extra: []string{
		"172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
		"172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
		"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
		"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
		"5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
		"5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
	}},
	{ref: "3.5#15", name: "172-0-0-2.hdls1.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2"}},
	{ref: "3.5#15", name: "5678-abcd--1.hdls1.testns.svc.cluster.local.", qtype: dns.TypeAAAA, answer: []string{"5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1"}},
	{ref: "3.2: hostname hides the dashed IP", name: "172-0-0-4.hdls1.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#16", name: "dup-name.hdls1.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
		"dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4", "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5"}},
	{ref: "3.5#17", name: "hdlsprtls.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"}},
	{ref: "3.5#17", name: "172-0-0-20.hdlsprtls.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"172-0-0-20.hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"}},
	{ref: "3.5#17 (no SRV)", name: "hdlsprtls.testns.svc.cluster.local.", qtype: dns.TypeSRV, soa: zone},
	{ref: "3.5#18", name: "svc-dual-stack.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3"}},
	{ref: "3.5#18", name: "svc-dual-stack.testns.svc.cluster.local.", qtype: dns.TypeAAAA, answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"}},
	{ref: "3.5#18", name: "svc-dual-stack.testns.svc.cluster.local.", qtype: dns.TypeSRV,
		answer: []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.cluster.local."},
		extra:  []string{"svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3", "svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"}},
	{ref: "3.2: endpoint name of a ClusterIP service", name: "ep1a.svc1.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"ep1a.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.1"}},
	{ref: "3.2: too many labels", name: "a.b.c.svc1.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.2: wrong 2nd-level label", name: "foo.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "1.5: no wildcards", name: "*.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "1.5: no wildcards", name: "any.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#19", name: "svc.cluster.local.", qtype: dns.TypeA, soa: zone},
	{ref: "3.5#19", name: "pod.cluster.local.", qtype: dns.TypeA, soa: zone},
	{ref: "3.5#19", name: "testns.svc.cluster.local.", qtype: dns.TypeA, soa: zone},
	{ref: "3.5#20", name: "svc.cluster.local.", qtype: dns.TypeNS, soa: zone},
	{ref: "3.5#20", name: "testns.svc.cluster.local.", qtype: dns.TypeNS, soa: zone},
	{ref: "3.5#20", name: "foo.cluster.local.", qtype: dns.TypeNS, rcode: nx, soa: zone},
	{ref: "3.5#20", name: "foo.svc.cluster.local.", qtype: dns.TypeNS, rcode: nx, soa: zone},
	{ref: "3.5#21", name: tsvc1, qtype: dns.TypeSOA, soa: zone},
	{ref: "3.3: PTR on a forward name", name: tsvc1, qtype: dns.TypePTR, soa: zone},
	{ref: "3.3: other types decide by existence", name: tsvc1, qtype: dns.TypeMX, soa: zone},
	{ref: "3.3: other types decide by existence", name: "svc0.testns.svc.cluster.local.", qtype: dns.TypeHINFO, rcode: nx, soa: zone},
	{ref: "3.5#22", name: "external.testns.svc.cluster.local.", qtype: dns.TypeCNAME, answer: []string{"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."}},
	{ref: "3.5#23", name: "external.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
		"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test.", "ext.interwebs.test. * IN A 1.2.3.4"}},
	{ref: "3.5#23: ExternalName SRV", name: "external.testns.svc.cluster.local.", qtype: dns.TypeSRV, soa: zone},
	{ref: "3.5#24", name: "external-to-service.testns.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
		"external-to-service.testns.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local.", tsvc1 + " 5 IN A 10.0.0.1"}},
	{ref: "3.5#25", name: "endpoint.external.testns.svc.cluster.local.", qtype: dns.TypeCNAME, rcode: nx, soa: zone},
	{ref: "3.5#25", name: "subdomain.subdomain.external.testns.svc.cluster.local.", qtype: dns.TypeCNAME, rcode: nx, soa: zone},
	{ref: "3.5#26", name: zone, qtype: dns.TypeSOA, answer: []string{"cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. * 7200 1800 86400 5"}},
	{ref: "3.5#26", name: zone, qtype: dns.TypeNS, answer: []string{"cluster.local. 5 IN NS ns.dns.cluster.local."}, extra: []string{"ns.dns.cluster.local. 5 IN A 10.244.1.1"}},
	{ref: "3.5#26", name: "ns.dns.cluster.local.", qtype: dns.TypeA, answer: []string{"ns.dns.cluster.local. 5 IN A 10.244.1.1"}},
	{ref: "3.5#26", name: zone, qtype: dns.TypeA, soa: zone},
	{ref: "3.5#26", name: zone, qtype: dns.TypeAAAA, soa: zone},
	{ref: "3.5#26", name: zone, qtype: dns.TypeSRV, soa: zone},
	{ref: "3.5#26", name: zone, qtype: dns.TypeHINFO, soa: zone},
	{ref: "3.5#26: zone transfer", name: zone, qtype: dns.TypeAXFR, rcode: dns.RcodeRefused, noAA: true},
	{ref: "3.5#27", name: "SvC1.TeStNs.SvC.cLuStEr.LoCaL.", qtype: dns.TypeA, answer: []string{"SvC1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN A 10.0.0.1"}},
	{ref: "3.5#27", name: "_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL.", qtype: dns.TypeSRV,
		answer: []string{"_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN SRV 0 100 80 svc1.testns.svc.cLuStEr.LoCaL."},
		extra:  []string{"svc1.testns.svc.cLuStEr.LoCaL. 5 IN A 10.0.0.1"}},
	{ref: "3.5#27", name: "not-a-service.testns.svc.ClUsTeR.lOcAl.", qtype: dns.TypeA, rcode: nx, soa: "ClUsTeR.lOcAl."},
	{ref: "3.5#31", name: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#31", name: "podns.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#38", name: "svc-unready.test-1.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "3.5#39", name: "svc-1-a.test-1.svc.cluster.local.", qtype: dns.TypeSRV, answer: []string{
		"svc-1-a.test-1.svc.cluster.local. 5 IN SRV 0 50 80 svc-1-a.test-1.svc.cluster.local.",
		"svc-1-a.test-1.svc.cluster.local. 5 IN SRV 0 50 443 svc-1-a.test-1.svc.cluster.local."},
		extra: []string{"svc-1-a.test-1.svc.cluster.local. 5 IN A 10.96.0.100"}},
	{ref: "3.2: CI endpoint of a ClusterIP service", name: "172-17-0-222.svc-1-a.test-1.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"172-17-0-222.svc-1-a.test-1.svc.cluster.local. 5 IN A 172.17.0.222"}},
	{ref: "3.2: PTR outside the reverse zones, an endpoint", name: "1.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
		answer: []string{"1.0.0.172.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."}},
	{ref: "3.2: PTR outside the reverse zones, forwarded", name: "8.8.8.8.in-addr.arpa.", qtype: dns.TypePTR, noAA: true,
		answer: []string{"8.8.8.8.in-addr.arpa. * IN PTR google-public-dns-a.google.com."}},
	{ref: "7: forwarding", name: "www.example.org.", qtype: dns.TypeA, noAA: true, answer: []string{"www.example.org. * IN A 192.0.2.80"}},
	{ref: "7: forwarding keeps case", name: "WwW.eXaMpLe.OrG.", qtype: dns.TypeA, noAA: true, answer: []string{"WwW.eXaMpLe.OrG. * IN A 192.0.2.80"}},
	{ref: "7: forwarding, upstream NXDOMAIN", name: "nope.example.org.", qtype: dns.TypeA, noAA: true, rcode: nx, soa: "example."},
	{ref: "7: forwarding, upstream SERVFAIL", name: "servfail.example.org.", qtype: dns.TypeA, noAA: true, rcode: dns.RcodeServerFailure},

	// §4: Kubernetes e2e DNS tests, queries as the probe pods send them.
	{ref: "4: cluster", name: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}},
	{ref: "4: partial kubernetes.default (search 1: wrong)", name: "kubernetes.default.e2e.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: partial kubernetes.default (search 2: right)", name: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}},
	{ref: "4: partial kubernetes.default.svc (search 1)", name: "kubernetes.default.svc.e2e.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: partial kubernetes.default.svc (search 2)", name: "kubernetes.default.svc.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: service name starting with a digit", name: "1kubernetes.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"1kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.2"}},
	{ref: "4: services, headless A", name: "dns-test-service.e2e.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"dns-test-service.e2e.svc.cluster.local. 5 IN A 10.244.1.5"}},
	{ref: "4: services, headless SRV", name: "_http._tcp.dns-test-service.e2e.svc.cluster.local.", qtype: dns.TypeSRV,
		answer: []string{"_http._tcp.dns-test-service.e2e.svc.cluster.local. 5 IN SRV 0 100 80 dns-querier-1.dns-test-service.e2e.svc.cluster.local."},
		extra:  []string{"dns-querier-1.dns-test-service.e2e.svc.cluster.local. 5 IN A 10.244.1.5"}},
	{ref: "4: services, ClusterIP SRV", name: "_http._tcp.test-service-2.e2e.svc.cluster.local.", qtype: dns.TypeSRV,
		answer: []string{"_http._tcp.test-service-2.e2e.svc.cluster.local. 5 IN SRV 0 100 80 test-service-2.e2e.svc.cluster.local."},
		extra:  []string{"test-service-2.e2e.svc.cluster.local. 5 IN A 10.96.5.5"}},
	{ref: "4: services, ClusterIP PTR", name: "5.5.96.10.in-addr.arpa.", qtype: dns.TypePTR,
		answer: []string{"5.5.96.10.in-addr.arpa. 5 IN PTR test-service-2.e2e.svc.cluster.local."}},
	{ref: "4: partial dns-test-service.e2e (search 1)", name: "dns-test-service.e2e.e2e.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: partial dns-test-service.e2e.svc (search 1)", name: "dns-test-service.e2e.svc.e2e.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: partial dns-test-service.e2e.svc (search 2)", name: "dns-test-service.e2e.svc.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
	{ref: "4: partial _http._tcp.dns-test-service.e2e.svc (search 1)", name: "_http._tcp.dns-test-service.e2e.svc.e2e.svc.cluster.local.", qtype: dns.TypeSRV, rcode: nx, soa: zone},
	{ref: "4: partial _http._tcp.dns-test-service.e2e.svc (search 2)", name: "_http._tcp.dns-test-service.e2e.svc.svc.cluster.local.", qtype: dns.TypeSRV, rcode: nx, soa: zone},
	{ref: "4: partial _http._tcp.test-service-2.e2e.svc (search 1)", name: "_http._tcp.test-service-2.e2e.svc.e2e.svc.cluster.local.", qtype: dns.TypeSRV, rcode: nx, soa: zone},
	{ref: "4: pods for Subdomain", name: "dns-querier-2.dns-test-service-2.e2e.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"dns-querier-2.dns-test-service-2.e2e.svc.cluster.local. 5 IN A 10.244.1.6"}},
	{ref: "4: pods for Subdomain", name: "dns-test-service-2.e2e.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"dns-test-service-2.e2e.svc.cluster.local. 5 IN A 10.244.1.6"}},
	{ref: "4: ExternalName CNAME", name: "dns-test-service-3.e2e.svc.cluster.local.", qtype: dns.TypeCNAME,
		answer: []string{"dns-test-service-3.e2e.svc.cluster.local. 5 IN CNAME foo.example.com."}},
	{ref: "4: ExternalName to an upstream-only name", name: "dns-test-service-3.e2e.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"dns-test-service-3.e2e.svc.cluster.local. 5 IN CNAME foo.example.com.", "foo.example.com. * IN A 192.0.2.123"}},
	// CoreDNS's plugin.A keeps the CNAME whatever the upstream answers for
	// the target (upstream.Lookup reports no error; forward writes SERVFAIL
	// or REFUSED as a reply): the CNAME alone, NOERROR.
	{ref: "4: ExternalName to a name the upstream fails", name: "upstream-fails.e2e.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"upstream-fails.e2e.svc.cluster.local. 5 IN CNAME servfail.example.org."}},
	{ref: "4: ClusterIP to ExternalName (in-zone chase)", name: "svc-to-externalsvc.e2e.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
		"svc-to-externalsvc.e2e.svc.cluster.local. 5 IN CNAME externalsvc.e2e.svc.cluster.local.", "externalsvc.e2e.svc.cluster.local. 5 IN A 10.96.7.7"}},
}

func TestConformance(t *testing.T) {
	up := fakeUpstream(t)
	_, addr := startServer(t, Config{Upstreams: []netip.AddrPort{up}, NSAddrs: []netip.Addr{netip.MustParseAddr("10.244.1.1")}},
		NewStaticSource(handlerFixture(), true))
	runRows(t, addr, handlerRows)
}

// TestConformanceOptions covers the rows that need other options or fixtures.
func TestConformanceOptions(t *testing.T) {
	up := fakeUpstream(t)
	fixture := handlerFixture()
	withKubeDNS := handlerFixture()
	withKubeDNS.Services = append(withKubeDNS.Services, clusterIPSvc("kube-system", "kube-dns", []string{"10.96.0.10"},
		portSpec{"dns", "UDP", 53}, portSpec{"dns-tcp", "TCP", 53}))
	autopathFixture := handlerFixture()
	// The tests' queries come from 127.0.0.1: make that a pod in test-1.
	autopathFixture.Pods = append(autopathFixture.Pods, pod("test-1", "client", "127.0.0.1"))
	podFixture := handlerFixture()
	podFixture.Pods = append(podFixture.Pods, pod("podns", "p1", "10.240.0.1"), pod("testns", "p2", "172.0.0.2"))
	for _, tc := range []struct {
		name string
		cfg  Config
		objs Objects
		rows []want
	}{
		{"namespaces option", Config{Namespaces: []string{"testns"}}, fixture, []want{
			{ref: "3.5#7", name: "svc0.svc-nons.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#10", name: "svc0.svc-nons.svc.cluster.local.", qtype: dns.TypeTXT, rcode: nx, soa: zone},
			{ref: "3.5#1", name: tsvc1, qtype: dns.TypeA, answer: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
		}},
		{"pods insecure", Config{Pods: PodsInsecure}, fixture, []want{
			{ref: "3.5#29", name: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
			{ref: "3.5#29", name: "blah.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#29", name: "blah.podns.pod.cluster.local.", qtype: dns.TypeAAAA, rcode: nx, soa: zone},
			{ref: "3.5#29", name: "blah.podns.pod.cluster.local.", qtype: dns.TypeHINFO, rcode: nx, soa: zone},
			{ref: "3.5#29", name: "blah.pod-nons.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#29", name: "podns.pod.cluster.local.", qtype: dns.TypeA, soa: zone},
			{ref: "3.5#29 (IPv6)", name: "1234-abcd--1.podns.pod.cluster.local.", qtype: dns.TypeAAAA, answer: []string{"1234-abcd--1.podns.pod.cluster.local. 5 IN AAAA 1234:abcd::1"}},
		}},
		{"pods verified", Config{Pods: PodsVerified}, podFixture, []want{
			{ref: "3.5#30", name: "10-240-0-1.podns.pod.cluster.local.", qtype: dns.TypeA, answer: []string{"10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"}},
			{ref: "3.5#30", name: "172-0-0-2.podns.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#30", name: "pod-nons.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
		}},
		{"reverse zones", Config{ReverseZones: []string{"0.10.in-addr.arpa", "168.192.in-addr.arpa", "d.c.b.a.4.3.2.1.ip6.arpa"}}, reverseFixture(), []want{
			{ref: "3.5#32", name: "100.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.0.0.10.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."}},
			{ref: "3.5#33", name: "100.1.168.192.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.1.168.192.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."}},
			{ref: "3.5#34", name: "99.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{
				"99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc1.testns.svc.cluster.local.", "99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc2.testns.svc.cluster.local."}},
			{ref: "3.5#35", name: "101.0.0.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: nx, soa: "0.10.in-addr.arpa."},
			{ref: "3.5#36", name: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.", qtype: dns.TypePTR,
				answer: []string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa. 5 IN PTR ep1b.svc1.testns.svc.cluster.local."}},
			{ref: "3.3: A on a reverse name", name: "100.0.0.10.in-addr.arpa.", qtype: dns.TypeA, soa: "0.10.in-addr.arpa."},
			{ref: "3.4: reverse zone apex SOA", name: "0.10.in-addr.arpa.", qtype: dns.TypeSOA,
				answer: []string{"0.10.in-addr.arpa. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. * 7200 1800 86400 5"}},
		}},
		{"ignore empty_service", Config{IgnoreEmptyService: true}, fixture, []want{
			{ref: "3.5#37", name: "svcempty.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#37", name: "external.testns.svc.cluster.local.", qtype: dns.TypeCNAME, answer: []string{"external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."}},
			{ref: "3.5#37", name: tsvc1, qtype: dns.TypeA, answer: []string{tsvc1 + " 5 IN A 10.0.0.1"}},
		}},
		{"kube-dns service", Config{}, withKubeDNS, []want{
			{ref: "3.5#40", name: zone, qtype: dns.TypeNS, answer: []string{"cluster.local. 5 IN NS kube-dns.kube-system.svc.cluster.local."},
				extra: []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10"}},
		}},
		{"autopath", Config{Autopath: true, HostSearch: []string{"example.org"}}, autopathFixture, []want{
			{ref: "3.5#42", name: "svc-1-a.test-1.test-1.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
				"svc-1-a.test-1.test-1.svc.cluster.local. 5 IN CNAME svc-1-a.test-1.svc.cluster.local.", "svc-1-a.test-1.svc.cluster.local. 5 IN A 10.96.0.100"}},
			{ref: "3.5#42: found under svc.<zone>", name: "svc1.testns.test-1.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
				"svc1.testns.test-1.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local.", tsvc1 + " 5 IN A 10.0.0.1"}},
			{ref: "3.5#42: found upstream, bare name", name: "www.example.org.test-1.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
				"www.example.org.test-1.svc.cluster.local. * IN CNAME www.example.org.", "www.example.org. * IN A 192.0.2.80"}},
			{ref: "3.5#42: found upstream, host search", name: "www.test-1.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
				"www.test-1.svc.cluster.local. * IN CNAME www.example.org.", "www.example.org. * IN A 192.0.2.80"}},
			{ref: "3.5#42: the name itself exists", name: "svc-1-a.test-1.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
				"svc-1-a.test-1.svc.cluster.local. 5 IN A 10.96.0.100"}},
			{ref: "3.5#42: not the client's namespace", name: "svc-1-a.test-1.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "3.5#42: nothing anywhere", name: "nope.test-1.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
		}},
		{"fallthrough", Config{Fallthrough: []string{"cluster.local"}}, fixture, []want{
			{ref: "3.5#41", name: "f.b.svc.cluster.local.", qtype: dns.TypeA, noAA: true, answer: []string{"f.b.svc.cluster.local. * IN A 5.6.7.8"}},
		}},
		{"fallthrough svc", Config{Fallthrough: []string{"svc.cluster.local"}}, fixture, []want{
			{ref: "3.5#41", name: "foo.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
		}},
		{"ttl 30", Config{TTL: 30}, fixture, []want{
			{ref: "1.7", name: tsvc1, qtype: dns.TypeA, answer: []string{tsvc1 + " 30 IN A 10.0.0.1"}},
			{ref: "3.4: SOA ttl", name: "svc0.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Upstreams = []netip.AddrPort{up}
			_, addr := startServer(t, tc.cfg, NewStaticSource(tc.objs, true))
			runRows(t, addr, tc.rows)
		})
	}
}

// TestNotSynced is row 28: before the first sync, would-be NXDOMAIN answers
// are SERVFAIL (with the SOA), and what needs no data still answers.
func TestNotSynced(t *testing.T) {
	src := NewStaticSource(Objects{}, false)
	_, addr := startServer(t, Config{}, src)
	runRows(t, addr, []want{
		{ref: "3.5#28", name: "svc0.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeServerFailure, soa: zone},
		{ref: "3.5#28", name: tsvc1, qtype: dns.TypeA, rcode: dns.RcodeServerFailure, soa: zone},
		{ref: "3.5#28", name: "dns-version.cluster.local.", qtype: dns.TypeTXT, answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
	})
}

func runRows(t *testing.T, addr netip.AddrPort, rows []want) {
	t.Helper()
	for _, w := range rows {
		for _, netw := range []string{"udp", "tcp"} {
			// Twice over UDP: the second answer comes from the memo.
			for range 2 {
				r := exchange(t, addr, netw, w.name, w.qtype, 0)
				checkReply(t, netw, w, r)
			}
		}
	}
}

func checkReply(t *testing.T, netw string, w want, r *dns.Msg) {
	t.Helper()
	what := w.ref + ": " + w.name + " " + dns.TypeToString[w.qtype] + " over " + netw
	if r.Rcode != w.rcode {
		t.Errorf("%s: rcode %s, want %s", what, dns.RcodeToString[r.Rcode], dns.RcodeToString[w.rcode])
	}
	if r.Authoritative == w.noAA {
		t.Errorf("%s: AA=%v, want %v", what, r.Authoritative, !w.noAA)
	}
	if r.Truncated != w.tc {
		t.Errorf("%s: TC=%v, want %v", what, r.Truncated, w.tc)
	}
	if !r.Response || !r.RecursionDesired || (r.RecursionAvailable && !w.noAA) {
		t.Errorf("%s: flags QR=%v RD=%v RA=%v, want QR, RD copied, no RA on authoritative answers", what, r.Response, r.RecursionDesired, r.RecursionAvailable)
	}
	if len(r.Question) != 1 || r.Question[0].Name != w.name {
		t.Errorf("%s: question %v not echoed", what, r.Question)
	}
	if got := rrText(r.Answer); !matchSet(got, w.answer) {
		t.Errorf("%s: answer\n got  %q\n want %q", what, got, sorted(w.answer))
	}
	if got := rrText(r.Extra); !matchSet(got, w.extra) {
		t.Errorf("%s: extra\n got  %q\n want %q", what, got, sorted(w.extra))
	}
	switch {
	case w.soa == "" && len(r.Ns) != 0:
		t.Errorf("%s: authority %q, want none", what, rrText(r.Ns))
	case w.soa != "":
		soa, isSOA := (*dns.SOA)(nil), false
		if len(r.Ns) == 1 {
			soa, isSOA = r.Ns[0].(*dns.SOA)
		}
		switch {
		case !isSOA:
			t.Errorf("%s: authority %q, want the SOA of %s", what, rrText(r.Ns), w.soa)
		case soa.Hdr.Name != w.soa:
			t.Errorf("%s: SOA owner %q, want %q", what, soa.Hdr.Name, w.soa)
		case !w.noAA && (soa.Ns != "ns.dns.cluster.local." || soa.Minttl != soa.Hdr.Ttl && soa.Hdr.Ttl != 300):
			t.Errorf("%s: SOA %s, want MNAME ns.dns.cluster.local. and minimum = ttl", what, soa)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// matchSet compares record texts as sets; "*" in want matches any field.
func matchSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if !used[i] && fieldsMatch(g, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func fieldsMatch(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if w[i] != "*" && w[i] != g[i] {
			return false
		}
	}
	return true
}
