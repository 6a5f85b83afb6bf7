package apiserver

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Namespace deletion, as kube-controller-manager's namespace controller does
// it. Deleting a namespace marks it Terminating; finalizeNamespace then, in
// the background, deletes every namespaced object in it (pods gracefully: the
// node agents stop them and the namespace waits until they are gone; objects
// with finalizers wait for them), reports progress in the namespace's status
// conditions (NamespaceContentRemaining, NamespaceFinalizersRemaining,
// NamespaceDeletionContentFailure, ...), removes the "kubernetes" finalizer
// from spec.finalizers once nothing is left, and deletes the namespace when no
// finalizer remains (another finalizer is removed through the finalize
// subresource, which then deletes it). Everything it does is read from and
// written to the store, so a server killed part way resumes at restart
// (bootstrap restarts it for every Terminating namespace).

// finalizeNamespace runs the deletion of a Terminating namespace once per
// server until it is done.
func (s *Server) finalizeNamespace(name string) {
	if _, running := s.nsFinalizing.LoadOrStore(name, struct{}{}); running {
		return
	}
	go func() {
		defer s.nsFinalizing.Delete(name)
		for attempt := 0; ; attempt++ {
			done, err := s.finalizeNamespaceOnce(name)
			if errors.Is(err, store.ErrClosed) {
				return // the server is stopping; the next start resumes
			}
			if err != nil {
				s.log.Warn("deleting namespace", "namespace", name, "err", err)
			}
			if done {
				return
			}
			time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
		}
	}()
}

// resumeNamespaceDeletions finalizes the namespaces left Terminating, marked
// more than olderThan ago: all of them at start (a crash stopped their
// finalization), and, as the servers sharing a store run it periodically,
// those whose server stopped mid-way. A namespace whose server is still
// working on it may be finalized by two servers at once; a pass only repeats
// deletes that the other has done (NotFound) and writes conditions in store
// transactions, so that is harmless.
func (s *Server) resumeNamespaceDeletions(olderThan time.Duration) error {
	kvs, _, err := s.store.List(nsResource.prefix(""))
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		var n corev1.Namespace
		if decodeStored(kv.Value, &n) != nil || n.Status.Phase != corev1.NamespaceTerminating {
			continue
		}
		if olderThan > 0 && n.DeletionTimestamp != nil && s.now().Sub(n.DeletionTimestamp.Time) < olderThan {
			continue
		}
		s.finalizeNamespace(n.Name)
	}
	return nil
}

// nsContent is what a deletion pass found in the namespace.
type nsContent struct {
	remaining  map[string]int // resource (group-qualified) -> objects left
	finalizers map[string]int // finalizer -> objects it holds
	failures   []string
}

