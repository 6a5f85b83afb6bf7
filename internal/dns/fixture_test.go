package dns

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Object builders for fixtures, in the shape the API server stores them.

func ns(names ...string) []*corev1.Namespace {
	var out []*corev1.Namespace
	for _, n := range names {
		out = append(out, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return out
}

type portSpec struct {
	name  string
	proto corev1.Protocol
	port  int32
}

var httpPort = portSpec{"http", corev1.ProtocolTCP, 80}

func clusterIPSvc(namespace, name string, ips []string, ports ...portSpec) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips}}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: p.name, Protocol: p.proto, Port: p.port})
	}
	return s
}

func headlessSvc(namespace, name string, ports ...portSpec) *corev1.Service {
	s := clusterIPSvc(namespace, name, []string{corev1.ClusterIPNone}, ports...)
	s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	return s
}

func externalSvc(namespace, name, target string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target}}
}

type epSpec struct {
	ip       string
	hostname string
	notReady bool
}

func slice(namespace, svc, name string, family discoveryv1.AddressType, eps []epSpec, ports ...portSpec) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: family}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}}
		ready := !e.notReady
		ep.Conditions.Ready = &ready
		if e.hostname != "" {
			h := e.hostname
			ep.Hostname = &h
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	for _, p := range ports {
		n, pr, po := p.name, p.proto, p.port
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &n, Protocol: &pr, Port: &po})
	}
	return s
}

func v4(eps ...epSpec) []epSpec { return eps }

// handlerFixture is docs/dns-conformance.md §3.5's fixture (CoreDNS
// plugin/kubernetes/handler_test.go), plus the objects of the CI rows, the
// Kubernetes e2e DNS tests (§4, namespace e2e) and a large headless service.
func handlerFixture() Objects {
	big := make([]epSpec, 0, 100)
	for i := range 100 {
		big = append(big, epSpec{ip: netip.AddrFrom4([4]byte{172, 1, 0, byte(i + 1)}).String()})
	}
	return Objects{
		Namespaces: ns("testns", "svc-nons", "podns", "test-1", "e2e", "default", "kube-system"),
		Services: []*corev1.Service{
			clusterIPSvc("testns", "svc1", []string{"10.0.0.1"}, httpPort),
			clusterIPSvc("testns", "svcempty", []string{"10.0.0.1"}, httpPort),
			clusterIPSvc("testns", "svc6", []string{"1234:abcd::1"}, httpPort),
			headlessSvc("testns", "hdls1", httpPort),
			headlessSvc("testns", "hdlsprtls"),
			externalSvc("testns", "external", "ext.interwebs.test"),
			externalSvc("testns", "external-to-service", "svc1.testns.svc.cluster.local."),
			externalSvc("testns", "external-big", "big.interwebs.test"),
			clusterIPSvc("testns", "svc-dual-stack", []string{"10.0.0.3", "10::3"}, httpPort),
			headlessSvc("testns", "big-headless", httpPort),
			clusterIPSvc("svc-nons", "svc0", []string{"10.0.0.7"}, httpPort),
			clusterIPSvc("test-1", "svc-1-a", []string{"10.96.0.100"}, httpPort, portSpec{"https", corev1.ProtocolTCP, 443}),
			headlessSvc("test-1", "svc-unready", httpPort),
			// The Kubernetes e2e DNS objects (test/e2e/network/dns.go).
			clusterIPSvc("default", "kubernetes", []string{"10.96.0.1"}, portSpec{"https", corev1.ProtocolTCP, 443}),
			clusterIPSvc("default", "1kubernetes", []string{"10.96.0.2"}, portSpec{"https", corev1.ProtocolTCP, 443}),
			headlessSvc("e2e", "dns-test-service", httpPort),
			clusterIPSvc("e2e", "test-service-2", []string{"10.96.5.5"}, httpPort),
			headlessSvc("e2e", "dns-test-service-2", httpPort),
			externalSvc("e2e", "dns-test-service-3", "foo.example.com"),
			externalSvc("e2e", "upstream-fails", "servfail.example.org"),
			clusterIPSvc("e2e", "externalsvc", []string{"10.96.7.7"}, httpPort),
			externalSvc("e2e", "svc-to-externalsvc", "externalsvc.e2e.svc.cluster.local"),
		},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			slice("testns", "svc1", "svc1-a", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "172.0.0.1", hostname: "ep1a"}), httpPort),
			slice("testns", "svc6", "svc6-a", discoveryv1.AddressTypeIPv6, v4(epSpec{ip: "1234:abcd::2"}), httpPort),
			slice("testns", "hdls1", "hdls1-v4", discoveryv1.AddressTypeIPv4, v4(
				epSpec{ip: "172.0.0.2"}, epSpec{ip: "172.0.0.3"},
				epSpec{ip: "172.0.0.4", hostname: "dup-name"}, epSpec{ip: "172.0.0.5", hostname: "dup-name"}), httpPort),
			slice("testns", "hdls1", "hdls1-v6", discoveryv1.AddressTypeIPv6, v4(
				epSpec{ip: "5678:abcd::1"}, epSpec{ip: "5678:abcd::2"}), httpPort),
			slice("testns", "hdlsprtls", "hdlsprtls-a", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "172.0.0.20"})),
			slice("testns", "svc-dual-stack", "svc-dual-stack-a", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "172.0.0.30"}), httpPort),
			slice("testns", "big-headless", "big-headless-a", discoveryv1.AddressTypeIPv4, big, httpPort),
			slice("test-1", "svc-1-a", "svc-1-a-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "172.17.0.222"}), httpPort, portSpec{"https", corev1.ProtocolTCP, 443}),
			slice("test-1", "svc-unready", "svc-unready-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "172.17.0.223", notReady: true}), httpPort),
			slice("e2e", "dns-test-service", "dns-test-service-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.5", hostname: "dns-querier-1"}), httpPort),
			slice("e2e", "test-service-2", "test-service-2-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.5", hostname: "dns-querier-1"}), httpPort),
			slice("e2e", "dns-test-service-2", "dns-test-service-2-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.6", hostname: "dns-querier-2"}), httpPort),
			slice("e2e", "externalsvc", "externalsvc-x", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.244.1.7"}), httpPort),
		},
	}
}

