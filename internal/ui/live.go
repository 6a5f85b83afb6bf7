package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/informer"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/topology"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// live holds the lab's current graph, refreshes the parts that changed and
// tells the pages.
//
// Locking: mu guards graph, version, subs, fresh, collecting and again.
// Reads of the kernel and the API run without it: the pods' reads in run's
// goroutine, the whole lab's in collect's (one at a time); each takes mu
// only to merge what it read into the graph and notify.
type live struct {
	src      Source
	client   kubernetes.Interface
	gw       gwclient.Interface // nil: no Gateway API to watch
	debounce time.Duration
	log      *slog.Logger
	nodes    corelisters.NodeLister

	mu      sync.Mutex
	graph   *topology.Graph
	version uint64
	subs    map[chan []byte]struct{}
	// fresh holds when each host was last read alone (or removed): a
	// read of the whole lab that started before that keeps the host as
	// it is now.
	fresh map[string]time.Time
	// collecting says a read of the whole lab runs; again, that another
	// must follow it.
	collecting, again bool

	pmu     sync.Mutex
	pending dirty
	wake    chan struct{}
}

// dirty is what the events since the last refresh touched.
type dirty struct {
	full bool
	// hosts are re-read; a host whose value is false is gone (its Pod was
	// deleted) and only removed.
	hosts map[string]bool
}

func newLive(src Source, c kubernetes.Interface, debounce time.Duration, log *slog.Logger) *live {
	return &live{src: src, client: c, debounce: debounce, log: log, subs: map[chan []byte]struct{}{}, fresh: map[string]time.Time{},
		wake: make(chan struct{}, 1), pending: dirty{hosts: map[string]bool{}}}
}

// start reads the lab, then watches it.
func (l *live) start(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(l.client, 0)
	l.nodes = f.Core().V1().Nodes().Lister()
	full := func(any) { l.mark(func(d *dirty) { d.full = true }) }
	fullH := cache.ResourceEventHandlerFuncs{AddFunc: full, UpdateFunc: func(_, n any) { full(n) }, DeleteFunc: full}
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Nodes().Informer(), f.Core().V1().Services().Informer(),
		f.Discovery().V1().EndpointSlices().Informer(), f.Networking().V1().Ingresses().Informer()} {
		reg, err := inf.AddEventHandler(fullH)
		if err != nil {
			return fmt.Errorf("watching the lab: %w", err)
		}
		synced = append(synced, reg.HasSynced)
	}
	gwSynced, err := l.watchGateways(ctx, fullH)
	if err != nil {
		return err
	}
	synced = append(synced, gwSynced...)
	reg, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { l.pod(o, false) },
		UpdateFunc: func(_, n any) { l.pod(n, false) },
		DeleteFunc: func(o any) { l.pod(o, true) },
	})
	if err != nil {
		return fmt.Errorf("watching the lab: %w", err)
	}
	synced = append(synced, reg.HasSynced)
	f.Start(ctx.Done())
	// Until every handler has seen the initial lists (not only the
	// caches: handlers run behind them).
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("watching the lab: the API's lists did not arrive: %w", ctx.Err())
	}
	// The initial lists marked everything; the lab read now is newer. A
	// change after the lists is an event again.
	l.pmu.Lock()
	l.pending = dirty{hosts: map[string]bool{}}
	l.pmu.Unlock()
	g, err := l.src.Collect(ctx)
	if err != nil {
		return fmt.Errorf("reading the lab: %w", err)
	}
	l.set(g)
	go l.run(ctx)
	return nil
}

