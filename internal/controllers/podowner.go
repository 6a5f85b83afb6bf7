package controllers

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
