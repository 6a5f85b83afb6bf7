package kubeproxy

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"
	"github.com/minikit/minikit/internal/netns"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The IPv6 proxier of a dual-stack node (node1 at fd00:56::10, pods in
// fd00:10:244::/56): the same chains as IPv4, written with ip6tables.

var testNodeIP6 = netip.MustParseAddr("fd00:56::10")

func testProxier6(t *testing.T, ipt *iptablestest.Fake) (*Proxier, *fakeConntrack) {
	t.Helper()
	ct := &fakeConntrack{}
	liberal := false
	p, err := New(Config{
		NodeName: testNode, Family: corev1.IPv6Protocol,
		NodeIP: testNodeIP6, ClusterCIDR: netip.MustParsePrefix("fd00:10:244::/56"),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:     newFakeClock(time.Unix(1_000_000, 0)),
		Conntrack: ct,
		HealthCheckListen: func(port int) (net.Listener, error) {
			return net.Listen("tcp", "127.0.0.1:0")
		},
		TCPBeLiberal: &liberal,
		NFAcct:       nfacct.NewFake(),
	}, ipt)
	if err != nil {
		t.Fatal(err)
	}
	p.initialized = true
	t.Cleanup(p.health.close)
	return p, ct
}

// withIPv6 makes a service dual-stack (PreferDualStack, IPv4 first) with
// the given IPv6 ClusterIP.
func withIPv6(ip string) svcOpt {
	return func(s *corev1.Service) {
		prefer := corev1.IPFamilyPolicyPreferDualStack
		s.Spec.IPFamilyPolicy = &prefer
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP, ip}
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
}

func makeSlice6(ns, svc string, ports []discovery.EndpointPort, eps ...ep) *discovery.EndpointSlice {
	s := makeSlice(ns, svc, ports, eps...)
	s.Name = svc + "-v6"
	s.AddressType = discovery.AddressTypeIPv6
	return s
}

// dualShapes are services of both families with an EndpointSlice each.
func dualShapes() []shape {
	mixed4 := []ep{{ip: "10.244.1.5", node: testNode}, {ip: "10.244.2.5", node: testOther}}
	mixed6 := []ep{{ip: "fd00:10:244:1::5", node: testNode}, {ip: "fd00:10:244:2::5", node: testOther}, {ip: "fd00:10:244:2::6", node: testOther}}
	both := func(ns, name string, ports []discovery.EndpointPort, e4, e6 []ep) []*discovery.EndpointSlice {
		return []*discovery.EndpointSlice{makeSlice(ns, name, ports, e4...), makeSlice6(ns, name, ports, e6...)}
	}
	return []shape{
		{"v6-clusterip", makeService("default", "hostnames", "10.96.0.20", withIPv6("fd00:10:96::20")),
			both("default", "hostnames", p80, mixed4, append(mixed6, ep{ip: "fd00:10:244:2::9", node: testOther, notReady: true}))},
		{"v6-nodeport-local", makeService("ns3", "svc3", "10.96.0.30", withIPv6("fd00:10:96::30"), withNodePort(30003), withLocal(0)),
			both("ns3", "svc3", p80, mixed4, mixed6)},
		{"v6-loadbalancer-sourceranges-affinity", makeService("ns5", "svc5", "10.96.0.50", withIPv6("fd00:10:96::50"),
			withLB("192.168.56.240", "fd00:56::240"), withNodePort(30005), withExternalIPs("192.168.56.150", "fd00:56::150"),
			withSourceRanges("203.0.113.0/25", "2001:db8::/64", "fd00:56::/64"), withAffinity(10800)),
			both("ns5", "svc5", p80, mixed4, mixed6)},
		{"v6-no-endpoints", makeService("ns6", "svc6", "10.96.0.80", withIPv6("fd00:10:96::80"), withNodePort(30006)),
			both("ns6", "svc6", p80, mixed4, nil)},
		{"v6-udp", makeService("kube-system", "kube-dns", "10.96.0.10", withIPv6("fd00:10:96::a"), withPorts(
			corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})),
			both("kube-system", "kube-dns", []discovery.EndpointPort{slicePort("dns", corev1.ProtocolUDP, 53)},
				[]ep{{ip: "10.244.1.2", node: testNode}}, []ep{{ip: "fd00:10:244:1::2", node: testNode}})},
	}
}

