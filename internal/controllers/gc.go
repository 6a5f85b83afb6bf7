package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The garbage collector deletes Pods, ReplicaSets and EndpointSlices whose
// owners are all gone, as Kubernetes' garbage collector does for background
// cascading deletion (Deployment -> ReplicaSet -> Pod). It knows the owner
// kinds Deployment, ReplicaSet, ReplicationController, StatefulSet,
// DaemonSet, Job, Service and Endpoints (the owner of mirrored slices); an
// object with an owner of another kind is never collected. Foreground
// deletion is carried out for Deployments, ReplicaSets,
// ReplicationControllers, Services and Endpoints. An owner counts
// as gone when neither the cache nor a live GET finds it with the UID the
// reference names, so a Deployment deleted and re-created under the same
// name does not keep the old one's pods.

type collector struct {
	c    *Controllers
	loop *loop
}

const (
	gcPod   = "pod/"
	gcSlice = "slice/"
	gcRS    = "replicaset/"
	// gcForeground keys are fg/<kind>/<namespace>/<name> of an owner being
	// deleted in the foreground.
	gcForeground = "fg/"
)

func newCollector(c *Controllers) *collector {
	g := &collector{c: c}
	g.loop = c.newLoop("garbagecollector", c.opts.Workers, g.sync)
	c.podInf.AddEventHandler(handlers(
		func(obj any) { g.enqueue(gcPod, obj.(metav1.Object)) },
		func(old, cur any) {
			if ownersChanged(old.(metav1.Object), cur.(metav1.Object)) {
				g.enqueue(gcPod, cur.(metav1.Object))
			}
		},
		g.enqueueOwners,
	))
	for _, inf := range []cache.SharedIndexInformer{
		c.factory.Apps().V1().Deployments().Informer(),
		c.factory.Apps().V1().ReplicaSets().Informer(),
		c.factory.Core().V1().ReplicationControllers().Informer(),
		c.factory.Core().V1().Services().Informer(),
		c.factory.Core().V1().Endpoints().Informer(),
	} {
		inf.AddEventHandler(handlers(g.enqueueForeground, func(_, cur any) { g.enqueueForeground(cur) }, g.enqueueOwners))
	}
	c.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handlers(
		func(obj any) { g.enqueue(gcSlice, obj.(metav1.Object)) },
		func(old, cur any) {
			if ownersChanged(old.(metav1.Object), cur.(metav1.Object)) {
				g.enqueue(gcSlice, cur.(metav1.Object))
			}
		},
		g.enqueueOwners,
	))
	c.factory.Apps().V1().Deployments().Informer().AddEventHandler(handlers(
		func(any) {}, func(_, _ any) {},
		func(obj any) {
			if d, ok := obj.(*appsv1.Deployment); ok {
				g.dependentsGone(gcPod, c.podInf.GetIndexer(), d.UID)
				list, _ := c.replicaSets.ReplicaSets(d.Namespace).List(labels.Everything())
				for _, rs := range list {
					if ownedBy(rs, d.UID) {
						g.loop.add(gcRS + keyOf(rs))
					}
				}
			}
		},
	))
	c.factory.Apps().V1().ReplicaSets().Informer().AddEventHandler(handlers(
		func(obj any) { g.enqueue(gcRS, obj.(metav1.Object)) },
		func(old, cur any) {
			if ownersChanged(old.(metav1.Object), cur.(metav1.Object)) {
				g.enqueue(gcRS, cur.(metav1.Object))
			}
		},
		func(obj any) {
			if rs, ok := obj.(*appsv1.ReplicaSet); ok {
				g.dependentsGone(gcPod, c.podInf.GetIndexer(), rs.UID)
			}
		},
	))
	c.factory.Core().V1().ReplicationControllers().Informer().AddEventHandler(handlers(
		func(any) {}, func(_, _ any) {},
		func(obj any) {
			if rc, ok := obj.(*corev1.ReplicationController); ok {
				g.dependentsGone(gcPod, c.podInf.GetIndexer(), rc.UID)
			}
		},
	))
	for _, inf := range []cache.SharedIndexInformer{
		c.factory.Apps().V1().StatefulSets().Informer(),
		c.factory.Apps().V1().DaemonSets().Informer(),
		c.factory.Batch().V1().Jobs().Informer(),
	} {
		inf.AddEventHandler(handlers(
			func(any) {}, func(_, _ any) {},
			func(obj any) {
				if o, ok := obj.(metav1.Object); ok {
					g.dependentsGone(gcPod, c.podInf.GetIndexer(), o.GetUID())
				}
			},
		))
	}
	c.factory.Core().V1().Services().Informer().AddEventHandler(handlers(
		func(any) {}, func(_, _ any) {},
		func(obj any) {
			svc, ok := obj.(*corev1.Service)
			if !ok {
				return
			}
			list, _ := c.slices.EndpointSlices(svc.Namespace).List(labels.Everything())
			for _, s := range list {
				if ownedBy(s, svc.UID) {
					g.loop.add(gcSlice + keyOf(s))
				}
			}
		},
	))
	return g
}

