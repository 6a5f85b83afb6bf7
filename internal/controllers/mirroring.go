package controllers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream, but hand-written Endpoints are what this controller mirrors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The EndpointSlice mirroring controller copies hand-written Endpoints of
// Services without a selector into EndpointSlices, with the semantics of
// Kubernetes' endpointslicemirroring controller, so that consumers that read
// only EndpointSlices (the proxy, DNS) see custom endpoints too. Endpoints
// labelled endpointslice.kubernetes.io/skip-mirror=true (the API server's own
// default/kubernetes) and leader-election records are not mirrored; neither
// are the Endpoints of Services with a selector, whose slices the endpoints
// controller computes from pods. A mirrored slice is owned by its Endpoints
// and goes with it.
//
// Like upstream, the subsets are first repacked (addresses grouped by the
// ports they serve), then each (address type, port set) gets one slice of at
// most maxEndpointsPerSubset endpoints; addresses beyond that, and addresses
// that are not IPs, are skipped with a warning Event on the Endpoints.

const (
	mirroringManagerName  = "endpointslicemirroring-controller.k8s.io"
	maxEndpointsPerSubset = 1000
	// leaderElectionAnnotation marks Endpoints used as a leader-election
	// lock (client-go resourcelock), which are never mirrored.
	leaderElectionAnnotation = "control-plane.alpha.kubernetes.io/leader"
)

type mirroringController struct {
	c     *Controllers
	loop  *loop
	fresh *freshness

	mu sync.Mutex
	// created holds the slices we created that the cache has not shown
	// yet, per Endpoints key: until it does, syncing again could create a
	// second slice for the same ports.
	created map[string]map[string]bool
}

func newMirroringController(c *Controllers) *mirroringController {
	m := &mirroringController{c: c, fresh: newFreshness(), created: map[string]map[string]bool{}}
	m.loop = c.newLoop("endpointslicemirroring", c.opts.Workers, m.sync)
	enqueue := func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			m.loop.add(keyOf(o))
		}
	}
	c.factory.Core().V1().Services().Informer().AddEventHandler(handlers(
		func(obj any) {
			if svc, ok := obj.(*corev1.Service); ok && len(svc.Spec.Selector) == 0 {
				enqueue(svc)
			}
		},
		func(old, cur any) {
			o, n := old.(*corev1.Service), cur.(*corev1.Service)
			if (len(o.Spec.Selector) == 0) != (len(n.Spec.Selector) == 0) {
				enqueue(n)
			}
		},
		func(obj any) {
			if svc, ok := obj.(*corev1.Service); ok && len(svc.Spec.Selector) == 0 {
				enqueue(svc)
			}
		}))
	c.factory.Core().V1().Endpoints().Informer().AddEventHandler(handlers(
		func(obj any) {
			if ep, ok := obj.(*corev1.Endpoints); ok && shouldMirror(ep) {
				enqueue(ep)
			}
		},
		func(old, cur any) {
			o, n := old.(*corev1.Endpoints), cur.(*corev1.Endpoints)
			if shouldMirror(o) || shouldMirror(n) {
				enqueue(n)
			}
		},
		func(obj any) {
			if ep, ok := obj.(*corev1.Endpoints); ok && shouldMirror(ep) {
				enqueue(ep)
			}
		}))
	sliceKey := func(s *discoveryv1.EndpointSlice) string {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			return s.Namespace + "/" + name
		}
		return ""
	}
	c.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handlers(
		func(obj any) {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || !mirrored(s) || sliceKey(s) == "" {
				return
			}
			m.loop.add(sliceKey(s))
		},
		func(old, cur any) {
			o, n := old.(*discoveryv1.EndpointSlice), cur.(*discoveryv1.EndpointSlice)
			if !mirrored(o) && !mirrored(n) {
				return
			}
			for _, k := range []string{sliceKey(o), sliceKey(n)} {
				if k != "" {
					m.loop.add(k)
				}
			}
		},
		func(obj any) {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || !mirrored(s) {
				return
			}
			m.fresh.forget("slice/" + keyOf(s))
			if k := sliceKey(s); k != "" {
				m.loop.add(k)
			}
		}))
	return m
}

