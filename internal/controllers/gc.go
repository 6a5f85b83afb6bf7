package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/informer"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
)

// The garbage collector carries out cascading deletion for every kind the
// API serves, built-in or custom, as Kubernetes' garbage collector
// (pkg/controller/garbagecollector) does:
//
//   - Background: an object all of whose owners are gone is deleted, so a
//     custom resource takes the Deployment it owns with it, and that
//     Deployment its ReplicaSets and Pods.
//   - Foreground: an owner carrying the foregroundDeletion finalizer (the
//     API server adds it) has its dependents deleted, and the finalizer is
//     removed once no dependent that blocks its deletion
//     (blockOwnerDeletion) is left.
//   - Orphan: an owner carrying the orphan finalizer has its references
//     removed from its dependents, then the finalizer. (Our API server
//     orphans in the deleting transaction itself and does not add the
//     finalizer; an object created with it is handled here.)
//
// What the collector watches comes from discovery: every resource that
// supports list, watch and delete gets a metadata-only informer (client-go's
// metadatainformer), started and stopped as discovery changes. Discovery is
// read again every discoveryPeriod and whenever a CustomResourceDefinition
// changes, so a CRD established after the start is watched within moments,
// and the informers of a deleted one stop. Upstream keeps a separate graph of
// nodes keyed by UID; ours is the informer caches themselves, indexed by
// UID and by owner UID, which give the same two questions — "who are X's
// dependents" and "is X there" — without a second copy to keep consistent.
// An owner the caches do not hold (not yet seen: upstream's virtual node) is
// looked up with a live GET by the apiVersion, kind and name its reference
// names, through a RESTMapper built from the same discovery, and counts as
// gone unless that finds it with the reference's UID — so a Deployment
// deleted and re-created under the same name does not keep the old one's
// pods, and a reference with a wrong UID does not keep anything.
//
// An owner reference of a kind discovery does not know is unresolvable: its
// object is never collected (it is looked at again when discovery changes),
// unless the kind was served and went away while the collector watched (its
// CRD was deleted, and with it every object of the kind).
// A namespaced owner is looked up in its dependent's namespace; one
// referenced from a cluster-scoped dependent is invalid, as upstream says:
// the dependent is left alone and an OwnerRefInvalidNamespace warning Event
// is recorded.

const (
	// discoveryPeriod is how often discovery is read again when no CRD
	// event asks for it sooner.
	discoveryPeriod = 10 * time.Second
	byUID           = "uid"
	byOwnerUID      = "ownerUID"
	crdGroup        = "apiextensions.k8s.io"
)

// ignoredResources are never watched: events, as upstream's collector
// ignores them (many, and never owners), and extensions/v1beta1 ingresses,
// which are the networking.k8s.io ingresses again under the group old
// kubectl asks for.
var ignoredResources = map[schema.GroupResource]bool{
	{Group: "", Resource: "events"}:              true,
	{Group: "events.k8s.io", Resource: "events"}: true,
	{Group: "extensions", Resource: "ingresses"}: true,
}

type collector struct {
	c     *Controllers
	loop  *loop
	md    metadata.Interface
	disco discovery.DiscoveryInterface

	// poke asks the discovery loop to read discovery again now.
	poke chan struct{}

	mu       sync.RWMutex // guards monitors and mapper
	monitors map[schema.GroupResource]*monitor
	mapper   meta.RESTMapper
	// removed are the kinds whose resource discovery dropped while we
	// watched it (a deleted CRD): no object of theirs is left, so a
	// reference to one names an owner that is gone, not an unknown kind.
	removed map[schema.GroupKind]bool
	wg      sync.WaitGroup // run and the monitors' informers

	warnedMu sync.Mutex
	warned   map[string]bool // OwnerRefInvalidNamespace events sent, by dependent and owner UID
}

// monitor is the metadata informer of one resource.
type monitor struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	inf        cache.SharedIndexInformer
	stop       context.CancelFunc
}

