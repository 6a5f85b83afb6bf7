package dns

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A dual-stack cluster as a kubeadm cluster with
// --service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112 and
// --cluster-cidr=10.244.0.0/16,fd00:10:244::/56 holds it: Services with a
// ClusterIP per family in spec.clusterIPs (either family first), an
// EndpointSlice per family, pods with podIPs of both. CoreDNS's kubernetes
// plugin answers A from the IPv4 addresses and AAAA from the IPv6 ones of the
// same records (plugin/kubernetes findServices, plugin/backend_lookup.go A
// and AAAA), names endpoints without a hostname by their address with dashes
// (endpointHostname: "fd00-10-244-2--6", a trailing dash gets a 0), and a
// name with records of the other family only is NODATA with the SOA.

const (
	dsWeb  = "web.ds.svc.cluster.local."
	dsHdls = "hdls.ds.svc.cluster.local."
	// ip6.arpa names of fd00:10:96::20, fd00:10:244:1::6, fd00:10:244:2::6
	// and an unused fd00:10:96::99.
	arpaWeb6   = "0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa."
	arpaWeb06  = "6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa."
	arpaHdls6  = "6.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa."
	arpaUnused = "9.9.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa."
	// svcZone6 is the reverse zone of fd00:10:96::/112.
	svcZone6 = "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa."
)

func dualStackFixture() Objects {
	return Objects{
		Namespaces: ns("ds", "kube-system"),
		Services: []*corev1.Service{
			clusterIPSvc("ds", "web", []string{"10.96.0.20", "fd00:10:96::20"}, httpPort),
			clusterIPSvc("ds", "web6first", []string{"fd00:10:96::21", "10.96.0.21"}, httpPort),
			clusterIPSvc("ds", "only4", []string{"10.96.0.22"}, httpPort),
			clusterIPSvc("ds", "only6", []string{"fd00:10:96::23"}, httpPort),
			headlessSvc("ds", "hdls", httpPort),
			headlessSvc("ds", "hdls4", httpPort),
			externalSvc("ds", "ext", "web.ds.svc.cluster.local"),
			clusterIPSvc("kube-system", "kube-dns", []string{"10.96.0.10", "fd00:10:96::a"},
				portSpec{"dns", corev1.ProtocolUDP, 53}),
		},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			slice("ds", "web", "web-v4", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.5"}), httpPort),
			slice("ds", "web", "web-v6", discoveryv1.AddressTypeIPv6, v4(epSpec{ip: "fd00:10:244:1::5"}), httpPort),
			slice("ds", "hdls", "hdls-v4", discoveryv1.AddressTypeIPv4, v4(
				epSpec{ip: "10.244.1.6", hostname: "web-0"}, epSpec{ip: "10.244.2.6"}), httpPort),
			slice("ds", "hdls", "hdls-v6", discoveryv1.AddressTypeIPv6, v4(
				epSpec{ip: "fd00:10:244:1::6", hostname: "web-0"}, epSpec{ip: "fd00:10:244:2::6"},
				epSpec{ip: "fd00:10:244:2::7", notReady: true}), httpPort),
			slice("ds", "hdls4", "hdls4-v4", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.8"}), httpPort),
		},
		Pods: []*corev1.Pod{dualPod("ds", "web-0", "10.244.1.6", "fd00:10:244:1::6"),
			dualPod("ds", "v6first", "fd00:10:244:1::9", "10.244.1.9")},
	}
}

func dualPod(namespace, name, ip4, ip6 string) *corev1.Pod {
	p := pod(namespace, name, ip4)
	p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip6})
	return p
}

