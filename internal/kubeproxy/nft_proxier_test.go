package kubeproxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// testPrepBatch is the tests' PrepBatchServices: small, so that first syncs
// and partial syncs adding two or more service ports write their chains
// ahead in transactions of two service ports (writeUnreachable), and the
// rest in the sync's one transaction.
var testPrepBatch = 2

// testNFTProxier is an NFTProxier on a Fake, never started: tests call
// syncProxyRules themselves.
func testNFTProxier(t testing.TB, backend nft.Interface) (*NFTProxier, *fakeClock, *fakeConntrack) {
	t.Helper()
	ct := &fakeConntrack{}
	clock := newFakeClock(time.Unix(1_000_000, 0))
	p, err := NewNFT(NFTConfig{Config: Config{
		NodeName: testNode, NodeIP: testNodeIP, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:     clock,
		Conntrack: ct,
		HealthCheckListen: func(port int) (net.Listener, error) {
			return net.Listen("tcp", "127.0.0.1:0")
		},
	}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, PrepBatchServices: testPrepBatch}, backend)
	if err != nil {
		t.Fatal(err)
	}
	p.initialized = true
	t.Cleanup(p.health.close)
	return p, clock, ct
}

func mustSyncNFT(t testing.TB, p *NFTProxier) {
	t.Helper()
	if err := p.syncProxyRules(); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func loadNFTShape(p *NFTProxier, s shape) {
	p.OnServiceUpdate(s.svc)
	for _, sl := range s.slices {
		p.OnEndpointSliceUpdate(sl)
	}
}

// TestNFTGoldenRules pins the table each service shape produces, as the
// Fake dumps it (node1, 192.168.56.10, pods 10.244.0.0/16, services
// 10.96.0.0/12): the same shapes as the iptables mode's goldens.
func TestNFTGoldenRules(t *testing.T) {
	for _, s := range shapes() {
		t.Run(s.name, func(t *testing.T) {
			f := nft.NewFake()
			p, _, _ := testNFTProxier(t, f)
			loadNFTShape(p, s)
			mustSyncNFT(t, p)
			golden(t, "nft/"+s.name, f.Dump())
		})
	}
}

// The chain names are kube-proxy's: the hash of "ns/svc/proto/port" as
// upstream's unit tests show it for ns1/svc1 port p80.
func TestNFTChainNamesAreUpstreams(t *testing.T) {
	sp := servicePorts(makeService("ns1", "svc1", "172.30.0.41"))[0]
	if got, want := nftPrefixService+nftChainBase(sp), "service-ULMVA6XW-ns1/svc1/tcp/p80"; got != want {
		t.Errorf("service chain %q, want %q", got, want)
	}
	e := &endpoint{ip: "10.180.0.1", port: 80}
	if got, want := nftPrefixEndpoint+nftEndpointBase(sp, e), "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"; got != want {
		t.Errorf("endpoint chain %q, want %q", got, want)
	}
}

// Headless and ExternalName services, and services handled by another proxy,
// add nothing to the table.
func TestNFTNoRulesForHeadlessAndExternalName(t *testing.T) {
	f := nft.NewFake()
	p, _, _ := testNFTProxier(t, f)
	mustSyncNFT(t, p)
	empty := f.Dump()
	headless := makeService("ns", "headless", "None")
	extName := makeService("ns", "ext", "")
	extName.Spec.Type = corev1.ServiceTypeExternalName
	other := makeService("ns", "other", "10.96.0.77")
	other.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "someone-else"}
	// service.kubernetes.io/headless keeps a service from the proxy whatever
	// its value, as kube-proxy's DoesNotExist label selector does.
	labelled := makeService("ns", "labelled", "10.96.0.78")
	labelled.Labels = map[string]string{corev1.IsHeadlessService: ""}
	for _, svc := range []*corev1.Service{headless, extName, other, labelled} {
		p.OnServiceUpdate(svc)
		p.OnEndpointSliceUpdate(makeSlice("ns", svc.Name, p80, ep{ip: "10.244.1.5", node: testNode}))
	}
	mustSyncNFT(t, p)
	if got := f.Dump(); got != empty {
		t.Errorf("rules appeared:\n%s", lineDiff(empty, got))
	}

	// A proxied service that gains the label loses its rules.
	web := makeService("ns", "web", "10.96.0.79")
	p.OnServiceUpdate(web)
	p.OnEndpointSliceUpdate(makeSlice("ns", "web", p80, ep{ip: "10.244.1.6", node: testNode}))
	mustSyncNFT(t, p)
	if got := f.Dump(); got == empty {
		t.Fatal("no rules for an unlabelled service")
	}
	web = web.DeepCopy()
	web.Labels = map[string]string{corev1.IsHeadlessService: "true"}
	p.OnServiceUpdate(web)
	mustSyncNFT(t, p)
	// Its chain stays, flushed, until kube-proxy's delayed chain deletion;
	// nothing leads to the service any more.
	if got := f.Dump(); strings.Contains(got, "10.96.0.79") || strings.Contains(got, "10.244.1.6") {
		t.Errorf("rules left after the service was labelled headless:\n%s", lineDiff(empty, got))
	}
}

