package controllers

import (
	"context"
	"fmt"
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

// The garbage collector deletes Pods and EndpointSlices whose owners are
// all gone, as Kubernetes' garbage collector does for background cascading
// deletion. It knows these kinds of owner: Deployments, StatefulSets,
// DaemonSets, Jobs and Services; an object with an owner of another kind is
// never collected. An owner counts
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
		func(any) {},
	))
	c.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handlers(
		func(obj any) { g.enqueue(gcSlice, obj.(metav1.Object)) },
		func(old, cur any) {
			if ownersChanged(old.(metav1.Object), cur.(metav1.Object)) {
				g.enqueue(gcSlice, cur.(metav1.Object))
			}
		},
		func(any) {},
	))
	c.factory.Apps().V1().Deployments().Informer().AddEventHandler(handlers(
		func(any) {}, func(_, _ any) {},
		func(obj any) {
			if d, ok := obj.(*appsv1.Deployment); ok {
				g.dependentsGone(gcPod, c.podInf.GetIndexer(), d.UID)
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
	ns, name, err := cache.SplitMetaNamespaceKey(objKey)
	if err != nil {
		return nil
	}
	var obj metav1.Object
	var del func(metav1.DeleteOptions) error
	switch kind + "/" {
	case gcPod:
		p, err := g.c.pods.Pods(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = p
		del = func(o metav1.DeleteOptions) error { return g.c.client.CoreV1().Pods(ns).Delete(ctx, name, o) }
	case gcSlice:
		s, err := g.c.slices.EndpointSlices(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = s
		del = func(o metav1.DeleteOptions) error {
			return g.c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, o)
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
	uid := obj.GetUID()
	bg := metav1.DeletePropagationBackground
	err = del(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
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