// reverseFixture is CoreDNS plugin/kubernetes/reverse_test.go's.
func reverseFixture() Objects {
	return Objects{
		Namespaces: ns("testns"),
		Services: []*corev1.Service{
			clusterIPSvc("testns", "svc1", []string{"192.168.1.100"}, httpPort),
			clusterIPSvc("testns", "svc2", []string{"192.168.1.101"}, httpPort),
		},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			slice("testns", "svc1", "svc1-v4", discoveryv1.AddressTypeIPv4, v4(
				epSpec{ip: "10.0.0.100", hostname: "ep1a"}, epSpec{ip: "10.0.0.99", hostname: "double-ep"}), httpPort),
			slice("testns", "svc1", "svc1-v6", discoveryv1.AddressTypeIPv6, v4(epSpec{ip: "1234:abcd::1", hostname: "ep1b"}), httpPort),
			slice("testns", "svc2", "svc2-v4", discoveryv1.AddressTypeIPv4, v4(epSpec{ip: "10.0.0.99", hostname: "double-ep"}), httpPort),
		},
	}
}

// fakeUpstream is the resolver outside the cluster: a few names, NXDOMAIN with
// an SOA for the rest, and a name too big for a 512-byte UDP answer.
func fakeUpstream(t testing.TB) netip.AddrPort {
	t.Helper()
	answers := map[string][]string{
		"ext.interwebs.test.":    {"ext.interwebs.test. 300 IN A 1.2.3.4"},
		"foo.example.com.":       {"foo.example.com. 300 IN A 192.0.2.123"},
		"bar.example.com.":       {"bar.example.com. 300 IN A 192.0.2.124"},
		"www.example.org.":       {"www.example.org. 300 IN A 192.0.2.80"},
		"f.b.svc.cluster.local.": {"f.b.svc.cluster.local. 300 IN A 5.6.7.8"},
		"8.8.8.8.in-addr.arpa.":  {"8.8.8.8.in-addr.arpa. 300 IN PTR google-public-dns-a.google.com."},
	}
	for i := range 60 {
		answers["big.interwebs.test."] = append(answers["big.interwebs.test."], "big.interwebs.test. 300 IN A 198.51.100."+strconv.Itoa(i+1))
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		q := r.Question[0]
		if q.Name == "servfail.example.org." {
			m.Rcode = dns.RcodeServerFailure
			w.WriteMsg(m)
			return
		}
		rrs, ok := answers[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
			soa, _ := dns.NewRR("example. 60 IN SOA ns.example. hostmaster.example. 1 7200 1800 86400 30")
			m.Ns = []dns.RR{soa}
		}
		for _, s := range rrs {
			rr, _ := dns.NewRR(s)
			if rr.Header().Rrtype == q.Qtype {
				rr.Header().Name = q.Name
				m.Answer = append(m.Answer, rr)
			}
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})
	// One port for both UDP and TCP: the kernel's free UDP port may be
	// taken for TCP, so try a few.
	var pc net.PacketConn
	var ln net.Listener
	for i := 0; ln == nil; i++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if i == 20 {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// startServer runs a server on 127.0.0.1:0 and waits until it answers from
// a complete zone (or, when src is not synced, until it serves at all).
func startServer(t testing.TB, cfg Config, src Source) (*Server, netip.AddrPort) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = time.Millisecond
	}
	s, err := New(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go s.Run(ctx)
	go func() { s.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if src.Synced() {
		select {
		case <-s.Synced():
		case <-time.After(10 * time.Second):
			t.Fatal("server did not sync")
		}
	}
	return s, l.Addr
}

// exchange asks addr over net ("udp" or "tcp"), with an EDNS0 buffer size
// when bufsize > 0.
func exchange(t testing.TB, addr netip.AddrPort, netw, name string, qtype uint16, bufsize uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if bufsize > 0 {
		m.SetEdns0(bufsize, false)
	}
	c := &dns.Client{Net: netw, Timeout: 5 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr.String())
	if err != nil {
		t.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], netw, err)
	}
	return r
}

// rrText renders records as single-space-separated text, sorted: answers
// are compared as sets (CoreDNS's loadbalance shuffles order).
func rrText(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, strings.Join(strings.Fields(rr.String()), " "))
	}
	sort.Strings(out)
	return out
}

func pod(namespace, name, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
}
