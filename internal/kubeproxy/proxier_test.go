package kubeproxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

func hostnames(p *Proxier, eps ...ep) {
	for _, s := range shapes() {
		if s.name == "clusterip" {
			p.OnServiceUpdate(s.svc)
			sl := s.slices[0]
			if eps != nil {
				sl = makeSlice("default", "hostnames", sl.Ports, eps...)
			}
			p.OnEndpointSliceUpdate(sl)
		}
	}
}

func TestOneRestorePerSync(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	for _, s := range shapes() {
		loadShape(p, s)
	}
	mustSync(t, p)
	if n := len(ipt.Restores); n != 1 || ipt.Restores[0].NoFlush {
		t.Fatalf("full sync: %d restores (noflush=%v), want one whole-table restore", n, n > 0 && ipt.Restores[0].NoFlush)
	}
	execs := ipt.Execs
	before := saved(t, ipt)

	// One endpoint of "hostnames" moves: a partial sync rewrites its
	// KUBE-SVC chain, adds the new KUBE-SEP chain, deletes the old one, and
	// touches nothing else.
	hostnames(p, ep{ip: "10.244.1.5", node: testNode}, ep{ip: "10.244.2.5", node: testOther}, ep{ip: "10.244.2.7", node: testOther})
	mustSync(t, p)
	if n := len(ipt.Restores); n != 2 || !ipt.Restores[1].NoFlush {
		t.Fatalf("partial sync: %d restores, want one more --noflush restore", n)
	}
	if ipt.Execs != execs {
		t.Errorf("partial sync ran %d per-rule iptables commands, want none", ipt.Execs-execs)
	}
	in := ipt.Restores[1].Data
	svc := prefixSVC + portProtoHash("default/hostnames:default", "tcp")
	oldSEP := prefixSEP + endpointHash("default/hostnames:default", "tcp", "10.244.2.6:9376")
	newSEP := prefixSEP + endpointHash("default/hostnames:default", "tcp", "10.244.2.7:9376")
	want := "*nat\n:" + svc + " - [0:0]\n:" + newSEP + " - [0:0]\n:" + oldSEP + " - [0:0]\n"
	if !strings.HasPrefix(in, want) || !strings.Contains(in, "-X "+oldSEP+"\n") {
		t.Errorf("partial restore input:\n%s\nwant it to start with:\n%s", in, want)
	}
	if strings.Contains(in, ":KUBE-SERVICES") || strings.Contains(in, "*filter") {
		t.Errorf("partial restore rewrote unchanged chains:\n%s", in)
	}
	after := saved(t, ipt)
	if strings.Contains(after, oldSEP) || !strings.Contains(after, "--to-destination 10.244.2.7:9376") {
		t.Errorf("kernel state after partial sync:\n%s", lineDiff(before, after))
	}

	// Nothing changed: no restore at all.
	p.OnServiceUpdate(makeService("ns6", "svc6", "10.96.0.80", withNodePort(30006), withExternalIPs("192.168.56.152")))
	mustSync(t, p)
	if n := len(ipt.Restores); n != 2 {
		t.Errorf("a sync with no change ran a restore:\n%s", ipt.Restores[n-1].Data)
	}

	// A partial sync must leave exactly what a full sync would write.
	fresh := iptablestest.NewFake()
	q, _ := testProxier(t, fresh)
	for _, s := range shapes() {
		loadShape(q, s)
	}
	hostnames(q, ep{ip: "10.244.1.5", node: testNode}, ep{ip: "10.244.2.5", node: testOther}, ep{ip: "10.244.2.7", node: testOther})
	mustSync(t, q)
	if got, want := saved(t, ipt), saved(t, fresh); got != want {
		t.Errorf("partial syncs diverged from a full sync:\n%s", lineDiff(want, got))
	}
}

func TestDeletedServiceLeavesNoChains(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	mustSync(t, p)
	empty := saved(t, ipt)
	s := shapes()[5] // LB with source ranges and affinity: EXT, FW, SVC, SEPs
	loadShape(p, s)
	mustSync(t, p)
	p.OnServiceDelete(s.svc)
	mustSync(t, p)
	if got := saved(t, ipt); got != empty {
		t.Errorf("left behind after delete:\n%s", lineDiff(empty, got))
	}
}