// freshNFTDump is what a new proxier's first full sync of the objects writes.
func freshNFTDump(t *testing.T, svcs map[string]*corev1.Service, slices map[string]*discovery.EndpointSlice) string {
	t.Helper()
	f := nft.NewFake()
	q, _, _ := testNFTProxier(t, f)
	for _, s := range svcs {
		q.OnServiceUpdate(s)
	}
	for _, s := range slices {
		q.OnEndpointSliceUpdate(s)
	}
	mustSyncNFT(t, q)
	return f.Dump()
}

// resolveDNATBlocks rewrites a Fake dump's rules "... dnat ip to numgen
// random mod N [offset B] map @dnat-endpoints" into the endpoints they pick
// from ("... dnat ip to numgen random mod N map { 0 : A . P, ... }") and
// drops the dnat-endpoints maps and elements, failing on a key a rule needs that is
// missing, a key two chains' blocks share, or an element no rule uses.
func resolveDNATBlocks(t *testing.T, dump string) string {
	t.Helper()
	type key struct {
		proto string
		n     int
	}
	elems := map[key]string{}
	var lines []string
	prefix := "add element ip " + nftTableName + " " + nftDNATMapPrefix
	for _, l := range strings.Split(dump, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			proto, rest, _ := strings.Cut(rest, " { ") // "tcp-0"

			k, v, _ := strings.Cut(strings.TrimSuffix(rest, " }"), " : ")
			n, err := strconv.Atoi(k)
			if err != nil {
				t.Fatalf("dnat-endpoints element %q: %v", l, err)
			}
			elems[key{proto, n}] = v
			continue
		}
		if strings.HasPrefix(l, "add map ip "+nftTableName+" "+nftDNATMapPrefix) {
			// Maps stay for a process's life: a proxier that had more
			// services has more.
			continue
		}
		lines = append(lines, l)
	}
	re := regexp.MustCompile(`dnat ip to numgen random mod (\d+)(?: offset (\d+))? map @` + nftDNATMapPrefix + `((?:tcp|udp|sctp)-\d+)`)
	used := map[key]bool{}
	for i, l := range lines {
		m := re.FindStringSubmatchIndex(l)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(l[m[2]:m[3]])
		base := 0
		if m[4] >= 0 {
			base, _ = strconv.Atoi(l[m[4]:m[5]])
		}
		proto := l[m[6]:m[7]]
		var picks []string
		for k := base; k < base+n; k++ {
			v, ok := elems[key{proto, k}]
			if !ok {
				t.Fatalf("rule %q: key %d missing from dnat-endpoints-%s", l, k, proto)
			}
			if used[key{proto, k}] {
				t.Fatalf("rule %q: key %d is another chain's too", l, k)
			}
			used[key{proto, k}] = true
			picks = append(picks, fmt.Sprintf("%d : %s", k-base, v))
		}
		proto, _, _ = strings.Cut(proto, "-")
		lines[i] = l[:m[0]] + fmt.Sprintf("dnat ip to numgen random mod %d map @%s{ %s }", n, proto, strings.Join(picks, ", ")) + l[m[1]:]
	}
	for k, v := range elems {
		if !used[k] {
			t.Fatalf("dnat-endpoints-%s element %d : %s is no rule's", k.proto, k.n, v)
		}
	}
	return strings.Join(lines, "\n")
}