// dualStackRows are answered with every option at its default.
var dualStackRows = []want{
	// ClusterIP Services: each family's ClusterIP, whichever is primary.
	{ref: "ds: A of a dual-stack ClusterIP", name: dsWeb, qtype: dns.TypeA, answer: []string{dsWeb + " 5 IN A 10.96.0.20"}},
	{ref: "ds: AAAA of a dual-stack ClusterIP", name: dsWeb, qtype: dns.TypeAAAA, answer: []string{dsWeb + " 5 IN AAAA fd00:10:96::20"}},
	{ref: "ds: IPv6 primary, A", name: "web6first.ds.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"web6first.ds.svc.cluster.local. 5 IN A 10.96.0.21"}},
	{ref: "ds: IPv6 primary, AAAA", name: "web6first.ds.svc.cluster.local.", qtype: dns.TypeAAAA,
		answer: []string{"web6first.ds.svc.cluster.local. 5 IN AAAA fd00:10:96::21"}},
	{ref: "ds: SRV of a dual-stack ClusterIP", name: "_http._tcp." + dsWeb, qtype: dns.TypeSRV,
		answer: []string{"_http._tcp." + dsWeb + " 5 IN SRV 0 50 80 " + dsWeb},
		extra:  []string{dsWeb + " 5 IN A 10.96.0.20", dsWeb + " 5 IN AAAA fd00:10:96::20"}},
	{ref: "ds: IPv4-only Service, AAAA is NODATA", name: "only4.ds.svc.cluster.local.", qtype: dns.TypeAAAA, soa: zone},
	{ref: "ds: IPv4-only Service, A", name: "only4.ds.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"only4.ds.svc.cluster.local. 5 IN A 10.96.0.22"}},
	{ref: "ds: IPv6-only Service, A is NODATA", name: "only6.ds.svc.cluster.local.", qtype: dns.TypeA, soa: zone},
	{ref: "ds: IPv6-only Service, AAAA", name: "only6.ds.svc.cluster.local.", qtype: dns.TypeAAAA,
		answer: []string{"only6.ds.svc.cluster.local. 5 IN AAAA fd00:10:96::23"}},
	{ref: "ds: endpoint of a ClusterIP Service by its dashed IPv6", name: "fd00-10-244-1--5." + dsWeb, qtype: dns.TypeAAAA,
		answer: []string{"fd00-10-244-1--5." + dsWeb + " 5 IN AAAA fd00:10:244:1::5"}},

	// Headless: every ready endpoint of both slices, per family.
	{ref: "ds: headless A", name: dsHdls, qtype: dns.TypeA,
		answer: []string{dsHdls + " 5 IN A 10.244.1.6", dsHdls + " 5 IN A 10.244.2.6"}},
	{ref: "ds: headless AAAA", name: dsHdls, qtype: dns.TypeAAAA,
		answer: []string{dsHdls + " 5 IN AAAA fd00:10:244:1::6", dsHdls + " 5 IN AAAA fd00:10:244:2::6"}},
	{ref: "ds: hostname A", name: "web-0." + dsHdls, qtype: dns.TypeA, answer: []string{"web-0." + dsHdls + " 5 IN A 10.244.1.6"}},
	{ref: "ds: hostname AAAA", name: "web-0." + dsHdls, qtype: dns.TypeAAAA, answer: []string{"web-0." + dsHdls + " 5 IN AAAA fd00:10:244:1::6"}},
	{ref: "ds: dashed IPv4 endpoint", name: "10-244-2-6." + dsHdls, qtype: dns.TypeA, answer: []string{"10-244-2-6." + dsHdls + " 5 IN A 10.244.2.6"}},
	{ref: "ds: dashed IPv4 endpoint, AAAA is NODATA", name: "10-244-2-6." + dsHdls, qtype: dns.TypeAAAA, soa: zone},
	{ref: "ds: dashed IPv6 endpoint", name: "fd00-10-244-2--6." + dsHdls, qtype: dns.TypeAAAA,
		answer: []string{"fd00-10-244-2--6." + dsHdls + " 5 IN AAAA fd00:10:244:2::6"}},
	{ref: "ds: dashed IPv6 endpoint, A is NODATA", name: "fd00-10-244-2--6." + dsHdls, qtype: dns.TypeA, soa: zone},
	{ref: "ds: not-ready IPv6 endpoint", name: "fd00-10-244-2--7." + dsHdls, qtype: dns.TypeAAAA, rcode: nx, soa: zone},
	// One SRV per (target, port): web-0 has an address of each family; the
	// weight counts all four records (CoreDNS plugin.SRV).
	{ref: "ds: headless SRV", name: "_http._tcp." + dsHdls, qtype: dns.TypeSRV, answer: []string{
		"_http._tcp." + dsHdls + " 5 IN SRV 0 25 80 web-0." + dsHdls,
		"_http._tcp." + dsHdls + " 5 IN SRV 0 25 80 10-244-2-6." + dsHdls,
		"_http._tcp." + dsHdls + " 5 IN SRV 0 25 80 fd00-10-244-2--6." + dsHdls,
	}, extra: []string{
		"web-0." + dsHdls + " 5 IN A 10.244.1.6",
		"web-0." + dsHdls + " 5 IN AAAA fd00:10:244:1::6",
		"10-244-2-6." + dsHdls + " 5 IN A 10.244.2.6",
		"fd00-10-244-2--6." + dsHdls + " 5 IN AAAA fd00:10:244:2::6",
	}},
	{ref: "ds: headless with IPv4 endpoints only, AAAA is NODATA", name: "hdls4.ds.svc.cluster.local.", qtype: dns.TypeAAAA, soa: zone},

	// ExternalName is unchanged: a CNAME, chased in the zone per family.
	{ref: "ds: ExternalName to a dual-stack Service, AAAA", name: "ext.ds.svc.cluster.local.", qtype: dns.TypeAAAA, answer: []string{
		"ext.ds.svc.cluster.local. 5 IN CNAME " + dsWeb, dsWeb + " 5 IN AAAA fd00:10:96::20"}},
	{ref: "ds: ExternalName CNAME", name: "ext.ds.svc.cluster.local.", qtype: dns.TypeCNAME,
		answer: []string{"ext.ds.svc.cluster.local. 5 IN CNAME " + dsWeb}},

	// ip6.arpa PTR (outside the reverse zones: known addresses only).
	{ref: "ds: PTR of an IPv6 ClusterIP", name: arpaWeb6, qtype: dns.TypePTR, answer: []string{arpaWeb6 + " 5 IN PTR " + dsWeb}},
	{ref: "ds: PTR of an IPv6 endpoint with a hostname", name: arpaWeb06, qtype: dns.TypePTR,
		answer: []string{arpaWeb06 + " 5 IN PTR web-0." + dsHdls}},
	{ref: "ds: PTR of an IPv6 endpoint without", name: arpaHdls6, qtype: dns.TypePTR,
		answer: []string{arpaHdls6 + " 5 IN PTR fd00-10-244-2--6." + dsHdls}},
	{ref: "ds: PTR of the IPv4 ClusterIP beside it", name: "20.0.96.10.in-addr.arpa.", qtype: dns.TypePTR,
		answer: []string{"20.0.96.10.in-addr.arpa. 5 IN PTR " + dsWeb}},

	// The apex NS names kube-dns with its ClusterIPs of both families.
	{ref: "ds: NS glue of both families", name: zone, qtype: dns.TypeNS, answer: []string{"cluster.local. 5 IN NS kube-dns.kube-system.svc.cluster.local."},
		extra: []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10", "kube-dns.kube-system.svc.cluster.local. 5 IN AAAA fd00:10:96::a"}},
}

// TestDualStack runs the rows over UDP and TCP against a server, and through
// the rules alone.
func TestDualStack(t *testing.T) {
	_, addr := startServer(t, Config{}, NewStaticSource(dualStackFixture(), true))
	runRows(t, addr, dualStackRows)

	a, snap := rules(t, Config{}, dualStackFixture(), true)
	for _, w := range dualStackRows {
		q := dns.Question{Name: w.name, Qtype: w.qtype, Qclass: dns.ClassINET}
		o := a.respond(context.Background(), snap, q, netip.Addr{})
		if o.forward {
			t.Errorf("%s: %s forwarded", w.ref, w.name)
			continue
		}
		checkReply(t, "rules", w, asReply(q, o))
	}
}

// TestDualStackOptions: pod records of both families (verified mode knows
// each pod's primary podIP only, as CoreDNS's pod index does), and the IPv6
// service range as an authoritative reverse zone.
func TestDualStackOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		rows []want
	}{
		{"pods insecure", Config{Pods: PodsInsecure}, []want{
			{ref: "ds: IPv4 pod record", name: "10-244-1-6.ds.pod.cluster.local.", qtype: dns.TypeA,
				answer: []string{"10-244-1-6.ds.pod.cluster.local. 5 IN A 10.244.1.6"}},
			{ref: "ds: IPv6 pod record, dashes for colons", name: "fd00-10-244-1--6.ds.pod.cluster.local.", qtype: dns.TypeAAAA,
				answer: []string{"fd00-10-244-1--6.ds.pod.cluster.local. 5 IN AAAA fd00:10:244:1::6"}},
			{ref: "ds: IPv6 pod record, a run of zeros", name: "fd00--1.ds.pod.cluster.local.", qtype: dns.TypeAAAA,
				answer: []string{"fd00--1.ds.pod.cluster.local. 5 IN AAAA fd00::1"}},
			{ref: "ds: IPv6 pod record, A is NODATA", name: "fd00-10-244-1--6.ds.pod.cluster.local.", qtype: dns.TypeA, soa: zone},
			{ref: "ds: IPv4 pod record, AAAA is NODATA", name: "10-244-1-6.ds.pod.cluster.local.", qtype: dns.TypeAAAA, soa: zone},
		}},
		{"pods verified", Config{Pods: PodsVerified}, []want{
			{ref: "ds: verified IPv4 podIP", name: "10-244-1-6.ds.pod.cluster.local.", qtype: dns.TypeA,
				answer: []string{"10-244-1-6.ds.pod.cluster.local. 5 IN A 10.244.1.6"}},
			{ref: "ds: verified primary IPv6 podIP", name: "fd00-10-244-1--9.ds.pod.cluster.local.", qtype: dns.TypeAAAA,
				answer: []string{"fd00-10-244-1--9.ds.pod.cluster.local. 5 IN AAAA fd00:10:244:1::9"}},
			// CoreDNS's pod index holds status.podIP alone.
			{ref: "ds: secondary IPv6 podIP is not verified", name: "fd00-10-244-1--6.ds.pod.cluster.local.", qtype: dns.TypeAAAA, rcode: nx, soa: zone},
			{ref: "ds: secondary IPv4 podIP is not verified", name: "10-244-1-9.ds.pod.cluster.local.", qtype: dns.TypeA, rcode: nx, soa: zone},
			{ref: "ds: IPv6 address of no pod", name: "fd00-10-244-1--7.ds.pod.cluster.local.", qtype: dns.TypeAAAA, rcode: nx, soa: zone},
		}},
		{"IPv6 service range as reverse zone", Config{ServiceCIDR: netip.MustParsePrefix("fd00:10:96::/112")}, []want{
			{ref: "ds: PTR of an IPv6 ClusterIP in the zone", name: arpaWeb6, qtype: dns.TypePTR, answer: []string{arpaWeb6 + " 5 IN PTR " + dsWeb}},
			{ref: "ds: unused IPv6 ClusterIP is NXDOMAIN", name: arpaUnused, qtype: dns.TypePTR, rcode: nx, soa: svcZone6},
			{ref: "ds: reverse zone apex SOA", name: svcZone6, qtype: dns.TypeSOA,
				answer: []string{svcZone6 + " 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. * 7200 1800 86400 5"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t, tc.cfg, NewStaticSource(dualStackFixture(), true))
			runRows(t, addr, tc.rows)
		})
	}
}
