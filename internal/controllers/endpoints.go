package controllers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served and still read by kube-proxy-style consumers

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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// The endpoints controller maintains, for every Service with a selector,
// the Endpoints object of the same name and the Service's EndpointSlices,
// with the semantics of Kubernetes' endpoints and endpointslice controllers.
// Both are computed in full from the Service and its pods on every sync and
// written only when they differ from what is stored, so a cluster at rest
// sees no writes. Objects are ours when they carry our managed-by label;
// Services without a selector get nothing from us, and anything we made for
// them (after the selector was removed) is deleted.

const (
	sliceManagerName = "endpointslice-controller.k8s.io"
	// Kubernetes' endpoints controller marks the Endpoints it manages so that
	// they can be told from hand-made ones; we delete only those.
	endpointsManagedByLabel = "endpoints.kubernetes.io/managed-by"
	endpointsManagerName    = "endpoint-controller"
	maxEndpointsPerSlice    = 100
	zoneLabel               = "topology.kubernetes.io/zone"
)

type endpointsController struct {
	c     *Controllers
	loop  *loop
	fresh *freshness
	hints *hinter // EndpointSlice hints (hints.go)

	mu sync.Mutex
	// created holds slices we created that the cache has not shown yet, per
	// service key; until it does, the service is not synced again (a sync
	// would not see the slice and create another).
	created map[string]map[string]bool
}

func newEndpointsController(c *Controllers) *endpointsController {
	e := &endpointsController{c: c, fresh: newFreshness(), created: map[string]map[string]bool{}, hints: newHinter()}
	e.loop = c.newLoop("endpoints", c.opts.Workers, e.sync)
	enqueueSvc := func(obj any) {
		if m, ok := obj.(metav1.Object); ok {
			e.loop.add(keyOf(m))
		}
	}
	c.factory.Core().V1().Services().Informer().AddEventHandler(handlers(
		enqueueSvc, func(_, cur any) { enqueueSvc(cur) }, enqueueSvc))
	// Endpoints are named after their Service; every one seen at start-up is
	// checked, so those of Services deleted while we were down go too.
	c.factory.Core().V1().Endpoints().Informer().AddEventHandler(handlers(
		enqueueSvc, func(_, cur any) { enqueueSvc(cur) },
		func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				e.fresh.forget("endpoints/" + keyOf(m))
				e.loop.add(keyOf(m))
			}
		}))
	c.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handlers(
		func(obj any) { e.sliceChanged(obj, true) },
		func(_, cur any) { e.sliceChanged(cur, false) },
		func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				e.fresh.forget("slice/" + keyOf(m))
			}
			e.sliceChanged(obj, false)
		},
	))
	// Endpoints carry their node's zone, and topology-aware hints follow
	// the zones' CPU and readiness: a node change resyncs every Service
	// (a lab has a handful).
	nodeChanged := func(obj any) {
		svcs, err := c.services.List(labels.Everything())
		if err != nil {
			return
		}
		for _, s := range svcs {
			e.loop.add(keyOf(s))
		}
	}
	c.factory.Core().V1().Nodes().Informer().AddEventHandler(handlers(nodeChanged,
		func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			if o.Labels[zoneLabel] != n.Labels[zoneLabel] || nodeReady(o) != nodeReady(n) ||
				!o.Status.Allocatable.Cpu().Equal(*n.Status.Allocatable.Cpu()) {
				nodeChanged(cur)
			}
		}, nodeChanged))
	c.podInf.AddEventHandler(handlers(
		func(obj any) { e.podChanged(obj.(*corev1.Pod), nil) },
		func(old, cur any) {
			o, p := old.(*corev1.Pod), cur.(*corev1.Pod)
			if o.ResourceVersion != p.ResourceVersion {
				e.podChanged(p, o)
			}
		},
		func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				e.podChanged(pod, nil)
			}
		},
	))
	return e
}

