package controllers

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/endpointslice/topologycache"
	"k8s.io/endpointslice/trafficdist"
	"k8s.io/klog/v2"
)

// EndpointSlice hints, as the endpointslice controller writes them
// (k8s.io/endpointslice's reconciler, whose two hint packages we use):
//
//   - a Service annotated service.kubernetes.io/topology-mode: Auto (or the
//     older topology-aware-hints annotation) gets topology-aware hints: ready
//     endpoints are allotted to zones in proportion to the zones' allocatable
//     CPU (topologycache), or none at all when the nodes' zones or CPU are
//     unknown, there is one zone, or too few endpoints to share fairly;
//   - otherwise spec.trafficDistribution PreferClose or PreferSameZone hints
//     every ready endpoint for its own zone, and PreferSameNode also for its
//     node (trafficdist);
//   - with neither, no endpoint has hints.
//
// kube-proxy then keeps a node's traffic on the endpoints hinted for its
// zone (or node) when every ready endpoint has hints.
type hinter struct {
	mu    sync.Mutex
	cache *topologycache.TopologyCache
	// nodesSig is the node distribution the cache was last given.
	nodesSig string
}

func newHinter() *hinter { return &hinter{cache: topologycache.NewTopologyCache()} }

// topologyModeAuto is the endpointslice controller's hintsEnabled.
func topologyModeAuto(svc *corev1.Service) bool {
	v, ok := svc.Annotations[corev1.AnnotationTopologyMode]
	if !ok {
		v = svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	}
	return v == "Auto" || v == "auto"
}

// setNodes gives the topology cache the current nodes when their zones,
// readiness or CPU changed since the last call.
func (h *hinter) setNodes(nodes []*corev1.Node) {
	var sig strings.Builder
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		cpu := n.Status.Allocatable.Cpu()
		fmt.Fprintf(&sig, "%s=%s/%s/%t;", n.Name, n.Labels[zoneLabel], cpu.String(), nodeReady(n))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if sig.String() == h.nodesSig {
		return
	}
	h.nodesSig = sig.String()
	h.cache.SetNodes(klog.Background(), nodes)
}

// apply sets the hints of the desired endpoints of svc's groups.
func (h *hinter) apply(svc *corev1.Service, addrType discoveryv1.AddressType, groups []*sliceGroup, nodes []*corev1.Node, log *slog.Logger) {
	// One slice per group is enough to compute hints: both packages work
	// endpoint by endpoint, topologycache over all slices of the service.
	tmp := make([]*discoveryv1.EndpointSlice, 0, len(groups))
	keys := make([][]string, 0, len(groups))
	for _, g := range groups {
		s := &discoveryv1.EndpointSlice{AddressType: addrType}
		ks := slices.Sorted(func(yield func(string) bool) {
			for k := range g.endpoints {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range ks {
			ep := g.endpoints[k]
			ep.Hints = nil
			s.Endpoints = append(s.Endpoints, ep)
		}
		tmp = append(tmp, s)
		keys = append(keys, ks)
	}
	key := keyOf(svc)
	if topologyModeAuto(svc) {
		h.setNodes(nodes)
		created, _, events := h.cache.AddHints(klog.Background(), &topologycache.SliceInfo{
			ServiceKey: key, AddressType: addrType, ToCreate: tmp})
		for _, ev := range events {
			log.Debug("topology aware hints", "service", key, "reason", ev.Reason, "message", ev.Message)
		}
		tmp = created
	} else {
		h.cache.RemoveHints(key, addrType)
		tmp, _, _ = trafficdist.ReconcileHints(svc.Spec.TrafficDistribution, tmp, nil, nil)
	}
	for i, g := range groups {
		for j, k := range keys[i] {
			ep := g.endpoints[k]
			ep.Hints = tmp[i].Endpoints[j].Hints
			g.endpoints[k] = ep
		}
	}
}

// forget drops a deleted service's allocations.
func (h *hinter) forget(key string) {
	for _, t := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		h.cache.RemoveHints(key, t)
	}
}

// allNodes lists the nodes for the topology cache.
func (e *endpointsController) allNodes() []*corev1.Node {
	nodes, err := e.c.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]*corev1.Node, len(nodes))
	copy(out, nodes)
	return out
}