// Other programs' rules survive full syncs: a whole-table restore writes them back.
func TestForeignRulesSurvive(t *testing.T) {
	ipt := iptablestest.NewFake()
	foreign := "*nat\n:DOCKER - [0:0]\n:MINIKIT-POSTROUTING - [0:0]\n" +
		"-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n" +
		"-A POSTROUTING -m comment --comment \"minikit pod masquerade\" -j MINIKIT-POSTROUTING\n" +
		"-A DOCKER -i docker0 -j RETURN\n" +
		"-A MINIKIT-POSTROUTING -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment \"pod to pod: no NAT\" -j RETURN\nCOMMIT\n" +
		"*filter\n:FORWARD DROP [0:0]\n:DOCKER-USER - [0:0]\n-A FORWARD -j DOCKER-USER\n-A DOCKER-USER -j RETURN\nCOMMIT\n"
	if err := ipt.Restore([]byte(foreign), true); err != nil {
		t.Fatal(err)
	}
	p, _ := testProxier(t, ipt)
	loadShape(p, shapes()[0])
	mustSync(t, p)
	p.forceFullSync()
	mustSync(t, p) // a second full sync over our own rules
	got := saved(t, ipt)
	for _, want := range []string{
		":FORWARD DROP [0:0]",
		"-A FORWARD -j DOCKER-USER",
		"-A DOCKER-USER -j RETURN",
		"-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
		"-A DOCKER -i docker0 -j RETURN",
		"-A POSTROUTING -m comment --comment \"minikit pod masquerade\" -j MINIKIT-POSTROUTING",
		"-A MINIKIT-POSTROUTING -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment \"pod to pod: no NAT\" -j RETURN",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("lost foreign rule %q", want)
		}
	}
	// Our jumps come first in built-in chains, once.
	pre := ipt.Rules("nat", "PREROUTING")
	if len(pre) != 2 || !strings.HasSuffix(pre[0], "-j KUBE-SERVICES") {
		t.Errorf("nat PREROUTING = %q", pre)
	}
	if err := Cleanup(ipt); err != nil {
		t.Fatal(err)
	}
	after := saved(t, ipt)
	if strings.Contains(after, "KUBE-") {
		t.Errorf("Cleanup left KUBE- state:\n%s", after)
	}
	if err := ipt.Restore([]byte(strings.ReplaceAll(foreign, "DROP", "ACCEPT")), false); err != nil {
		t.Fatal(err)
	}
	want := saved(t, ipt)
	if strings.ReplaceAll(after, ":FORWARD DROP", ":FORWARD ACCEPT") != want {
		t.Errorf("Cleanup changed foreign state:\n%s", lineDiff(want, after))
	}
}

// `iptables -t nat -F` by hand: the monitor notices within one period and the
// next sync (a full one) puts everything back.
func TestFlushIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush func(*iptablestest.Fake)
	}{
		{"nat -F", func(f *iptablestest.Fake) { f.FlushTable("nat") }},
		{"filter -F", func(f *iptablestest.Fake) { f.FlushTable("filter") }},
		{"nat -F -X", func(f *iptablestest.Fake) { f.DeleteUserChains("nat") }},
		{"mangle -X", func(f *iptablestest.Fake) { f.DeleteUserChains("mangle") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := iptablestest.NewFake()
			p, _ := testProxier(t, ipt)
			for _, s := range shapes() {
				loadShape(p, s)
			}
			mustSync(t, p)
			want := saved(t, ipt)
			if m := p.missingRules(monitoredJumps()); m != "" {
				t.Fatalf("monitor reports %q missing right after a sync", m)
			}
			tc.flush(ipt)
			clock := p.clock.(*fakeClock)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { p.monitor(ctx); close(done) }()
			testutil.Eventually(t, 5*time.Second, "a waiter on the clock", clockWaiting(clock))
			clock.Step(p.cfg.SyncPeriod)
			testutil.Eventually(t, 5*time.Second, "a full sync requested", func() error {
				p.mu.Lock()
				defer p.mu.Unlock()
				if !p.needFull {
					return errors.New("needFull not set")
				}
				return nil
			})
			cancel()
			<-done
			mustSync(t, p)
			if got := saved(t, ipt); got != want {
				t.Errorf("not repaired:\n%s", lineDiff(want, got))
			}
		})
	}
}

// clockWaiting is an Eventually condition: something waits on clock.
func clockWaiting(clock *fakeClock) func() error {
	return func() error {
		if clock.Waiters() == 0 {
			return errors.New("nothing waits on the clock")
		}
		return nil
	}
}

