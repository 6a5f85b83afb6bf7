package controllers

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// startPodOwnerSync is how the syncs of the controllers that own pods
// (DaemonSets, StatefulSets, Jobs) begin: the object from the cache, its
// expectations forgotten when it is gone; errStale while the cache is older
// than this controller's last write to it; a retry in a second while pods the
// last sync created or deleted are not yet seen; nothing for an object being
// deleted (the garbage collector removes its pods). ok says to go on.
func startPodOwnerSync[T metav1.Object](key string, get func(ns, name string) (T, error), fresh *freshness, exp *expectations, addAfter func(string, time.Duration), now time.Time) (obj T, ok bool, err error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return obj, false, nil
	}
	obj, err = get(ns, name)
	if apierrors.IsNotFound(err) {
		exp.forget(key)
		return obj, false, nil
	}
	if err != nil {
		return obj, false, err
	}
	if fresh.stale(key, obj) {
		return obj, false, errStale
	}
	if done, _ := exp.satisfied(key, now); !done {
		addAfter(key, time.Second) // the pod events normally come first
		return obj, false, nil
	}
	if obj.GetDeletionTimestamp() != nil {
		return obj, false, nil
	}
	return obj, true, nil
}

// watchPodOwners wires the informer of a kind of pod owner (DaemonSets,
// StatefulSets, Jobs) to its controller: an added or changed owner is queued,
// a deleted one's expectations and freshness are forgotten, and the events of
// the pods it owns queue it too (podsOf).
func (c *Controllers) watchPodOwners(inf cache.SharedIndexInformer, kind schema.GroupVersionKind, l *loop, exp *expectations, fresh *freshness) {
	c.synced = append(c.synced, inf.HasSynced)
	inf.AddEventHandler(handlers(
		func(obj any) { l.add(keyOf(obj.(metav1.Object))) },
		func(_, cur any) { l.add(keyOf(cur.(metav1.Object))) },
		func(obj any) {
			if o, ok := obj.(metav1.Object); ok {
				exp.forget(keyOf(o))
				fresh.forget(keyOf(o))
			}
		},
	))
	c.podsOf(kind, l, exp)
}
