package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var schemaGR = schema.GroupResource{}

// protectedNamespaces may not be deleted, as in Kubernetes.
var protectedNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

func deleteOptions(r *http.Request) (metav1.DeleteOptions, error) {
	var opts metav1.DeleteOptions
	body, err := readBody(r)
	if err != nil {
		return opts, err
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &opts); err != nil {
			return opts, apierrors.NewBadRequest(fmt.Sprintf("decoding DeleteOptions: %v", err))
		}
	}
	if v := r.URL.Query()["dryRun"]; len(v) > 0 {
		opts.DryRun = v
	}
	if err := checkDryRun(opts.DryRun, "DeleteOptions"); err != nil {
		return opts, err
	}
	if v := r.URL.Query().Get("gracePeriodSeconds"); v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return opts, apierrors.NewBadRequest(fmt.Sprintf("invalid gracePeriodSeconds %q", v))
		}
		opts.GracePeriodSeconds = &g
	}
	return opts, nil
}

func (s *Server) serveDelete(w http.ResponseWriter, r *http.Request, rq request) error {
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	obj, err := s.Delete(rq.res, rq.namespace, rq.name, opts)
	if err != nil {
		return err
	}
	return s.respond(w, r, rq.res, http.StatusOK, obj)
}

// Delete deletes an object with Kubernetes' semantics: bound pods terminate
// gracefully (the node agent removes them), objects with finalizers and namespaces
// are marked for deletion first. It returns the object's last state.
func (s *Server) Delete(res *resource, ns, name string, opts metav1.DeleteOptions) (runtime.Object, error) {
	if res.name == "namespaces" && protectedNamespaces[name] {
		return nil, apierrors.NewForbidden(res.gr(), name, fmt.Errorf("this namespace may not be deleted"))
	}
	key := res.key(ns, name)
	var result runtime.Object
	var finalizeNS bool
	var storedRV string
	dryRun := len(opts.DryRun) > 0
	_, err := s.store.Update(dryRunTx(dryRun, func(tx store.Tx) error {
		result, finalizeNS = nil, false // the store may run this more than once
		kv, ok := tx.Get(key)
		if !ok {
			return apierrors.NewNotFound(res.gr(), name)
		}
		obj := res.newObj()
		if err := decodeStored(kv.Value, obj); err != nil {
			return err
		}
		m := metaOf(obj)
		storedRV = m.GetResourceVersion()
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != m.GetUID() {
				return apierrors.NewConflict(res.gr(), name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, m.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
				return apierrors.NewConflict(res.gr(), name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, m.GetResourceVersion()))
			}
		}
		result = obj
		now := metav1.NewTime(s.now().Truncate(time.Second))
		if n, ok := obj.(*corev1.Namespace); ok {
			finalizeNS = true
			if n.Status.Phase == corev1.NamespaceTerminating {
				return nil
			}
			n.Status.Phase = corev1.NamespaceTerminating
			n.DeletionTimestamp = &now
			return s.put(tx, res, key, obj)
		}
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			return s.markCRDForDeletion(tx, key, crd)
		}
		if marked, err := s.propagate(tx, res, key, obj, opts); err != nil || marked {
			return err
		}
		if p, ok := obj.(*corev1.Pod); ok {
			if grace, graceful := s.podGrace(tx, p, opts); graceful {
				if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= grace {
					return nil // already terminating at least as fast
				}
				at := metav1.NewTime(s.now().Add(time.Duration(grace) * time.Second).Truncate(time.Second))
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &at, &grace
				return s.put(tx, res, key, obj)
			}
		} else if len(m.GetFinalizers()) > 0 {
			if m.GetDeletionTimestamp() != nil {
				return nil
			}
			m.SetDeletionTimestamp(&now)
			zero := int64(0)
			m.SetDeletionGracePeriodSeconds(&zero)
			return s.put(tx, res, key, obj)
		}
		if err := s.beforeDelete(tx, res, obj); err != nil {
			return err
		}
		withResourceVersion(obj, tx.Rev())
		return tx.Delete(key)
	}))
	if errors.Is(err, errDryRun) {
		// What the delete would have done, written nowhere.
		metaOf(result).SetResourceVersion(storedRV)
		return result, nil
	}
	if err != nil {
		return nil, err
	}
	if finalizeNS {
		s.finalizeNamespace(name)
	}
	return result, nil
}

// podGrace decides whether a pod deletion is graceful: a pod bound to an existing
// node is terminated by that node's agent, which deletes it with grace 0 when its
// processes are gone. Unbound pods, or pods on nodes that no longer exist, go at once.
func (s *Server) podGrace(tx store.Tx, p *corev1.Pod, opts metav1.DeleteOptions) (int64, bool) {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if p.Spec.TerminationGracePeriodSeconds != nil {
		grace = *p.Spec.TerminationGracePeriodSeconds
	}
	if opts.GracePeriodSeconds != nil {
		grace = *opts.GracePeriodSeconds
	}
	if grace <= 0 || p.Spec.NodeName == "" {
		return 0, false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return 0, false
	}
	if _, ok := tx.Get(lookup("", "v1", "nodes").key("", p.Spec.NodeName)); !ok {
		return 0, false
	}
	return grace, true
}

func (s *Server) serveDeleteCollection(w http.ResponseWriter, r *http.Request, rq request) error {
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	ls, fs, err := selectors(r, rq.res)
	if err != nil {
		return err
	}
	kvs, rev, err := s.store.List(rq.res.prefix(rq.namespace))
	if err != nil {
		return err
	}
	var deleted [][]byte
	for _, kv := range kvs {
		obj := rq.res.newObj()
		if err := decodeStored(kv.Value, obj); err != nil {
			return err
		}
		if !rq.res.matches(obj, ls, fs) {
			continue
		}
		m := metaOf(obj)
		last, err := s.Delete(rq.res, m.GetNamespace(), m.GetName(), opts)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		b, _ := encodeObject(last, rq.res.gvk())
		deleted = append(deleted, b)
	}
	writeJSON(w, r, http.StatusOK, listJSON(rq.res.listKind(), rq.res.gv.String(), rev, deleted))
	return nil
}
