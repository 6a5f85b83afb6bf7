package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/ctrlloop"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Class is the spec.loadBalancerClass minikit answers to besides none at all.
// A Service with any other class belongs to another implementation and is
// left alone.
const Class = "minikit.io/l2"

// Annotations a Service can carry to ask for a specific address, MetalLB's
// (current and legacy spelling), so MetalLB manifests work unchanged. They win
// over the deprecated spec.loadBalancerIP.
var requestAnnotations = []string{"metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"}

// ControllerComponent is the Events' source, the component that writes
// Service load-balancer status in Kubernetes.
const ControllerComponent = "service-controller"

// Event reasons, those of Kubernetes' service controller and MetalLB's.
const (
	ReasonEnsuring         = "EnsuringLoadBalancer"
	ReasonEnsured          = "EnsuredLoadBalancer"
	ReasonDeleting         = "DeletingLoadBalancer"
	ReasonDeleted          = "DeletedLoadBalancer"
	ReasonIPAllocated      = "IPAllocated"
	ReasonAllocationFailed = "AllocationFailed"
)

// ControllerConfig configures the Controller.
type ControllerConfig struct {
	Client kubernetes.Interface
	// Pool is where addresses come from; nil or empty keeps every Service
	// pending, with an Event saying so.
	Pool   *Pool
	Logger *slog.Logger
}

// Controller allocates load-balancer addresses to Services. One worker runs
// the syncs, so two Services are never given one address by racing syncs; the
// mutex only guards the table against the Events code.
type Controller struct {
	client kubernetes.Interface
	pool   *Pool
	log    *slog.Logger

	factory  informers.SharedInformerFactory
	services corelisters.ServiceLister
	synced   cache.InformerSynced
	loop     *ctrlloop.Loop

	mu sync.Mutex
	// owner maps each address in use to the Service ("ns/name") holding it;
	// byKey is the reverse, a Service's addresses (one per family). They are
	// rebuilt from Service statuses at start and kept ahead of the informer
	// cache, which lags our own writes.
	owner map[netip.Addr]string
	byKey map[string][]netip.Addr
	// lastEvent is the last reason+message recorded per Service, so a
	// Service retried while still pending does not flood its Events.
	lastEvent map[string]string

	ready chan struct{}
}

// NewController builds a Controller; Run starts it.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Controller{
		client: cfg.Client, pool: cfg.Pool, log: cfg.Logger.With("component", "lb-controller"),
		owner: map[netip.Addr]string{}, byKey: map[string][]netip.Addr{}, lastEvent: map[string]string{},
		ready: make(chan struct{}),
	}
	c.loop = ctrlloop.New(ctrlloop.Config{Name: "loadbalancer", Sync: c.sync, KeyAttr: "service", Logger: c.log})
	c.factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	inf := c.factory.Core().V1().Services()
	c.services = inf.Lister()
	c.synced = inf.Informer().HasSynced
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.enqueue,
	})
	return c
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.loop.Add(key)
	}
}

// Ready is closed once the allocation table is rebuilt and the worker runs.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.loop.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("lb-controller: service cache did not sync")
	}
	c.rebuild()
	if c.pool.Empty() {
		c.log.Warn("no load-balancer address pool (--lb-pool): LoadBalancer Services will stay pending")
	} else {
		c.log.Info("load-balancer controller running", "pool", c.pool.String(), "addresses", c.pool.Size(), "inUse", len(c.owner))
	}
	// One worker: see Controller.
	c.loop.Start(ctx)
	close(c.ready)
	<-ctx.Done()
	c.loop.ShutDown()
	c.loop.Wait()
	return nil
}

// ours reports whether svc is a LoadBalancer Service of minikit's class.
func ours(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	return svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == Class
}

// statusIPs are the addresses of svc's load-balancer status, the first of
// each family, in the status's order.
func statusIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(ing.IP)
		if err != nil || plainAddr(a) != nil || slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// statusIP is svc's status address of family f, if any.
func statusIP(svc *corev1.Service, f corev1.IPFamily) netip.Addr {
	for _, a := range statusIPs(svc) {
		if familyOf(a) == f {
			return a
		}
	}
	return netip.Addr{}
}