// TestNFTPartialSyncsMatchFullSync is the iptables mode's randomized test
// for the nftables mode: random changes of every kind with partial syncs
// only; after each, once the stale chains' second has passed, the table
// equals what a fresh proxier's full sync writes, and the statistics agree.
func TestNFTPartialSyncsMatchFullSync(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			f := nft.NewFake()
			p, clock, _ := testNFTProxier(t, f)
			svcs := map[string]*corev1.Service{}
			slices := map[string]*discovery.EndpointSlice{}
			mustSyncNFT(t, p)
			for step := 0; step < 150; step++ {
				name := fmt.Sprint("s", rng.IntN(12))
				var what string
				switch op := rng.IntN(10); {
				case op < 3 || svcs[name] == nil:
					what = "service " + name + " created or reshaped"
					svcs[name] = randomNFTService(rng, name)
					p.OnServiceUpdate(svcs[name])
				case op < 8:
					what = "endpoints of " + name + " changed"
					slices[name] = randomSlice(rng, name)
					p.OnEndpointSliceUpdate(slices[name])
				case op < 9:
					what = "service " + name + " deleted"
					p.OnServiceDelete(svcs[name])
					delete(svcs, name)
				default:
					if slices[name] != nil {
						what = "endpoints of " + name + " deleted"
						p.OnEndpointSliceDelete(slices[name])
						delete(slices, name)
					}
				}
				mustSyncNFT(t, p)
				// Stale chains are flushed now and deleted by the first sync
				// more than a second later.
				clock.Step(2 * time.Second)
				mustSyncNFT(t, p)

				// Blocks of dnat-endpoints keys depend on the order services
				// came and went: compare what each chain picks from.
				want := resolveDNATBlocks(t, freshNFTDump(t, svcs, slices))
				if got := resolveDNATBlocks(t, f.Dump()); got != want {
					t.Fatalf("step %d (%s): partial syncs diverged from a full sync:\n%s", step, what, lineDiff(want, got))
				}
				q, _, _ := testNFTProxier(t, nft.NewFake())
				for _, s := range svcs {
					q.OnServiceUpdate(s)
				}
				for _, s := range slices {
					q.OnEndpointSliceUpdate(s)
				}
				mustSyncNFT(t, q)
				if got, want := p.Stats(), q.Stats(); got.NATRules != want.NATRules || got.NATChains != want.NATChains ||
					got.Services != want.Services || got.Endpoints != want.Endpoints {
					t.Fatalf("step %d (%s): stats %+v, a full sync counts %+v", step, what, got, want)
				}
			}
			if st := p.Stats(); st.FullSyncs != 1 || st.PartialSyncs == 0 {
				t.Fatalf("want one full sync then partial ones, got %+v", st)
			}
			// A full sync keeps every chain's block: it writes the same table.
			before := f.Dump()
			p.forceFullSync()
			mustSyncNFT(t, p)
			if got := f.Dump(); got != before {
				t.Fatalf("a full sync after partial ones moved blocks:\n%s", lineDiff(before, got))
			}
		})
	}
}

// randomNFTService is randomService with two more shapes that share
// elements: the same external IP on two services (one key, two owners) and
// a changing affinity timeout.
func randomNFTService(rng *rand.Rand, name string) *corev1.Service {
	switch rng.IntN(8) {
	case 6:
		return makeService("ns", name, clusterIPOf(name), withExternalIPs("80.11.12.200"))
	case 7:
		return makeService("ns", name, clusterIPOf(name), withAffinity(int32(60+rng.IntN(3))))
	}
	return randomService(rng, name)
}

func clusterIPOf(name string) string {
	n := 0
	fmt.Sscanf(strings.TrimPrefix(name, "s"), "%d", &n)
	return fmt.Sprintf("10.96.1.%d", 10+n)
}

// A partial sync of an unchanged service writes nothing.
func TestNFTNoChangeWritesNothing(t *testing.T) {
	f := nft.NewFake()
	p, _, _ := testNFTProxier(t, f)
	s := shapes()[0]
	loadNFTShape(p, s)
	mustSyncNFT(t, p)
	before := f.Dump()
	loadNFTShape(p, s)
	mustSyncNFT(t, p)
	if st := p.Stats(); st.SkippedSyncs != 1 || st.WrittenChains != 0 {
		t.Errorf("a sync of unchanged objects wrote: %+v", st)
	}
	if got := f.Dump(); got != before {
		t.Errorf("table changed:\n%s", lineDiff(before, got))
	}
}

// chaosFixture is a proxier with every shape loaded and synced.
func chaosFixture(t *testing.T) (*NFTProxier, *nft.Fake, string) {
	t.Helper()
	f := nft.NewFake()
	p, _, _ := testNFTProxier(t, f)
	for i, s := range shapes() {
		// Each shape in a namespace of its own so that they coexist.
		svc := s.svc.DeepCopy()
		svc.Namespace = fmt.Sprint("c", i)
		svc.Spec.ClusterIP = fmt.Sprintf("10.96.2.%d", 10+i)
		if svc.Spec.Ports[0].NodePort != 0 {
			svc.Spec.Ports[0].NodePort = int32(31000 + i)
		}
		p.OnServiceUpdate(svc)
		for _, sl := range s.slices {
			sl := sl.DeepCopy()
			sl.Namespace = svc.Namespace
			p.OnEndpointSliceUpdate(sl)
		}
	}
	mustSyncNFT(t, p)
	if d := p.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift right after a sync: %s", d)
	}
	return p, f, f.Dump()
}

