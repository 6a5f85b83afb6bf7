package kubeproxy

import (
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// changes is what both proxy modes' event handlers record, under mu: the
// Services and EndpointSlices as the informers last saw them, the services
// changed since the last sync, whether the next sync must be a full one, the
// node's address, and the EndpointSlices' trigger times for kube-proxy's
// network programming latency. Each change asks the runner for a sync. It is
// embedded in Proxier and NFTProxier, whose sync loops read and reset it.
type changes struct {
	runner *boundedRunner

	mu          sync.Mutex
	services    map[types.NamespacedName]*corev1.Service
	slices      map[types.NamespacedName]map[string]*discovery.EndpointSlice
	dirty       map[types.NamespacedName]bool
	needFull    bool
	nodeIP      netip.Addr
	initialized bool
	// triggers are the last-change-trigger-times of the EndpointSlice
	// changes not yet synced; created is when the proxier was made.
	triggers []time.Time
	created  time.Time
}

func newChanges(nodeIP netip.Addr, created time.Time) changes {
	return changes{
		services: map[types.NamespacedName]*corev1.Service{},
		slices:   map[types.NamespacedName]map[string]*discovery.EndpointSlice{},
		dirty:    map[types.NamespacedName]bool{},
		needFull: true,
		nodeIP:   nodeIP,
		created:  created,
	}
}

func (p *changes) SetInitialized() {
	p.mu.Lock()
	p.initialized = true
	p.mu.Unlock()
	p.runner.Run()
}

// Event handlers. They only record the change and ask for a sync.

func (p *changes) OnServiceUpdate(svc *corev1.Service) {
	if svc.Labels["service.kubernetes.io/service-proxy-name"] != "" {
		p.OnServiceDelete(svc) // served by another proxy
		return
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	p.mu.Lock()
	p.services[key] = svc
	p.dirty[key] = true
	p.mu.Unlock()
	p.runner.Run()
}

func (p *changes) OnServiceDelete(svc *corev1.Service) {
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	p.mu.Lock()
	delete(p.services, key)
	p.dirty[key] = true
	p.mu.Unlock()
	p.runner.Run()
}

func sliceService(s *discovery.EndpointSlice) (types.NamespacedName, bool) {
	name := s.Labels[discovery.LabelServiceName]
	return types.NamespacedName{Namespace: s.Namespace, Name: name}, name != ""
}

func (p *changes) OnEndpointSliceUpdate(s *discovery.EndpointSlice) {
	key, ok := sliceService(s)
	if !ok {
		return
	}
	p.mu.Lock()
	if p.slices[key] == nil {
		p.slices[key] = map[string]*discovery.EndpointSlice{}
	}
	p.slices[key][s.Name] = s
	p.dirty[key] = true
	// kube-proxy's network programming latency starts at the time the
	// EndpointSlice controller saw the change (the annotation), if it is
	// newer than the proxy itself.
	if t, ok := triggerTime(s, p.created); ok {
		p.triggers = append(p.triggers, t)
	}
	p.mu.Unlock()
	p.runner.Run()
}

func (p *changes) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	key, ok := sliceService(s)
	if !ok {
		return
	}
	p.mu.Lock()
	delete(p.slices[key], s.Name)
	if len(p.slices[key]) == 0 {
		delete(p.slices, key)
	}
	p.dirty[key] = true
	p.mu.Unlock()
	p.runner.Run()
}

// SetNodeIP updates the node's address; the next sync is a full one.
func (p *changes) SetNodeIP(ip netip.Addr) {
	p.mu.Lock()
	changed := ip != p.nodeIP
	p.nodeIP = ip
	if changed {
		p.needFull = true
	}
	p.mu.Unlock()
	if changed {
		p.runner.Run()
	}
}

// forceFullSync is what the flush monitor calls.
func (p *changes) forceFullSync() {
	p.mu.Lock()
	p.needFull = true
	p.mu.Unlock()
	p.runner.Run()
}
