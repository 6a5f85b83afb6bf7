package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/informer"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// SpeakerComponent is the source of the announcers' Events.
const SpeakerComponent = "minikit-speaker"

// ReasonNodeAssigned is MetalLB's Event reason when a node starts announcing
// a Service's address.
const ReasonNodeAssigned = "nodeAssigned"

// Responder answers for load-balancer addresses on the node's network. The
// real one answers ARP for the IPv4 addresses (ARPResponder) and NDP for the
// IPv6 ones (NDPResponder).
type Responder interface {
	// Set makes the responder answer for exactly ips, announcing the new
	// ones (gratuitous ARP, unsolicited neighbour advertisements). After an
	// error it is called again with the same addresses.
	Set(ips []netip.Addr) error
	Close() error
}

// AnnouncerConfig configures a node's Announcer.
type AnnouncerConfig struct {
	Client   kubernetes.Interface
	NodeName string
	// NodeIP is the node's InternalIP; the responder listens on the interface
	// that holds it.
	NodeIP netip.Addr
	Logger *slog.Logger
	// OpenResponder opens the responder for the interface holding NodeIP and
	// returns it with the interface's name (default: ARP and NDP, in this
	// process's network namespace).
	OpenResponder func(nodeIP netip.Addr, log *slog.Logger) (Responder, string, error)
	// RenewInterval and LeaseDuration tune liveness (defaults 1 s and 3 s);
	// Resync is how often the election is recomputed with no event (default
	// 250 ms): a lease that stops changing produces no event.
	RenewInterval, LeaseDuration, Resync time.Duration
}

func openLayer2(nodeIP netip.Addr, log *slog.Logger) (Responder, string, error) {
	ifname, err := InterfaceWith(nodeIP)
	if err != nil {
		return nil, "", fmt.Errorf("finding the interface of node IP %s: %w", nodeIP, err)
	}
	r, err := ListenARP(ifname, log)
	if err != nil {
		return nil, "", err
	}
	return &layer2{ifname: ifname, log: log, arp: r}, ifname, nil
}

// layer2 answers for IPv4 addresses by ARP and for IPv6 ones by NDP, on the
// interface holding the node's InternalIP, as MetalLB's speaker does on one
// interface for both families. The NDP socket is opened when the first IPv6
// address comes, so an IPv4-only node (or one with IPv6 disabled) needs
// none; until it opens (a link-local address still tentative) Set fails and
// the announcer retries. It is opened in the calling thread's network
// namespace: the speaker runs in a node process that lives wholly in the
// node's namespace.
type layer2 struct {
	ifname string
	log    *slog.Logger
	arp    *ARPResponder
	ndp    *NDPResponder
}

func (l *layer2) Set(ips []netip.Addr) error {
	var v4, v6 []netip.Addr
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	errs := []error{l.arp.Set(v4)}
	if len(v6) > 0 && l.ndp == nil {
		r, err := ListenNDP(l.ifname, l.log)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		l.ndp = r
		l.log.Info("load-balancer speaker answering NDP", "interface", l.ifname)
	}
	if l.ndp != nil {
		errs = append(errs, l.ndp.Set(v6))
	}
	return errors.Join(errs...)
}

func (l *layer2) Close() error {
	errs := []error{l.arp.Close()}
	if l.ndp != nil {
		errs = append(errs, l.ndp.Close())
	}
	return errors.Join(errs...)
}

// Announcer is a node's speaker: it renews the node's lease, elects, for each
// load-balancer address, the node that announces it, and makes its responder
// answer for the addresses this node won.
type Announcer struct {
	cfg  AnnouncerConfig
	log  *slog.Logger
	live *liveness

	factory   informers.SharedInformerFactory
	leaseFact informers.SharedInformerFactory
	services  corelisters.ServiceLister
	nodes     corelisters.NodeLister
	slices    discoverylisters.EndpointSliceLister
	synced    []cache.InformerSynced
	kick      chan struct{}

	mu        sync.Mutex
	announced map[netip.Addr]string // address -> Service key
	ifname    string
	seenSelf  bool // own lease seen at least once
	frozen    bool
	setErr    string // the responder's last Set error, logged once

	// crashOnStop leaves the lease behind on stop, as a crash does (tests).
	crashOnStop bool
}