// TestNFTChaosRepairedInOneSync breaks the table the ways an operator (or
// another program) might, and checks that the drift check sees it and that
// the one full sync it asks for restores the table exactly.
func TestNFTChaosRepairedInOneSync(t *testing.T) {
	ctx := context.Background()
	svcChain := "service-" + nftHashName("c1/svc3/tcp/p80")
	cases := []struct {
		name    string
		breakIt func(t *testing.T, f *nft.Fake)
	}{
		{"table deleted", func(t *testing.T, f *nft.Fake) {
			if err := f.DeleteTable(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"service-ips element removed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Delete(&nft.Element{Set: nftServiceIPsMap, Key: []string{"10.96.2.10", "tcp", "80"}})
			})
		}},
		{"no-endpoint-nodeports element removed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Delete(&nft.Element{Set: nftNoEndpointNodePortsMap, Key: []string{"tcp", "31010"}})
			})
		}},
		{"dnat-endpoints element removed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Delete(&nft.Element{Set: nftDNATMapName("tcp", 0), Key: []string{"1"}})
			})
		}},
		{"dnat-endpoints element changed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Delete(&nft.Element{Set: nftDNATMapName("tcp", 0), Key: []string{"0"}})
				tx.Add(&nft.Element{Set: nftDNATMapName("tcp", 0), Key: []string{"0"}, Value: "10.244.99.99 . 80"})
			})
		}},
		{"dnat-endpoints element added", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Add(&nft.Element{Set: nftDNATMapName("tcp", 0), Key: []string{"500"}, Value: "10.244.99.99 . 80"})
			})
		}},
		{"dnat-endpoints map flushed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) { tx.Flush(&nft.Map{Name: nftDNATMapName("tcp", 0)}) })
		}},
		{"foreign element added", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) {
				tx.Add(&nft.Element{Set: nftClusterIPsSet, Key: []string{"10.96.9.9"}})
			})
		}},
		{"base chain flushed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) { tx.Flush(&nft.Chain{Name: nftNATPrerouting}) })
		}},
		{"service chain flushed", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) { tx.Flush(&nft.Chain{Name: svcChain}) })
		}},
		{"rule added to a top-level chain", func(t *testing.T, f *nft.Fake) {
			run(t, f, func(tx *nft.Transaction) { tx.Add(&nft.Rule{Chain: nftServicesChain, Rule: "ip daddr 10.96.5.5 drop"}) })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, f, want := chaosFixture(t)
			c.breakIt(t, f)
			d := p.checkDrift(ctx)
			if d == "" {
				t.Fatal("drift not detected")
			}
			p.forceFullSync()
			mustSyncNFT(t, p)
			if got := f.Dump(); got != want {
				t.Fatalf("after %q (%s) one sync left:\n%s", c.name, d, lineDiff(want, got))
			}
			if d := p.checkDrift(ctx); d != "" {
				t.Fatalf("drift after the repair: %s", d)
			}
		})
	}
}

func run(t *testing.T, f *nft.Fake, build func(tx *nft.Transaction)) {
	t.Helper()
	tx := &nft.Transaction{}
	build(tx)
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
}

// A failed transaction leaves the table as it was and makes the retry a
// full sync that writes everything.
func TestNFTFailedSyncRetriesFull(t *testing.T) {
	f := nft.NewFake()
	fb := &failingNFT{Interface: f}
	p, _, _ := testNFTProxier(t, fb)
	mustSyncNFT(t, p)
	s := shapes()[1]
	loadNFTShape(p, s)
	fb.fail = true
	if err := p.syncProxyRules(); err == nil {
		t.Fatal("sync did not fail")
	}
	fb.fail = false
	mustSyncNFT(t, p)
	if st := p.Stats(); st.FullSyncs != 2 || st.RestoreFailures != 1 {
		t.Errorf("stats %+v, want 2 full syncs and 1 failure", st)
	}
	if got, want := f.Dump(), freshNFTDump(t, map[string]*corev1.Service{"a": s.svc}, map[string]*discovery.EndpointSlice{"a": s.slices[0]}); got != want {
		t.Errorf("after the retry:\n%s", lineDiff(want, got))
	}
}

type failingNFT struct {
	nft.Interface
	fail bool
}

