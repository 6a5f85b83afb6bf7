// Package controllers owns the control loops of a minikit cluster: the
// Deployment controller (template revisions -> ReplicaSets, rolling updates,
// history, status), the ReplicaSet and ReplicationController controller
// (replicas -> Pods), the scheduler (unbound Pods -> Nodes), the endpoints controller (Service
// selector x Pods -> Endpoints and EndpointSlices), EndpointSlice mirroring
// (hand-written Endpoints of selector-less Services -> EndpointSlices), the
// ServiceCIDR controller (finalizer and Ready condition), node IPAM (a podCIDR per
// Node) and the garbage collector (cascading deletion of every kind the API
// serves, custom resources included: background, foreground and orphan).
//
// Every loop is level-triggered, as Kubernetes' controllers are: informer
// events only put a key on a rate-limited workqueue, and the sync for that key
// computes the whole desired state from the informer caches and writes the
// difference through the API. Nothing is remembered across restarts: a fresh
// Controllers re-lists everything and converges again. The little in-memory
// state there is (expectations of pods being created, objects just written
// that the cache has not caught up with, pods the scheduler has just bound)
// only guards against acting twice on a stale cache, and expires by itself.
//
// The package talks to the cluster only through kubernetes.Interface and, for
// the garbage collector, which handles kinds it has no types for, a
// metadata.Interface; it never imports the API server or the store.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/ctrlloop"
	"github.com/minikit/minikit/internal/informer"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config configures the loops. Zero values mean the defaults.
type Config struct {
	// PodCIDR is the cluster pod network that node IPAM carves node ranges
	// from (default 10.244.0.0/16).
	PodCIDR netip.Prefix
	// NodeCIDRMaskSize is the prefix length of each node's range (default 24).
	NodeCIDRMaskSize int
	// SecondaryPodCIDR, of the other IP family, gives every node a second
	// range (dual-stack), of SecondaryNodeCIDRMaskSize bits (default 24 for
	// IPv4, 64 for IPv6, as kube-controller-manager's per-family sizes).
	SecondaryPodCIDR          netip.Prefix
	SecondaryNodeCIDRMaskSize int
	// RootCA is the PEM CA bundle published in every namespace's
	// kube-root-ca.crt ConfigMap (empty when the API serves plain HTTP).
	RootCA []byte
	// Workers is the number of workers of the deployment, endpoints and
	// garbage collection loops (default 2). The scheduler and node IPAM always
	// run one worker: their decisions depend on each other's results.
	Workers int
	// Metadata is the garbage collector's client for the metadata of every
	// resource (NewMetadataClient). Without one the collector does not run.
	Metadata metadata.Interface
}