func (e *endpointsController) sliceChanged(obj any, added bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	key := s.Namespace + "/" + svc
	if added {
		e.mu.Lock()
		delete(e.created[key], s.Name)
		e.mu.Unlock()
	}
	e.loop.add(key)
}

// podChanged queues the services selecting pod now or before (old).
func (e *endpointsController) podChanged(pod, old *corev1.Pod) {
	svcs, err := e.c.services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if sel.Matches(labels.Set(pod.Labels)) || (old != nil && sel.Matches(labels.Set(old.Labels))) {
			e.loop.add(keyOf(svc))
		}
	}
}

// managesEndpoints reports whether the controller computes endpoints for svc.
func managesEndpoints(svc *corev1.Service) bool {
	return len(svc.Spec.Selector) > 0 && svc.Spec.Type != corev1.ServiceTypeExternalName
}

func (e *endpointsController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := e.c.services.Services(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if svc == nil || !managesEndpoints(svc) {
		e.hints.forget(key)
		return e.cleanup(ctx, ns, name)
	}
	pods, err := e.c.pods.Pods(ns).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return errors.Join(e.syncEndpoints(ctx, svc, pods), e.syncSlices(ctx, svc, pods))
}

// cleanup deletes the Endpoints and EndpointSlices we made for a Service
// that is gone or no longer has a selector.
func (e *endpointsController) cleanup(ctx context.Context, ns, name string) error {
	var errs []error
	epKey := "endpoints/" + ns + "/" + name
	ep, err := e.c.endpoints.Endpoints(ns).Get(name)
	if err == nil && ep.Labels[endpointsManagedByLabel] == endpointsManagerName {
		if e.fresh.stale(epKey, ep) {
			return errStale
		}
		errs = append(errs, e.delete(ctx, epKey, ep, func(opts metav1.DeleteOptions) error {
			return e.c.client.CoreV1().Endpoints(ns).Delete(ctx, name, opts)
		}))
	}
	existing, err := e.ownedSlices(ns, name)
	if err != nil {
		return err
	}
	for _, s := range existing {
		sKey := "slice/" + keyOf(s)
		if e.fresh.stale(sKey, s) {
			errs = append(errs, errStale)
			continue
		}
		errs = append(errs, e.delete(ctx, sKey, s, func(opts metav1.DeleteOptions) error {
			return e.c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.Name, opts)
		}))
	}
	return errors.Join(errs...)
}

func (e *endpointsController) delete(ctx context.Context, key string, obj metav1.Object, del func(metav1.DeleteOptions) error) error {
	uid := obj.GetUID()
	err := del(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	e.fresh.deleted(key)
	e.loop.log.Debug("deleted", "object", key)
	return nil
}

// ownedSlices are the slices our controller manages for service name.
func (e *endpointsController) ownedSlices(ns, name string) ([]*discoveryv1.EndpointSlice, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: sliceManagerName})
	list, err := e.c.slices.EndpointSlices(ns).List(sel)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// includePod is Kubernetes' ShouldPodBeInEndpoints.
func includePod(pod *corev1.Pod, includeTerminating bool) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if pod.Status.PodIP == "" && len(pod.Status.PodIPs) == 0 {
		return false
	}
	return includeTerminating || pod.DeletionTimestamp == nil
}

// serviceFamily is the address family the service's endpoints use.
func serviceFamily(svc *corev1.Service) corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies[0]
	}
	if a, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && a.Is6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// podAddress is the pod's IP of the service's family, or "".
func podAddress(pod *corev1.Pod, family corev1.IPFamily) string {
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if (family == corev1.IPv6Protocol) == (a.Is6() && !a.Is4In6()) {
			return a.Unmap().String()
		}
	}
	return ""
}