// rebuild fills the allocation table from the Services' statuses. When two
// Services claim one address (a status written by hand, or by a controller
// that died between two writes), the older Service keeps it and the other is
// given a new one when it syncs. Addresses of the pool that Services of other
// classes show in their status are held too, so they are never handed out.
func (c *Controller) rebuild() {
	svcs, _ := c.services.List(labels.Everything())
	sort.Slice(svcs, func(i, j int) bool {
		ti, tj := svcs[i].CreationTimestamp, svcs[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return keyOf(svcs[i]) < keyOf(svcs[j])
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, svc := range svcs {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		c.hold(keyOf(svc), statusIPs(svc))
	}
	for _, svc := range svcs {
		c.loop.Add(keyOf(svc))
	}
}

// hold claims for key those of ips that are in the pool and free. The caller
// holds c.mu.
func (c *Controller) hold(key string, ips []netip.Addr) {
	for _, ip := range ips {
		if _, taken := c.owner[ip]; taken || !c.pool.Contains(ip) {
			continue
		}
		c.owner[ip], c.byKey[key] = key, append(c.byKey[key], ip)
	}
}

func keyOf(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// serviceFamilies are the address families svc gets addresses of, primary
// first: spec.ipFamilies, which the API server always fills for a Service
// with ClusterIPs; else the families of its ClusterIPs; else IPv4.
func serviceFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies
	}
	var out []corev1.IPFamily
	for _, s := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, familyOf(a)) {
			out = append(out, familyOf(a))
		}
	}
	if len(out) == 0 {
		out = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return out
}

// requestedIPs are the addresses a Service asks for, at most one of each
// family: those of MetalLB's annotation, else spec.loadBalancerIP (which
// holds one address). source names where they came from, for Events.
func requestedIPs(svc *corev1.Service) (ips []netip.Addr, source string, err error) {
	for _, ann := range requestAnnotations {
		v, ok := svc.Annotations[ann]
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		source = "annotation " + ann
		for _, s := range strings.Split(v, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil || plainAddr(a) != nil {
				return nil, source, fmt.Errorf("%q is not an IP address", strings.TrimSpace(s))
			}
			if slices.ContainsFunc(ips, func(b netip.Addr) bool { return familyOf(b) == familyOf(a) }) {
				return nil, source, fmt.Errorf("%q asks for two %s addresses; a Service gets at most one of each family", v, familyOf(a))
			}
			ips = append(ips, a)
		}
		return ips, source, nil
	}
	if s := strings.TrimSpace(svc.Spec.LoadBalancerIP); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || plainAddr(a) != nil {
			return nil, "spec.loadBalancerIP", fmt.Errorf("%q is not an IP address", s)
		}
		return []netip.Addr{a}, "spec.loadBalancerIP", nil
	}
	return nil, "", nil
}

// decision is what sync does for one Service: give it ips (one per family,
// in the order of its ipFamilies), or leave it pending (no ips) with a
// Warning saying why.
type decision struct {
	ips   []netip.Addr
	why   string   // set when pending
	notes []string // Normal events to add, e.g. an address given up
}

// families lists, for the Service's ipFamilies and ipFamilyPolicy, which of
// the Service's families it gets an address of from this pool: every one for
// SingleStack and RequireDualStack; for PreferDualStack those the pool has,
// as MetalLB gives a PreferDualStack Service a single-stack pool's one
// family. why is set when the Service can get none.
func (c *Controller) families(svc *corev1.Service) (want []corev1.IPFamily, why string) {
	fams := serviceFamilies(svc)
	prefer := svc.Spec.IPFamilyPolicy != nil && *svc.Spec.IPFamilyPolicy == corev1.IPFamilyPolicyPreferDualStack
	for _, f := range fams {
		switch {
		case c.pool.Has(f):
			want = append(want, f)
		case !prefer:
			return nil, fmt.Sprintf("the address pool %s has no %s addresses, and the Service's spec.ipFamilies are %v (ipFamilyPolicy %s)",
				c.pool, f, fams, policyOf(svc))
		}
	}
	if len(want) == 0 {
		return nil, fmt.Sprintf("the address pool %s has no address of the Service's spec.ipFamilies %v", c.pool, fams)
	}
	return want, ""
}

func policyOf(svc *corev1.Service) corev1.IPFamilyPolicy {
	if svc.Spec.IPFamilyPolicy == nil {
		return corev1.IPFamilyPolicySingleStack
	}
	return *svc.Spec.IPFamilyPolicy
}

// decide picks the addresses of an in-class Service. The caller holds c.mu.
func (c *Controller) decide(svc *corev1.Service) decision {
	if c.pool.Empty() {
		return decision{why: "no address pool is configured: start `minikit server` with --lb-pool " +
			"(CIDRs or FIRST-LAST ranges on the nodes' network, IPv4 and IPv6), as MetalLB needs an IPAddressPool"}
	}
	req, source, err := requestedIPs(svc)
	if err != nil {
		return decision{why: fmt.Sprintf("invalid %s: %v", source, err)}
	}
	if len(req) > 0 {
		return c.decideRequested(svc, req, source)
	}
	want, why := c.families(svc)
	if why != "" {
		return decision{why: why}
	}
	var d decision
	for _, f := range want {
		ip, note, why := c.pick(svc, f)
		if note != "" {
			d.notes = append(d.notes, note)
		}
		if why != "" {
			return decision{why: why, notes: d.notes}
		}
		d.ips = append(d.ips, ip)
	}
	return d
}