func (f *failingNFT) Run(ctx context.Context, tx *nft.Transaction) error {
	if f.fail {
		return fmt.Errorf("injected failure")
	}
	return f.Interface.Run(ctx, tx)
}

// UDP services get their stale conntrack flows deleted as in iptables mode:
// a flow to a UDP ClusterIP whose backend is gone.
func TestNFTConntrackCleanup(t *testing.T) {
	f := nft.NewFake()
	p, _, ct := testNFTProxier(t, f)
	dns := shapes()[11] // udp-multiport
	loadNFTShape(p, dns)
	mustSyncNFT(t, p)
	stale := Flow{OrigSrc: netip.MustParseAddrPort("10.244.1.9:5353"), OrigDst: netip.MustParseAddrPort("10.96.0.10:53"),
		ReplySrc: netip.MustParseAddrPort("10.244.1.2:53")}
	ct.flows = []Flow{stale}
	p.OnEndpointSliceUpdate(makeSlice("kube-system", "kube-dns",
		[]discovery.EndpointPort{slicePort("dns", corev1.ProtocolUDP, 53), slicePort("dns-tcp", corev1.ProtocolTCP, 53)},
		ep{ip: "10.244.1.3", node: testNode}))
	mustSyncNFT(t, p)
	if len(ct.deleted) != 1 || ct.deleted[0] != stale {
		t.Errorf("deleted flows %v, want %v", ct.deleted, stale)
	}

	// The same backend behind a new target port: its flows to the old port go.
	oldPort := Flow{OrigSrc: netip.MustParseAddrPort("10.244.1.9:5354"), OrigDst: netip.MustParseAddrPort("10.96.0.10:53"),
		ReplySrc: netip.MustParseAddrPort("10.244.1.3:53")}
	ct.flows, ct.deleted = []Flow{oldPort}, nil
	p.OnEndpointSliceUpdate(makeSlice("kube-system", "kube-dns",
		[]discovery.EndpointPort{slicePort("dns", corev1.ProtocolUDP, 5353), slicePort("dns-tcp", corev1.ProtocolTCP, 53)},
		ep{ip: "10.244.1.3", node: testNode}))
	mustSyncNFT(t, p)
	if len(ct.deleted) != 1 || ct.deleted[0] != oldPort {
		t.Errorf("after the target port changed, deleted flows %v, want %v", ct.deleted, oldPort)
	}
}

// The health check node port of a Local LoadBalancer answers with this
// node's local endpoint count; the debug endpoint serves the table, stats
// and the sync duration metrics.
func TestNFTHealthAndHandler(t *testing.T) {
	f := nft.NewFake()
	p, _, _ := testNFTProxier(t, f)
	loadNFTShape(p, shapes()[6]) // loadbalancer-local-hcnp
	mustSyncNFT(t, p)
	p.health.mu.Lock()
	n := len(p.health.servers)
	p.health.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d health check servers, want 1", n)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/rules":   "add table ip kube-proxy",
		"/stats":   `"fullSyncs": 1`,
		"/healthz": "ok",
		"/metrics": "kubeproxy_sync_proxy_rules_duration_seconds_count 1",
	} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: %q not in\n%s", path, want, b)
		}
	}
}

// Stale chains are flushed by the sync that stops using them and deleted by
// the first sync more than a second later, as kube-proxy does.
func TestNFTStaleChainsDeletedLater(t *testing.T) {
	f := nft.NewFake()
	p, clock, _ := testNFTProxier(t, f)
	s := shapes()[1] // nodeport
	loadNFTShape(p, s)
	mustSyncNFT(t, p)
	chain := "external-" + nftHashName("ns3/svc3/tcp/p80")
	if len(f.Rules(chain)) == 0 {
		t.Fatalf("%s not written", chain)
	}
	p.OnEndpointSliceUpdate(makeSlice("ns3", "svc3", p80))
	mustSyncNFT(t, p)
	has := func() bool {
		chains, _ := f.ListChains(context.Background())
		for _, c := range chains {
			if c == chain {
				return true
			}
		}
		return false
	}
	if !has() || len(f.Rules(chain)) != 0 {
		t.Fatalf("%s should be flushed but kept: exists=%v rules=%v", chain, has(), f.Rules(chain))
	}
	clock.Step(500 * time.Millisecond)
	mustSyncNFT(t, p)
	if !has() {
		t.Fatalf("%s deleted before a second passed", chain)
	}
	clock.Step(time.Second)
	mustSyncNFT(t, p)
	if has() {
		t.Fatalf("%s not deleted", chain)
	}
}