// finalizeNamespaceOnce is one pass; it reports whether the namespace is done
// (deleted, or waiting only for finalizers that are not ours).
func (s *Server) finalizeNamespaceOnce(name string) (bool, error) {
	obj, err := s.get(nsResource, "", name)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if obj.(*corev1.Namespace).Status.Phase != corev1.NamespaceTerminating {
		return true, nil
	}
	content := s.deleteNamespaceContent(name)
	if err := s.setDeletionConditions(name, content); err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	if len(content.remaining) > 0 || len(content.failures) > 0 {
		return false, nil
	}
	// Empty: our finalizer goes, and with no finalizer left, the namespace.
	_, err = s.store.Update(func(tx store.Tx) error {
		key := nsResource.key("", name)
		kv, ok := tx.Get(key)
		if !ok {
			return nil
		}
		var n corev1.Namespace
		if err := decodeStored(kv.Value, &n); err != nil {
			return err
		}
		n.Spec.Finalizers = slices.DeleteFunc(n.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
		if len(n.Spec.Finalizers) == 0 && len(n.Finalizers) == 0 {
			return tx.Delete(key)
		}
		return s.put(tx, nsResource, key, &n)
	})
	if err != nil {
		return false, err
	}
	return true, nil
}

// deleteNamespaceContent deletes every object in the namespace and reports
// what remains (pods terminating on their nodes, objects with finalizers).
func (s *Server) deleteNamespaceContent(ns string) nsContent {
	c := nsContent{remaining: map[string]int{}, finalizers: map[string]int{}}
	seen := map[string]bool{} // a custom resource's versions share one prefix
	for _, res := range s.allResources() {
		if !res.namespaced || seen[res.prefix("")] {
			continue
		}
		seen[res.prefix("")] = true
		objs, err := s.listNamespaced(res, ns)
		if err != nil {
			c.failures = append(c.failures, fmt.Sprintf("listing %s: %v", res.gr(), err))
			continue
		}
		for _, obj := range objs {
			if metaOf(obj).GetDeletionTimestamp() != nil {
				continue
			}
			if _, err := s.Delete(res, ns, metaOf(obj).GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				c.failures = append(c.failures, fmt.Sprintf("deleting %s %q: %v", res.gr(), metaOf(obj).GetName(), err))
			}
		}
		left, err := s.listNamespaced(res, ns)
		if err != nil {
			c.failures = append(c.failures, fmt.Sprintf("listing %s: %v", res.gr(), err))
			continue
		}
		if len(left) > 0 {
			c.remaining[res.gr().String()] += len(left)
		}
		for _, obj := range left {
			for _, f := range metaOf(obj).GetFinalizers() {
				c.finalizers[f]++
			}
		}
	}
	return c
}

func (s *Server) listNamespaced(res *resource, ns string) ([]runtime.Object, error) {
	kvs, _, err := s.store.List(res.prefix(ns))
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(kvs))
	for _, kv := range kvs {
		obj := res.newObj()
		if err := decodeStored(kv.Value, obj); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", kv.Key, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// setDeletionConditions writes the namespace controller's five conditions.
func (s *Server) setDeletionConditions(name string, c nsContent) error {
	cond := func(t corev1.NamespaceConditionType, bad bool, reason, msg, okReason, okMsg string) corev1.NamespaceCondition {
		if bad {
			return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg}
		}
		return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: okReason, Message: okMsg}
	}
	var remaining, finalizers []string
	for r, n := range c.remaining {
		remaining = append(remaining, fmt.Sprintf("%s has %d resource instances", r, n))
	}
	for f, n := range c.finalizers {
		finalizers = append(finalizers, fmt.Sprintf("%s in %d resource instances", f, n))
	}
	sort.Strings(remaining)
	sort.Strings(finalizers)
	want := []corev1.NamespaceCondition{
		cond(corev1.NamespaceDeletionDiscoveryFailure, false, "", "", "ResourcesDiscovered", "All resources successfully discovered"),
		cond(corev1.NamespaceDeletionGVParsingFailure, false, "", "", "ParsedGroupVersions", "All legacy kube types successfully parsed"),
		cond(corev1.NamespaceDeletionContentFailure, len(c.failures) > 0, "ContentDeletionFailed",
			fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(c.failures), strings.Join(c.failures, ", ")),
			"ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
		cond(corev1.NamespaceContentRemaining, len(remaining) > 0, "SomeResourcesRemain",
			"Some resources are remaining: "+strings.Join(remaining, ", "), "ContentRemoved", "All content successfully removed"),
		cond(corev1.NamespaceFinalizersRemaining, len(finalizers) > 0, "SomeFinalizersRemain",
			"Some content in the namespace has finalizers remaining: "+strings.Join(finalizers, ", "), "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
	}
	_, err := s.Update(nsResource, "", name, "status", func(cur runtime.Object) (runtime.Object, error) {
		n := cur.(*corev1.Namespace)
		now := metav1.NewTime(s.now().Truncate(time.Second))
		for i := range want {
			want[i].LastTransitionTime = now
			for _, old := range n.Status.Conditions {
				if old.Type == want[i].Type && old.Status == want[i].Status && old.Reason == want[i].Reason && old.Message == want[i].Message {
					want[i].LastTransitionTime = old.LastTransitionTime
				}
			}
		}
		n.Status.Conditions = want
		n.ResourceVersion = ""
		return n, nil
	})
	return err
}