// TestGoldenRulesIPv6 pins the ip6tables rules of each dual-stack shape.
func TestGoldenRulesIPv6(t *testing.T) {
	for _, s := range dualShapes() {
		t.Run(s.name, func(t *testing.T) {
			ipt := iptablestest.NewFake()
			p, _ := testProxier6(t, ipt)
			loadShape(p, s)
			mustSync(t, p)
			golden(t, s.name, saved(t, ipt))
		})
	}
}

// The IPv4 proxier writes exactly what it writes for a single-stack service
// when the service is dual-stack and an IPv6 EndpointSlice exists: the
// IPv6 objects are the other proxier's.
func TestIPv4ProxierIgnoresIPv6(t *testing.T) {
	for _, s := range dualShapes() {
		t.Run(s.name, func(t *testing.T) {
			single := s.svc.DeepCopy()
			single.Spec.ClusterIPs, single.Spec.IPFamilies, single.Spec.IPFamilyPolicy = nil, nil, nil
			var ext []string
			for _, ip := range single.Spec.ExternalIPs {
				if netip.MustParseAddr(ip).Is4() {
					ext = append(ext, ip)
				}
			}
			single.Spec.ExternalIPs = ext
			var ing []corev1.LoadBalancerIngress
			for _, i := range single.Status.LoadBalancer.Ingress {
				if netip.MustParseAddr(i.IP).Is4() {
					ing = append(ing, i)
				}
			}
			single.Status.LoadBalancer.Ingress = ing
			var ranges []string
			for _, r := range single.Spec.LoadBalancerSourceRanges {
				if netip.MustParsePrefix(r).Addr().Is4() {
					ranges = append(ranges, r)
				}
			}
			single.Spec.LoadBalancerSourceRanges = ranges

			want := iptablestest.NewFake()
			p, _ := testProxier(t, want)
			loadShape(p, shape{svc: single, slices: s.slices[:1]})
			mustSync(t, p)

			got := iptablestest.NewFake()
			p, _ = testProxier(t, got)
			loadShape(p, s)
			mustSync(t, p)
			if w, g := saved(t, want), saved(t, got); w != g {
				t.Errorf("the IPv6 half changed the IPv4 rules:\n%s", lineDiff(w, g))
			}
		})
	}
}

// What distinguishes the IPv6 rules: the IPv6 ClusterIP and endpoints,
// bracketed DNAT targets, ::1 kept out of KUBE-NODEPORTS, no localhost
// firewall; chain names hash as upstream's (service port name and protocol,
// plus "ip:port" for endpoints), so a port's KUBE-SVC name is the same in
// both families' tables.
func TestIPv6RuleShape(t *testing.T) {
	ipt6 := iptablestest.NewFake()
	p6, _ := testProxier6(t, ipt6)
	s := dualShapes()[2] // LB, source ranges, affinity, NodePort
	loadShape(p6, s)
	mustSync(t, p6)

	hash := portProtoHash("ns5/svc5:p80", "tcp")
	svc := prefixSVC + hash
	sep := prefixSEP + endpointHash("ns5/svc5:p80", "tcp", "[fd00:10:244:1::5]:80")
	all := saved(t, ipt6)
	for _, want := range []string{
		`-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d fd00:10:96::50 --dport 80 -j ` + svc,
		`-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 external IP" -m tcp -p tcp -d fd00:56::150 --dport 80 -j ` + prefixEXT + hash,
		`-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d fd00:56::240 --dport 80 -j ` + prefixFW + hash,
		`-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS`,
		`-A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 30005 -j ` + prefixEXT + hash,
		`-A ` + svc + ` -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d fd00:10:96::50 --dport 80 ! -s fd00:10:244::/56 -j KUBE-MARK-MASQ`,
		`-A ` + prefixFW + hash + ` -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 2001:db8::/64 -j ` + prefixEXT + hash,
		// The node is in fd00:56::/64: its own LB VIP traffic is let through.
		`-A ` + prefixFW + hash + ` -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s fd00:56::240 -j ` + prefixEXT + hash,
		`-A ` + sep + ` -m comment --comment ns5/svc5:p80 -s fd00:10:244:1::5 -j KUBE-MARK-MASQ`,
		`-A ` + sep + ` -m comment --comment ns5/svc5:p80 -m recent --name ` + sep + ` --set -m tcp -p tcp -j DNAT --to-destination [fd00:10:244:1::5]:80`,
		`-A ` + svc + ` -m comment --comment "ns5/svc5:p80 -> [fd00:10:244:1::5]:80" -m recent --name ` + sep + ` --rcheck --seconds 10800 --reap -j ` + sep,
	} {
		if !strings.Contains(all, want+"\n") {
			t.Errorf("missing rule\n  %s\nin\n%s", want, all)
		}
	}
	for _, bad := range []string{"10.96.0.50", "10.244.", "192.168.56.", "203.0.113.0", "127.0.0.0/8"} {
		if strings.Contains(all, bad) {
			t.Errorf("IPv6 rules mention %s:\n%s", bad, all)
		}
	}
	if r := ipt6.Rules("filter", chainFirewall); len(r) != 0 {
		t.Errorf("IPv6 KUBE-FIREWALL has rules %q; localhost NodePorts are IPv4's only", r)
	}

	// The IPv4 proxier names the port's service chain the same.
	ipt4 := iptablestest.NewFake()
	p4, _ := testProxier(t, ipt4)
	loadShape(p4, s)
	mustSync(t, p4)
	if len(ipt4.Rules("nat", svc)) == 0 || len(ipt6.Rules("nat", svc)) == 0 {
		t.Errorf("%s missing in one family: IPv4 %q, IPv6 %q", svc, ipt4.Rules("nat", svc), ipt6.Rules("nat", svc))
	}
}