func (g *collector) enqueue(prefix string, obj metav1.Object) {
	if len(obj.GetOwnerReferences()) > 0 && obj.GetDeletionTimestamp() == nil {
		g.loop.add(prefix + keyOf(obj))
	}
}

func (g *collector) dependentsGone(prefix string, idx cache.Indexer, uid types.UID) {
	objs, _ := idx.ByIndex(byControllerUID, string(uid))
	for _, o := range objs {
		g.loop.add(prefix + keyOf(o.(metav1.Object)))
	}
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
	kind, objKey, _ := strings.Cut(key, "/")
	if kind+"/" == gcForeground {
		return g.syncForeground(ctx, objKey)
	}
	ns, name, err := cache.SplitMetaNamespaceKey(objKey)
	if err != nil {
		return nil
	}
	var obj metav1.Object
	var del func(metav1.DeleteOptions) error
	var live func() (metav1.Object, error)
	switch kind + "/" {
	case gcPod:
		p, err := g.c.pods.Pods(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = p
		del = func(o metav1.DeleteOptions) error { return g.c.client.CoreV1().Pods(ns).Delete(ctx, name, o) }
		live = func() (metav1.Object, error) { return g.c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}) }
	case gcRS:
		rs, err := g.c.replicaSets.ReplicaSets(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = rs
		del = func(o metav1.DeleteOptions) error { return g.c.client.AppsV1().ReplicaSets(ns).Delete(ctx, name, o) }
		live = func() (metav1.Object, error) {
			return g.c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		}
	case gcSlice:
		s, err := g.c.slices.EndpointSlices(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = s
		del = func(o metav1.DeleteOptions) error {
			return g.c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, o)
		}
		live = func() (metav1.Object, error) {
			return g.c.client.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
		}
	default:
		return nil
	}
	if obj.GetDeletionTimestamp() != nil || len(obj.GetOwnerReferences()) == 0 {
		return nil
	}
	for _, ref := range obj.GetOwnerReferences() {
		exists, known, err := g.ownerExists(ctx, ns, ref)
		if err != nil {
			return err
		}
		if !known || exists {
			return nil
		}
	}
	// The cache may lag behind the object itself: a deletion with
	// propagationPolicy Orphan drops the references in the same write that
	// deletes the owner, and the owner's deletion can be seen first. Decide
	// on the object as it is now, and delete only that version of it.
	cur, err := live()
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %q: %w", strings.TrimSuffix(kind, "/"), objKey, err)
	}
	if cur.GetUID() != obj.GetUID() || cur.GetDeletionTimestamp() != nil || ownersChanged(obj, cur) {
		return nil // an update event brings it back if it still needs looking at
	}
	uid, rv := cur.GetUID(), cur.GetResourceVersion()
	bg := metav1.DeletePropagationBackground
	err = del(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}, PropagationPolicy: &bg})
	if apierrors.IsConflict(err) {
		return err // changed since read: look again (retried quietly)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %q whose owners are gone: %w", strings.TrimSuffix(kind, "/"), objKey, err)
	}
	if err == nil {
		g.loop.log.Info("deleted object whose owners are gone", "kind", kind, "object", objKey)
	}
	return nil
}