// findPort is Kubernetes' podutil.FindPort: a numeric targetPort as is, a
// named one looked up among the pod's container ports of the same protocol.
func findPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	if sp.TargetPort.Type == intstr.Int {
		if sp.TargetPort.IntVal == 0 {
			return sp.Port, true
		}
		return sp.TargetPort.IntVal, true
	}
	name := sp.TargetPort.StrVal
	match := func(c corev1.Container) (int32, bool) {
		for _, p := range c.Ports {
			if p.Name == name && p.Protocol == sp.Protocol {
				return p.ContainerPort, true
			}
		}
		return 0, false
	}
	for _, c := range pod.Spec.Containers {
		if port, ok := match(c); ok {
			return port, true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(c) {
			if port, ok := match(c); ok {
				return port, true
			}
		}
	}
	return 0, false
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func hostnameFor(pod *corev1.Pod, svc *corev1.Service) string {
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		return pod.Spec.Hostname
	}
	return ""
}

func podRef(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

func isHeadless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }

// serviceLabels are the labels Kubernetes copies from a Service onto its
// Endpoints and EndpointSlices, plus the headless marker.
func serviceLabels(svc *corev1.Service) map[string]string {
	l := map[string]string{}
	for k, v := range svc.Labels {
		switch k {
		case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, corev1.IsHeadlessService, endpointsManagedByLabel:
			continue
		}
		l[k] = v
	}
	if isHeadless(svc) {
		l[corev1.IsHeadlessService] = ""
	}
	return l
}

// --- Endpoints ---

// desiredSubsets is what Kubernetes' endpoints controller computes, repacked
// so that addresses with the same ports share a subset.
func desiredSubsets(svc *corev1.Service, pods []*corev1.Pod) []corev1.EndpointSubset {
	family := serviceFamily(svc)
	publish := svc.Spec.PublishNotReadyAddresses
	type entry struct {
		addr  corev1.EndpointAddress
		ready bool
		ports []corev1.EndpointPort
	}
	var entries []entry
	for _, pod := range pods {
		if !includePod(pod, publish) {
			continue
		}
		ip := podAddress(pod, family)
		if ip == "" {
			continue
		}
		addr := corev1.EndpointAddress{IP: ip, Hostname: hostnameFor(pod, svc), TargetRef: podRef(pod)}
		if pod.Spec.NodeName != "" {
			addr.NodeName = ptrTo(pod.Spec.NodeName)
		}
		ent := entry{addr: addr, ready: publish || isPodReady(pod)}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			if port, ok := findPort(pod, sp); ok {
				ent.ports = append(ent.ports, corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: sp.Protocol, AppProtocol: sp.AppProtocol})
			}
		}
		if len(ent.ports) == 0 && !(len(svc.Spec.Ports) == 0 && isHeadless(svc)) {
			continue // no port of the service resolves on this pod
		}
		entries = append(entries, ent)
	}
	bySig := map[string]*corev1.EndpointSubset{}
	var sigs []string
	for _, ent := range entries {
		sortEndpointPorts(ent.ports)
		sig := endpointPortsSig(ent.ports)
		ss := bySig[sig]
		if ss == nil {
			ss = &corev1.EndpointSubset{Ports: ent.ports}
			bySig[sig] = ss
			sigs = append(sigs, sig)
		}
		if ent.ready {
			ss.Addresses = append(ss.Addresses, ent.addr)
		} else {
			ss.NotReadyAddresses = append(ss.NotReadyAddresses, ent.addr)
		}
	}
	slices.Sort(sigs)
	var out []corev1.EndpointSubset
	for _, sig := range sigs {
		out = append(out, *bySig[sig])
	}
	return normalizeSubsets(out)
}

func sortEndpointPorts(ps []corev1.EndpointPort) {
	slices.SortFunc(ps, func(a, b corev1.EndpointPort) int {
		return strings.Compare(endpointPortsSig([]corev1.EndpointPort{a}), endpointPortsSig([]corev1.EndpointPort{b}))
	})
}

