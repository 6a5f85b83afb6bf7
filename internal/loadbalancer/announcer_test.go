package loadbalancer

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// fakeResponder is a stateful Responder: the addresses it answers for, the
// gratuitous ARPs (and unsolicited neighbour advertisements) it sent, and
// whether it was closed (a closed responder answers nothing, as a dead
// process's socket). failSets makes the next Sets fail and change nothing,
// as NDP's before its socket can open.
type fakeResponder struct {
	mu     sync.Mutex
	ips    []netip.Addr
	garps  []netip.Addr
	closed bool
	fail   int
}

func (f *fakeResponder) failSets(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

func (f *fakeResponder) Set(ips []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("responder closed")
	}
	if f.fail > 0 {
		f.fail--
		return fmt.Errorf("opening NDP socket on eth1: bind: cannot assign requested address")
	}
	for _, ip := range ips {
		if !slices.Contains(f.ips, ip) {
			f.garps = append(f.garps, ip)
		}
	}
	f.ips = slices.Clone(ips)
	return nil
}

func (f *fakeResponder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed, f.ips = true, nil
	return nil
}

func (f *fakeResponder) answers(ip netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.closed && slices.Contains(f.ips, ip)
}

// speakers is a set of announcers, one per node, against one API.
type speakers struct {
	t      *testing.T
	c      kubernetes.Interface
	resp   map[string]*fakeResponder
	stop   map[string]func()
	nodes  []string
	lease  time.Duration
	ann    map[string]*Announcer
	mu     sync.Mutex
	logger *slog.Logger
}

func startSpeakers(t *testing.T, c kubernetes.Interface, lease time.Duration, nodes ...string) *speakers {
	s := &speakers{t: t, c: c, resp: map[string]*fakeResponder{}, stop: map[string]func(){}, nodes: nodes,
		lease: lease, ann: map[string]*Announcer{}, logger: testutil.Logger(t)}
	for _, n := range nodes {
		s.start(n)
	}
	return s
}