func newCollector(c *Controllers) *collector {
	g := &collector{c: c, md: c.opts.Metadata, disco: c.client.Discovery(), poke: make(chan struct{}, 1),
		monitors: map[schema.GroupResource]*monitor{}, removed: map[schema.GroupKind]bool{}, warned: map[string]bool{}}
	g.loop = c.newLoop("garbagecollector", c.opts.Workers, g.sync)
	return g
}

// start reads discovery (retrying until it can), starts the informers and
// waits for them to sync, then keeps them in step with discovery (run) until
// ctx ends.
func (g *collector) start(ctx context.Context) {
	// wg counts run too, so that only run adds to it after start: wait
	// never races a new informer's Add.
	g.wg.Add(1)
	// Without discovery nothing can be collected; an API server that is
	// still starting is waited for rather than failing every loop.
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := g.rediscover(ctx); err != nil {
			g.loop.log.Error("reading discovery", "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		g.wg.Done()
		return // ctx ended
	}
	go func() {
		defer g.wg.Done()
		g.run(ctx)
	}()
	g.mu.RLock()
	var synced []cache.InformerSynced
	for _, m := range g.monitors {
		synced = append(synced, m.inf.HasSynced)
	}
	g.mu.RUnlock()
	cache.WaitForCacheSync(ctx.Done(), synced...) // false only once ctx ends
}

func (g *collector) run(ctx context.Context) {
	t := time.NewTicker(discoveryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.poke:
		}
		if err := g.rediscover(ctx); err != nil && ctx.Err() == nil {
			g.loop.log.Error("reading discovery", "err", err)
		}
	}
}

// wait returns once run and every informer have stopped (after the ctx of
// start ends).
func (g *collector) wait() { g.wg.Wait() }

// rediscover reads the deletable resources and the REST mapping from
// discovery and starts and stops informers to match.
func (g *collector) rediscover(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	start := time.Now()
	// One read of discovery gives both the mapping and, at each group's
	// preferred version, what to watch. A group that cannot be read (an
	// aggregated API that is down) is left out; the others are collected.
	groups, err := restmapper.GetAPIGroupResources(g.disco)
	if err != nil {
		return fmt.Errorf("reading discovery: %w", err)
	}
	if len(groups) == 0 {
		return errors.New("reading discovery: no API groups")
	}
	want := map[schema.GroupResource]*monitor{}
	listed := map[string]bool{} // groups whose preferred version could be read
	for _, grp := range groups {
		v := grp.Group.PreferredVersion.Version
		if _, ok := grp.VersionedResources[v]; ok {
			listed[grp.Group.Name] = true
		}
		for _, r := range grp.VersionedResources[v] {
			gr := schema.GroupResource{Group: grp.Group.Name, Resource: r.Name}
			if strings.Contains(r.Name, "/") || ignoredResources[gr] ||
				!slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			want[gr] = &monitor{gvr: gr.WithVersion(v), kind: r.Kind, namespaced: r.Namespaced}
		}
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)

	g.mu.Lock()
	defer g.mu.Unlock()
	g.mapper = mapper
	var started, stopped int
	for gr, m := range g.monitors {
		if w, ok := want[gr]; !ok || w.gvr != m.gvr || w.namespaced != m.namespaced {
			if !ok && (listed[gr.Group] || !slices.ContainsFunc(groups, func(a *restmapper.APIGroupResources) bool { return a.Group.Name == gr.Group })) {
				g.removed[schema.GroupKind{Group: gr.Group, Kind: m.kind}] = true
			}
			m.stop()
			delete(g.monitors, gr)
			stopped++
		}
	}
	for gr, w := range want {
		delete(g.removed, schema.GroupKind{Group: gr.Group, Kind: w.kind})
		if g.monitors[gr] != nil {
			continue
		}
		g.startMonitor(ctx, w)
		g.monitors[gr] = w
		started++
	}
	if started > 0 || stopped > 0 {
		// Owner references that could not be resolved may resolve now.
		g.loop.log.Info("garbage collector resources changed", "watching", len(g.monitors), "started", started, "stopped", stopped)
		for _, m := range g.monitors {
			for _, o := range m.inf.GetStore().List() {
				if pm := o.(*metav1.PartialObjectMetadata); len(pm.OwnerReferences) > 0 {
					g.enqueue(m, pm)
				}
			}
		}
	}
	g.loop.log.Debug("discovery read", "resources", len(want), "took", time.Since(start))
	return nil
}