func endpointPortsSig(ps []corev1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ps {
		ap := ""
		if p.AppProtocol != nil {
			ap = *p.AppProtocol
		}
		fmt.Fprintf(&b, "%s/%s/%d/%s;", p.Name, p.Protocol, p.Port, ap)
	}
	return b.String()
}

// normalizeSubsets sorts subsets, their addresses and ports, so stored and
// desired Endpoints compare equal regardless of order.
func normalizeSubsets(in []corev1.EndpointSubset) []corev1.EndpointSubset {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.EndpointSubset, len(in))
	for i, ss := range in {
		ss = *ss.DeepCopy()
		byIP := func(a, b corev1.EndpointAddress) int {
			if c := strings.Compare(a.IP, b.IP); c != 0 {
				return c
			}
			if a.TargetRef != nil && b.TargetRef != nil {
				return strings.Compare(string(a.TargetRef.UID), string(b.TargetRef.UID))
			}
			return 0
		}
		slices.SortFunc(ss.Addresses, byIP)
		slices.SortFunc(ss.NotReadyAddresses, byIP)
		sortEndpointPorts(ss.Ports)
		if len(ss.Addresses) == 0 {
			ss.Addresses = nil
		}
		if len(ss.NotReadyAddresses) == 0 {
			ss.NotReadyAddresses = nil
		}
		if len(ss.Ports) == 0 {
			ss.Ports = nil
		}
		out[i] = ss
	}
	slices.SortFunc(out, func(a, b corev1.EndpointSubset) int {
		return strings.Compare(endpointPortsSig(a.Ports), endpointPortsSig(b.Ports))
	})
	return out
}

func (e *endpointsController) syncEndpoints(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod) error {
	key := "endpoints/" + keyOf(svc)
	cur, err := e.c.endpoints.Endpoints(svc.Namespace).Get(svc.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if cur == nil {
		if e.fresh.stale(key, nil) {
			return errStale
		}
	} else if e.fresh.stale(key, cur) {
		return errStale
	}
	subsets := desiredSubsets(svc, pods)
	lbls := serviceLabels(svc)
	lbls[endpointsManagedByLabel] = endpointsManagerName
	if cur == nil {
		ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: lbls}, Subsets: subsets}
		res, err := e.c.client.CoreV1().Endpoints(svc.Namespace).Create(ctx, ep, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating endpoints %q: %w", keyOf(svc), err)
		}
		e.fresh.wrote(key, res)
		e.loop.log.Debug("created endpoints", "service", keyOf(svc))
		return nil
	}
	if maps.Equal(cur.Labels, lbls) && apiequality.Semantic.DeepEqual(normalizeSubsets(cur.Subsets), subsets) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Labels = lbls
	upd.Subsets = subsets
	res, err := e.c.client.CoreV1().Endpoints(svc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating endpoints %q: %w", keyOf(svc), err)
	}
	e.fresh.wrote(key, res)
	e.loop.log.Debug("updated endpoints", "service", keyOf(svc))
	return nil
}

// --- EndpointSlices ---

// sliceGroup is the endpoints that share one resolution of the service's
// ports: each group gets its own slices, as in Kubernetes.
type sliceGroup struct {
	sig       string
	ports     []discoveryv1.EndpointPort
	endpoints map[string]discoveryv1.Endpoint // by address
}

