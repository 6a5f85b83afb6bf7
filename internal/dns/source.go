package dns

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Objects are what the zone is computed from.
type Objects struct {
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Namespaces     []*corev1.Namespace
	Pods           []*corev1.Pod // only read in verified pod mode and for autopath
}

// Source is the server's view of the cluster. Run calls changed after every
// change and once when the first complete list is in (Synced turns true).
type Source interface {
	Run(ctx context.Context, changed func())
	Synced() bool
	Objects() Objects
}

// StaticSource serves objects set by hand: tests and benchmarks.
type StaticSource struct {
	mu      sync.Mutex
	objs    Objects
	synced  bool
	changed func()
	started chan struct{}
}

// NewStaticSource returns a source holding o, synced when synced is true.
func NewStaticSource(o Objects, synced bool) *StaticSource {
	return &StaticSource{objs: o, synced: synced, started: make(chan struct{})}
}

// Set replaces the objects and marks the source synced.
func (s *StaticSource) Set(o Objects) {
	s.mu.Lock()
	s.objs, s.synced = o, true
	ch := s.changed
	s.mu.Unlock()
	if ch != nil {
		ch()
	}
}

// Run reports one change at once, and one after every Set, until ctx ends.
func (s *StaticSource) Run(ctx context.Context, changed func()) {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	changed()
	<-ctx.Done()
}

// Synced is what NewStaticSource was given, true after a Set.
func (s *StaticSource) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Objects returns the objects last set.
func (s *StaticSource) Objects() Objects {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objs
}

// InformerSource watches the API with client-go informers: Services,
// EndpointSlices (discovery/v1), Namespaces, and Pods when asked for. It is
// built on REST clients rather than a clientset so that a process running
// only the DNS server links two API groups, not all of them (the clientset's
// init alone costs a DNS-only process half its memory).
type InformerSource struct {
	svcs       cache.SharedIndexInformer
	slices     cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	pods       cache.SharedIndexInformer
	mu         sync.Mutex
	synced     bool
}

// NewInformerSource watches through core (the core/v1 REST client, for
// example clientset.CoreV1().RESTClient()) and discovery (discovery.k8s.io/v1);
// pods adds a Pod informer (verified pod mode).
func NewInformerSource(core, discovery rest.Interface, pods bool) *InformerSource {
	inf := func(c rest.Interface, resource string, obj runtime.Object) cache.SharedIndexInformer {
		i := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(c, resource, metav1.NamespaceAll, fields.Everything()),
			obj, 0, cache.Indexers{})
		// The zone needs little of each object: dropping managed fields and
		// annotations keeps the caches (most of our memory) small.
		_ = i.SetTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
				m.SetAnnotations(nil)
			}
			if p, ok := obj.(*corev1.Pod); ok {
				p.Spec = corev1.PodSpec{}
				p.Status = corev1.PodStatus{PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs, Phase: p.Status.Phase}
			}
			return obj, nil
		})
		return i
	}
	s := &InformerSource{
		svcs:       inf(core, "services", &corev1.Service{}),
		slices:     inf(discovery, "endpointslices", &discoveryv1.EndpointSlice{}),
		namespaces: inf(core, "namespaces", &corev1.Namespace{}),
	}
	if pods {
		s.pods = inf(core, "pods", &corev1.Pod{})
	}
	return s
}

// RESTClients makes the two REST clients NewInformerSource needs from a
// client configuration, with a scheme of just those API groups.
func RESTClients(cfg *rest.Config) (core, discovery rest.Interface, err error) {
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, nil, err
	}
	if err := discoveryv1.AddToScheme(sch); err != nil {
		return nil, nil, err
	}
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	mk := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, codecs
		if c.UserAgent == "" {
			c.UserAgent = "minikit-dns"
		}
		return rest.RESTClientFor(c)
	}
	if core, err = mk(corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, nil, err
	}
	if discovery, err = mk(discoveryv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, nil, err
	}
	return core, discovery, nil
}

func (s *InformerSource) informers() []cache.SharedIndexInformer {
	infs := []cache.SharedIndexInformer{s.svcs, s.slices, s.namespaces}
	if s.pods != nil {
		infs = append(infs, s.pods)
	}
	return infs
}

// Run starts the informers and calls changed on every event and once they
// have all synced, until ctx ends.
func (s *InformerSource) Run(ctx context.Context, changed func()) {
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	var syncs []cache.InformerSynced
	for _, inf := range s.informers() {
		_, _ = inf.AddEventHandler(h)
		syncs = append(syncs, inf.HasSynced)
		go inf.RunWithContext(ctx)
	}
	if cache.WaitForCacheSync(ctx.Done(), syncs...) {
		s.mu.Lock()
		s.synced = true
		s.mu.Unlock()
		changed()
	}
	<-ctx.Done()
}

// Synced says whether every informer has its first complete list.
func (s *InformerSource) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Objects lists the informers' caches.
func (s *InformerSource) Objects() Objects {
	var o Objects
	for _, x := range s.svcs.GetStore().List() {
		o.Services = append(o.Services, x.(*corev1.Service))
	}
	for _, x := range s.slices.GetStore().List() {
		o.EndpointSlices = append(o.EndpointSlices, x.(*discoveryv1.EndpointSlice))
	}
	for _, x := range s.namespaces.GetStore().List() {
		o.Namespaces = append(o.Namespaces, x.(*corev1.Namespace))
	}
	if s.pods != nil {
		for _, x := range s.pods.GetStore().List() {
			o.Pods = append(o.Pods, x.(*corev1.Pod))
		}
	}
	return o
}