// garbledLister lists concatenated keys as one undecoded field and map
// values as nothing, as a backend that does not know the set's types would.
type garbledLister struct {
	*nft.Fake
	garble bool
}

func (g *garbledLister) ListElements(ctx context.Context, set string) ([]*nft.Element, error) {
	elems, err := g.Fake.ListElements(ctx, set)
	for _, e := range elems {
		if g.garble && len(e.Key) > 1 {
			e.Key = []string{"0xdeadbeef"}
			e.Value = ""
		}
	}
	return elems, err
}

// The drift check compares every managed set's and map's elements exactly
// (keys and verdicts), and a full sync never diffs against a listing it
// cannot read: it fails, naming the element, and writes nothing.
func TestNFTListingsComparedExactly(t *testing.T) {
	f := nft.NewFake()
	g := &garbledLister{Fake: f}
	p, _, _ := testNFTProxier(t, g)
	loadShapes(p)
	mustSyncNFT(t, p)
	want := f.Dump()
	if d := p.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift right after a sync: %s", d)
	}
	// A verdict changed behind the proxy's back, count unchanged.
	run(t, f, func(tx *nft.Transaction) {
		tx.Delete(&nft.Element{Set: nftServiceIPsMap, Key: []string{"10.96.2.10", "tcp", "80"}})
		tx.Add(&nft.Element{Set: nftServiceIPsMap, Key: []string{"10.96.2.10", "tcp", "80"}, Value: "goto " + nftRejectChain})
	})
	if d := p.checkDrift(context.Background()); !strings.Contains(d, `element 10.96.2.10 . tcp . 80 of service-ips is "goto reject-chain"`) {
		t.Fatalf("drift = %q; want the changed verdict named", d)
	}
	p.forceFullSync()
	mustSyncNFT(t, p)
	if got := f.Dump(); got != want {
		t.Fatalf("after the full sync:\n%s", lineDiff(want, got))
	}
	g.garble = true
	if d := p.checkDrift(context.Background()); !strings.Contains(d, "unexpected element 0xdeadbeef") {
		t.Fatalf("drift with a garbled listing = %q", d)
	}
	p.forceFullSync()
	if err := p.syncProxyRules(); err == nil || !strings.Contains(err.Error(), `listed element "0xdeadbeef"`) {
		t.Fatalf("full sync over a garbled listing: %v", err)
	}
	if got := f.Dump(); got != want {
		t.Fatalf("a failed full sync changed the table:\n%s", lineDiff(want, got))
	}
}

// txRecorder keeps every transaction run through it.
type txRecorder struct {
	nft.Interface
	txs []*nft.Transaction
}

func (r *txRecorder) Run(ctx context.Context, tx *nft.Transaction) error {
	r.txs = append(r.txs, tx)
	return r.Interface.Run(ctx, tx)
}

// The first sync of a new process over the table an earlier one left does
// not delete the table: it keeps what is still wanted, recreates the wanted
// affinity sets (their timeout is unknown), deletes the unwanted ones by
// name, and leaves stale service chains to be deleted a second later; the
// table then equals a fresh proxier's.
func TestNFTFirstSyncOverAnEarlierTable(t *testing.T) {
	f := nft.NewFake()
	a, _, _ := testNFTProxier(t, f)
	loadShapes(a)
	mustSyncNFT(t, a)

	// An affinity set of a service the new process does not have (as an
	// earlier version would leave), and one new service.
	run(t, f, func(tx *nft.Transaction) {
		tx.Add(&nft.Set{Name: "affinity-LEFTOVER-old/svc/tcp/p__10.244.9.9/80", Type: "ipv4_addr", Flags: []string{"dynamic", "timeout"}, Timeout: time.Hour})
	})
	load := func(p *NFTProxier) {
		loadShapes(p)
		s := shapes()[0]
		svc := s.svc.DeepCopy()
		svc.Namespace, svc.Spec.ClusterIP = "new", "10.96.3.3"
		p.OnServiceUpdate(svc)
		for _, sl := range s.slices {
			sl := sl.DeepCopy()
			sl.Namespace = "new"
			p.OnEndpointSliceUpdate(sl)
		}
		p.OnServiceDelete(shapeService(1))
	}
	affinitySets := func() []string {
		sets, _ := f.ListSets(context.Background())
		var out []string
		for _, s := range sets {
			if strings.HasPrefix(s, "affinity-") {
				out = append(out, s)
			}
		}
		return out
	}
	before := affinitySets()
	rec := &txRecorder{Interface: f}
	b, clock, _ := testNFTProxier(t, rec)
	load(b)
	mustSyncNFT(t, b)
	for _, tx := range rec.txs {
		for _, op := range tx.Ops {
			if op.Kind == nft.OpDelete && op.Table != nil {
				t.Fatalf("the first sync deleted the table")
			}
		}
	}
	clock.Step(1500 * time.Millisecond)
	mustSyncNFT(t, b)

	q, _, _ := testNFTProxier(t, nft.NewFake())
	load(q)
	mustSyncNFT(t, q)
	want := q.nft.(*nft.Fake).Dump()
	if got := f.Dump(); got != want {
		t.Fatalf("after the new process's syncs:\n%s", lineDiff(want, got))
	}
	after := affinitySets()
	if len(before) < 2 || len(after) != len(before)-1 || slices.Contains(after, "affinity-LEFTOVER-old/svc/tcp/p__10.244.9.9/80") {
		t.Fatalf("affinity sets before %v, after %v: want some kept and some deleted", before, after)
	}
	if d := b.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift after the first sync: %s", d)
	}
}