// A service with no IPv6 endpoints is REJECTed in the IPv6 filter table at
// its IPv6 ClusterIP and NodePort, while IPv4 still proxies it.
func TestIPv6NoEndpointsRejects(t *testing.T) {
	ipt6 := iptablestest.NewFake()
	p6, _ := testProxier6(t, ipt6)
	loadShape(p6, dualShapes()[3])
	mustSync(t, p6)
	all := saved(t, ipt6)
	for _, want := range []string{
		`-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d fd00:10:96::80 --dport 80 -j REJECT`,
		`-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30006 -j REJECT`,
	} {
		if !strings.Contains(all, want+"\n") {
			t.Errorf("missing rule\n  %s\nin\n%s", want, all)
		}
	}
	if strings.Contains(all, prefixSVC) {
		t.Errorf("a KUBE-SVC chain without IPv6 endpoints:\n%s", all)
	}
}

// Single-stack IPv6 services (only an IPv6 ClusterIP) are the IPv6
// proxier's alone.
func TestSingleStackIPv6Service(t *testing.T) {
	svc := makeService("ns", "v6only", "fd00:10:96::99")
	slice := makeSlice6("ns", "v6only", p80, ep{ip: "fd00:10:244:1::9", node: testNode})
	ipt4, ipt6 := iptablestest.NewFake(), iptablestest.NewFake()
	p4, _ := testProxier(t, ipt4)
	p6, _ := testProxier6(t, ipt6)
	m, err := NewMetaProxier(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, p4)
	empty4 := saved(t, ipt4)
	m.OnServiceUpdate(svc)
	m.OnEndpointSliceUpdate(slice)
	mustSync(t, p4)
	mustSync(t, p6)
	if got := saved(t, ipt4); got != empty4 {
		t.Errorf("IPv4 rules for an IPv6-only service:\n%s", lineDiff(empty4, got))
	}
	if !strings.Contains(saved(t, ipt6), "--to-destination [fd00:10:244:1::9]:80") {
		t.Errorf("no DNAT to the IPv6 endpoint:\n%s", saved(t, ipt6))
	}
}