// decideRequested checks the addresses a Service asks for: each of one of
// its families (all of them for RequireDualStack), in the pool and not
// another Service's. The caller holds c.mu.
func (c *Controller) decideRequested(svc *corev1.Service, req []netip.Addr, source string) decision {
	key := keyOf(svc)
	fams := serviceFamilies(svc)
	var ips []netip.Addr
	for _, f := range fams {
		for _, a := range req {
			if familyOf(a) == f {
				ips = append(ips, a)
			}
		}
	}
	for _, a := range req {
		if !slices.Contains(fams, familyOf(a)) {
			return decision{why: fmt.Sprintf("invalid %s: %s is an %s address, and the Service's spec.ipFamilies are %v", source, a, familyOf(a), fams)}
		}
	}
	if policyOf(svc) != corev1.IPFamilyPolicyPreferDualStack {
		for _, f := range fams {
			if !slices.ContainsFunc(ips, func(a netip.Addr) bool { return familyOf(a) == f }) {
				return decision{why: fmt.Sprintf("invalid %s: it has no %s address, and a Service with spec.ipFamilies %v and ipFamilyPolicy %s needs one of each",
					source, f, fams, policyOf(svc))}
			}
		}
	}
	for _, a := range ips {
		switch owner, taken := c.owner[a]; {
		case !c.pool.Contains(a):
			return decision{why: fmt.Sprintf("requested IP %s (%s) is not in the address pool %s", a, source, c.pool)}
		case taken && owner != key:
			return decision{why: fmt.Sprintf("requested IP %s (%s) is already in use by Service %s", a, source, owner)}
		}
	}
	return decision{ips: ips}
}

// pick chooses svc's address of family f: the one it holds, if still ours to
// give (first what we last wrote, which the cache may not show yet, then its
// status), else the pool's first free one. The caller holds c.mu.
func (c *Controller) pick(svc *corev1.Service, f corev1.IPFamily) (ip netip.Addr, note, why string) {
	key := keyOf(svc)
	for _, a := range c.byKey[key] {
		if familyOf(a) == f && c.pool.Contains(a) {
			return a, "", ""
		}
	}
	if cur := statusIP(svc, f); cur.IsValid() {
		owner, taken := c.owner[cur]
		switch {
		case !c.pool.Contains(cur):
			note = fmt.Sprintf("IP %s is not in the address pool %s any more; allocating another", cur, c.pool)
		case taken && owner != key:
			note = fmt.Sprintf("IP %s is also held by Service %s, which had it first; allocating another", cur, owner)
		default:
			return cur, "", ""
		}
	}
	ip, ok := c.pool.firstFree(f, func(a netip.Addr) bool { _, taken := c.owner[a]; return taken })
	if !ok {
		what := "addresses"
		n := c.pool.Size()
		if c.pool.DualStack() {
			what, n = string(f)+" addresses", c.pool.SizeOf(f)
		}
		return netip.Addr{}, note, fmt.Sprintf("no available IPs: all %d %s of the pool %s are in use", n, what, c.pool)
	}
	return ip, note, ""
}

// claim makes ips key's addresses; it reports whether key gave up any.
func (c *Controller) claim(key string, ips []netip.Addr) (released bool) {
	for _, old := range c.byKey[key] {
		if !slices.Contains(ips, old) && c.owner[old] == key {
			delete(c.owner, old)
			released = true
		}
	}
	for _, ip := range ips {
		c.owner[ip] = key
	}
	c.byKey[key] = slices.Clone(ips)
	return released
}