// ownerExists reports whether the owner ref names exists with its UID;
// known is false for kinds the collector cannot check.
func (g *collector) ownerExists(ctx context.Context, ns string, ref metav1.OwnerReference) (exists, known bool, err error) {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	var cached metav1.Object
	var live func() (metav1.Object, error)
	switch {
	case gv.Group == appsv1.GroupName && ref.Kind == "Deployment":
		if d, err := g.c.deployments.Deployments(ns).Get(ref.Name); err == nil {
			cached = d
		}
		live = func() (metav1.Object, error) {
			return g.c.client.AppsV1().Deployments(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == appsv1.GroupName && ref.Kind == "ReplicaSet":
		if rs, err := g.c.replicaSets.ReplicaSets(ns).Get(ref.Name); err == nil {
			cached = rs
		}
		live = func() (metav1.Object, error) {
			return g.c.client.AppsV1().ReplicaSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == corev1.GroupName && ref.Kind == "ReplicationController":
		if rc, err := g.c.rcs.ReplicationControllers(ns).Get(ref.Name); err == nil {
			cached = rc
		}
		live = func() (metav1.Object, error) {
			return g.c.client.CoreV1().ReplicationControllers(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == appsv1.GroupName && ref.Kind == "StatefulSet":
		if o, err := g.c.factory.Apps().V1().StatefulSets().Lister().StatefulSets(ns).Get(ref.Name); err == nil {
			cached = o
		}
		live = func() (metav1.Object, error) {
			return g.c.client.AppsV1().StatefulSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == appsv1.GroupName && ref.Kind == "DaemonSet":
		if o, err := g.c.factory.Apps().V1().DaemonSets().Lister().DaemonSets(ns).Get(ref.Name); err == nil {
			cached = o
		}
		live = func() (metav1.Object, error) {
			return g.c.client.AppsV1().DaemonSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == batchv1.GroupName && ref.Kind == "Job":
		if o, err := g.c.factory.Batch().V1().Jobs().Lister().Jobs(ns).Get(ref.Name); err == nil {
			cached = o
		}
		live = func() (metav1.Object, error) {
			return g.c.client.BatchV1().Jobs(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == corev1.GroupName && ref.Kind == "Endpoints": // slices the mirroring controller made
		if e, err := g.c.endpoints.Endpoints(ns).Get(ref.Name); err == nil {
			cached = e
		}
		live = func() (metav1.Object, error) {
			return g.c.client.CoreV1().Endpoints(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	case gv.Group == corev1.GroupName && ref.Kind == "Service":
		if s, err := g.c.services.Services(ns).Get(ref.Name); err == nil {
			cached = s
		}
		live = func() (metav1.Object, error) {
			return g.c.client.CoreV1().Services(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	default:
		return false, false, nil
	}
	if cached != nil && cached.GetUID() == ref.UID {
		return true, true, nil
	}
	// The cache may lag behind a newly created owner: ask the API.
	obj, err := live()
	if apierrors.IsNotFound(err) {
		return false, true, nil
	}
	if err != nil {
		return false, true, fmt.Errorf("looking up owner %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	return obj.GetUID() == ref.UID, true, nil
}

// foregroundKinds are the owners whose foreground deletion the collector
// carries out, by the kind their dependents' references name.
var foregroundKinds = map[string]string{"Deployment": "deployment", "ReplicaSet": "replicaset", "ReplicationController": "rc",
	"Service": "service", "Endpoints": "endpoints"}

func (g *collector) enqueueForeground(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok || m.GetDeletionTimestamp() == nil || !slices.Contains(m.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		return
	}
	var kind string
	switch obj.(type) {
	case *appsv1.Deployment:
		kind = "deployment"
	case *appsv1.ReplicaSet:
		kind = "replicaset"
	case *corev1.ReplicationController:
		kind = "rc"
	case *corev1.Service:
		kind = "service"
	case *corev1.Endpoints:
		kind = "endpoints"
	default:
		return
	}
	g.loop.add(gcForeground + kind + "/" + keyOf(m))
}

// enqueueOwners looks again at the owners of a deleted object: one being
// deleted in the foreground may now have no dependents left.
func (g *collector) enqueueOwners(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	for _, ref := range m.GetOwnerReferences() {
		if kind, ok := foregroundKinds[ref.Kind]; ok {
			g.loop.add(gcForeground + kind + "/" + m.GetNamespace() + "/" + ref.Name)
		}
	}
}

// syncForeground deletes the dependents of an owner marked for foreground
// deletion and, once none is left, removes the foregroundDeletion finalizer
// so the API server deletes the owner (Kubernetes' processDeletingDependentsItem).
func (g *collector) syncForeground(ctx context.Context, key string) error {
	kind, objKey, _ := strings.Cut(key, "/")
	ns, name, err := cache.SplitMetaNamespaceKey(objKey)
	if err != nil {
		return nil
	}
	var owner metav1.Object
	var dependents []metav1.Object
	var deleteDependent func(m metav1.Object, o metav1.DeleteOptions) error
	var removeFinalizer func() error
	podsOf := func(uid types.UID) {
		objs, _ := g.c.podInf.GetIndexer().ByIndex(byControllerUID, string(uid))
		for _, o := range objs {
			dependents = append(dependents, o.(metav1.Object))
		}
		deleteDependent = func(m metav1.Object, o metav1.DeleteOptions) error {
			return g.c.client.CoreV1().Pods(ns).Delete(ctx, m.GetName(), o)
		}
	}
	slicesOf := func(uid types.UID) {
		list, _ := g.c.slices.EndpointSlices(ns).List(labels.Everything())
		for _, s := range list {
			if ownedBy(s, uid) {
				dependents = append(dependents, s)
			}
		}
		deleteDependent = func(m metav1.Object, o metav1.DeleteOptions) error {
			return g.c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, m.GetName(), o)
		}
	}
	switch kind {
	case "service":
		svc, err := g.c.services.Services(ns).Get(name)
		if err != nil {
			return nil
		}
		owner = svc
		slicesOf(svc.UID)
		removeFinalizer = func() error {
			cur, err := g.c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.UID != svc.UID {
				return err
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
			_, err = g.c.client.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	case "endpoints":
		ep, err := g.c.endpoints.Endpoints(ns).Get(name)
		if err != nil {
			return nil
		}
		owner = ep
		slicesOf(ep.UID)
		removeFinalizer = func() error {
			cur, err := g.c.client.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.UID != ep.UID {
				return err
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
			_, err = g.c.client.CoreV1().Endpoints(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	case "deployment":
		d, err := g.c.deployments.Deployments(ns).Get(name)
		if err != nil {
			return nil
		}
		owner = d
		list, _ := g.c.replicaSets.ReplicaSets(ns).List(labels.Everything())
		for _, rs := range list {
			if ownedBy(rs, d.UID) {
				dependents = append(dependents, rs)
			}
		}
		deleteDependent = func(m metav1.Object, o metav1.DeleteOptions) error {
			return g.c.client.AppsV1().ReplicaSets(ns).Delete(ctx, m.GetName(), o)
		}
		removeFinalizer = func() error {
			cur, err := g.c.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.UID != d.UID {
				return err
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
			_, err = g.c.client.AppsV1().Deployments(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	case "replicaset":
		rs, err := g.c.replicaSets.ReplicaSets(ns).Get(name)
		if err != nil {
			return nil
		}
		owner = rs
		podsOf(rs.UID)
		removeFinalizer = func() error {
			cur, err := g.c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.UID != rs.UID {
				return err
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
			_, err = g.c.client.AppsV1().ReplicaSets(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	case "rc":
		rc, err := g.c.rcs.ReplicationControllers(ns).Get(name)
		if err != nil {
			return nil
		}
		owner = rc
		podsOf(rc.UID)
		removeFinalizer = func() error {
			cur, err := g.c.client.CoreV1().ReplicationControllers(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || cur.UID != rc.UID {
				return err
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
			_, err = g.c.client.CoreV1().ReplicationControllers(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
	default:
		return nil
	}
	if owner.GetDeletionTimestamp() == nil || !slices.Contains(owner.GetFinalizers(), metav1.FinalizerDeleteDependents) {
		return nil
	}
	fg := metav1.DeletePropagationForeground
	for _, dep := range dependents {
		if dep.GetDeletionTimestamp() != nil {
			continue
		}
		uid := dep.GetUID()
		err := deleteDependent(dep, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &fg})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting dependent %q of %s %q: %w", dep.GetName(), kind, objKey, err)
		}
	}
	if len(dependents) > 0 {
		return nil // each dependent's deletion brings the owner back here
	}
	if err := removeFinalizer(); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finishing foreground deletion of %s %q: %w", kind, objKey, err)
	}
	return nil
}