func (s *speakers) start(node string) {
	s.t.Helper()
	r := &fakeResponder{}
	a, err := NewAnnouncer(AnnouncerConfig{Client: s.c, NodeName: node, NodeIP: netip.MustParseAddr("192.168.56.10"), Logger: s.logger,
		OpenResponder: func(netip.Addr, *slog.Logger) (Responder, string, error) { return r, "eth1", nil },
		RenewInterval: s.lease / 5, LeaseDuration: s.lease, Resync: 50 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	s.mu.Lock()
	s.resp[node], s.ann[node] = r, a
	s.stop[node] = func() { cancel(); <-done }
	s.mu.Unlock()
	s.t.Cleanup(func() { cancel(); <-done })
}

// crash stops node's announcer as a SIGKILL would: its responder dies, its
// lease stays behind and goes stale.
func (s *speakers) crash(node string) {
	s.mu.Lock()
	s.ann[node].crashOnStop = true
	stop := s.stop[node]
	s.mu.Unlock()
	stop()
}

// announcers answering for ip.
func (s *speakers) holders(ip netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.nodes {
		if s.resp[n].answers(ip) {
			out = append(out, n)
		}
	}
	return out
}

// waitHolder waits until exactly want answers for ip, and returns how long it took.
func (s *speakers) waitHolder(ip netip.Addr, want string, within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	testutil.Eventually(s.t, within, fmt.Sprintf("only %s answers for %s", want, ip), func() error {
		if h := s.holders(ip); len(h) != 1 || h[0] != want {
			return fmt.Errorf("answering: %v", h)
		}
		return nil
	})
	return time.Since(start)
}

func createNodes(t *testing.T, c kubernetes.Interface, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		created, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createEndpoints writes the EndpointSlice of Service svc: one ready endpoint per node.
func createEndpoints(t *testing.T, c kubernetes.Interface, svc string, nodes ...string) {
	t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-x", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, n := range nodes {
		ready := true
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.5", i+1)},
			NodeName: &n, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(context.Background(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestAnnouncerElectsOneNodeAndFailsOver(t *testing.T) {
	c := newAPI(t)
	createNodes(t, c, "node1", "node2", "node3")
	runController(t, c, "192.168.56.240-192.168.56.250")
	createSvc(t, c, lbService("web"))
	createEndpoints(t, c, "web", "node1", "node2")
	waitIP(t, c, "web", "192.168.56.240")
	ip := netip.MustParseAddr("192.168.56.240")

	const lease = time.Second
	sp := startSpeakers(t, c, lease, "node1", "node2", "node3")
	first := Elect(ip, []string{"node1", "node2", "node3"})
	sp.waitHolder(ip, first, waitTimeout)
	waitEvent(t, c, "web", "Normal nodeAssigned", fmt.Sprintf("announcing 192.168.56.240 from node %q", first))
	if g := sp.resp[first].garps; !slices.Contains(g, ip) {
		t.Errorf("%s sent no gratuitous ARP for %s on takeover (sent %v)", first, ip, g)
	}

	var rest []string
	for _, n := range sp.nodes {
		if n != first {
			rest = append(rest, n)
		}
	}
	second := Elect(ip, rest)
	t.Run("crashed announcer: the next node takes over once its lease is stale", func(t *testing.T) {
		sp.crash(first)
		took := sp.waitHolder(ip, second, waitTimeout)
		if took < lease/2 {
			t.Errorf("took over after %v, before the crashed node's lease (%v) could be stale", took, lease)
		}
		t.Logf("failover after a crash took %v (lease %v)", took, lease)
		waitEvent(t, c, "web", fmt.Sprintf("from node %q", second))
	})

	third := Elect(ip, slices.DeleteFunc(slices.Clone(rest), func(n string) bool { return n == second }))
	t.Run("stopped announcer: its lease is released and the next node takes over at once", func(t *testing.T) {
		sp.stop[second]()
		took := sp.waitHolder(ip, third, waitTimeout)
		if took >= lease {
			t.Errorf("took over after %v; a released lease should not wait for the lease duration %v", took, lease)
		}
		t.Logf("failover after a clean stop took %v", took)
	})

	t.Run("restarted node: the IP goes back to the first choice", func(t *testing.T) {
		sp.start(first)
		sp.waitHolder(ip, first, waitTimeout)
	})
}

func TestAnnouncerPolicies(t *testing.T) {
	c := newAPI(t)
	createNodes(t, c, "node1", "node2", "node3")
	runController(t, c, "192.168.56.240-192.168.56.250")
	sp := startSpeakers(t, c, time.Second, "node1", "node2", "node3")

	t.Run("externalTrafficPolicy Local: the node with the endpoint", func(t *testing.T) {
		for i, n := range []string{"node1", "node2", "node3"} {
			name := fmt.Sprintf("local%d", i+1)
			createSvc(t, c, lbService(name, func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }))
			createEndpoints(t, c, name, n)
			ip := fmt.Sprintf("192.168.56.%d", 240+i)
			waitIP(t, c, name, ip)
			sp.waitHolder(netip.MustParseAddr(ip), n, waitTimeout)
		}
	})

	t.Run("no ready endpoint: nobody announces", func(t *testing.T) {
		createSvc(t, c, lbService("empty"))
		waitIP(t, c, "empty", "192.168.56.243")
		time.Sleep(300 * time.Millisecond) // several resyncs: nobody may start announcing
		if h := sp.holders(netip.MustParseAddr("192.168.56.243")); len(h) != 0 {
			t.Fatalf("%v announce a Service without endpoints", h)
		}
		createEndpoints(t, c, "empty", "node2")
		sp.waitHolder(netip.MustParseAddr("192.168.56.243"), Elect(netip.MustParseAddr("192.168.56.243"), sp.nodes), waitTimeout)
	})

	t.Run("excluded node hands over", func(t *testing.T) {
		ip := netip.MustParseAddr("192.168.56.243")
		was := Elect(ip, sp.nodes)
		n, err := c.CoreV1().Nodes().Get(context.Background(), was, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{ExcludeLabel: "true"}
		if _, err := c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rest := slices.DeleteFunc(slices.Clone(sp.nodes), func(s string) bool { return s == was })
		sp.waitHolder(ip, Elect(ip, rest), waitTimeout)
	})
}

// With the API gone every lease stops changing; an announcer must not take
// that as every peer dying (and announce everything) nor as itself dying
// (and announce nothing): it keeps what it has, as the data plane of a
// cluster outlives its control plane.
func TestAnnouncerKeepsAnnouncingWhileTheAPIIsDown(t *testing.T) {
	c, apiDown := newAPIServer(t)
	createNodes(t, c, "node1", "node2", "node3")
	runController(t, c, "192.168.56.240-192.168.56.250")
	createSvc(t, c, lbService("web"))
	createEndpoints(t, c, "web", "node1")
	waitIP(t, c, "web", "192.168.56.240")
	ip := netip.MustParseAddr("192.168.56.240")
	const lease = 500 * time.Millisecond
	sp := startSpeakers(t, c, lease, "node1", "node2", "node3")
	winner := Elect(ip, sp.nodes)
	sp.waitHolder(ip, winner, waitTimeout)

	apiDown()
	deadline := time.Now().Add(4 * lease)
	for time.Now().Before(deadline) {
		if h := sp.holders(ip); len(h) != 1 || h[0] != winner {
			t.Fatalf("with the API down, %v answer for %s; want %s alone, as before", h, ip, winner)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval
	}
}