// shapeService is shapes()[i]'s Service as loadShapes loads it.
func shapeService(i int) *corev1.Service {
	svc := shapes()[i].svc.DeepCopy()
	svc.Namespace = fmt.Sprint("c", i)
	return svc
}

// prepChecker checks every transaction that only adds (a preparatory one of
// writeUnreachable): its rules go into chains it creates, and once it is
// applied nothing outside those chains names them, so packets cannot reach
// what it wrote.
type prepChecker struct {
	*nft.Fake
	t     *testing.T
	preps int
}

func (c *prepChecker) Run(ctx context.Context, tx *nft.Transaction) error {
	before, _ := c.Fake.ListChains(ctx)
	existed := map[string]bool{}
	for _, n := range before {
		existed[n] = true
	}
	added := map[string]bool{}
	prep := true
	for _, op := range tx.Ops {
		if op.Kind != nft.OpAdd || op.Element != nil || op.Chain != nil && op.Chain.Hook != "" {
			prep = false
		}
		if op.Chain != nil && !existed[op.Chain.Name] {
			added[op.Chain.Name] = true
		}
	}
	if err := c.Fake.Run(ctx, tx); err != nil || !prep {
		return err
	}
	c.preps++
	for _, op := range tx.Ops {
		if op.Rule != nil && !added[op.Rule.Chain] {
			c.t.Errorf("preparatory transaction adds a rule to %s, which existed before", op.Rule.Chain)
		}
	}
	names := func(text string) {
		for n := range added {
			if strings.Contains(text, n) {
				c.t.Errorf("after a preparatory transaction %q names its chain %s", text, n)
			}
		}
	}
	for _, set := range nftManagedSets {
		els, _ := c.Fake.ListElements(ctx, set)
		for _, e := range els {
			names(e.Value)
		}
	}
	after, _ := c.Fake.ListChains(ctx)
	for _, ch := range after {
		if !added[ch] {
			for _, r := range c.Fake.Rules(ch) {
				names(r.Rule)
			}
		}
	}
	return nil
}

// A first sync of many service ports, and a partial sync adding many,
// write the new chains ahead in transactions nothing reaches, of at most
// PrepBatchServices service ports each; the table equals the one a single
// transaction writes.
func TestNFTUnreachableChainsWrittenAhead(t *testing.T) {
	c := &prepChecker{Fake: nft.NewFake(), t: t}
	p, clock, _ := testNFTProxier(t, c)
	loadShapes(p)
	mustSyncNFT(t, p)
	ports := p.Stats().Services
	if want := ports / testPrepBatch; c.preps < want {
		t.Fatalf("%d preparatory transactions for %d service ports, want at least %d", c.preps, ports, want)
	}
	single := func(load func(*NFTProxier)) string {
		f := nft.NewFake()
		q, _, _ := testNFTProxier(t, f)
		q.cfg.PrepBatchServices = 1 << 30
		load(q)
		mustSyncNFT(t, q)
		return f.Dump()
	}
	if got, want := c.Dump(), single(loadShapes); got != want {
		t.Fatalf("first sync:\n%s", lineDiff(want, got))
	}
	// Many new services in one partial sync.
	n := c.preps
	more := func(q *NFTProxier) {
		for i := 0; i < 6; i++ {
			name := fmt.Sprint("s", i)
			q.OnServiceUpdate(makeService("ns", name, clusterIPOf(name), withAffinity(60)))
			q.OnEndpointSliceUpdate(makeSlice("ns", name, p80, ep{ip: fmt.Sprintf("10.244.1.%d", 50+i), node: testNode}))
		}
	}
	more(p)
	clock.Step(time.Second)
	mustSyncNFT(t, p)
	if st := p.Stats(); st.FullSyncs != 1 || c.preps < n+3 {
		t.Fatalf("partial sync of 6 new services: %d more preparatory transactions, stats %+v", c.preps-n, st)
	}
	if got, want := c.Dump(), single(func(q *NFTProxier) { loadShapes(q); more(q) }); got != want {
		t.Fatalf("after the partial sync:\n%s", lineDiff(want, got))
	}
	if d := p.checkDrift(context.Background()); d != "" {
		t.Fatalf("drift: %s", d)
	}
}