// shouldMirror is upstream's: not skip-mirror, not a leader-election lock.
func shouldMirror(ep *corev1.Endpoints) bool {
	if ep == nil || ep.Labels[discoveryv1.LabelSkipMirror] == "true" {
		return false
	}
	_, lock := ep.Annotations[leaderElectionAnnotation]
	return !lock
}

func mirrored(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == mirroringManagerName
}

func (m *mirroringController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	existing, err := m.c.slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: mirroringManagerName}))
	if err != nil {
		return err
	}
	slices.SortFunc(existing, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range existing {
		if m.fresh.stale("slice/"+keyOf(s), s) {
			return errStale
		}
	}
	if m.pendingCreates(key, ns) {
		return errStale
	}

	ep, err := m.c.endpoints.Endpoints(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	svc, err := m.c.services.Services(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if ep == nil || !shouldMirror(ep) || svc == nil || len(svc.Spec.Selector) > 0 {
		return m.apply(ctx, key, nil, nil, nil, existing)
	}

	want, skipped, invalid := desiredMirror(ep)
	if invalid > 0 {
		m.c.recordEvent(ctx, "endpointslice-mirroring-controller", ep, "Endpoints", "v1", corev1.EventTypeWarning,
			"InvalidIPAddress", fmt.Sprintf("Skipped %d invalid IP addresses when mirroring to EndpointSlices", invalid))
	}
	if skipped > invalid {
		m.c.recordEvent(ctx, "endpointslice-mirroring-controller", ep, "Endpoints", "v1", corev1.EventTypeWarning,
			"TooManyAddressesToMirror", fmt.Sprintf("A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", maxEndpointsPerSubset, skipped))
	}

	// Each port mapping keeps its first slice (updated in place) and drops
	// the others; a mapping with no slice yet reuses a dropped slice of the
	// same address type before a new one is created, as upstream recycles.
	byKey := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := mirrorKey(s.AddressType, s.Ports)
		byKey[k] = append(byKey[k], s)
	}
	var toCreate, toUpdate []*discoveryv1.EndpointSlice
	var toDelete []*discoveryv1.EndpointSlice
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		if _, ok := want[k]; !ok {
			toDelete = append(toDelete, byKey[k]...)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		have := byKey[k]
		w := mirrorSlice(ep, want[k])
		if len(have) == 0 {
			toCreate = append(toCreate, w)
			continue
		}
		toDelete = append(toDelete, have[1:]...)
		w.Name = have[0].Name
		if !sameMirror(have[0], w) {
			toUpdate = append(toUpdate, w)
		}
	}
	for i := 0; i < len(toCreate); {
		j := slices.IndexFunc(toDelete, func(s *discoveryv1.EndpointSlice) bool { return s.AddressType == toCreate[i].AddressType })
		if j < 0 {
			i++
			continue
		}
		toCreate[i].Name = toDelete[j].Name
		toUpdate = append(toUpdate, toCreate[i])
		toCreate = slices.Delete(toCreate, i, i+1)
		toDelete = slices.Delete(toDelete, j, j+1)
	}
	if ep.DeletionTimestamp != nil {
		toCreate = nil
	}
	return m.apply(ctx, key, toCreate, toUpdate, toDelete, nil)
}

// pendingCreates reports whether a slice we created for key is not in the
// cache yet (for at most freshnessTimeout: one that never shows up, deleted
// before the cache saw it, stops counting).
func (m *mirroringController) pendingCreates(key, ns string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.created[key] {
		var cached metav1.Object
		if s, err := m.c.slices.EndpointSlices(ns).Get(name); err == nil {
			cached = s
		}
		if !m.fresh.stale("slice/"+ns+"/"+name, cached) {
			delete(m.created[key], name)
		}
	}
	if len(m.created[key]) == 0 {
		delete(m.created, key)
		return false
	}
	return true
}

// apply writes the changes; deleteAll, when set, are slices to delete because
// nothing should be mirrored any more.
func (m *mirroringController) apply(ctx context.Context, key string, toCreate, toUpdate, toDelete, deleteAll []*discoveryv1.EndpointSlice) error {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	client := m.c.client.DiscoveryV1().EndpointSlices(ns)
	var errs []error
	for _, s := range toCreate {
		created, err := client.Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
			errs = append(errs, fmt.Errorf("creating EndpointSlice for Endpoints %s: %w", key, err))
			continue
		}
		m.mu.Lock()
		if m.created[key] == nil {
			m.created[key] = map[string]bool{}
		}
		m.created[key][created.Name] = true
		m.mu.Unlock()
		m.fresh.wrote("slice/"+keyOf(created), created)
		m.loop.log.Debug("created", "slice", keyOf(created), "endpoints", key)
	}
	for _, s := range toUpdate {
		updated, err := client.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("updating EndpointSlice %s/%s for Endpoints %s: %w", ns, s.Name, key, err))
			continue
		}
		m.fresh.wrote("slice/"+keyOf(updated), updated)
	}
	for _, s := range append(toDelete, deleteAll...) {
		uid := s.UID
		err := client.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting EndpointSlice %s/%s for Endpoints %s: %w", ns, s.Name, key, err))
			continue
		}
		m.fresh.deleted("slice/" + keyOf(s))
	}
	return errors.Join(errs...)
}

