package loadbalancer

import (
	"bytes"
	"crypto/sha256"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ExcludeLabel on a Node keeps it from announcing load-balancer addresses, as
// Kubernetes' service controller and MetalLB honour it (kind puts it on
// control-plane nodes).
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// Elect picks the node that announces ip among candidates: the first in the
// order of sha256(node + "#" + ip), MetalLB's layer-2 rule. Every announcer
// computes it alone and, with the same view of the cluster, gets the same
// answer; the order differs per address, so addresses spread over the nodes.
// It returns "" when there is no candidate.
func Elect(ip netip.Addr, candidates []string) string {
	if len(candidates) == 0 {
		return ""
	}
	best, bestHash := "", [sha256.Size]byte{}
	for _, n := range candidates {
		h := sha256.Sum256([]byte(n + "#" + ip.String()))
		if best == "" || bytes.Compare(h[:], bestHash[:]) < 0 {
			best, bestHash = n, h
		}
	}
	return best
}

// Candidates lists, sorted, the nodes that may announce svc's address:
// Ready, not excluded, with a live announcer (alive), and, as MetalLB
// requires, only while the Service has a ready endpoint somewhere. With
// externalTrafficPolicy Local only nodes with a ready endpoint of their own
// qualify, since the others would drop the traffic.
func Candidates(svc *corev1.Service, nodes []*corev1.Node, slices []*discoveryv1.EndpointSlice, alive func(node string) bool) []string {
	local := map[string]bool{}
	anyReady := false
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			anyReady = true
			if ep.NodeName != nil {
				local[*ep.NodeName] = true
			}
		}
	}
	if !anyReady {
		return nil
	}
	onlyLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var out []string
	for _, n := range nodes {
		if _, excluded := n.Labels[ExcludeLabel]; excluded || !nodeReady(n) || !alive(n.Name) {
			continue
		}
		if onlyLocal && !local[n.Name] {
			continue
		}
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