// startMonitor starts m's informer; g.mu is held.
func (g *collector) startMonitor(ctx context.Context, m *monitor) {
	m.inf = metadatainformer.NewFilteredMetadataInformer(g.md, m.gvr, metav1.NamespaceAll, 0, cache.Indexers{
		byUID: func(obj any) ([]string, error) { return []string{string(obj.(metav1.Object).GetUID())}, nil },
		byOwnerUID: func(obj any) ([]string, error) {
			var uids []string
			for _, r := range obj.(metav1.Object).GetOwnerReferences() {
				uids = append(uids, string(r.UID))
			}
			return uids, nil
		},
	}, nil).Informer()
	_, _ = m.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { g.changed(m, nil, obj.(*metav1.PartialObjectMetadata)) },
		UpdateFunc: func(old, cur any) {
			g.changed(m, old.(*metav1.PartialObjectMetadata), cur.(*metav1.PartialObjectMetadata))
		},
		DeleteFunc: func(obj any) {
			if pm, ok := informer.Object(obj).(*metav1.PartialObjectMetadata); ok {
				g.deleted(m, pm)
			}
		},
	})
	mctx, cancel := context.WithCancel(ctx)
	m.stop = cancel
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		m.inf.Run(mctx.Done())
	}()
}

func (g *collector) changed(m *monitor, old, cur *metav1.PartialObjectMetadata) {
	if m.gvr.Group == crdGroup && m.gvr.Resource == "customresourcedefinitions" {
		g.rediscoverSoon()
	}
	if cur.DeletionTimestamp != nil {
		if slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) || slices.Contains(cur.Finalizers, metav1.FinalizerOrphanDependents) {
			g.enqueue(m, cur)
		}
	} else if len(cur.OwnerReferences) > 0 && (old == nil || ownersChanged(old, cur)) {
		g.enqueue(m, cur)
	}
	if old != nil {
		// An owner waiting for its dependents may have lost one.
		for _, r := range old.OwnerReferences {
			if !ownedBy(cur, r.UID) {
				g.enqueueUID(r.UID)
			}
		}
	}
}

func (g *collector) deleted(m *monitor, obj *metav1.PartialObjectMetadata) {
	if m.gvr.Group == crdGroup && m.gvr.Resource == "customresourcedefinitions" {
		g.rediscoverSoon()
	}
	for _, d := range g.dependents(obj.UID) {
		g.enqueue(d.m, d.obj)
	}
	for _, r := range obj.OwnerReferences {
		g.enqueueUID(r.UID)
	}
}

func (g *collector) rediscoverSoon() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// Queue keys are "<resource>.<group>|<namespace>/<name>".
func (g *collector) enqueue(m *monitor, obj metav1.Object) {
	g.loop.add(m.gvr.GroupResource().String() + "|" + keyOf(obj))
}

// enqueueUID enqueues the object with uid, wherever the caches hold it.
func (g *collector) enqueueUID(uid types.UID) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, m := range g.monitors {
		objs, _ := m.inf.GetIndexer().ByIndex(byUID, string(uid))
		for _, o := range objs {
			g.enqueue(m, o.(metav1.Object))
		}
	}
}

type dependent struct {
	m   *monitor
	obj *metav1.PartialObjectMetadata
}

