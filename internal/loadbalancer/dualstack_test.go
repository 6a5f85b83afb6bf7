package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol

	single  = corev1.IPFamilyPolicySingleStack
	prefer  = corev1.IPFamilyPolicyPreferDualStack
	require = corev1.IPFamilyPolicyRequireDualStack

	dualPool = "192.168.56.240-192.168.56.241,fd00:56::240-fd00:56::241"
)

// A dual-stack Service gets one address of each family, in the order of its
// ipFamilies; a single-stack one one of its family; a family running out
// keeps the Service pending (all or nothing, as MetalLB); and the
// allocations survive a restart, as they live in the Services' statuses.
func TestControllerDualStack(t *testing.T) {
	c := newDualStackAPI(t)
	stop := runController(t, c, dualPool)

	createSvc(t, c, lbService("both", families(require)))
	waitIP(t, c, "both", "192.168.56.240,fd00:56::240")
	waitEvent(t, c, "both", `Normal IPAllocated: Assigned IP ["192.168.56.240" "fd00:56::240"]`)
	for _, ing := range getSvc(t, c, "both").Status.LoadBalancer.Ingress {
		if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			t.Errorf("ingress %s: ipMode %v, want VIP", ing.IP, ing.IPMode)
		}
	}

	createSvc(t, c, lbService("v6", families(single, v6)))
	waitIP(t, c, "v6", "fd00:56::241")

	t.Run("one family exhausted: pending, the other family's address not taken", func(t *testing.T) {
		createSvc(t, c, lbService("v6first", families(prefer, v6, v4)))
		waitEvent(t, c, "v6first", "Warning AllocationFailed",
			"no available IPs: all 2 IPv6 addresses of the pool "+dualPool+" are in use")
		createSvc(t, c, lbService("v4", families(single, v4)))
		waitIP(t, c, "v4", "192.168.56.241")
		if err := c.CoreV1().Services("default").Delete(context.Background(), "v4", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("freed: the pending Service gets both, IPv6 first as its ipFamilies", func(t *testing.T) {
		if err := c.CoreV1().Services("default").Delete(context.Background(), "v6", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIP(t, c, "v6first", "fd00:56::241,192.168.56.241")
	})

	t.Run("restart keeps both families' addresses and hands none out twice", func(t *testing.T) {
		stop()
		runController(t, c, dualPool)
		createSvc(t, c, lbService("late", families(prefer)))
		waitEvent(t, c, "late", "Warning AllocationFailed", "no available IPs: all 2 IPv4 addresses")
		waitIP(t, c, "both", "192.168.56.240,fd00:56::240")
		waitIP(t, c, "v6first", "fd00:56::241,192.168.56.241")
	})
}

// Requested addresses (MetalLB's annotation, spec.loadBalancerIP) must be of
// the Service's families, at most one of each, one of each for
// RequireDualStack; the errors name the field.
func TestControllerDualStackRequests(t *testing.T) {
	c := newDualStackAPI(t)
	runController(t, c, dualPool)
	ann := func(v string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Annotations = map[string]string{"metallb.io/loadBalancerIPs": v} }
	}
	for _, tc := range []struct {
		name, svc string
		mods      []func(*corev1.Service)
		wantIP    string
		event     string
	}{
		{"both families, listed IPv6 first", "both", []func(*corev1.Service){families(require), ann("fd00:56::241, 192.168.56.241")},
			"192.168.56.241,fd00:56::241", ""},
		{"RequireDualStack given one family", "onefamily", []func(*corev1.Service){families(require), ann("192.168.56.240")}, "<pending>",
			"invalid annotation metallb.io/loadBalancerIPs: it has no IPv6 address, and a Service with spec.ipFamilies [IPv4 IPv6] and ipFamilyPolicy RequireDualStack needs one of each"},
		{"an address of another family", "otherfamily", []func(*corev1.Service){families(single, v4), ann("fd00:56::240")}, "<pending>",
			"invalid annotation metallb.io/loadBalancerIPs: fd00:56::240 is an IPv6 address, and the Service's spec.ipFamilies are [IPv4]"},
		{"two of one family", "twov6", []func(*corev1.Service){families(require), ann("fd00:56::240,fd00:56::241")}, "<pending>",
			`invalid annotation metallb.io/loadBalancerIPs: "fd00:56::240,fd00:56::241" asks for two IPv6 addresses; a Service gets at most one of each family`},
		{"PreferDualStack given one family gets that one", "prefer6", []func(*corev1.Service){families(prefer), ann("fd00:56::240")}, "fd00:56::240", ""},
		{"spec.loadBalancerIP outside the pool", "outside", []func(*corev1.Service){families(single, v6),
			func(s *corev1.Service) { s.Spec.LoadBalancerIP = "fd00:56::999" }}, "<pending>",
			"requested IP fd00:56::999 (spec.loadBalancerIP) is not in the address pool " + dualPool},
		{"an IPv6 address already in use", "taken", []func(*corev1.Service){families(single, v6), ann("fd00:56::240")}, "<pending>",
			"requested IP fd00:56::240 (annotation metallb.io/loadBalancerIPs) is already in use by Service default/prefer6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.svc
			createSvc(t, c, lbService(name, tc.mods...))
			if tc.event != "" {
				waitEvent(t, c, name, "Warning AllocationFailed", tc.event)
			}
			waitIP(t, c, name, tc.wantIP)
		})
	}
}

// Which families a Service gets from a pool that lacks one: PreferDualStack
// takes what there is, as MetalLB gives it a single-stack pool's family;
// RequireDualStack and a single-stack Service of the missing family stay
// pending, saying so.
func TestControllerPoolFamilies(t *testing.T) {
	c := newDualStackAPI(t)
	const pool = "192.168.56.240-192.168.56.241"
	runController(t, c, pool)
	createSvc(t, c, lbService("prefer", families(prefer)))
	waitIP(t, c, "prefer", "192.168.56.240")
	createSvc(t, c, lbService("require", families(require)))
	waitEvent(t, c, "require", "Warning AllocationFailed",
		"the address pool "+pool+" has no IPv6 addresses, and the Service's spec.ipFamilies are [IPv4 IPv6] (ipFamilyPolicy RequireDualStack)")
	createSvc(t, c, lbService("v6", families(single, v6)))
	waitEvent(t, c, "v6", "Warning AllocationFailed", "the address pool "+pool+" has no IPv6 addresses")
	for _, name := range []string{"require", "v6"} {
		if ip := externalIP(getSvc(t, c, name)); ip != "<pending>" {
			t.Errorf("%s got %s", name, ip)
		}
	}
}

// Both addresses of a dual-stack Service are announced by one node, elected
// by the first (as MetalLB), the IPv6 one by NDP.
func TestAnnouncerDualStack(t *testing.T) {
	c := newDualStackAPI(t)
	createNodes(t, c, "node1", "node2", "node3")
	runController(t, c, dualPool)
	createSvc(t, c, lbService("web", families(require)))
	createEndpoints(t, c, "web", "node1", "node2", "node3")
	waitIP(t, c, "web", "192.168.56.240,fd00:56::240")
	ip4, ip6 := netip.MustParseAddr("192.168.56.240"), netip.MustParseAddr("fd00:56::240")

	sp := startSpeakers(t, c, time.Second, "node1", "node2", "node3")
	winner := Elect(ip4, sp.nodes)
	sp.waitHolder(ip4, winner, waitTimeout)
	sp.waitHolder(ip6, winner, waitTimeout)
	waitEvent(t, c, "web", "Normal nodeAssigned", fmt.Sprintf(`announcing fd00:56::240 from node %q with protocol "layer2" (NDP on eth1)`, winner))
	waitEvent(t, c, "web", "Normal nodeAssigned", fmt.Sprintf(`announcing 192.168.56.240 from node %q with protocol "layer2" (ARP on eth1)`, winner))
	if g := sp.resp[winner].garps; !slices.Contains(g, ip6) {
		t.Errorf("%s sent no unsolicited advertisement for %s on takeover (sent %v)", winner, ip6, g)
	}

	t.Run("a failed Set is retried until it succeeds", func(t *testing.T) {
		rest := slices.DeleteFunc(slices.Clone(sp.nodes), func(n string) bool { return n == winner })
		next := Elect(ip4, rest)
		sp.resp[next].failSets(3)
		sp.stop[winner]()
		sp.waitHolder(ip6, next, waitTimeout)
		sp.waitHolder(ip4, next, waitTimeout)
		waitEvent(t, c, "web", fmt.Sprintf(`announcing fd00:56::240 from node %q`, next))
	})
}