func TestFailedRestoreRetriesFull(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	loadShape(p, shapes()[0])
	mustSync(t, p)
	hostnames(p, ep{ip: "10.244.1.5", node: testNode})
	ipt.RestoreErr = iptablestest.ErrFake
	if err := p.syncProxyRules(); err == nil {
		t.Fatal("sync with a failing restore succeeded")
	}
	mustSync(t, p)
	last := ipt.Restores[len(ipt.Restores)-1]
	if last.NoFlush {
		t.Errorf("retry after a failure was a partial sync")
	}
	if got := ipt.Rules("nat", prefixSVC+portProtoHash("default/hostnames:default", "tcp")); len(got) != 2 {
		t.Errorf("retry did not apply the change: %q", got)
	}
	if s := p.Stats(); s.RestoreFailures != 1 || s.FullSyncs != 2 {
		t.Errorf("stats = %+v", s)
	}
}

// The legacy backend gets kube-proxy's shape: per-rule jumps, --noflush.
func TestLegacyBackendFullSync(t *testing.T) {
	ipt := iptablestest.NewFake()
	ipt.FakeBackend = iptables.Legacy
	p, _ := testProxier(t, ipt)
	for _, s := range shapes() {
		loadShape(p, s)
	}
	mustSync(t, p)
	if len(ipt.Restores) != 1 || !ipt.Restores[0].NoFlush {
		t.Fatalf("legacy full sync restores: %+v", len(ipt.Restores))
	}
	nft := iptablestest.NewFake()
	q, _ := testProxier(t, nft)
	for _, s := range shapes() {
		loadShape(q, s)
	}
	mustSync(t, q)
	if got, want := saved(t, ipt), saved(t, nft); got != want {
		t.Errorf("legacy and nf_tables shapes give different rules:\n%s", lineDiff(want, got))
	}
	// A stale service chain left in the kernel (say, from before a restart) is deleted.
	stale := "*nat\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-MARK-MASQ\nCOMMIT\n"
	if err := ipt.Restore([]byte(stale), true); err != nil {
		t.Fatal(err)
	}
	p.forceFullSync()
	mustSync(t, p)
	if ok, _ := ipt.ChainExists("nat", "KUBE-SVC-AAAAAAAAAAAAAAAA"); ok {
		t.Error("stale chain survived a legacy full sync")
	}
}

func TestConntrackCleanupForUDP(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, ct := testProxier(t, ipt)
	dns := shapes()[11]
	loadShape(p, dns)
	mustSync(t, p)
	vip := netip.MustParseAddrPort("10.96.0.10:53")
	client := netip.MustParseAddrPort("10.244.1.9:40000")
	old := netip.MustParseAddrPort("10.244.1.2:53")
	ct.flows = []Flow{
		{OrigSrc: client, OrigDst: vip, ReplySrc: old},
		{OrigSrc: netip.MustParseAddrPort("10.244.1.9:40001"), OrigDst: netip.MustParseAddrPort("8.8.8.8:53"), ReplySrc: netip.MustParseAddrPort("8.8.8.8:53")},
	}
	// The only backend is replaced.
	p.OnEndpointSliceUpdate(makeSlice("kube-system", "kube-dns", dns.slices[0].Ports, ep{ip: "10.244.1.3", node: testNode}))
	mustSync(t, p)
	if len(ct.deleted) != 1 || ct.deleted[0].ReplySrc != old {
		t.Fatalf("deleted %v, want the flow to the old backend", ct.deleted)
	}
	// Scaled to zero: flows that hit the REJECT (un-NATed, reply from the VIP) go too.
	ct.flows = append(ct.flows, Flow{OrigSrc: client, OrigDst: vip, ReplySrc: vip})
	p.OnEndpointSliceUpdate(makeSlice("kube-system", "kube-dns", dns.slices[0].Ports))
	mustSync(t, p)
	if len(ct.deleted) != 2 {
		t.Errorf("zero-endpoint service: deleted %v", ct.deleted)
	}
	if len(ct.flows) != 1 || ct.flows[0].OrigDst.Addr() != netip.MustParseAddr("8.8.8.8") {
		t.Errorf("unrelated flows touched: left %v", ct.flows)
	}
}

