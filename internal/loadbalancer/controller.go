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
	// byKey is the reverse. They are rebuilt from Service statuses at start
	// and kept ahead of the informer cache, which lags our own writes.
	owner map[netip.Addr]string
	byKey map[string]netip.Addr
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
		owner: map[netip.Addr]string{}, byKey: map[string]netip.Addr{}, lastEvent: map[string]string{},
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

// statusIP is the first IPv4 address of svc's load-balancer status.
func statusIP(svc *corev1.Service) netip.Addr {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && a.Is4() {
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
		ip := statusIP(svc)
		if !ip.IsValid() || !c.pool.Contains(ip) {
			continue
		}
		if _, taken := c.owner[ip]; taken {
			continue
		}
		c.owner[ip], c.byKey[keyOf(svc)] = keyOf(svc), ip
	}
	for _, svc := range svcs {
		c.loop.Add(keyOf(svc))
	}
}

func keyOf(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// requestedIP is the address a Service asks for: the first IPv4 address of
// MetalLB's annotation, else spec.loadBalancerIP. source names where it came
// from, for Events.
func requestedIP(svc *corev1.Service) (ip netip.Addr, source string, err error) {
	for _, ann := range requestAnnotations {
		v, ok := svc.Annotations[ann]
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		var v4 []netip.Addr
		for _, s := range strings.Split(v, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return netip.Addr{}, "annotation " + ann, fmt.Errorf("%q is not an IP address", strings.TrimSpace(s))
			}
			if a.Is4() {
				v4 = append(v4, a)
			}
		}
		switch len(v4) {
		case 0:
			return netip.Addr{}, "annotation " + ann, fmt.Errorf("%q has no IPv4 address (this cluster is IPv4)", v)
		case 1:
			return v4[0], "annotation " + ann, nil
		default:
			return netip.Addr{}, "annotation " + ann, fmt.Errorf("%q asks for %d IPv4 addresses; a Service gets one", v, len(v4))
		}
	}
	if s := strings.TrimSpace(svc.Spec.LoadBalancerIP); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, "spec.loadBalancerIP", fmt.Errorf("%q is not an IP address", s)
		}
		if !a.Is4() {
			return netip.Addr{}, "spec.loadBalancerIP", fmt.Errorf("%s is not an IPv4 address (this cluster is IPv4)", a)
		}
		return a, "spec.loadBalancerIP", nil
	}
	return netip.Addr{}, "", nil
}

// decision is what sync does for one Service: give it ip, or leave it
// pending (ip invalid) with a Warning saying why.
type decision struct {
	ip   netip.Addr
	why  string // set when pending
	note string // a Normal event to add, e.g. an address given up
}

// decide picks the address of an in-class Service. The caller holds c.mu.
func (c *Controller) decide(svc *corev1.Service) decision {
	key := keyOf(svc)
	if c.pool.Empty() {
		return decision{why: "no address pool is configured: start `minikit server` with --lb-pool " +
			"(a CIDR or FIRST-LAST range on the nodes' network), as MetalLB needs an IPAddressPool"}
	}
	req, source, err := requestedIP(svc)
	if err != nil {
		return decision{why: fmt.Sprintf("invalid %s: %v", source, err)}
	}
	if req.IsValid() {
		switch owner, taken := c.owner[req]; {
		case !c.pool.Contains(req):
			return decision{why: fmt.Sprintf("requested IP %s (%s) is not in the address pool %s", req, source, c.pool)}
		case taken && owner != key:
			return decision{why: fmt.Sprintf("requested IP %s (%s) is already in use by Service %s", req, source, owner)}
		}
		return decision{ip: req}
	}
	// Keep what the Service has, if it is still ours to give: first what we
	// last wrote (the cache may not show it yet), then its status.
	if ip, ok := c.byKey[key]; ok && c.pool.Contains(ip) {
		return decision{ip: ip}
	}
	var note string
	if cur := statusIP(svc); cur.IsValid() {
		owner, taken := c.owner[cur]
		switch {
		case !c.pool.Contains(cur):
			note = fmt.Sprintf("IP %s is not in the address pool %s any more; allocating another", cur, c.pool)
		case taken && owner != key:
			note = fmt.Sprintf("IP %s is also held by Service %s, which had it first; allocating another", cur, owner)
		default:
			return decision{ip: cur}
		}
	}
	ip, ok := c.pool.firstFree(func(a netip.Addr) bool { _, taken := c.owner[a]; return taken })
	if !ok {
		return decision{why: fmt.Sprintf("no available IPs: all %d addresses of the pool %s are in use", c.pool.Size(), c.pool), note: note}
	}
	return decision{ip: ip, note: note}
}

func (c *Controller) claim(key string, ip netip.Addr) {
	if old, ok := c.byKey[key]; ok && old != ip {
		delete(c.owner, old)
	}
	c.owner[ip], c.byKey[key] = key, ip
}

// release drops key's address; it reports whether there was one.
func (c *Controller) release(key string) (netip.Addr, bool) {
	ip, ok := c.byKey[key]
	if ok {
		delete(c.byKey, key)
		if c.owner[ip] == key {
			delete(c.owner, ip)
		}
	}
	return ip, ok
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		ip, had := c.release(key)
		delete(c.lastEvent, key)
		c.mu.Unlock()
		if had {
			c.log.Info("released address of deleted Service", "service", key, "ip", ip)
			c.requeuePending()
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(svc) {
		c.mu.Lock()
		ip, had := c.release(key)
		delete(c.lastEvent, key)
		// An address of our pool in another implementation's status is
		// held, never handed out twice.
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			if cur := statusIP(svc); c.pool.Contains(cur) {
				if _, taken := c.owner[cur]; !taken {
					c.claim(key, cur)
				}
			}
		}
		c.mu.Unlock()
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer || (!had && len(svc.Status.LoadBalancer.Ingress) == 0) {
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
		if had {
			c.log.Info("released address of Service no longer of type LoadBalancer", "service", key, "ip", ip)
			c.requeuePending()
		}
		return nil
	}

	c.mu.Lock()
	d := c.decide(svc)
	var released bool
	if d.ip.IsValid() {
		prev, had := c.byKey[key]
		released = had && prev != d.ip
		c.claim(key, d.ip)
	} else {
		_, released = c.release(key)
	}
	c.mu.Unlock()
	if released {
		c.requeuePending()
	}
	if d.note != "" {
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonIPAllocated, d.note)
	}

	if !d.ip.IsValid() {
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

	want := corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: d.ip.String(), IPMode: ptr(corev1.LoadBalancerIPModeVIP)}}}
	if statusEqual(svc.Status.LoadBalancer, want) {
		return nil
	}
	c.event(ctx, svc, corev1.EventTypeNormal, ReasonEnsuring, "Ensuring load balancer")
	cp := svc.DeepCopy()
	cp.Status.LoadBalancer = want
	if _, err := c.client.CoreV1().Services(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing load-balancer status of Service %q: %w", key, err)
	}
	if statusIP(svc) != d.ip {
		c.event(ctx, svc, corev1.EventTypeNormal, ReasonIPAllocated, fmt.Sprintf("Assigned IP [%q]", d.ip.String()))
	}
	c.event(ctx, svc, corev1.EventTypeNormal, ReasonEnsured, "Ensured load balancer")
	c.log.Info("assigned load-balancer address", "service", key, "ip", d.ip)
	return nil
}

// requeuePending queues the in-class Services without an address: one may
// now get the address just released.
func (c *Controller) requeuePending() {
	svcs, _ := c.services.List(labels.Everything())
	for _, svc := range svcs {
		if ours(svc) && !statusIP(svc).IsValid() {
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