func (e *endpointsController) desiredSliceGroups(svc *corev1.Service, pods []*corev1.Pod, family corev1.IPFamily) []*sliceGroup {
	publish := svc.Spec.PublishNotReadyAddresses
	groups := map[string]*sliceGroup{}
	for _, pod := range pods {
		if !includePod(pod, true) {
			continue
		}
		ip := podAddress(pod, family)
		if ip == "" {
			continue
		}
		var ports []discoveryv1.EndpointPort
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			if port, ok := findPort(pod, sp); ok {
				ports = append(ports, discoveryv1.EndpointPort{Name: ptrTo(sp.Name), Port: ptrTo(port), Protocol: ptrTo(sp.Protocol), AppProtocol: sp.AppProtocol})
			}
		}
		ports = normalizeSlicePorts(ports)
		sig := slicePortsSig(ports)
		g := groups[sig]
		if g == nil {
			g = &sliceGroup{sig: sig, ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
			groups[sig] = g
		}
		serving := publish || isPodReady(pod)
		terminating := pod.DeletionTimestamp != nil
		ready := serving && (!terminating || publish)
		ep := discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(ready), Serving: ptrTo(serving), Terminating: ptrTo(terminating)},
			TargetRef:  podRef(pod),
		}
		if pod.Spec.NodeName != "" {
			ep.NodeName = ptrTo(pod.Spec.NodeName)
			if n, err := e.c.nodes.Get(pod.Spec.NodeName); err == nil && n.Labels[zoneLabel] != "" {
				ep.Zone = ptrTo(n.Labels[zoneLabel])
			}
		}
		if h := hostnameFor(pod, svc); h != "" {
			ep.Hostname = ptrTo(h)
		}
		g.endpoints[ip] = ep
	}
	if len(groups) == 0 {
		// Kubernetes keeps one empty "placeholder" slice per service.
		groups[""] = &sliceGroup{endpoints: map[string]discoveryv1.Endpoint{}}
	}
	out := slices.Collect(maps.Values(groups))
	slices.SortFunc(out, func(a, b *sliceGroup) int { return strings.Compare(a.sig, b.sig) })
	return out
}

func normalizeSlicePorts(ps []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if len(ps) == 0 {
		return nil
	}
	ps = slices.Clone(ps)
	for i := range ps {
		if ps[i].Name == nil {
			ps[i].Name = ptrTo("")
		}
		if ps[i].Protocol == nil {
			ps[i].Protocol = ptrTo(corev1.ProtocolTCP)
		}
	}
	slices.SortFunc(ps, func(a, b discoveryv1.EndpointPort) int {
		return strings.Compare(slicePortsSig([]discoveryv1.EndpointPort{a}), slicePortsSig([]discoveryv1.EndpointPort{b}))
	})
	return ps
}

func slicePortsSig(ps []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ps {
		name, proto, ap, port := "", corev1.ProtocolTCP, "", int32(0)
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if p.AppProtocol != nil {
			ap = *p.AppProtocol
		}
		if p.Port != nil {
			port = *p.Port
		}
		fmt.Fprintf(&b, "%s/%s/%d/%s;", name, proto, port, ap)
	}
	return b.String()
}

func endpointKey(ep discoveryv1.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return ""
	}
	return ep.Addresses[0]
}

func sortedEndpoints(eps []discoveryv1.Endpoint) []discoveryv1.Endpoint {
	return sortedEndpointsBy(eps, endpointKey)
}