// The metaproxier hands each EndpointSlice to the proxier of its address
// type, services to both, and each node address to its family's proxier.
func TestMetaProxierDispatch(t *testing.T) {
	ipt4, ipt6 := iptablestest.NewFake(), iptablestest.NewFake()
	p4, _ := testProxier(t, ipt4)
	p6, _ := testProxier6(t, ipt6)
	if _, err := NewMetaProxier(p6, p4); err == nil {
		t.Error("NewMetaProxier accepted the families swapped")
	}
	m, err := NewMetaProxier(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	s := dualShapes()[0]
	m.OnServiceUpdate(s.svc)
	for _, sl := range s.slices {
		m.OnEndpointSliceUpdate(sl)
	}
	if len(p4.slices[nsName("default", "hostnames")]) != 1 || len(p6.slices[nsName("default", "hostnames")]) != 1 {
		t.Fatalf("slices: IPv4 proxier %v, IPv6 proxier %v; want one each", p4.slices, p6.slices)
	}
	if p4.slices[nsName("default", "hostnames")]["hostnames-abc"] == nil || p6.slices[nsName("default", "hostnames")]["hostnames-v6"] == nil {
		t.Errorf("slices went to the wrong proxier: IPv4 %v, IPv6 %v", p4.slices, p6.slices)
	}
	m.SetNodeIP(netip.MustParseAddr("fd00:56::11"))
	m.SetNodeIP(netip.MustParseAddr("192.168.56.11"))
	if p4.nodeIP != netip.MustParseAddr("192.168.56.11") || p6.nodeIP != netip.MustParseAddr("fd00:56::11") {
		t.Errorf("node IPs: IPv4 proxier %s, IPv6 proxier %s", p4.nodeIP, p6.nodeIP)
	}
	// A proxier ignores an address of the other family given to it directly.
	p4.SetNodeIP(netip.MustParseAddr("fd00:56::12"))
	p6.SetNodeIP(netip.MustParseAddr("192.168.56.12"))
	if p4.nodeIP != netip.MustParseAddr("192.168.56.11") || p6.nodeIP != netip.MustParseAddr("fd00:56::11") {
		t.Errorf("a proxier took the other family's address: IPv4 %s, IPv6 %s", p4.nodeIP, p6.nodeIP)
	}
	mustSync(t, p4)
	mustSync(t, p6)
	if !strings.Contains(saved(t, ipt4), "-d 10.96.0.20 --dport") || !strings.Contains(saved(t, ipt6), "-d fd00:10:96::20 --dport") {
		t.Errorf("rules:\nIPv4\n%s\nIPv6\n%s", saved(t, ipt4), saved(t, ipt6))
	}
	m.OnEndpointSliceDelete(s.slices[1])
	if len(p6.slices[nsName("default", "hostnames")]) != 0 || len(p4.slices[nsName("default", "hostnames")]) != 1 {
		t.Errorf("deleting the IPv6 slice: IPv4 %v, IPv6 %v", p4.slices, p6.slices)
	}

	// The debug endpoint serves the IPv6 rules at /rules6.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/rules6", nil))
	if !strings.Contains(rec.Body.String(), "fd00:10:96::20") {
		t.Errorf("/rules6:\n%s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/rules", nil))
	if !strings.Contains(rec.Body.String(), "10.96.0.20") || strings.Contains(rec.Body.String(), "fd00:") {
		t.Errorf("/rules:\n%s", rec.Body.String())
	}
}

// UDP conntrack cleanup in the IPv6 proxier: flows to the IPv6 ClusterIP
// and to a NodePort on the node's IPv6 address that no serving endpoint
// answers are deleted; a flow its endpoint answers stays.
func TestIPv6ConntrackCleanup(t *testing.T) {
	ipt6 := iptablestest.NewFake()
	p6, ct := testProxier6(t, ipt6)
	svc := makeService("kube-system", "dns", "10.96.0.10", withIPv6("fd00:10:96::a"), withPorts(
		corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}))
	svc.Spec.Type = corev1.ServiceTypeNodePort
	ports := []discovery.EndpointPort{slicePort("dns", corev1.ProtocolUDP, 53)}
	ap := netip.MustParseAddrPort
	good := Flow{OrigSrc: ap("[fd00:10:244:1::3]:4000"), OrigDst: ap("[fd00:10:96::a]:53"), ReplySrc: ap("[fd00:10:244:1::2]:53")}
	gone := Flow{OrigSrc: ap("[fd00:10:244:1::3]:4001"), OrigDst: ap("[fd00:10:96::a]:53"), ReplySrc: ap("[fd00:10:244:2::7]:53")}
	nodePort := Flow{OrigSrc: ap("[fd00:56::1]:4002"), OrigDst: ap("[fd00:56::10]:30053"), ReplySrc: ap("[fd00:10:244:2::7]:53")}
	ct.flows = []Flow{good, gone, nodePort}
	p6.OnServiceUpdate(svc)
	p6.OnEndpointSliceUpdate(makeSlice6("kube-system", "dns", ports, ep{ip: "fd00:10:244:1::2", node: testNode}))
	mustSync(t, p6)
	if len(ct.flows) != 1 || ct.flows[0] != good {
		t.Errorf("flows left %v, want only %v (deleted %v)", ct.flows, good, ct.deleted)
	}
}