// NewAnnouncer builds an Announcer; Run starts it.
func NewAnnouncer(cfg AnnouncerConfig) (*Announcer, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("load-balancer announcer needs a client and a node name")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OpenResponder == nil {
		cfg.OpenResponder = openLayer2
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = DefaultRenewInterval
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 250 * time.Millisecond
	}
	a := &Announcer{
		cfg: cfg, log: cfg.Logger.With("component", "lb-speaker", "node", cfg.NodeName),
		live: newLiveness(cfg.NodeName, cfg.LeaseDuration, time.Now), kick: make(chan struct{}, 1),
		announced: map[netip.Addr]string{},
	}
	a.factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	a.leaseFact = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(LeaseNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = leaseLabel + "=" + leaseLabelValue }))
	kick := informer.OnChange(a.trigger)
	svcInf := a.factory.Core().V1().Services()
	nodeInf := a.factory.Core().V1().Nodes()
	sliceInf := a.factory.Discovery().V1().EndpointSlices()
	leaseInf := a.leaseFact.Core().V1().ConfigMaps()
	a.services, a.nodes, a.slices = svcInf.Lister(), nodeInf.Lister(), sliceInf.Lister()
	for _, inf := range []cache.SharedIndexInformer{svcInf.Informer(), nodeInf.Informer(), sliceInf.Informer()} {
		inf.AddEventHandler(kick)
		a.synced = append(a.synced, inf.HasSynced)
	}
	leaseInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withConfigMap(o, a.live.observe); a.trigger() },
		UpdateFunc: func(_, o any) { withConfigMap(o, a.live.observe); a.trigger() },
		DeleteFunc: func(o any) { withConfigMap(o, a.live.forget); a.trigger() },
	})
	a.synced = append(a.synced, leaseInf.Informer().HasSynced)
	return a, nil
}

func withConfigMap(o any, f func(*corev1.ConfigMap)) {
	if cm, ok := informer.As[*corev1.ConfigMap](o); ok {
		f(cm)
	}
}

func (a *Announcer) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run renews the lease and announces until ctx ends; then it stops
// answering and deletes the lease, so the peers take over at once.
func (a *Announcer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); a.renew(ctx) }()
	a.factory.Start(ctx.Done())
	a.leaseFact.Start(ctx.Done())
	defer a.factory.Shutdown()
	defer a.leaseFact.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return nil
	}
	var resp Responder
	defer func() {
		if resp != nil {
			resp.Close()
		}
	}()
	t := time.NewTicker(a.cfg.Resync)
	defer t.Stop()
	var openErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		case <-t.C:
		}
		if resp == nil {
			r, ifname, err := a.cfg.OpenResponder(a.cfg.NodeIP, a.log)
			if err != nil {
				if err.Error() != openErr {
					a.log.Warn("cannot answer for load-balancer addresses yet; retrying", "err", err)
					openErr = err.Error()
				}
				continue
			}
			resp = r
			a.mu.Lock()
			a.ifname = ifname
			a.mu.Unlock()
			a.log.Info("load-balancer speaker answering", "interface", ifname, "nodeIP", a.cfg.NodeIP)
		}
		a.reconcile(ctx, resp)
	}
}