// sortedEndpointsBy is eps sorted by key, nil when empty: the form two
// slices' endpoints are compared in.
func sortedEndpointsBy(eps []discoveryv1.Endpoint, key func(discoveryv1.Endpoint) string) []discoveryv1.Endpoint {
	out := slices.Clone(eps)
	slices.SortFunc(out, func(a, b discoveryv1.Endpoint) int { return strings.Compare(key(a), key(b)) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// sliceWant is the content one slice should have.
type sliceWant struct {
	existing  *discoveryv1.EndpointSlice // nil: create
	ports     []discoveryv1.EndpointPort
	endpoints []discoveryv1.Endpoint
}

func (e *endpointsController) syncSlices(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod) error {
	svcKey := keyOf(svc)
	e.mu.Lock()
	for name := range e.created[svcKey] {
		if _, err := e.c.slices.EndpointSlices(svc.Namespace).Get(name); err == nil {
			delete(e.created[svcKey], name)
		}
	}
	pending := len(e.created[svcKey]) > 0
	e.mu.Unlock()
	if pending {
		return errStale
	}
	existing, err := e.ownedSlices(svc.Namespace, svc.Name)
	if err != nil {
		return err
	}
	for _, s := range existing {
		if e.fresh.stale("slice/"+keyOf(s), s) {
			return errStale
		}
	}
	// One set of slices per IP family of the service, as upstream's
	// reconciler (getAddressTypesForService). Slices of an address type the
	// service no longer has go with the first family's pass.
	fams := sliceFamilies(svc)
	var errs []error
	for i, fam := range fams {
		var mine []*discoveryv1.EndpointSlice
		for _, s := range existing {
			if s.AddressType == discoveryv1.AddressType(fam) ||
				(i == 0 && !slices.Contains(fams, corev1.IPFamily(s.AddressType))) {
				mine = append(mine, s)
			}
		}
		errs = append(errs, e.syncFamilySlices(ctx, svc, pods, fam, mine))
	}
	return errors.Join(errs...)
}

// sliceFamilies are the address families a service's slices have: its
// ipFamilies; else its ClusterIP's; else (headless) both, as upstream.
func sliceFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies
	}
	if a, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
		if a.Is6() && !a.Is4In6() {
			return []corev1.IPFamily{corev1.IPv6Protocol}
		}
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

// syncFamilySlices reconciles the slices of one address family; existing
// are the owned slices of that family (and obsolete ones to delete).
func (e *endpointsController) syncFamilySlices(ctx context.Context, svc *corev1.Service, pods []*corev1.Pod, family corev1.IPFamily, existing []*discoveryv1.EndpointSlice) error {
	addrType := discoveryv1.AddressTypeIPv4
	if family == corev1.IPv6Protocol {
		addrType = discoveryv1.AddressTypeIPv6
	}

	// Existing slices of the right service, address type and port
	// resolution are reused; endpoints stay in the slice they are in.
	bySig := map[string][]*discoveryv1.EndpointSlice{}
	var obsolete []*discoveryv1.EndpointSlice
	for _, s := range existing {
		ref := metav1.GetControllerOf(s)
		if s.AddressType != addrType || ref == nil || ref.UID != svc.UID {
			obsolete = append(obsolete, s)
			continue
		}
		sig := slicePortsSig(normalizeSlicePorts(s.Ports))
		bySig[sig] = append(bySig[sig], s)
	}
	groups := e.desiredSliceGroups(svc, pods, family)
	e.hints.apply(svc, addrType, groups, e.allNodes(), e.c.log)
	var wants []sliceWant
	for _, g := range groups {
		reuse := bySig[g.sig]
		delete(bySig, g.sig)
		placed := map[string]bool{}
		assigned := make([][]discoveryv1.Endpoint, len(reuse))
		for i, s := range reuse {
			for _, ep := range s.Endpoints {
				k := endpointKey(ep)
				if want, ok := g.endpoints[k]; ok && !placed[k] && len(assigned[i]) < maxEndpointsPerSlice {
					assigned[i] = append(assigned[i], want)
					placed[k] = true
				}
			}
		}
		var rest []string
		for k := range g.endpoints {
			if !placed[k] {
				rest = append(rest, k)
			}
		}
		slices.Sort(rest)
		for i := range reuse {
			for len(rest) > 0 && len(assigned[i]) < maxEndpointsPerSlice {
				assigned[i] = append(assigned[i], g.endpoints[rest[0]])
				rest = rest[1:]
			}
		}
		kept := 0
		for i, s := range reuse {
			// Empty slices go, except one to stand for an empty group.
			if len(assigned[i]) == 0 && (len(g.endpoints) > 0 || kept > 0) {
				obsolete = append(obsolete, s)
				continue
			}
			kept++
			wants = append(wants, sliceWant{existing: s, ports: g.ports, endpoints: assigned[i]})
		}
		for len(rest) > 0 || kept == 0 {
			n := min(len(rest), maxEndpointsPerSlice)
			var eps []discoveryv1.Endpoint
			for _, k := range rest[:n] {
				eps = append(eps, g.endpoints[k])
			}
			rest = rest[n:]
			kept++
			wants = append(wants, sliceWant{ports: g.ports, endpoints: eps})
		}
	}
	for _, ss := range bySig {
		obsolete = append(obsolete, ss...)
	}
	// Rather than create a slice and delete another, rewrite the one that
	// would go (the placeholder, typically), as Kubernetes does.
	slices.SortFunc(obsolete, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for i := range wants {
		if wants[i].existing != nil {
			continue
		}
		j := slices.IndexFunc(obsolete, func(s *discoveryv1.EndpointSlice) bool {
			ref := metav1.GetControllerOf(s)
			return s.AddressType == addrType && ref != nil && ref.UID == svc.UID
		})
		if j < 0 {
			break
		}
		wants[i].existing = obsolete[j]
		obsolete = slices.Delete(obsolete, j, j+1)
	}

	lbls := serviceLabels(svc)
	lbls[discoveryv1.LabelServiceName] = svc.Name
	lbls[discoveryv1.LabelManagedBy] = sliceManagerName
	owner := metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))
	var errs []error
	// Create and update before deleting, so that consumers never see a
	// moment with fewer endpoints than either before or after.
	for _, w := range wants {
		errs = append(errs, e.writeSlice(ctx, svc, w, addrType, lbls, owner))
	}
	for _, s := range obsolete {
		errs = append(errs, e.delete(ctx, "slice/"+keyOf(s), s, func(opts metav1.DeleteOptions) error {
			return e.c.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, opts)
		}))
	}
	return errors.Join(errs...)
}

