package kubeproxy

import (
	"context"
	"iter"
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
	// ipv6 is the proxier's IP family (set once, before Run): node
	// addresses of the other family are not its own.
	ipv6 bool

	mu          sync.Mutex
	services    map[types.NamespacedName]*corev1.Service
	slices      map[types.NamespacedName]map[string]*discovery.EndpointSlice
	dirty       map[types.NamespacedName]bool
	needFull    bool
	nodeIP      netip.Addr
	nodeZone    string // the node's topology.kubernetes.io/zone label
	initialized bool
	// triggers are the last-change-trigger-times of the EndpointSlice
	// changes not yet synced; created is when the proxier was made.
	triggers []time.Time
	created  time.Time
	// For kube-proxy's healthz (proxyhealth.go): now is the proxier's clock,
	// queued the time of the oldest change no sync has programmed yet (zero
	// when none waits), updated the end of the last successful sync, and
	// nodeEligible whether this node, as last seen, may take traffic.
	now          func() time.Time
	queued       time.Time
	updated      time.Time
	nodeEligible bool
}

func newChanges(nodeIP netip.Addr, clock Clock) changes {
	created := clock.Now()
	return changes{
		now:      clock.Now,
		services: map[types.NamespacedName]*corev1.Service{},
		slices:   map[types.NamespacedName]map[string]*discovery.EndpointSlice{},
		dirty:    map[types.NamespacedName]bool{},
		needFull: true,
		nodeIP:   nodeIP,
		created:  created,
	}
}

// SetInitialized says the Service and EndpointSlice informers have synced:
// syncing before that would delete the rules of services not yet seen.
func (p *changes) SetInitialized() {
	p.mu.Lock()
	p.initialized = true
	p.mu.Unlock()
	p.runner.Run()
}

// Event handlers. They only record the change and ask for a sync.

// notProxied reports whether an object carries a label that keeps kube-proxy
// from seeing it: kube-proxy's informers select Services and EndpointSlices
// with neither service.kubernetes.io/service-proxy-name (served by another
// proxy) nor service.kubernetes.io/headless (no proxying wanted), whatever the
// label's value, so an object that gains one looks deleted to the proxy.
func notProxied(labels map[string]string) bool {
	_, other := labels[labelServiceProxyName]
	_, headless := labels[corev1.IsHeadlessService]
	return other || headless
}

// labelServiceProxyName is k8s.io/kubernetes/pkg/proxy/apis.LabelServiceProxyName.
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

func (p *changes) OnServiceUpdate(svc *corev1.Service) {
	if notProxied(svc.Labels) {
		p.OnServiceDelete(svc)
		return
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	p.mu.Lock()
	p.services[key] = svc
	p.dirty[key] = true
	p.queue()
	p.mu.Unlock()
	p.runner.Run()
}

func (p *changes) OnServiceDelete(svc *corev1.Service) {
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	p.mu.Lock()
	delete(p.services, key)
	p.dirty[key] = true
	p.queue()
	p.mu.Unlock()
	p.runner.Run()
}

func sliceService(s *discovery.EndpointSlice) (types.NamespacedName, bool) {
	name := s.Labels[discovery.LabelServiceName]
	return types.NamespacedName{Namespace: s.Namespace, Name: name}, name != ""
}

func (p *changes) OnEndpointSliceUpdate(s *discovery.EndpointSlice) {
	if notProxied(s.Labels) {
		p.OnEndpointSliceDelete(s)
		return
	}
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
	p.queue()
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
	p.queue()
	p.mu.Unlock()
	p.runner.Run()
}

// SetNodeIP updates the node's address; the next sync is a full one. An
// address of the other IP family is the other proxier's and is ignored.
func (p *changes) SetNodeIP(ip netip.Addr) {
	if ip.IsValid() && ip.Is4() == p.ipv6 {
		return
	}
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

// syncInput is one service's objects as a sync takes them.
type syncInput struct {
	svc    *corev1.Service
	slices []*discovery.EndpointSlice
}

// queue records that a change waits for a sync (kube-proxy's
// QueuedUpdate); p.mu is held.
func (p *changes) queue() {
	if p.queued.IsZero() {
		p.queued = p.now()
	}
}

// taken is what a sync takes from the change tracking when it starts.
type taken struct {
	full     bool
	queued   time.Time // the oldest change it programs
	dirty    map[types.NamespacedName]bool
	triggers []time.Time // the EndpointSlice changes this sync programs
	nodeIP   netip.Addr
	nodeZone string
	inputs   map[types.NamespacedName]syncInput
}

// take starts a sync at now, in either mode; ok is false before
// SetInitialized. The sync is full when one was asked for or fullEvery has
// passed since lastFull; a full sync takes every known service and every
// rendered one (a deleted one renders to nothing), a partial one the dirty
// services only.
func (c *changes) take(now, lastFull time.Time, fullEvery time.Duration, rendered iter.Seq[types.NamespacedName]) (t taken, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initialized {
		return taken{}, false
	}
	t = taken{
		full:     c.needFull || now.Sub(lastFull) >= fullEvery,
		dirty:    c.dirty,
		triggers: c.triggers,
		queued:   c.queued,
		nodeIP:   c.nodeIP,
		nodeZone: c.nodeZone,
		inputs:   map[types.NamespacedName]syncInput{},
	}
	c.dirty, c.needFull, c.triggers = map[types.NamespacedName]bool{}, false, nil
	c.queued = time.Time{}
	if t.full {
		for key := range c.services {
			c.collect(t.inputs, key)
		}
		for key := range rendered {
			c.collect(t.inputs, key)
		}
	} else {
		for key := range t.dirty {
			c.collect(t.inputs, key)
		}
	}
	return t, true
}

// takeAll adds every known service to a sync's inputs: a partial sync that
// turns full on the way.
func (c *changes) takeAll(inputs map[types.NamespacedName]syncInput) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.services {
		c.collect(inputs, key)
	}
}

// collect snapshots one service's objects into inputs; c.mu is held.
func (c *changes) collect(inputs map[types.NamespacedName]syncInput, key types.NamespacedName) {
	in := syncInput{svc: c.services[key]}
	for _, s := range c.slices[key] {
		in.slices = append(in.slices, s)
	}
	inputs[key] = in
}

// giveBack is take undone after a failed sync: the change tracking was
// consumed (and the in-memory copy of the kernel may be wrong), so the retry
// is a full sync, and the triggers wait for the sync that programs them.
func (c *changes) giveBack(t taken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.needFull = true
	for key := range t.dirty {
		c.dirty[key] = true
	}
	c.triggers = append(t.triggers, c.triggers...)
	if !t.queued.IsZero() && (c.queued.IsZero() || t.queued.Before(c.queued)) {
		c.queued = t.queued
	}
}

// markUpdated records a successful sync's end (kube-proxy's Updated).
func (c *changes) markUpdated() {
	c.mu.Lock()
	c.updated = c.now()
	c.mu.Unlock()
}

// runProxier is either mode's Run: the sync loop and the drift monitor until ctx
// ends, then the health-check servers close.
func runProxier(ctx context.Context, r *boundedRunner, monitor func(context.Context), h *healthServers) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		monitor(ctx)
	}()
	r.Loop(ctx)
	wg.Wait()
	h.close()
}