// mirrorGroup is the content of one mirrored slice.
type mirrorGroup struct {
	addrType  discoveryv1.AddressType
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

// desiredMirror groups the Endpoints' addresses by address type and port
// set. It reports how many addresses were skipped in all, and how many of
// those were not IPs.
func desiredMirror(ep *corev1.Endpoints) (groups map[string]*mirrorGroup, skipped, invalid int) {
	groups = map[string]*mirrorGroup{}
	seen := map[string]map[string]bool{} // group -> endpoint identity
	for _, ss := range repackSubsets(ep.Subsets) {
		ports := mirrorPorts(ss.Ports)
		added := 0
		add := func(a corev1.EndpointAddress, ready bool) {
			if added >= maxEndpointsPerSubset {
				skipped++
				return
			}
			ip, err := netip.ParseAddr(a.IP)
			if err != nil {
				invalid++
				skipped++
				return
			}
			ip = ip.Unmap()
			addrType := discoveryv1.AddressTypeIPv4
			if ip.Is6() {
				addrType = discoveryv1.AddressTypeIPv6
			}
			k := mirrorKey(addrType, ports)
			g := groups[k]
			if g == nil {
				g = &mirrorGroup{addrType: addrType, ports: ports}
				groups[k] = g
				seen[k] = map[string]bool{}
			}
			e := discoveryv1.Endpoint{
				Addresses:  []string{ip.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(ready)},
				TargetRef:  a.TargetRef,
				NodeName:   a.NodeName,
			}
			if a.Hostname != "" {
				e.Hostname = ptrTo(a.Hostname)
			}
			id := mirrorEndpointID(e)
			added++
			if !seen[k][id] {
				seen[k][id] = true
				g.endpoints = append(g.endpoints, e)
			}
		}
		for _, a := range ss.Addresses {
			add(a, true)
		}
		for _, a := range ss.NotReadyAddresses {
			add(a, false)
		}
	}
	for _, g := range groups {
		slices.SortFunc(g.endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(mirrorEndpointID(a), mirrorEndpointID(b)) })
	}
	return groups, skipped, invalid
}

// mirrorEndpointID identifies an endpoint as upstream's EndpointSet does:
// by address, target and hostname.
func mirrorEndpointID(e discoveryv1.Endpoint) string {
	var uid types.UID
	if e.TargetRef != nil {
		uid = e.TargetRef.UID
	}
	host := ""
	if e.Hostname != nil {
		host = *e.Hostname
	}
	return strings.Join(e.Addresses, ",") + "/" + string(uid) + "/" + host
}

func mirrorKey(addrType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	return string(addrType) + "-" + slicePortsSig(normalizeSlicePorts(ports))
}

func mirrorPorts(ps []corev1.EndpointPort) []discoveryv1.EndpointPort {
	out := []discoveryv1.EndpointPort{}
	for _, p := range ps {
		out = append(out, discoveryv1.EndpointPort{Name: ptrTo(p.Name), Port: ptrTo(p.Port), Protocol: ptrTo(p.Protocol), AppProtocol: p.AppProtocol})
	}
	return out
}