// TestNFTBlocks pins the allocation of dnat-endpoints keys: blocks of the
// next power of two, 512 keys per map, a freed block reused first, a
// block kept while the count fits, and maps per protocol.
func TestNFTBlocks(t *testing.T) {
	b := newNFTBlocks()
	type got struct {
		m    string
		base int
	}
	get := func(chain, proto string, n int) got {
		m, base := b.get(chain, proto, n)
		return got{m, base}
	}
	for i := 0; i < 64; i++ {
		if g, want := get(fmt.Sprint("c", i), "tcp", 5), (got{"dnat-endpoints-tcp-0", i * 8}); g != want {
			t.Fatalf("chain c%d: %+v, want %+v", i, g, want)
		}
	}
	for _, tc := range []struct {
		what, chain, proto string
		n                  int
		want               got
	}{
		{"map 0 is full: map 1", "c64", "tcp", 5, got{"dnat-endpoints-tcp-1", 0}},
		{"same chain, same count: same block", "c64", "tcp", 5, got{"dnat-endpoints-tcp-1", 0}},
		{"a count that fits keeps the block", "c64", "tcp", 3, got{"dnat-endpoints-tcp-1", 0}},
		{"a count that outgrows it moves", "c64", "tcp", 9, got{"dnat-endpoints-tcp-1", 8}},
		{"the freed block is reused", "c65", "tcp", 8, got{"dnat-endpoints-tcp-1", 0}},
		{"other protocols have their own maps", "u0", "udp", 1, got{"dnat-endpoints-udp-0", 0}},
		{"a block larger than a map gets its own", "big", "tcp", 1000, got{"dnat-endpoints-tcp-2", 0}},
	} {
		if g := get(tc.chain, tc.proto, tc.n); g != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, g, tc.want)
		}
	}
	b.release("c3")
	if g, want := get("c66", "tcp", 6), (got{"dnat-endpoints-tcp-0", 24}); g != want {
		t.Errorf("after releasing c3: %+v, want %+v", g, want)
	}
	if got, want := strings.Join(b.mapNames(), " "), "dnat-endpoints-tcp-0 dnat-endpoints-tcp-1 dnat-endpoints-tcp-2 dnat-endpoints-udp-0"; got != want {
		t.Errorf("maps %q, want %q", got, want)
	}
}

// TestNFTEarlierProcessesMapsRemoved: a proxy restarted with fewer services
// deletes the dnat-endpoints maps the earlier process used and it does not.
func TestNFTEarlierProcessesMapsRemoved(t *testing.T) {
	ctx := context.Background()
	f := nft.NewFake()
	p, _, _ := testNFTProxier(t, f)
	nftBenchServices(p, 70) // 70 blocks of 8 keys: two maps of 512
	mustSyncNFT(t, p)
	if names, _ := f.ListSets(ctx); !slices.Contains(names, nftDNATMapName("tcp", 1)) {
		t.Fatalf("70 services made no second map: %v", names)
	}
	q, clock, _ := testNFTProxier(t, f)
	nftBenchServices(q, 3)
	mustSyncNFT(t, q)
	clock.Step(2 * time.Second) // the stale chains' second
	mustSyncNFT(t, q)
	names, _ := f.ListSets(ctx)
	var maps []string
	for _, n := range names {
		if strings.HasPrefix(n, nftDNATMapPrefix) {
			maps = append(maps, n)
		}
	}
	if got, want := strings.Join(maps, " "), nftDNATMapName("tcp", 0); got != want {
		t.Fatalf("maps after the restart: %q, want %q", got, want)
	}
	if d := q.checkDrift(ctx); d != "" {
		t.Fatalf("drift after the restart: %s", d)
	}
	r, _, _ := testNFTProxier(t, nft.NewFake())
	nftBenchServices(r, 3)
	mustSyncNFT(t, r)
	if got, want := f.Dump(), r.Rules(); got != string(want) {
		t.Fatalf("the restarted proxy's table differs from a fresh one's:\n%s", lineDiff(string(want), got))
	}
}