func (a *Announcer) renew(ctx context.Context) {
	defer func() {
		if a.crashOnStop {
			return
		}
		if err := releaseLease(a.cfg.Client, a.cfg.NodeName); err != nil {
			a.log.Debug("releasing lease", "err", err)
		}
	}()
	t := time.NewTicker(a.cfg.RenewInterval)
	defer t.Stop()
	failing := false
	for {
		err := renewLease(ctx, a.cfg.Client, a.cfg.NodeName, a.cfg.LeaseDuration, time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			a.log.Warn("lease not renewed", "err", err)
			failing = true
		case err == nil && failing:
			a.log.Info("lease renewed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// desired computes the addresses this node should answer for, by Service.
// A Service's addresses (one of each family on a dual-stack Service) are
// announced by one node, elected by the first of them, as MetalLB does, so
// both families of a Service reach it through the same node.
func (a *Announcer) desired(alive func(node string) bool) (map[netip.Addr]*corev1.Service, error) {
	svcs, err := a.services.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(svcs, func(i, j int) bool { return keyOf(svcs[i]) < keyOf(svcs[j]) })
	want := map[netip.Addr]*corev1.Service{}
	for _, svc := range svcs {
		if !ours(svc) {
			continue
		}
		var ips []netip.Addr
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			ip, err := netip.ParseAddr(ing.IP)
			if err != nil || plainAddr(ip) != nil || (ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy) {
				continue
			}
			if _, dup := want[ip]; !dup && !slices.Contains(ips, ip) {
				ips = append(ips, ip)
			}
		}
		if len(ips) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
		eps, err := a.slices.EndpointSlices(svc.Namespace).List(sel)
		if err != nil {
			return nil, err
		}
		if Elect(ips[0], Candidates(svc, nodes, eps, alive)) != a.cfg.NodeName {
			continue
		}
		for _, ip := range ips {
			want[ip] = svc
		}
	}
	return want, nil
}

// resolution is the protocol neighbours resolve ip's MAC address with.
func resolution(ip netip.Addr) string {
	if ip.Is4() {
		return "ARP"
	}
	return "NDP"
}

func (a *Announcer) reconcile(ctx context.Context, resp Responder) {
	alive := a.live.at(a.live.now())
	if !alive(a.cfg.NodeName) {
		// Our own renewals are not coming back: our view of the peers is
		// stale. Keep answering for what we have until we see ourselves.
		a.mu.Lock()
		if a.seenSelf && !a.frozen {
			a.log.Warn("own lease not seen for the lease duration: keeping current announcements until the API is reachable", "announced", len(a.announced))
			a.frozen = true
		}
		a.mu.Unlock()
		return
	}
	want, err := a.desired(alive)
	if err != nil {
		a.log.Warn("computing announcements", "err", err)
		return
	}
	a.mu.Lock()
	if a.frozen {
		a.log.Info("own lease seen again: announcing from the current view")
		a.frozen = false
	}
	a.seenSelf = true
	var added []*corev1.Service
	var addedIPs, removed []netip.Addr
	for ip, svc := range want {
		if _, ok := a.announced[ip]; !ok {
			added, addedIPs = append(added, svc), append(addedIPs, ip)
		}
	}
	for ip := range a.announced {
		if _, ok := want[ip]; !ok {
			removed = append(removed, ip)
		}
	}
	changed := len(added)+len(removed) > 0
	ifname := a.ifname
	a.mu.Unlock()
	if !changed {
		return
	}
	ips := make([]netip.Addr, 0, len(want))
	next := map[netip.Addr]string{}
	for ip, svc := range want {
		ips = append(ips, ip)
		next[ip] = keyOf(svc)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	if err := resp.Set(ips); err != nil {
		// Nothing is recorded as announced: the next resync tries again.
		a.mu.Lock()
		if err.Error() != a.setErr {
			a.log.Warn("announcing load-balancer addresses; retrying", "err", err)
			a.setErr = err.Error()
		}
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.announced = next
	a.setErr = ""
	a.mu.Unlock()
	for _, ip := range removed {
		a.log.Info("stopped announcing load-balancer address", "ip", ip)
	}
	for i, svc := range added {
		a.log.Info("announcing load-balancer address", "ip", addedIPs[i], "service", keyOf(svc), "interface", ifname)
		recordEvent(ctx, a.cfg.Client, a.log, svc, corev1.EventSource{Component: SpeakerComponent, Host: a.cfg.NodeName},
			corev1.EventTypeNormal, ReasonNodeAssigned,
			fmt.Sprintf("announcing %s from node %q with protocol %q (%s on %s)", addedIPs[i], a.cfg.NodeName, "layer2", resolution(addedIPs[i]), ifname))
	}
}