// mirrorSlice is the slice that mirrors group g of ep (without a name: the
// caller names it, or the API generates one).
func mirrorSlice(ep *corev1.Endpoints, g *mirrorGroup) *discoveryv1.EndpointSlice {
	lbls := maps.Clone(ep.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[discoveryv1.LabelServiceName] = ep.Name
	lbls[discoveryv1.LabelManagedBy] = mirroringManagerName
	annotations := map[string]string{}
	for k, v := range ep.Annotations {
		if k != corev1.EndpointsLastChangeTriggerTime && k != corev1.LastAppliedConfigAnnotation {
			annotations[k] = v
		}
	}
	prefix := ep.Name + "-"
	if len(prefix) > 63-5 { // the generated name must stay a valid name
		prefix = prefix[:63-5]
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: prefix,
			Namespace:    ep.Namespace,
			Labels:       lbls,
			Annotations:  annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep,
				corev1.SchemeGroupVersion.WithKind("Endpoints"))},
		},
		AddressType: g.addrType,
		Ports:       g.ports,
		Endpoints:   g.endpoints,
	}
}

// sameMirror reports whether the stored slice already says what want does.
func sameMirror(have, want *discoveryv1.EndpointSlice) bool {
	if len(have.Annotations) == 0 && len(want.Annotations) == 0 {
		// nil and empty are the same annotations
	} else if !apiequality.Semantic.DeepEqual(have.Annotations, want.Annotations) {
		return false
	}
	ownedBy := func(s *discoveryv1.EndpointSlice) types.UID {
		if ref := metav1.GetControllerOf(s); ref != nil && ref.Kind == "Endpoints" {
			return ref.UID
		}
		return ""
	}
	return apiequality.Semantic.DeepEqual(have.Labels, want.Labels) &&
		ownedBy(have) == ownedBy(want) &&
		have.AddressType == want.AddressType &&
		slicePortsSig(normalizeSlicePorts(have.Ports)) == slicePortsSig(normalizeSlicePorts(want.Ports)) &&
		apiequality.Semantic.DeepEqual(sortedEndpointsBy(have.Endpoints, mirrorEndpointID), sortedEndpointsBy(want.Endpoints, mirrorEndpointID))
}

// repackSubsets is Kubernetes' RepackSubsets: addresses are grouped by the
// set of ports they serve, whatever subsets they were written in, an address
// not ready in any subset is not ready, and the result is sorted.
func repackSubsets(in []corev1.EndpointSubset) []corev1.EndpointSubset {
	type addrKey struct {
		ip  string
		uid types.UID
	}
	noPort := corev1.EndpointPort{Port: -1} // addresses of a subset without ports are kept
	addrs := map[addrKey]corev1.EndpointAddress{}
	byPort := map[corev1.EndpointPort]map[addrKey]bool{} // port -> address -> ready
	var portOrder []corev1.EndpointPort
	mark := func(port corev1.EndpointPort, a corev1.EndpointAddress, ready bool) {
		k := addrKey{ip: a.IP}
		if a.TargetRef != nil {
			k.uid = a.TargetRef.UID
		}
		if _, ok := addrs[k]; !ok {
			addrs[k] = a
		}
		set := byPort[port]
		if set == nil {
			set = map[addrKey]bool{}
			byPort[port] = set
			portOrder = append(portOrder, port)
		}
		if was, ok := set[k]; !ok || was {
			set[k] = ready
		}
	}
	for _, ss := range in {
		ports := ss.Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{noPort}
		}
		for _, p := range ports {
			for _, a := range ss.Addresses {
				mark(p, a, true)
			}
			for _, a := range ss.NotReadyAddresses {
				mark(p, a, false)
			}
		}
	}
	type group struct {
		set   map[addrKey]bool
		ports []corev1.EndpointPort
	}
	groups := map[string]*group{}
	var order []string
	for _, p := range portOrder {
		set := byPort[p]
		var ids []string
		for k, ready := range set {
			ids = append(ids, fmt.Sprintf("%s/%s/%t", k.ip, k.uid, ready))
		}
		slices.Sort(ids)
		id := strings.Join(ids, ";")
		g := groups[id]
		if g == nil {
			g = &group{set: set}
			groups[id] = g
			order = append(order, id)
		}
		if p != noPort {
			g.ports = append(g.ports, p)
		}
	}
	var out []corev1.EndpointSubset
	for _, id := range order {
		g := groups[id]
		var ss corev1.EndpointSubset
		for k, ready := range g.set {
			if ready {
				ss.Addresses = append(ss.Addresses, addrs[k])
			} else {
				ss.NotReadyAddresses = append(ss.NotReadyAddresses, addrs[k])
			}
		}
		ss.Ports = g.ports
		out = append(out, ss)
	}
	return normalizeSubsets(out)
}