func (e *endpointsController) writeSlice(ctx context.Context, svc *corev1.Service, w sliceWant, addrType discoveryv1.AddressType, lbls map[string]string, owner *metav1.OwnerReference) error {
	eps := sortedEndpoints(w.endpoints)
	if w.existing == nil {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName:    generateNamePrefix(svc.Name + "-"),
				Namespace:       svc.Namespace,
				Labels:          lbls,
				OwnerReferences: []metav1.OwnerReference{*owner},
			},
			AddressType: addrType,
			Endpoints:   eps,
			Ports:       w.ports,
		}
		res, err := e.c.client.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating endpointslice for service %q: %w", keyOf(svc), err)
		}
		e.mu.Lock()
		if _, err := e.c.slices.EndpointSlices(res.Namespace).Get(res.Name); err != nil {
			if e.created[keyOf(svc)] == nil {
				e.created[keyOf(svc)] = map[string]bool{}
			}
			e.created[keyOf(svc)][res.Name] = true
		}
		e.mu.Unlock()
		e.loop.log.Debug("created endpointslice", "service", keyOf(svc), "slice", res.Name, "endpoints", len(eps))
		return nil
	}
	cur := w.existing
	if maps.Equal(cur.Labels, lbls) &&
		apiequality.Semantic.DeepEqual(sortedEndpoints(cur.Endpoints), eps) &&
		apiequality.Semantic.DeepEqual(normalizeSlicePorts(cur.Ports), w.ports) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Labels = lbls
	upd.Endpoints = eps
	upd.Ports = w.ports
	res, err := e.c.client.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating endpointslice %q: %w", keyOf(cur), err)
	}
	e.fresh.wrote("slice/"+keyOf(res), res)
	e.loop.log.Debug("updated endpointslice", "service", keyOf(svc), "slice", res.Name, "endpoints", len(eps))
	return nil
}

// generateNamePrefix trims a generateName the way Kubernetes' API server
// does, so generated names stay within 63 characters.
func generateNamePrefix(p string) string {
	if len(p) > maxGeneratedNameBase {
		return p[:maxGeneratedNameBase]
	}
	return p
}
