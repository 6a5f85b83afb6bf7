package kubeproxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
)

// The nftables mode's IPv6 proxier of a dual-stack node (node1 at
// fd00:56::10, pods in fd00:10:244::/56, services in fd00:10:96::/112):
// `ip6 kube-proxy`, the same chains, sets and maps as `ip kube-proxy`.

func testNFTProxier6(t testing.TB, backend nft.Interface) (*NFTProxier, *fakeConntrack) {
	t.Helper()
	ct := &fakeConntrack{}
	p, err := NewNFT(NFTConfig{Config: Config{
		NodeName: testNode, Family: corev1.IPv6Protocol,
		NodeIP: testNodeIP6, ClusterCIDR: netip.MustParsePrefix("fd00:10:244::/56"),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:     newFakeClock(time.Unix(1_000_000, 0)),
		Conntrack: ct,
		HealthCheckListen: func(port int) (net.Listener, error) {
			return net.Listen("tcp", "127.0.0.1:0")
		},
	}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")},
		PrepBatchServices: testPrepBatch}, backend)
	if err != nil {
		t.Fatal(err)
	}
	p.initialized = true
	t.Cleanup(p.health.close)
	return p, ct
}

// ipv4Addr is an IPv4 address in nft text (not an IPv6 endpoint's name,
// which writes the address with dots).
var ipv4Addr = regexp.MustCompile(`(^|[ {,])\d+\.\d+\.\d+\.\d+`)

// TestNFTGoldenRulesIPv6 pins the ip6 table of each dual-stack shape.
func TestNFTGoldenRulesIPv6(t *testing.T) {
	for _, s := range dualShapes() {
		t.Run(s.name, func(t *testing.T) {
			f := nft.NewFakeFamily(nft.IPv6Family)
			p, _ := testNFTProxier6(t, f)
			loadNFTShape(p, s)
			mustSyncNFT(t, p)
			dump := f.Dump()
			golden(t, "nft/"+s.name, dump)
			// Nothing of IPv4 in the ip6 table.
			for _, line := range strings.Split(dump, "\n") {
				if ipv4Addr.MatchString(line) || strings.Contains(line, "ipv4_addr") ||
					strings.Contains(line, " ip saddr") || strings.Contains(line, " ip daddr") || strings.Contains(line, "dnat ip to") {
					t.Errorf("IPv4 in the ip6 table: %s", line)
				}
			}
		})
	}
}

// The IPv4 nftables proxier writes exactly what it writes for single-stack
// services when the services are dual-stack and IPv6 EndpointSlices exist.
func TestNFTIPv4ProxierIgnoresIPv6(t *testing.T) {
	for _, s := range dualShapes() {
		t.Run(s.name, func(t *testing.T) {
			dual := nft.NewFake()
			p, _, _ := testNFTProxier(t, dual)
			loadNFTShape(p, s)
			mustSyncNFT(t, p)

			single := nft.NewFake()
			p1, _, _ := testNFTProxier(t, single)
			svc := s.svc.DeepCopy()
			svc.Spec.ClusterIPs, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil, nil
			p1.OnServiceUpdate(svc)
			p1.OnEndpointSliceUpdate(s.slices[0])
			mustSyncNFT(t, p1)
			if dual.Dump() != single.Dump() {
				t.Errorf("the IPv4 table of a dual-stack service differs from a single-stack one's:\n%s", lineDiff(single.Dump(), dual.Dump()))
			}
		})
	}
}

