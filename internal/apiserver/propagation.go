package apiserver

import (
	"slices"
	"time"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Cascading deletion (propagationPolicy). Background, the default, deletes
// the owner at once and leaves its dependents to the garbage collector in
// controllers/. Orphan removes the owner's references from its dependents
// in the same transaction as the deletion, which is what Kubernetes'
// garbage collector does behind the "orphan" finalizer, only atomically.
// Foreground marks an owner that has dependents with deletionTimestamp and
// the foregroundDeletion finalizer; the garbage collector deletes the
// dependents and then removes the finalizer, and the owner goes.

// propagationPolicy is opts' policy, the legacy orphanDependents included.
func propagationPolicy(opts metav1.DeleteOptions) metav1.DeletionPropagation {
	if opts.PropagationPolicy != nil {
		return *opts.PropagationPolicy
	}
	if opts.OrphanDependents != nil && *opts.OrphanDependents {
		return metav1.DeletePropagationOrphan
	}
	return metav1.DeletePropagationBackground
}

// propagate applies the deletion's policy to obj's dependents inside tx. It
// reports whether obj was marked for foreground deletion instead of deleted.
func (s *Server) propagate(tx store.Tx, res *resource, key string, obj runtime.Object, opts metav1.DeleteOptions) (bool, error) {
	if _, isPod := obj.(*corev1.Pod); isPod {
		return false, nil
	}
	m := metaOf(obj)
	switch propagationPolicy(opts) {
	case metav1.DeletePropagationOrphan:
		return false, s.eachDependent(tx, m.GetNamespace(), m.GetUID(), func(r *resource, k string, dep runtime.Object) error {
			dm := metaOf(dep)
			dm.SetOwnerReferences(slices.DeleteFunc(dm.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == m.GetUID() }))
			return s.put(tx, r, k, dep)
		})
	case metav1.DeletePropagationForeground:
		if m.GetDeletionTimestamp() != nil {
			return true, nil
		}
		found := false
		if err := s.eachDependent(tx, m.GetNamespace(), m.GetUID(), func(*resource, string, runtime.Object) error {
			found = true
			return nil
		}); err != nil || !found {
			return false, err
		}
		now := metav1.NewTime(s.now().Truncate(time.Second))
		zero := int64(0)
		m.SetDeletionTimestamp(&now)
		m.SetDeletionGracePeriodSeconds(&zero)
		if !slices.Contains(m.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			m.SetFinalizers(append(m.GetFinalizers(), metav1.FinalizerDeleteDependents))
		}
		return true, s.put(tx, res, key, obj)
	}
	return false, nil
}

// eachDependent calls fn for every object with an ownerReference to uid
// that may have it: the namespaced objects in ns for a namespaced owner;
// for a cluster-scoped owner (ns "") those in every namespace and the
// cluster-scoped ones, so that a cluster-scoped custom resource owning
// another is orphaned or waited for as well.
func (s *Server) eachDependent(tx store.Tx, ns string, uid types.UID, fn func(r *resource, key string, obj runtime.Object) error) error {
	seen := map[string]bool{}
	for _, r := range s.allResources() {
		p := r.prefix(ns)
		if (!r.namespaced && ns != "") || seen[p] || r.gv.Group == "extensions" {
			continue
		}
		seen[p] = true
		for _, kv := range tx.List(p) {
			obj := r.newObj()
			if err := decodeStored(kv.Value, obj); err != nil {
				return err
			}
			if slices.ContainsFunc(metaOf(obj).GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == uid }) {
				if err := fn(r, kv.Key, obj); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
