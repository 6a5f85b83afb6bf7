package kubeproxy

import (
	"flag"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var update = flag.Bool("update", false, "rewrite golden files")

const (
	testNode  = "node1"
	testOther = "node2"
)

var testNodeIP = netip.MustParseAddr("192.168.56.10")

// svcOpt changes a Service under construction.
type svcOpt func(*corev1.Service)

func makeService(ns, name, clusterIP string, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Name: "p80", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withPorts(ports ...corev1.ServicePort) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports = ports }
}

func withNodePort(np int32) svcOpt {
	return func(s *corev1.Service) {
		if s.Spec.Type == corev1.ServiceTypeClusterIP {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}
		s.Spec.Ports[0].NodePort = np
	}
}

func withLB(ips ...string) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func withExternalIPs(ips ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
}

func withSourceRanges(r ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = r }
}

func withLocal(hcnp int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hcnp
	}
}

func withInternalLocal() svcOpt {
	return func(s *corev1.Service) {
		l := corev1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &l
	}
}

func withAffinity(secs int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &secs}}
	}
}

// ep is an endpoint for makeSlice: "ip@node", ready unless notReady.
type ep struct {
	ip, node              string
	notReady, terminating bool
}

func makeSlice(ns, svc string, ports []discovery.EndpointPort, eps ...ep) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-abc", Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       ports,
	}
	for _, e := range eps {
		ready, serving, term := !e.notReady, !e.notReady || e.terminating, e.terminating
		node := e.node
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{e.ip},
			NodeName:   &node,
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
		})
	}
	return s
}

func slicePort(name string, proto corev1.Protocol, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}

var p80 = []discovery.EndpointPort{slicePort("p80", corev1.ProtocolTCP, 80)}

// fakeConntrack is a stateful conntrack table.
type fakeConntrack struct {
	mu      sync.Mutex
	flows   []Flow
	deleted []Flow
}

func (c *fakeConntrack) ListUDP() ([]Flow, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Flow(nil), c.flows...), nil
}

func (c *fakeConntrack) Delete(flows []Flow) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	del := map[Flow]bool{}
	for _, f := range flows {
		del[f] = true
	}
	var keep []Flow
	n := 0
	for _, f := range c.flows {
		if del[f] {
			n++
			c.deleted = append(c.deleted, f)
		} else {
			keep = append(keep, f)
		}
	}
	c.flows = keep
	return n, nil
}

// testProxier is a Proxier on a Fake, never started: tests call
// syncProxyRules themselves.
func testProxier(t *testing.T, ipt *iptablestest.Fake) (*Proxier, *fakeConntrack) {
	t.Helper()
	ct := &fakeConntrack{}
	liberal := false
	p, err := New(Config{
		NodeName: testNode, NodeIP: testNodeIP, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
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

func mustSync(t *testing.T, p *Proxier) {
	t.Helper()
	if err := p.syncProxyRules(); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// saved returns the fake's filter and nat tables as iptables-save text.
func saved(t *testing.T, ipt *iptablestest.Fake) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{iptables.TableFilter, iptables.TableNAT} {
		out, err := ipt.Save(table)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n%s", name, path, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if count[l] > 0 {
			b.WriteString("- " + l + "\n")
			count[l]--
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if count[l] < 0 {
			b.WriteString("+ " + l + "\n")
			count[l]++
		}
	}
	if b.Len() == 0 {
		return "(same lines, different order)"
	}
	return b.String()
}

// fakeClock is a manual clock: After channels fire when Step passes them.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	return ch
}

// Step advances the clock and fires the timers that are due.
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	var keep []fakeWaiter
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			keep = append(keep, w)
		}
	}
	c.waiters = keep
}

// Waiters reports how many timers are pending.
func (c *fakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}