// A NodePort UDP service whose targetPort changes keeps its backend's IP:
// kube-proxy's reconciler compares the reply's address and port, so flows
// still answered from the old port (DNATed before the change) are deleted,
// on the node port as on the cluster IP, and flows to the new port stay.
func TestConntrackCleanupWhenTargetPortChanges(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, ct := testProxier(t, ipt)
	svc := makeService("ns", "udp", "10.96.0.20", withPorts(corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80}), withNodePort(30080))
	p.OnServiceUpdate(svc)
	p.OnEndpointSliceUpdate(makeSlice("ns", "udp", []discovery.EndpointPort{slicePort("udp", corev1.ProtocolUDP, 8080)}, ep{ip: "10.244.2.5", node: testOther}))
	mustSync(t, p)

	client := netip.MustParseAddrPort("10.244.1.9:12345")
	viaNodePort := Flow{OrigSrc: client, OrigDst: netip.AddrPortFrom(testNodeIP, 30080), ReplySrc: netip.MustParseAddrPort("10.244.2.5:8080")}
	viaClusterIP := Flow{OrigSrc: client, OrigDst: netip.MustParseAddrPort("10.96.0.20:80"), ReplySrc: netip.MustParseAddrPort("10.244.2.5:8080")}
	current := Flow{OrigSrc: netip.MustParseAddrPort("10.244.1.9:12346"), OrigDst: netip.MustParseAddrPort("10.96.0.20:80"), ReplySrc: netip.MustParseAddrPort("10.244.2.5:9090")}
	ct.flows = []Flow{viaNodePort, viaClusterIP, current}

	p.OnEndpointSliceUpdate(makeSlice("ns", "udp", []discovery.EndpointPort{slicePort("udp", corev1.ProtocolUDP, 9090)}, ep{ip: "10.244.2.5", node: testOther}))
	mustSync(t, p)
	if len(ct.deleted) != 2 || !slices.Contains(ct.deleted, viaNodePort) || !slices.Contains(ct.deleted, viaClusterIP) {
		t.Errorf("deleted %v, want the two flows answered from :8080", ct.deleted)
	}
	if len(ct.flows) != 1 || ct.flows[0] != current {
		t.Errorf("left %v, want only the flow to :9090", ct.flows)
	}
}

func TestHealthCheckNodePort(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	lb := shapes()[6] // eTP=Local with health check node port 30000, one local endpoint
	loadShape(p, lb)
	mustSync(t, p)
	get := func() (int, string, string) {
		t.Helper()
		p.health.mu.Lock()
		s := p.health.servers[types.NamespacedName{Namespace: "ns2", Name: "svc2"}]
		p.health.mu.Unlock()
		if s == nil {
			t.Fatal("no health check server")
		}
		// The test listener is on 127.0.0.1:0; find its address through the server.
		addr := p.health.addrOf(s)
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), string(b)
	}
	code, weight, body := get()
	want := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns2\",\n\t\t\"name\": \"svc2\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"
	if code != 200 || weight != "1" || body != want {
		t.Errorf("with a local endpoint: %d %s %q", code, weight, body)
	}
	p.OnEndpointSliceUpdate(makeSlice("ns2", "svc2", p80, ep{ip: "10.244.2.5", node: testOther}))
	mustSync(t, p)
	if code, weight, body := get(); code != 503 || weight != "0" || !strings.Contains(body, `"localEndpoints": 0`) {
		t.Errorf("without local endpoints: %d %s %q", code, weight, body)
	}
	p.OnServiceDelete(lb.svc)
	mustSync(t, p)
	if len(p.health.servers) != 0 {
		t.Error("health check server outlived its service")
	}
}