// dependents are the cached objects with a reference to uid. A resource
// served in two groups (Ingress in extensions and networking.k8s.io) holds
// the same objects twice: each counts once.
func (g *collector) dependents(uid types.UID) []dependent {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []dependent
	seen := map[types.UID]bool{}
	for _, m := range g.monitors {
		objs, _ := m.inf.GetIndexer().ByIndex(byOwnerUID, string(uid))
		for _, o := range objs {
			pm := o.(*metav1.PartialObjectMetadata)
			if !seen[pm.UID] {
				seen[pm.UID] = true
				out = append(out, dependent{m, pm})
			}
		}
	}
	return out
}

func (g *collector) synced() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, m := range g.monitors {
		if !m.inf.HasSynced() {
			return false
		}
	}
	return true
}

func (g *collector) monitorFor(gr schema.GroupResource) *monitor {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.monitors[gr]
}

func ownersChanged(old, cur metav1.Object) bool {
	a, b := old.GetOwnerReferences(), cur.GetOwnerReferences()
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return true
		}
	}
	return false
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, r := range obj.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func (g *collector) sync(ctx context.Context, key string) error {
	grs, objKey, _ := strings.Cut(key, "|")
	m := g.monitorFor(schema.ParseGroupResource(grs))
	if m == nil {
		return nil // no longer served
	}
	o, exists, err := m.inf.GetIndexer().GetByKey(objKey)
	if err != nil || !exists {
		return nil
	}
	obj := o.(*metav1.PartialObjectMetadata)
	if obj.DeletionTimestamp != nil {
		switch {
		case slices.Contains(obj.Finalizers, metav1.FinalizerOrphanDependents):
			return g.orphan(ctx, m, obj)
		case slices.Contains(obj.Finalizers, metav1.FinalizerDeleteDependents):
			return g.foreground(ctx, m, obj)
		}
		return nil
	}
	if len(obj.OwnerReferences) == 0 {
		return nil
	}
	return g.attemptToDelete(ctx, m, obj)
}

// ownerState is what the collector knows of one owner reference.
type ownerState int

const (
	ownerSolid        ownerState = iota // there, not being deleted in the foreground
	ownerWaiting                        // there, deleting its dependents in the foreground
	ownerDangling                       // gone, or another object under its name
	ownerUnresolvable                   // unknown kind, or an invalid reference
)

// attemptToDelete deletes obj if all its owners are gone or deleting their
// dependents, and drops its references to those owners if some other owner
// is still there (upstream's attemptToDeleteItem).
func (g *collector) attemptToDelete(ctx context.Context, m *monitor, obj *metav1.PartialObjectMetadata) error {
	// The caches answer for owners that are there, which is most of them,
	// without asking the API.
	if g.allSolid(ctx, m, obj, true) {
		return nil
	}
	// Decide on the object as it is now: the cache may lag behind it (a
	// deletion with propagationPolicy Orphan drops the references in the
	// same write that deletes the owner, and the owner's deletion can be
	// seen first), and delete or patch only that version of it.
	res := g.md.Resource(m.gvr).Namespace(obj.Namespace)
	cur, err := res.Get(ctx, obj.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %q: %w", m.kind, keyOf(obj), err)
	}
	if cur.UID != obj.UID || cur.DeletionTimestamp != nil || len(cur.OwnerReferences) == 0 {
		return nil // an event brings it back if it still needs looking at
	}
	var solid, gone []metav1.OwnerReference
	waiting := false
	for _, ref := range cur.OwnerReferences {
		st, err := g.ownerState(ctx, m, cur, ref, false)
		if err != nil {
			return err
		}
		switch st {
		case ownerUnresolvable:
			return nil
		case ownerSolid:
			solid = append(solid, ref)
		case ownerWaiting:
			waiting = true
			gone = append(gone, ref)
		case ownerDangling:
			gone = append(gone, ref)
		}
	}
	uid, rv := cur.UID, cur.ResourceVersion
	if len(solid) > 0 {
		if len(gone) == 0 {
			return nil // the cache was behind: all there
		}
		// Still owned: only the references to the others go.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rv, "ownerReferences": solid}})
		if _, err := res.Patch(ctx, cur.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing references to owners of %s %q that are gone: %w", m.kind, keyOf(cur), err)
		}
		g.loop.log.Info("removed references to owners that are gone", "kind", m.kind, "object", keyOf(cur), "removed", len(gone))
		return nil
	}
	policy := metav1.DeletePropagationBackground
	if waiting && len(g.dependents(cur.UID)) > 0 {
		// An owner waits for this one: this one waits for its own dependents.
		policy = metav1.DeletePropagationForeground
	}
	err = res.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}, PropagationPolicy: &policy})
	if apierrors.IsConflict(err) {
		return err // changed since read: look again (retried quietly)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %q whose owners are gone: %w", m.kind, keyOf(cur), err)
	}
	if err == nil {
		g.loop.log.Info("deleted object whose owners are gone", "kind", m.kind, "object", keyOf(cur), "propagation", policy)
	}
	return nil
}