// watchGateways watches the Gateways and their routes as the Ingresses are
// watched: any change reads the whole lab again. Only the kinds the API
// serves are watched (an informer on a kind without its CRD would list in
// vain forever); a CRD installed after the page started is seen when the
// page is started again.
func (l *live) watchGateways(ctx context.Context, h cache.ResourceEventHandler) ([]cache.InformerSynced, error) {
	if l.gw == nil {
		return nil, nil
	}
	f := gwinformers.NewSharedInformerFactory(l.gw, 0)
	v1 := f.Gateway().V1()
	kinds := []struct {
		inf  func() cache.SharedIndexInformer
		list func() error
	}{
		{v1.Gateways().Informer, func() error {
			_, err := l.gw.GatewayV1().Gateways("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{v1.HTTPRoutes().Informer, func() error {
			_, err := l.gw.GatewayV1().HTTPRoutes("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{v1.GRPCRoutes().Informer, func() error {
			_, err := l.gw.GatewayV1().GRPCRoutes("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{v1.TLSRoutes().Informer, func() error {
			_, err := l.gw.GatewayV1().TLSRoutes("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
	}
	var synced []cache.InformerSynced
	for _, k := range kinds {
		err := k.list()
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("watching the lab's Gateways: %w", err)
		}
		reg, err := k.inf().AddEventHandler(h)
		if err != nil {
			return nil, fmt.Errorf("watching the lab's Gateways: %w", err)
		}
		synced = append(synced, reg.HasSynced)
	}
	f.Start(ctx.Done())
	return synced, nil
}

func (l *live) mark(fn func(*dirty)) {
	l.pmu.Lock()
	fn(&l.pending)
	l.pmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// pod marks a pod's namespace for a re-read, or its host for removal.
func (l *live) pod(obj any, deleted bool) {
	p, ok := informer.As[*corev1.Pod](obj)
	if !ok || p.Spec.HostNetwork || p.Spec.NodeName == "" {
		return
	}
	n, err := l.nodes.Get(p.Spec.NodeName)
	if err != nil {
		l.mark(func(d *dirty) { d.full = true })
		return
	}
	id, err := kubelet.PodSandboxName(n, p.UID)
	if err != nil {
		l.mark(func(d *dirty) { d.full = true })
		return
	}
	l.mark(func(d *dirty) {
		d.hosts[id] = !deleted
		// The node's side of the pod's veth (its bridge port) comes
		// with the next read of the whole lab.
		d.full = true
	})
}

// run refreshes what changed, debounced, until ctx ends.
func (l *live) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.debounce):
		}
		l.pmu.Lock()
		d := l.pending
		l.pending = dirty{hosts: map[string]bool{}}
		l.pmu.Unlock()
		l.refresh(ctx, d)
	}
}

// refresh brings the graph up to date in two steps, each sent to the pages
// as soon as it is done: first the pods that changed, each read alone
// (Source.ReadHost: the pod's namespace), so a new pod is drawn as soon as
// its namespace can be read; then, when anything else changed (a node, a
// Service, an EndpointSlice, an Ingress, or a node's side of a pod's veth),
// the whole lab (Source.Collect), in its own goroutine so that pods keep
// being drawn while it runs. Reading a node's host alone would read every
// pod on it again, which costs as much as reading the whole lab.
func (l *live) refresh(ctx context.Context, d dirty) {
	start := time.Now()
	var ids []string
	for id, read := range d.hosts {
		if read {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	type answer struct {
		h     topology.Host
		links []topology.Link
		err   error
	}
	answers := make([]answer, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			a := &answers[i]
			a.h, a.links, a.err = l.src.ReadHost(ctx, id)
		}()
	}
	wg.Wait()
	if len(d.hosts) > 0 {
		l.mu.Lock()
		g := clone(l.graph)
		now := time.Now()
		for id, read := range d.hosts {
			if !read {
				removeHost(g, id)
				l.fresh[id] = now
			}
		}
		for i, id := range ids {
			a := answers[i]
			if a.err != nil {
				if errors.Is(a.err, topology.ErrGone) || !netns.ExistsNamed(id) {
					removeHost(g, id)
					l.fresh[id] = now
					continue
				}
				l.log.Info("reading a lab host", "host", id, "err", a.err)
				continue
			}
			putHost(g, a.h, a.links)
			l.fresh[id] = now
		}
		n := l.setLocked(g)
		l.mu.Unlock()
		l.log.Debug("refreshed lab hosts", "hosts", len(ids), "changed", n, "duration", time.Since(start))
	}
	if !d.full {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.collecting {
		l.again = true
		return
	}
	l.collecting = true
	go l.collect(ctx)
}

// collect reads the whole lab, again while asked to, and sends the
// difference; hosts read alone after a read began keep their newer state.
func (l *live) collect(ctx context.Context) {
	for {
		start := time.Now()
		g, err := l.src.Collect(ctx)
		l.mu.Lock()
		if err != nil {
			l.log.Info("reading the lab", "err", err)
		} else {
			cur := l.graph
			for id, t := range l.fresh {
				if !t.After(start) {
					delete(l.fresh, id)
					continue
				}
				if i := slices.IndexFunc(cur.Hosts, func(h topology.Host) bool { return h.ID == id }); i >= 0 {
					var ls []topology.Link
					for _, k := range cur.Links {
						if hostOf(k.A) == id || hostOf(k.B) == id {
							ls = append(ls, k)
						}
					}
					putHost(g, cur.Hosts[i], ls)
				} else {
					removeHost(g, id)
				}
			}
			n := l.setLocked(g)
			l.log.Debug("refreshed the lab", "hosts", len(g.Hosts), "changed", n, "duration", time.Since(start))
		}
		if !l.again || ctx.Err() != nil {
			l.collecting = false
			l.mu.Unlock()
			return
		}
		l.again = false
		l.mu.Unlock()
	}
}

func clone(g *topology.Graph) *topology.Graph {
	c := *g
	c.Hosts = slices.Clone(g.Hosts)
	c.Links = slices.Clone(g.Links)
	return &c
}

// hostOf is the host ID of an interface ID (HOSTID/IFNAME).
func hostOf(iface string) string {
	if i := strings.LastIndexByte(iface, '/'); i >= 0 {
		return iface[:i]
	}
	return iface
}

// removeHost drops a host and every link with an end in it.
func removeHost(g *topology.Graph, id string) {
	g.Hosts = slices.DeleteFunc(g.Hosts, func(h topology.Host) bool { return h.ID == id })
	g.Links = slices.DeleteFunc(g.Links, func(k topology.Link) bool { return hostOf(k.A) == id || hostOf(k.B) == id })
}

// putHost replaces a host and the links with an end in it by those just read.
func putHost(g *topology.Graph, h topology.Host, links []topology.Link) {
	removeHost(g, h.ID)
	g.Hosts = append(g.Hosts, h)
	for _, k := range links {
		g.Links = slices.DeleteFunc(g.Links, func(o topology.Link) bool { return o.ID == k.ID })
		g.Links = append(g.Links, k)
	}
	slices.SortStableFunc(g.Hosts, func(a, b topology.Host) int { return strings.Compare(hostKey(a), hostKey(b)) })
	slices.SortFunc(g.Links, func(a, b topology.Link) int { return strings.Compare(a.ID, b.ID) })
}

// hostKey orders hosts as Graph.Hosts is documented: underlay, nodes,
// client, external, then pods by node, namespace and name.
func hostKey(h topology.Host) string {
	rank := map[string]string{topology.KindUnderlay: "0", topology.KindNode: "1", topology.KindClient: "2", topology.KindExternal: "3", topology.KindPod: "4"}[h.Kind]
	if rank == "" {
		rank = "5"
	}
	return rank + "\x00" + h.Node + "\x00" + h.Name + "\x00" + h.ID
}

// patch is the difference between two graphs, as the page applies it.
type patch struct {
	Version     uint64              `json:"version"`
	Hosts       []topology.Host     `json:"hosts,omitempty"`
	RemoveHosts []string            `json:"removeHosts,omitempty"`
	Links       []topology.Link     `json:"links,omitempty"`
	RemoveLinks []string            `json:"removeLinks,omitempty"`
	Services    *[]topology.Service `json:"services,omitempty"`
	Ingresses   *[]topology.Ingress `json:"ingresses,omitempty"`
	// Gateways and GatewayRoutes are sent together, both whole, when
	// either changed.
	Gateways      *[]topology.Gateway      `json:"gateways,omitempty"`
	GatewayRoutes *[]topology.GatewayRoute `json:"gatewayRoutes,omitempty"`
}

func (p *patch) empty() bool {
	return len(p.Hosts)+len(p.RemoveHosts)+len(p.Links)+len(p.RemoveLinks) == 0 && p.Services == nil && p.Ingresses == nil && p.Gateways == nil
}

// diff is what changed from a to b.
func diff(a, b *topology.Graph) patch {
	var p patch
	ah := map[string]*topology.Host{}
	for i := range a.Hosts {
		ah[a.Hosts[i].ID] = &a.Hosts[i]
	}
	bh := map[string]bool{}
	for i := range b.Hosts {
		h := &b.Hosts[i]
		bh[h.ID] = true
		if old, ok := ah[h.ID]; !ok || !reflect.DeepEqual(old, h) {
			p.Hosts = append(p.Hosts, *h)
		}
	}
	for _, h := range a.Hosts {
		if !bh[h.ID] {
			p.RemoveHosts = append(p.RemoveHosts, h.ID)
		}
	}
	al := map[string]topology.Link{}
	for _, k := range a.Links {
		al[k.ID] = k
	}
	bl := map[string]bool{}
	for _, k := range b.Links {
		bl[k.ID] = true
		if old, ok := al[k.ID]; !ok || old != k {
			p.Links = append(p.Links, k)
		}
	}
	for _, k := range a.Links {
		if !bl[k.ID] {
			p.RemoveLinks = append(p.RemoveLinks, k.ID)
		}
	}
	if !reflect.DeepEqual(a.Services, b.Services) {
		s := b.Services
		if s == nil {
			s = []topology.Service{}
		}
		p.Services = &s
	}
	if !reflect.DeepEqual(a.Ingresses, b.Ingresses) {
		s := b.Ingresses
		if s == nil {
			s = []topology.Ingress{}
		}
		p.Ingresses = &s
	}
	if !reflect.DeepEqual(a.Gateways, b.Gateways) || !reflect.DeepEqual(a.GatewayRoutes, b.GatewayRoutes) {
		gs, rs := b.Gateways, b.GatewayRoutes
		if gs == nil {
			gs = []topology.Gateway{}
		}
		if rs == nil {
			rs = []topology.GatewayRoute{}
		}
		p.Gateways, p.GatewayRoutes = &gs, &rs
	}
	return p
}

// set makes g the current graph and sends the pages what changed; it
// returns the number of hosts and links that did.
func (l *live) set(g *topology.Graph) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.setLocked(g)
}

func (l *live) setLocked(g *topology.Graph) int {
	if l.graph == nil {
		l.graph, l.version = g, 1
		return len(g.Hosts) + len(g.Links)
	}
	p := diff(l.graph, g)
	if p.empty() {
		return 0
	}
	l.version++
	p.Version = l.version
	l.graph = g
	b, _ := json.Marshal(p)
	for ch := range l.subs {
		select {
		case ch <- b:
		default:
			// A page that cannot keep up is closed; it reconnects and
			// gets the whole graph again.
			close(ch)
			delete(l.subs, ch)
		}
	}
	return len(p.Hosts) + len(p.RemoveHosts) + len(p.Links) + len(p.RemoveLinks)
}

func (l *live) snapshot() (*topology.Graph, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.graph, l.version
}

// subscribe returns the current graph and a channel of the patches after
// it; cancel ends the subscription.
func (l *live) subscribe() (*topology.Graph, uint64, <-chan []byte, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan []byte, 64)
	l.subs[ch] = struct{}{}
	return l.graph, l.version, ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.subs[ch]; ok {
			delete(l.subs, ch)
			close(ch)
		}
	}
}

// serveEvents is the page's live feed (Server-Sent Events): "graph" with
// the whole graph first, then a "patch" per change.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	g, version, ch, cancel := s.live.subscribe()
	defer cancel()
	if g == nil {
		http.Error(w, "the lab has not been read yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	b, err := json.Marshal(struct {
		Version uint64          `json:"version"`
		Graph   *topology.Graph `json:"graph"`
	}{version, g})
	if err != nil {
		s.log.Info("encoding the graph", "err", err)
		return
	}
	fmt.Fprintf(w, "event: graph\ndata: %s\n\n", b)
	fl.Flush()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
		case b, ok := <-ch:
			if !ok {
				return
			}
			fmt.Fprintf(w, "event: patch\ndata: %s\n\n", b)
		}
		fl.Flush()
	}
}