func TestRunnerBoundsFrequency(t *testing.T) {
	clock := newFakeClock(time.Unix(0, 0))
	calls := make(chan time.Time, 10)
	r := newBoundedRunner(func() error { calls <- clock.Now(); return nil }, time.Second, time.Hour, 30*time.Second, 2, clock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Loop(ctx)
	expect := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no call", what)
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case at := <-calls:
			t.Fatalf("%s: unexpected call at %v", what, at)
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.Run()
	expect("first request runs at once")
	r.Run()
	expect("burst of two")
	r.Run()
	r.Run()
	r.Run()
	none("third request within a second waits")
	testutil.Eventually(t, 5*time.Second, "a waiter on the clock", clockWaiting(clock))
	clock.Step(time.Second)
	expect("after a token refills, pending requests run once")
	none("collapsed into one call")
	testutil.Eventually(t, 5*time.Second, "a waiter on the clock", clockWaiting(clock))
	clock.Step(time.Hour)
	expect("periodic call after maxInterval")
}

var _ = corev1.ProtocolTCP

// TestMetrics: the metrics endpoint speaks kube-proxy's names: sync
// histograms, network programming latency from the EndpointSlice's
// last-change-trigger-time, and the nfacct counters read at each scrape.
func TestMetrics(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	clock := p.clock.(*fakeClock)
	s := shapes()[1]
	p.OnServiceUpdate(s.svc)
	mustSync(t, p)
	clock.Step(time.Millisecond) // the trigger must be newer than the proxier
	sl := s.slices[0].DeepCopy()
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: clock.Now().Format(time.RFC3339Nano)}
	clock.Step(1500 * time.Millisecond)
	p.OnEndpointSliceUpdate(sl)
	mustSync(t, p)
	p.acct.(*nfacct.Fake).Counters[CounterLocalhostNodePorts].Packets = 7
	var b strings.Builder
	p.WriteMetrics(&b)
	out := b.String()
	for _, want := range []string{
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 2`,
		`kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="1"} 0`,
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="2"} 1`,
		`kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv4"} 1.5`,
		"kubeproxy_iptables_localhost_nodeports_accepted_packets_total 7",
		"kubeproxy_iptables_ct_state_invalid_dropped_packets_total 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

// TestLocalhostNodePortInNetns is a student's `curl 127.0.0.1:NODEPORT` on a
// node, with real packets: a node namespace (mkt-parity-lh-node) with the
// proxier's rules in its kernel, route_localnet set as the node agent sets
// it, and a backend "pod" namespace behind a veth serving HTTP. The curl
// reaches the backend, and the localhost NodePort counter counted it.
func TestLocalhostNodePortInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (CI runs as root)")
	}
	node, pod := "mkt-parity-lh-node", "mkt-parity-lh-pod"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{node, pod} {
		exec.Command("ip", "netns", "del", ns).Run()
		sh("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	in := func(ns string, args ...string) {
		t.Helper()
		sh(append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	in(node, "ip", "link", "set", "lo", "up")
	in(pod, "ip", "link", "set", "lo", "up")
	in(node, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer") // no dummy links in this kernel
	in(node, "ip", "addr", "add", "192.168.56.10/24", "dev", "eth0")
	in(node, "ip", "link", "set", "eth0", "up")
	in(node, "ip", "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", pod)
	in(node, "ip", "addr", "add", "10.244.0.1/24", "dev", "vpod")
	in(node, "ip", "link", "set", "vpod", "up")
	in(pod, "ip", "addr", "add", "10.244.0.5/24", "dev", "eth0")
	in(pod, "ip", "link", "set", "eth0", "up")
	in(pod, "ip", "route", "add", "default", "via", "10.244.0.1")

	var ln net.Listener
	if err := netns.DoPath(netns.NetNSPath(pod), func() (err error) {
		ln, err = net.Listen("tcp", "10.244.0.5:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pod=backend client="+r.RemoteAddr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	s := makeService("default", "web", "10.96.0.20", withNodePort(30080))
	port := p80[0] // a copy: p80 is shared with every other test
	port.Port = ptrInt32(8080)
	sl := makeSlice("default", "web", []discovery.EndpointPort{port}, ep{ip: "10.244.0.5", node: testNode})
	acct := nfacct.Netlink{}
	err := netns.DoPath(netns.NetNSPath(node), func() error {
		ipt, err := iptables.New()
		if err != nil {
			return err
		}
		liberal := false
		p, err := New(Config{
			NodeName: testNode, NodeIP: testNodeIP, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TCPBeLiberal: &liberal, NFAcct: acct,
			RouteLocalnet: func() error {
				return os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1"), 0o644)
			},
			HealthCheckListen: func(port int) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
		}, ipt)
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
	out, err := exec.Command("ip", "netns", "exec", node, "curl", "-sS", "--max-time", "5", "http://127.0.0.1:30080/").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "pod=backend client=10.244.0.1:") {
		t.Fatalf("curl 127.0.0.1:30080 in the node namespace: %v: %s (want the backend, seeing the node's bridge-side address after masquerade)", err, out)
	}
	var c nfacct.Counter
	if err := netns.DoPath(netns.NetNSPath(node), func() (err error) {
		c, err = acct.Get(CounterLocalhostNodePorts)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if c.Packets == 0 {
		t.Errorf("%s counted no packets", CounterLocalhostNodePorts)
	}
	// The same port on the node's own address works as before.
	out, err = exec.Command("ip", "netns", "exec", node, "curl", "-sS", "--max-time", "5", "http://192.168.56.10:30080/").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "pod=backend") {
		t.Errorf("curl 192.168.56.10:30080: %v: %s", err, out)
	}
}

func ptrInt32(v int32) *int32 { return &v }