// allSolid reports whether every owner of obj is known to be there and
// not deleting its dependents; cacheOnly asks only the caches.
func (g *collector) allSolid(ctx context.Context, m *monitor, obj *metav1.PartialObjectMetadata, cacheOnly bool) bool {
	for _, ref := range obj.OwnerReferences {
		if st, err := g.ownerState(ctx, m, obj, ref, cacheOnly); err != nil || st != ownerSolid {
			return false
		}
	}
	return true
}

// ownerState looks up the owner ref names: in the caches, then (unless
// cacheOnly, when it answers dangling for what the caches lack) with a
// live GET, which must find the reference's UID.
func (g *collector) ownerState(ctx context.Context, dm *monitor, dep *metav1.PartialObjectMetadata, ref metav1.OwnerReference, cacheOnly bool) (ownerState, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ownerUnresolvable, nil
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	g.mu.RLock()
	mapper, removed := g.mapper, g.removed[gk]
	g.mu.RUnlock()
	mapping, err := mapper.RESTMapping(gk, gv.Version)
	if err != nil {
		// A reference at a version no longer served still names its kind.
		if mapping, err = mapper.RESTMapping(gk); err != nil {
			if removed {
				return ownerDangling, nil
			}
			return ownerUnresolvable, nil
		}
	}
	ns := ""
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if dep.Namespace == "" {
			g.invalidNamespace(ctx, dm, dep, ref)
			return ownerUnresolvable, nil
		}
		ns = dep.Namespace
	}
	stateOf := func(o metav1.Object) ownerState {
		if o.GetDeletionTimestamp() != nil && slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			return ownerWaiting
		}
		return ownerSolid
	}
	if om := g.monitorFor(mapping.Resource.GroupResource()); om != nil {
		key := ref.Name
		if ns != "" {
			key = ns + "/" + ref.Name
		}
		if o, ok, _ := om.inf.GetIndexer().GetByKey(key); ok && o.(metav1.Object).GetUID() == ref.UID {
			return stateOf(o.(metav1.Object)), nil
		}
	}
	if cacheOnly {
		return ownerDangling, nil
	}
	// The cache may lag behind a newly created owner: ask the API.
	o, err := g.md.Resource(mapping.Resource).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ownerDangling, nil
	}
	if err != nil {
		return 0, fmt.Errorf("looking up owner %s %q of %s %q: %w", ref.Kind, ref.Name, dm.kind, keyOf(dep), err)
	}
	if o.UID != ref.UID {
		return ownerDangling, nil
	}
	return stateOf(o), nil
}