// The ip6 table has upstream's IPv6 layout: ClusterIP, NodePort on the
// node's IPv6 address, masquerade of off-cluster traffic, external IPs and
// LB IPs with source ranges, affinity sets of ipv6_addr, and REJECT for a
// service without endpoints.
func TestNFTIPv6RuleShape(t *testing.T) {
	f := nft.NewFakeFamily(nft.IPv6Family)
	p, _ := testNFTProxier6(t, f)
	for _, s := range dualShapes() {
		loadNFTShape(p, s)
	}
	mustSyncNFT(t, p)
	dump := f.Dump()
	for _, want := range []string{
		"add table ip6 kube-proxy",
		"add set ip6 kube-proxy cluster-ips { type ipv6_addr",
		"add set ip6 kube-proxy nodeport-ips { type ipv6_addr",
		"add element ip6 kube-proxy nodeport-ips { fd00:56::10 }",
		"add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict",
		"add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips",
		"add rule ip6 kube-proxy services ip6 daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
		"add rule ip6 kube-proxy services ip6 daddr @cluster-ips ip6 saddr != fd00:10:244::/56 mark set mark or 0x00004000",
		"add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:10:96::/112 } drop",
		"add rule ip6 kube-proxy masquerading ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random",
		"add element ip6 kube-proxy service-ips { fd00:10:96::20 . tcp . 80 : goto service-",
		"add element ip6 kube-proxy service-nodeports { tcp . 30003 : goto external-",
		"add element ip6 kube-proxy service-ips { fd00:56::150 . tcp . 80 : goto external-",
		"add element ip6 kube-proxy firewall-ips { fd00:56::240 . tcp . 80 : goto firewall-",
		"ip6 saddr != { 2001:db8::/64 , fd00:56::/64 , fd00:56::240 } drop",
		"{ type ipv6_addr ; flags dynamic,timeout ; timeout 10800s ; }",
		"update @affinity-",
		"{ ip6 saddr }",
		"meta l4proto tcp dnat to [fd00:10:244:1::5]:80",
		"add element ip6 kube-proxy no-endpoint-services { fd00:10:96::80 . tcp . 80 comment \"ns6/svc6:p80\" : goto reject-chain }",
		"add element ip6 kube-proxy no-endpoint-nodeports { tcp . 30006 comment \"ns6/svc6:p80\" : goto reject-chain }",
		"meta l4proto tcp dnat ip6 to numgen random mod 3 map @dnat-endpoints-tcp-0",
		"add map ip6 kube-proxy dnat-endpoints-tcp-0 { typeof numgen random mod 1 : ip6 daddr . tcp dport",
		": fd00:10:244:2::5 . 80 }",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("ip6 table lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(dump)
	}
}

// TestNFTMetaProxierDispatch: the nftables proxiers of a dual-stack node
// get the objects of their family from the MetaProxier and write their own
// tables; metrics and debug output cover both.
func TestNFTMetaProxierDispatch(t *testing.T) {
	f4, f6 := nft.NewFake(), nft.NewFakeFamily(nft.IPv6Family)
	p4, _, _ := testNFTProxier(t, f4)
	p6, _ := testNFTProxier6(t, f6)
	if _, err := NewNFTMetaProxier(p6, p4); err == nil {
		t.Error("NewNFTMetaProxier accepted the families swapped")
	}
	m, err := NewNFTMetaProxier(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	s := dualShapes()[0]
	m.OnServiceUpdate(s.svc)
	for _, sl := range s.slices {
		m.OnEndpointSliceUpdate(sl)
	}
	m.SetNodeIP(netip.MustParseAddr("fd00:56::11"))
	m.SetNodeIP(netip.MustParseAddr("192.168.56.11"))
	mustSyncNFT(t, p4)
	mustSyncNFT(t, p6)
	d4, d6 := f4.Dump(), f6.Dump()
	if !strings.Contains(d4, "10.96.0.20 . tcp . 80 : goto service-") || !strings.Contains(d4, "nodeport-ips { 192.168.56.11 }") || strings.Contains(d4, "fd00:") {
		t.Errorf("ip table:\n%s", d4)
	}
	if !strings.Contains(d6, "fd00:10:96::20 . tcp . 80 : goto service-") || !strings.Contains(d6, "nodeport-ips { fd00:56::11 }") || ipv4Addr.MatchString(d6) {
		t.Errorf("ip6 table:\n%s", d6)
	}
	// The IPv6 endpoints are the IPv6 table's only.
	for _, e := range []string{"fd00:10:244:1::5 . 80", "fd00:10:244:2::5 . 80", "fd00:10:244:2::6 . 80"} {
		if !strings.Contains(d6, e) {
			t.Errorf("ip6 table lacks endpoint %s", e)
		}
	}
	m.OnEndpointSliceDelete(s.slices[1])
	mustSyncNFT(t, p6)
	if d6 := f6.Dump(); !strings.Contains(d6, "no-endpoint-services { fd00:10:96::20 . tcp . 80 comment \"default/hostnames:p80\" : goto reject-chain }") {
		t.Errorf("the IPv6 slice deleted, the IPv6 ClusterIP does not reject:\n%s", d6)
	}
	if !strings.Contains(f4.Dump(), "10.96.0.20 . tcp . 80 : goto service-") {
		t.Errorf("deleting the IPv6 slice changed the IPv4 table:\n%s", f4.Dump())
	}

	st := m.Stats()
	if st.Syncs != p4.Stats().Syncs+p6.Stats().Syncs || st.Syncs < 3 {
		t.Errorf("joint stats count %d syncs; the proxiers %d and %d", st.Syncs, p4.Stats().Syncs, p6.Stats().Syncs)
	}
	var b strings.Builder
	m.WriteMetrics(&b)
	if !strings.Contains(b.String(), "kubeproxy_sync_proxy_rules_duration_seconds_count 3\n") {
		t.Errorf("metrics do not count both families' 3 syncs:\n%s", b.String())
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats6", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/stats6: %d %s", rec.Code, rec.Body.String())
	}
}

// A family the nftables mode does not know is refused.
func TestNFTUnknownFamily(t *testing.T) {
	_, err := NewNFT(NFTConfig{Config: Config{Family: "IPv5"}}, nft.NewFake())
	if err == nil || !strings.Contains(err.Error(), "IPv5") {
		t.Errorf("NewNFT with family IPv5: %v", err)
	}
}

// An IPv6 endpoint's chain and affinity set are named as upstream names
// them: the address's colons written as dots (nft names cannot hold ":").
func TestNFTIPv6EndpointChainName(t *testing.T) {
	sp := servicePortsOf(makeService("ns5", "svc5", "10.96.0.50", withIPv6("fd00:10:96::50")), true)[0]
	base := nftEndpointBase(sp, &endpoint{ip: "fd00:10:244:1::5", port: 80})
	if want := nftHashName("ns5/svc5/tcp/p80__fd00.10.244.1..5/80"); base != want || strings.Contains(base, ":") {
		t.Errorf("endpoint chain base %q, want %q", base, want)
	}
}

// TestNFTIPv6InTheKernel: the IPv6 proxier's transactions through the
// Netlink backend in one namespace and as `nft -f` text in another: the
// kernel takes the ip6 table of every dual-stack shape and its partial
// syncs, `nft list table ip6 kube-proxy` lists the same in both, and the
// drift check, reading through Netlink, finds nothing changed.
func TestNFTIPv6InTheKernel(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	var nl *nft.Netlink
	if err := netns.DoPath(netns.NetNSPath(nsA), func() error {
		var err error
		nl, err = nft.NewNetlink(nft.IPv6Family, nftTableName)
		return err
	}); err != nil {
		t.Fatalf("netlink backend in %s: %v", nsA, err)
	}
	t.Cleanup(func() { nl.Close() })
	p, _ := testNFTProxier6(t, &execTee{Interface: nl, ns: nsB, fam: nft.IPv6Family})
	shapes := dualShapes()
	for _, s := range shapes {
		loadNFTShape(p, s)
	}
	mustSyncNFT(t, p)
	same := func(what string) {
		t.Helper()
		got, want := listTableFamily(t, nsA, nft.IPv6Family), listTableFamily(t, nsB, nft.IPv6Family)
		if got != want {
			t.Fatalf("%s: Netlink and nft -f differ:\n%s", what, lineDiff(want, got))
		}
		if !strings.Contains(got, "table ip6 kube-proxy") || !strings.Contains(got, "fd00:10:96::20 . tcp . 80 : goto service-") {
			t.Fatalf("%s: the ip6 table lacks the services:\n%s", what, got)
		}
		if d := p.checkDrift(context.Background()); d != "" {
			t.Fatalf("%s: drift check through Netlink: %s", what, d)
		}
	}
	same("full sync")

	// Partial syncs: an IPv6 slice deleted (the ClusterIP rejects), an
	// endpoint replaced, the slice back.
	p.OnEndpointSliceDelete(shapes[0].slices[1])
	mustSyncNFT(t, p)
	if got := listTableFamily(t, nsA, nft.IPv6Family); !strings.Contains(got, "fd00:10:96::20 . tcp . 80 comment \"default/hostnames:p80\" : goto reject-chain") {
		t.Fatalf("the IPv6 slice deleted, the ClusterIP does not reject:\n%s", got)
	}
	sl := shapes[2].slices[1].DeepCopy()
	sl.Endpoints[0].Addresses = []string{"fd00:10:244:1::77"}
	p.OnEndpointSliceUpdate(sl)
	mustSyncNFT(t, p)
	p.OnEndpointSliceUpdate(shapes[0].slices[1])
	mustSyncNFT(t, p)
	same("partial syncs")
	p.forceFullSync()
	mustSyncNFT(t, p)
	same("second full sync")
	if st := p.Stats(); st.FullSyncs != 2 || st.PartialSyncs != 3 {
		t.Fatalf("want two full syncs and three partial ones, got %+v", st)
	}
}
