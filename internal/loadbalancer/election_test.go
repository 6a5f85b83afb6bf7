package loadbalancer

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestElect(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	ip := netip.MustParseAddr("192.168.56.240")
	winner := Elect(ip, nodes)
	if !slices.Contains(nodes, winner) {
		t.Fatalf("Elect chose %q, not a candidate", winner)
	}
	// Every announcer computes it alone: the order of the list must not matter.
	for _, perm := range [][]string{{"node3", "node2", "node1"}, {"node2", "node1", "node3"}} {
		if got := Elect(ip, perm); got != winner {
			t.Errorf("Elect(%v) = %s, want %s whatever the order", perm, got, winner)
		}
	}
	// Without the winner, another node; the others keep their relative order.
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == winner })
	if got := Elect(ip, rest); got == winner || got == "" {
		t.Errorf("Elect without %s = %q", winner, got)
	}
	if got := Elect(ip, nil); got != "" {
		t.Errorf("Elect with no candidate = %q", got)
	}
	// The order differs per address, so eleven addresses do not all land on one node.
	per := map[string]int{}
	for i := 240; i <= 250; i++ {
		per[Elect(netip.MustParseAddr(fmt.Sprintf("192.168.56.%d", i)), nodes)]++
	}
	if len(per) < 2 {
		t.Errorf("all addresses elected the same node: %v", per)
	}
}

func node(name string, ready bool, labels ...string) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionUnknown
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	for _, l := range labels {
		n.Labels[l] = ""
	}
	return n
}

func slice(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{Endpoints: eps}
}

func endpoint(node string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{"10.244.0.5"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

func TestCandidates(t *testing.T) {
	all := []*corev1.Node{node("node1", true), node("node2", true), node("node3", true)}
	everyone := func(string) bool { return true }
	cluster := lbService("web")
	local := lbService("web", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		nodes  []*corev1.Node
		slices []*discoveryv1.EndpointSlice
		alive  func(string) bool
		want   []string
	}{
		{"Cluster policy: every Ready node", cluster, all, []*discoveryv1.EndpointSlice{slice(endpoint("node1", true))}, everyone,
			[]string{"node1", "node2", "node3"}},
		{"no ready endpoint anywhere: nobody announces", cluster, all, []*discoveryv1.EndpointSlice{slice(endpoint("node1", false))}, everyone, nil},
		{"no endpoints at all", cluster, all, nil, everyone, nil},
		{"not Ready nodes are out", cluster, []*corev1.Node{node("node1", true), node("node2", false), node("node3", true)},
			[]*discoveryv1.EndpointSlice{slice(endpoint("node1", true))}, everyone, []string{"node1", "node3"}},
		{"excluded nodes are out", cluster, []*corev1.Node{node("node1", true, ExcludeLabel), node("node2", true), node("node3", true)},
			[]*discoveryv1.EndpointSlice{slice(endpoint("node1", true))}, everyone, []string{"node2", "node3"}},
		{"nodes whose speaker is gone are out", cluster, all, []*discoveryv1.EndpointSlice{slice(endpoint("node1", true))},
			func(n string) bool { return n != "node2" }, []string{"node1", "node3"}},
		{"Local policy: only nodes with a ready local endpoint", local, all,
			[]*discoveryv1.EndpointSlice{slice(endpoint("node2", true), endpoint("node3", false)), slice(endpoint("node3", true))}, everyone,
			[]string{"node2", "node3"}},
		{"Local policy, the only endpoint not ready", local, all, []*discoveryv1.EndpointSlice{slice(endpoint("node2", false))}, everyone, nil},
		{"Local policy, endpoint node's speaker gone", local, all, []*discoveryv1.EndpointSlice{slice(endpoint("node2", true))},
			func(n string) bool { return n != "node2" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Candidates(tc.svc, tc.nodes, tc.slices, tc.alive)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Candidates = %v, want %v", got, tc.want)
			}
		})
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func lease(node, rv string, renew time.Time) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node), ResourceVersion: rv},
		Data: map[string]string{"holderIdentity": node, "renewTime": renew.UTC().Format(time.RFC3339Nano)}}
}

func TestLiveness(t *testing.T) {
	clock := &fakeClock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	l := newLiveness("me", 4*time.Second, clock.now)
	start := clock.t
	rv := 100
	renewSelf := func() { rv++; l.observe(lease("me", fmt.Sprint(rv), clock.t)) }

	if l.alive("me") {
		t.Error("alive before its own lease was ever seen")
	}
	renewSelf()
	l.observe(lease("fresh", "1", start.Add(-time.Second)))
	l.observe(lease("dead", "2", start.Add(-time.Minute))) // listed at start, long silent
	l.observe(lease("skewed", "3", start.Add(time.Hour)))  // a clock ahead counts as now
	for n, want := range map[string]bool{"me": true, "fresh": true, "dead": false, "skewed": true, "unknown": false} {
		if got := l.alive(n); got != want {
			t.Errorf("at start, alive(%s) = %v, want %v", n, got, want)
		}
	}

	// Renewals are judged by when the observer saw them change, not by their
	// renewTime: a lagging clock on the renewer does not matter.
	clock.t = start.Add(3 * time.Second)
	renewSelf()
	l.observe(lease("fresh", "10", start.Add(-time.Hour)))
	clock.t = start.Add(6 * time.Second)
	renewSelf()
	if !l.alive("fresh") {
		t.Error("fresh renewed 3 s ago is not alive")
	}
	if l.alive("skewed") {
		t.Error("skewed, silent for 6 s, is alive")
	}
	// The same resourceVersion seen again (a re-list) is no renewal.
	l.observe(lease("skewed", "3", clock.t))
	if l.alive("skewed") {
		t.Error("a re-listed, unchanged lease counts as a renewal")
	}

	// Peers are judged as of our own last renewal seen: while our own
	// renewals do not come back, nobody else dies either, however long.
	clock.t = start.Add(20 * time.Second)
	if !l.alive("fresh") {
		t.Error("fresh died while our own lease was not seen renewed either")
	}
	if l.alive("me") {
		t.Error("own view counts as current though our lease was not seen for 14 s")
	}
	renewSelf()
	if l.alive("fresh") {
		t.Error("fresh, silent for 17 s as of our own renewal, is alive")
	}

	// A deleted lease (clean stop) is gone at once.
	l.observe(lease("fresh", "11", clock.t))
	l.forget(lease("fresh", "12", clock.t))
	if l.alive("fresh") {
		t.Error("a deleted lease is alive")
	}
}

// One reconcile judges every node at one instant: its own lease expiring
// between "am I current?" and "who are the candidates?" must not make it
// drop itself from the candidates after passing the first check (stop 45's
// rehearsal, load 60: node1 stopped announcing and nobody took over).
func TestLivenessAtOneInstant(t *testing.T) {
	clock := &fakeClock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	l := newLiveness("me", 4*time.Second, clock.now)
	l.observe(lease("me", "1", clock.t))
	l.observe(lease("peer", "2", clock.t))
	clock.t = clock.t.Add(4 * time.Second) // the last instant "me" is current
	alive := l.at(clock.now())
	clock.t = clock.t.Add(time.Millisecond) // the reconcile goes on; the lease expires
	if !alive("me") || !alive("peer") {
		t.Errorf("judged at one instant: alive(me) = %v, alive(peer) = %v; want both", alive("me"), alive("peer"))
	}
	if l.alive("me") {
		t.Error("after the instant, own view still counts as current")
	}
}