// invalidNamespace records, once, upstream's warning for a cluster-scoped
// object that names a namespaced owner.
func (g *collector) invalidNamespace(ctx context.Context, dm *monitor, dep *metav1.PartialObjectMetadata, ref metav1.OwnerReference) {
	id := string(dep.UID) + "/" + string(ref.UID)
	g.warnedMu.Lock()
	done := g.warned[id]
	g.warned[id] = true
	g.warnedMu.Unlock()
	if done {
		return
	}
	msg := fmt.Sprintf("ownerRef [%s/%s, namespace: , name: %s, uid: %s] does not exist in namespace %q", ref.APIVersion, ref.Kind, ref.Name, ref.UID, "")
	g.loop.log.Warn("cluster-scoped object names a namespaced owner; not collecting it", "kind", dm.kind, "object", dep.Name, "owner", ref.Kind+"/"+ref.Name)
	now := metav1.NewTime(g.c.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", dep.Name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: dm.gvr.GroupVersion().String(), Kind: dm.kind, Name: dep.Name,
			UID: dep.UID, ResourceVersion: dep.ResourceVersion},
		Reason: "OwnerRefInvalidNamespace", Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "garbage-collector-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := g.c.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		g.loop.log.Warn("recording OwnerRefInvalidNamespace event", "object", dep.Name, "err", err)
	}
}

// foreground deletes the dependents of an owner marked for foreground
// deletion and, once none that blocks it is left, removes the
// foregroundDeletion finalizer so the API server deletes the owner
// (upstream's processDeletingDependentsItem).
func (g *collector) foreground(ctx context.Context, m *monitor, owner *metav1.PartialObjectMetadata) error {
	if !g.synced() {
		return errStale // a cache still listing may hold a blocking dependent
	}
	blocking := 0
	for _, d := range g.dependents(owner.UID) {
		if d.obj.DeletionTimestamp == nil {
			g.enqueue(d.m, d.obj) // attemptToDelete sees its owner waiting
		}
		for _, r := range d.obj.OwnerReferences {
			if r.UID == owner.UID && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
				blocking++
				break
			}
		}
	}
	if blocking > 0 {
		g.loop.log.Debug("foreground deletion waits for dependents", "kind", m.kind, "object", keyOf(owner), "blocking", blocking)
		return nil // each dependent's deletion brings the owner back here
	}
	return g.removeFinalizer(ctx, m, owner, metav1.FinalizerDeleteDependents)
}

// orphan removes the references to an owner carrying the orphan finalizer
// from its dependents, then the finalizer (upstream's attemptToOrphan).
func (g *collector) orphan(ctx context.Context, m *monitor, owner *metav1.PartialObjectMetadata) error {
	if !g.synced() {
		return errStale
	}
	for _, d := range g.dependents(owner.UID) {
		refs := slices.DeleteFunc(slices.Clone(d.obj.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": d.obj.ResourceVersion, "ownerReferences": refs}})
		_, err := g.md.Resource(d.m.gvr).Namespace(d.obj.Namespace).Patch(ctx, d.obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			return err
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("orphaning %s %q of %s %q: %w", d.m.kind, keyOf(d.obj), m.kind, keyOf(owner), err)
		}
	}
	return g.removeFinalizer(ctx, m, owner, metav1.FinalizerOrphanDependents)
}

// removeFinalizer removes f from the cached version of obj; a conflict
// means the cache was behind, and the key is retried.
func (g *collector) removeFinalizer(ctx context.Context, m *monitor, obj *metav1.PartialObjectMetadata, f string) error {
	rest := slices.DeleteFunc(slices.Clone(obj.Finalizers), func(s string) bool { return s == f })
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.ResourceVersion, "finalizers": rest}})
	_, err := g.md.Resource(m.gvr).Namespace(obj.Namespace).Patch(ctx, obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		return err
	}
	if err != nil {
		return fmt.Errorf("removing the %s finalizer of %s %q: %w", f, m.kind, keyOf(obj), err)
	}
	g.loop.log.Info("removed finalizer", "finalizer", f, "kind", m.kind, "object", keyOf(obj))
	return nil
}
