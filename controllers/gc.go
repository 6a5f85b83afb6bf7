package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
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
// kinds Deployment, ReplicaSet, ReplicationController and Service; an
// object with an owner of another kind is never collected. An owner counts
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
	case gcRS:
		rs, err := g.c.replicaSets.ReplicaSets(ns).Get(name)
		if err != nil {
			return nil
		}
		obj = rs
		del = func(o metav1.DeleteOptions) error { return g.c.client.AppsV1().ReplicaSets(ns).Delete(ctx, name, o) }
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