func (o Config) withDefaults() Config {
	if !o.PodCIDR.IsValid() {
		o.PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	o.PodCIDR = o.PodCIDR.Masked()
	if o.NodeCIDRMaskSize == 0 {
		o.NodeCIDRMaskSize = 24
		if o.PodCIDR.Addr().Is6() {
			o.NodeCIDRMaskSize = 64
		}
	}
	if o.SecondaryPodCIDR.IsValid() {
		o.SecondaryPodCIDR = o.SecondaryPodCIDR.Masked()
		if o.SecondaryNodeCIDRMaskSize == 0 {
			o.SecondaryNodeCIDRMaskSize = 24
			if o.SecondaryPodCIDR.Addr().Is6() {
				o.SecondaryNodeCIDRMaskSize = 64
			}
		}
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	return o
}

// Controllers runs all the loops over one shared set of informers.
type Controllers struct {
	client kubernetes.Interface
	log    *slog.Logger
	opts   Config
	now    func() time.Time

	factory     informers.SharedInformerFactory
	podInf      cache.SharedIndexInformer
	pods        corelisters.PodLister
	nodes       corelisters.NodeLister
	services    corelisters.ServiceLister
	endpoints   corelisters.EndpointsLister
	slices      discoverylisters.EndpointSliceLister
	deployments appslisters.DeploymentLister
	replicaSets appslisters.ReplicaSetLister
	rcs         corelisters.ReplicationControllerLister
	synced      []cache.InformerSynced

	loops []*loop
	dc    *deploymentController
	rsc   *replicaSetController
	rcc   *replicaSetController
	sched *scheduler
	ec    *endpointsController
	ipam  *nodeIPAM
	gc    *collector
	nl    *nodeLifecycle
	sa    *serviceAccounts
	scc   *serviceCIDRController

	startOnce sync.Once
	ready     chan struct{}
}

// Index of pods by the UID of their controller, for the deployment
// controller and the garbage collector.
const byControllerUID = "controllerUID"

// New builds the loops and registers their informer handlers. Nothing runs
// until Run.
func New(client kubernetes.Interface, log *slog.Logger, opts Config) *Controllers {
	if log == nil {
		log = slog.Default()
	}
	c := &Controllers{
		client: client,
		log:    log.With("component", "controllers"),
		opts:   opts.withDefaults(),
		now:    time.Now,
		ready:  make(chan struct{}),
	}
	c.factory = informers.NewSharedInformerFactory(client, 0)
	c.podInf = c.factory.Core().V1().Pods().Informer()
	_ = c.podInf.AddIndexers(cache.Indexers{byControllerUID: func(obj any) ([]string, error) {
		if ref := metav1.GetControllerOf(obj.(metav1.Object)); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return nil, nil
	}})
	c.pods = c.factory.Core().V1().Pods().Lister()
	c.nodes = c.factory.Core().V1().Nodes().Lister()
	c.services = c.factory.Core().V1().Services().Lister()
	c.endpoints = c.factory.Core().V1().Endpoints().Lister()
	c.slices = c.factory.Discovery().V1().EndpointSlices().Lister()
	c.deployments = c.factory.Apps().V1().Deployments().Lister()
	c.replicaSets = c.factory.Apps().V1().ReplicaSets().Lister()
	c.rcs = c.factory.Core().V1().ReplicationControllers().Lister()
	for _, inf := range []cache.SharedIndexInformer{
		c.podInf,
		c.factory.Core().V1().Nodes().Informer(),
		c.factory.Core().V1().Services().Informer(),
		c.factory.Core().V1().Endpoints().Informer(),
		c.factory.Discovery().V1().EndpointSlices().Informer(),
		c.factory.Apps().V1().Deployments().Informer(),
		c.factory.Apps().V1().ReplicaSets().Informer(),
		c.factory.Core().V1().ReplicationControllers().Informer(),
	} {
		c.synced = append(c.synced, inf.HasSynced)
	}

	c.dc = newDeploymentController(c)
	c.rsc = newReplicaSetController(c)
	c.rcc = newReplicationController(c)
	c.sched = newScheduler(c)
	c.ec = newEndpointsController(c)
	newMirroringController(c)
	c.scc = newServiceCIDRController(c)
	c.ipam = newNodeIPAM(c)
	if c.opts.Metadata != nil {
		c.gc = newCollector(c)
	}
	c.nl = newNodeLifecycle(c)
	newJobController(c)
	newDaemonSetController(c)
	newStatefulSetController(c)
	c.sa = newServiceAccounts(c)
	return c
}

// Ready is closed once the caches have synced and every loop is running.
func (c *Controllers) Ready() <-chan struct{} { return c.ready }

// Run starts the informers, waits for their caches and runs every loop until
// ctx is done. It returns nil after a clean shutdown.
func (c *Controllers) Run(ctx context.Context) error {
	started := false
	c.startOnce.Do(func() { started = true })
	if !started {
		return errors.New("controllers: Run called twice")
	}
	if err := c.ipam.check(); err != nil {
		return fmt.Errorf("controllers: %w", err)
	}
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("controllers: informer caches did not sync")
	}
	if c.gc != nil {
		c.gc.start(ctx)
		defer c.gc.wait()
	} else {
		c.log.Warn("garbage collector not running: no metadata client")
	}
	for _, l := range c.loops {
		l.Start(ctx)
	}
	go c.nl.run(ctx)
	c.log.Info("controllers running", "loops", len(c.loops), "podCIDR", c.opts.PodCIDR, "nodeMaskSize", c.opts.NodeCIDRMaskSize)
	close(c.ready)
	<-ctx.Done()
	for _, l := range c.loops {
		l.ShutDown()
	}
	for _, l := range c.loops {
		l.Wait()
	}
	return nil
}

// errStale means the cache has not yet caught up with one of our own writes;
// the key is retried with backoff without logging an error.
var errStale = errors.New("cache is older than our last write")

// loop is one of the controllers' work queues (a ctrlloop.Loop), with the
// names the controllers' code uses for its queue and logger.
type loop struct {
	*ctrlloop.Loop
	queue workqueue.TypedRateLimitingInterface[string]
	log   *slog.Logger
}

func (c *Controllers) newLoop(name string, workers int, sync func(context.Context, string) error) *loop {
	log := c.log.With("loop", name)
	l := ctrlloop.New(ctrlloop.Config{
		Name: name, Workers: workers, Sync: sync, Logger: log,
		Expected: func(err error) bool { return errors.Is(err, errStale) || apierrors.IsConflict(err) },
	})
	lp := &loop{Loop: l, queue: l.Queue, log: log}
	c.loops = append(c.loops, lp)
	return lp
}

func (l *loop) add(key string) { l.Add(key) }

// handlers adapts plain functions to informer event handlers; deletions
// arrive with tombstones unwrapped.
func handlers(add func(obj any), update func(old, cur any), del func(obj any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: update,
		DeleteFunc: func(obj any) { del(informer.Object(obj)) },
	}
}

func keyOf(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// freshness remembers the resourceVersions of our own writes so a sync does
// not act on a cached object older than what we wrote (which would create a
// second object, or conflict on every retry). Entries go away once the cache
// has caught up, when the object's deletion is seen, or after
// freshnessTimeout, in case the cache never shows the state we wrote (the
// object was written again and deleted before a re-list).
type freshness struct {
	mu      sync.Mutex
	written map[string]written
}

type written struct {
	rv int64 // resourceVersion written; gone = deleted
	at time.Time
}

const (
	gone             = -1
	freshnessTimeout = 30 * time.Second
)

func newFreshness() *freshness { return &freshness{written: map[string]written{}} }

func (f *freshness) wrote(key string, obj metav1.Object) {
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return // an opaque resourceVersion: rely on conflicts instead
	}
	f.mu.Lock()
	f.written[key] = written{rv: rv, at: time.Now()}
	f.mu.Unlock()
}

func (f *freshness) deleted(key string) {
	f.mu.Lock()
	f.written[key] = written{rv: gone, at: time.Now()}
	f.mu.Unlock()
}

// stale reports whether cached (nil when absent from the cache) is older
// than our last write of key.
func (f *freshness) stale(key string, cached metav1.Object) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.written[key]
	if !ok {
		return false
	}
	if time.Since(w.at) > freshnessTimeout {
		delete(f.written, key)
		return false
	}
	if w.rv == gone {
		if cached != nil {
			return true
		}
		delete(f.written, key)
		return false
	}
	if cached == nil {
		return true // created, not yet seen
	}
	rv, err := strconv.ParseInt(cached.GetResourceVersion(), 10, 64)
	if err != nil || rv >= w.rv {
		delete(f.written, key)
		return false
	}
	return true
}

// forget drops what is known about key, when its deletion is seen.
func (f *freshness) forget(key string) {
	f.mu.Lock()
	delete(f.written, key)
	f.mu.Unlock()
}

// recordEvent writes a core/v1 Event about obj, as kubectl describe shows
// them. Failures are logged only: events are best effort, as in Kubernetes.
func (c *Controllers) recordEvent(ctx context.Context, component string, obj metav1.Object, kind, apiVersion, typ, reason, msg string) {
	now := metav1.NewTime(c.now())
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", obj.GetName(), now.UnixNano()),
			Namespace: ns,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: kind, APIVersion: apiVersion, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		},
		Reason:              reason,
		Message:             msg,
		Source:              corev1.EventSource{Component: component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                typ,
		ReportingController: component,
	}
	if _, err := c.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		c.log.Debug("recording event", "object", keyOf(obj), "reason", reason, "err", err)
	}
}