// release drops key's addresses and returns them.
func (c *Controller) release(key string) []netip.Addr {
	ips := c.byKey[key]
	delete(c.byKey, key)
	for _, ip := range ips {
		if c.owner[ip] == key {
			delete(c.owner, ip)
		}
	}
	return ips
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		ips := c.release(key)
		delete(c.lastEvent, key)
		c.mu.Unlock()
		if len(ips) > 0 {
			c.log.Info("released addresses of deleted Service", "service", key, "ips", ips)
			c.requeuePending()
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(svc) {
		c.mu.Lock()
		ips := c.release(key)
		delete(c.lastEvent, key)
		// An address of our pool in another implementation's status is
		// held, never handed out twice.
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			c.hold(key, statusIPs(svc))
		}
		c.mu.Unlock()
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer || (len(ips) == 0 && len(svc.Status.LoadBalancer.Ingress) == 0) {
			return nil
		}
		// No longer of type LoadBalancer: the load balancer goes, and with
		// it the status (as Kubernetes' service controller clears it).
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonDeleting, "Deleting load balancer")
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			cp := svc.DeepCopy()
			cp.Status.LoadBalancer = corev1.LoadBalancerStatus{}
			if _, err := c.client.CoreV1().Services(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("clearing load-balancer status of Service %q: %w", key, err)
			}
		}
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonDeleted, "Deleted load balancer")
		if len(ips) > 0 {
			c.log.Info("released addresses of Service no longer of type LoadBalancer", "service", key, "ips", ips)
			c.requeuePending()
		}
		return nil
	}

	c.mu.Lock()
	d := c.decide(svc)
	var released bool
	if len(d.ips) > 0 {
		released = c.claim(key, d.ips)
	} else {
		released = len(c.release(key)) > 0
	}
	c.mu.Unlock()
	if released {
		c.requeuePending()
	}
	for _, note := range d.notes {
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonIPAllocated, note)
	}

	if len(d.ips) == 0 {
		c.event(ctx, svc, corev1.EventTypeWarning, ReasonAllocationFailed, fmt.Sprintf("Failed to allocate IP for %q: %s", key, d.why))
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			cp := svc.DeepCopy()
			cp.Status.LoadBalancer = corev1.LoadBalancerStatus{}
			if _, err := c.client.CoreV1().Services(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("clearing load-balancer status of Service %q: %w", key, err)
			}
		}
		c.log.Info("Service stays pending", "service", key, "reason", d.why)
		return nil
	}

	var want corev1.LoadBalancerStatus
	texts := make([]string, len(d.ips))
	for i, ip := range d.ips {
		texts[i] = ip.String()
		want.Ingress = append(want.Ingress, corev1.LoadBalancerIngress{IP: texts[i], IPMode: ptr(corev1.LoadBalancerIPModeVIP)})
	}
	if statusEqual(svc.Status.LoadBalancer, want) {
		return nil
	}
	c.event(ctx, svc, corev1.EventTypeNormal, ReasonEnsuring, "Ensuring load balancer")
	cp := svc.DeepCopy()
	cp.Status.LoadBalancer = want
	if _, err := c.client.CoreV1().Services(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing load-balancer status of Service %q: %w", key, err)
	}
	if !slices.Equal(statusIPs(svc), d.ips) {
		// MetalLB's message: the list of addresses, each quoted.
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonIPAllocated, fmt.Sprintf("Assigned IP %q", texts))
	}
	c.event(ctx, svc, corev1.EventTypeNormal, ReasonEnsured, "Ensured load balancer")
	c.log.Info("assigned load-balancer addresses", "service", key, "ips", d.ips)
	return nil
}

// requeuePending queues the in-class Services without an address: one may
// now get an address just released.
func (c *Controller) requeuePending() {
	svcs, _ := c.services.List(labels.Everything())
	for _, svc := range svcs {
		if ours(svc) && len(statusIPs(svc)) == 0 {
			c.loop.Add(keyOf(svc))
		}
	}
}

func statusEqual(a, b corev1.LoadBalancerStatus) bool {
	return slices.EqualFunc(a.Ingress, b.Ingress, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && len(x.Ports) == 0 && len(y.Ports) == 0 &&
			(x.IPMode == nil) == (y.IPMode == nil) && (x.IPMode == nil || *x.IPMode == *y.IPMode)
	})
}

func ptr[T any](v T) *T { return &v }

// event records a core/v1 Event about svc, as `kubectl describe svc` lists
// them. The same reason and message are not recorded twice in a row for a
// Service. Failures are logged only: events are best effort.
func (c *Controller) event(ctx context.Context, svc *corev1.Service, typ, reason, msg string) {
	key := keyOf(svc)
	c.mu.Lock()
	if typ == corev1.EventTypeWarning {
		if c.lastEvent[key] == reason+"\x00"+msg {
			c.mu.Unlock()
			return
		}
		c.lastEvent[key] = reason + "\x00" + msg
	} else {
		delete(c.lastEvent, key)
	}
	c.mu.Unlock()
	recordEvent(ctx, c.client, c.log, svc, corev1.EventSource{Component: ControllerComponent}, typ, reason, msg)
}

func recordEvent(ctx context.Context, client kubernetes.Interface, log *slog.Logger, svc *corev1.Service, src corev1.EventSource, typ, reason, msg string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", svc.Name, now.UnixNano()), Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name,
			UID: svc.UID, ResourceVersion: svc.ResourceVersion},
		Reason: reason, Message: msg, Source: src, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		ReportingController: src.Component, ReportingInstance: src.Host,
	}
	if _, err := client.CoreV1().Events(svc.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		log.Debug("recording event", "service", keyOf(svc), "reason", reason, "err", err)
	}
}