func nsName(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// The IPv6 proxier on the real kernel: ip6tables-restore takes its rules in
// a throwaway node namespace, the node reaches a pod through the IPv6
// ClusterIP (with session affinity, the recent match), a client namespace
// reaches it through a NodePort on the node's IPv6 address (masqueraded),
// the IPv4 tables stay untouched, and Cleanup removes every chain again.
func TestIPv6ProxierInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (CI runs as root)")
	}
	node, pod, client := "mkt-v6proxy-node", "mkt-v6proxy-pod", "mkt-v6proxy-client"
	sh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, ns := range []string{node, pod, client} {
		exec.Command("ip", "netns", "del", ns).Run()
		sh("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	in := func(ns string, args ...string) string {
		t.Helper()
		return sh(append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	for _, ns := range []string{node, pod, client} {
		in(ns, "ip", "link", "set", "lo", "up")
	}
	in(node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	in(node, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", client)
	in(node, "ip", "addr", "add", "fd00:56::10/64", "dev", "eth0", "nodad")
	in(node, "ip", "link", "set", "eth0", "up")
	in(client, "ip", "addr", "add", "fd00:56::1/64", "dev", "eth0", "nodad")
	in(client, "ip", "link", "set", "eth0", "up")
	// A node routes a service range somewhere (here its default route);
	// without a route, connecting to a ClusterIP fails before nat OUTPUT.
	in(node, "ip", "-6", "route", "add", "default", "via", "fd00:56::1")
	in(node, "ip", "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", pod)
	in(node, "ip", "addr", "add", "fd00:10:244::1/64", "dev", "vpod", "nodad")
	in(node, "ip", "link", "set", "vpod", "up")
	in(pod, "ip", "addr", "add", "fd00:10:244::5/64", "dev", "eth0", "nodad")
	in(pod, "ip", "link", "set", "eth0", "up")
	in(pod, "ip", "-6", "route", "add", "default", "via", "fd00:10:244::1")

	var ln net.Listener
	if err := netns.DoPath(netns.NetNSPath(pod), func() (err error) {
		ln, err = net.Listen("tcp6", "[fd00:10:244::5]:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pod=backend client="+r.RemoteAddr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	v4Before := in(node, "iptables-save")
	s := makeService("default", "web", "10.96.0.20", withIPv6("fd00:10:96::20"), withNodePort(30080), withAffinity(60))
	port := p80[0] // a copy: p80 is shared with every other test
	port.Port = ptrInt32(8080)
	sl := makeSlice6("default", "web", []discovery.EndpointPort{port}, ep{ip: "fd00:10:244::5", node: testNode})
	var ipt6 iptables.Interface
	err := netns.DoPath(netns.NetNSPath(node), func() error {
		var err error
		if ipt6, err = iptables.NewIPv6(); err != nil {
			return err
		}
		liberal := false
		p, err := New(Config{
			NodeName: testNode, Family: corev1.IPv6Protocol, NodeIP: netip.MustParseAddr("fd00:56::10"),
			ClusterCIDR: netip.MustParsePrefix("fd00:10:244::/56"),
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)), TCPBeLiberal: &liberal,
			HealthCheckListen: func(port int) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
			Conntrack:         &fakeConntrack{},
		}, ipt6)
		if err != nil {
			return err
		}
		t.Cleanup(p.health.close)
		p.initialized = true
		p.OnServiceUpdate(s)
		p.OnEndpointSliceUpdate(sl)
		return p.syncProxyRules()
	})
	if err != nil {
		t.Fatal(err)
	}
	curl := func(ns, url, wantClient string) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", ns, "curl", "-sS", "-g", "--max-time", "5", url).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "pod=backend client=["+wantClient+"]:") {
			t.Errorf("curl %s from %s: %v: %s (want the backend seeing %s)", url, ns, err, out, wantClient)
		}
	}
	curl(node, "http://[fd00:10:96::20]:80/", "fd00:10:244::1")
	curl(client, "http://[fd00:56::10]:30080/", "fd00:10:244::1") // masqueraded to the node's pod-side address
	if got := in(node, "iptables-save"); got != v4Before {
		t.Errorf("the IPv6 proxier changed the IPv4 tables:\n%s", lineDiff(v4Before, got))
	}
	saved6 := in(node, "ip6tables-save")
	if !strings.Contains(saved6, "--to-destination [fd00:10:244::5]:8080") {
		t.Errorf("ip6tables-save lacks the DNAT:\n%s", saved6)
	}
	if err := netns.DoPath(netns.NetNSPath(node), func() error { return Cleanup(ipt6) }); err != nil {
		t.Fatal(err)
	}
	if left := in(node, "ip6tables-save"); strings.Contains(left, "KUBE-") {
		t.Errorf("Cleanup left IPv6 chains:\n%s", left)
	}
}
