package apiserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/store"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The CRD controller runs in every API server and plays the parts of
// kube-apiserver's naming, establishing and finalizer controllers and of its
// CRD handler's serving table:
//
//   - it watches the CRDs in the store, so every server sharing the store
//     serves a CRD's custom resources as soon as the CRD is Established,
//     whichever server it was created on (the registry, crdRegistry);
//   - it accepts names (NamesAccepted, with upstream's reasons for a name
//     another CRD of the group, or a built-in resource of the group, has
//     taken), fills status.acceptedNames and sets Established;
//   - for a CRD marked for deletion (markCRDForDeletion), it deletes every
//     custom resource of the CRD and then removes the customresourcecleanup
//     finalizer, which deletes the CRD.
//
// Several servers may do the same write at once: each write recomputes the
// status from the current object inside the store transaction, so they agree.

// crdRetry is how long the controller waits before retrying a failed store
// call, and how often a cleanup checks whether the last custom resources
// (held by their finalizers) are gone.
const crdRetry = 200 * time.Millisecond

// startCRDController serves the CRDs the store already holds (so a restarted
// server serves them from its first request) and then follows changes.
func (s *Server) startCRDController(ctx context.Context) error {
	rev, err := s.syncAllCRDs(ctx)
	if err != nil {
		return err
	}
	go s.runCRDController(ctx, rev)
	return nil
}

// syncAllCRDs syncs every stored CRD and forgets the ones that are gone.
func (s *Server) syncAllCRDs(ctx context.Context) (int64, error) {
	kvs, rev, err := s.store.List(crdResource.prefix(""))
	if err != nil {
		return 0, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	present := map[string]bool{}
	for _, kv := range kvs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := decodeStored(kv.Value, crd); err != nil {
			s.log.Error("decoding stored CustomResourceDefinition", "key", kv.Key, "err", err)
			continue
		}
		present[crd.Name] = true
		s.syncCRD(ctx, crd)
	}
	for _, name := range s.crds.names() {
		if !present[name] {
			s.crds.set(name, "", nil, nil)
		}
	}
	return rev, nil
}

func (s *Server) runCRDController(ctx context.Context, rev int64) {
	prefix := crdResource.prefix("")
	for {
		events, err := s.store.Watch(ctx, prefix, rev)
		switch {
		case ctx.Err() != nil || errors.Is(err, store.ErrClosed):
			return
		case err != nil:
			// Expired history: start again from a fresh list.
			r, lerr := s.syncAllCRDs(ctx)
			if lerr != nil {
				s.log.Debug("resyncing CustomResourceDefinitions", "err", lerr)
				if !sleepCtx(ctx, crdRetry) {
					return
				}
				continue
			}
			rev = r
			continue
		}
		for e := range events {
			rev = e.Rev
			if e.Type == store.Deleted {
				s.crds.set(strings.TrimPrefix(e.Key, prefix), "", nil, nil)
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := decodeStored(e.Value, crd); err != nil {
				s.log.Error("decoding watched CustomResourceDefinition", "key", e.Key, "err", err)
				continue
			}
			s.syncCRD(ctx, crd)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// servingKey is what a CRD's served resources are built from: a status-only
// write does not rebuild them (and recompile its CEL rules).
func servingKey(crd *apiextensionsv1.CustomResourceDefinition) string {
	return fmt.Sprintf("%s/%d/%v/%v", crd.UID, crd.Generation, crd.Status.AcceptedNames, crd.DeletionTimestamp != nil)
}

// syncCRD brings the registry and the CRD's status up to date with crd.
func (s *Server) syncCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) {
	// The status this controller wants: the names other CRDs hold, read once,
	// outside the write transaction (which the store may run more than once).
	want := crd
	var usedNames, usedKinds sets.Set[string]
	if crd.DeletionTimestamp == nil {
		usedNames, usedKinds = s.namesTaken(crd)
		want = crd.DeepCopy()
		acceptNames(want, usedNames, usedKinds)
	}
	// Serve by the wanted status, so a CRD is served (in discovery and at its
	// paths) before the write that makes it Established: a client that waits
	// for Established finds its resources.
	established := crdConditionTrue(want, apiextensionsv1.Established)
	switch {
	case !established:
		s.crds.set(crd.Name, "", nil, nil)
	case s.crds.builtFrom(crd.Name) != servingKey(want):
		res, err := crdResources(want)
		if err != nil {
			s.log.Error("serving CustomResourceDefinition", "name", crd.Name, "err", err)
			s.crds.set(crd.Name, "", nil, nil)
		} else {
			docs, err := buildCRDOpenAPI(want)
			if err != nil {
				s.log.Error("building the OpenAPI of a CustomResourceDefinition", "name", crd.Name, "err", err)
			}
			s.crds.set(crd.Name, servingKey(want), res, docs)
		}
	}
	if crd.DeletionTimestamp != nil {
		if slices.Contains(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer) {
			if _, running := s.crdCleanups.LoadOrStore(crd.UID, true); !running {
				go func() {
					defer s.crdCleanups.Delete(crd.UID)
					s.cleanupCRD(ctx, crd)
				}()
			}
		}
		return
	}
	if reflect.DeepEqual(want.Status.AcceptedNames, crd.Status.AcceptedNames) && conditionsEqual(want, crd) {
		return
	}
	_, err := s.Update(crdResource, "", crd.Name, "status", func(cur runtime.Object) (runtime.Object, error) {
		c := cur.(*apiextensionsv1.CustomResourceDefinition)
		if c.UID != crd.UID || c.DeletionTimestamp != nil {
			return c, nil
		}
		acceptNames(c, usedNames, usedKinds)
		return c, nil
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		s.log.Debug("writing CustomResourceDefinition status", "name", crd.Name, "err", err)
	}
}

func crdConditionTrue(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	c := crdCondition(crd, t)
	return c != nil && c.Status == apiextensionsv1.ConditionTrue
}

// conditionsEqual compares the conditions the controller sets, ignoring
// transition times.
func conditionsEqual(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	for _, t := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.NamesAccepted, apiextensionsv1.Established} {
		ca, cb := crdCondition(a, t), crdCondition(b, t)
		if (ca == nil) != (cb == nil) {
			return false
		}
		if ca != nil && (ca.Status != cb.Status || ca.Reason != cb.Reason || ca.Message != cb.Message) {
			return false
		}
	}
	return true
}

// acceptNames is upstream's naming controller for one CRD: the names no
// other CRD of the group has accepted (nor a built-in resource of the group
// uses) are accepted; a conflict leaves the old accepted name and sets
// NamesAccepted False with upstream's reason and message. Established turns
// True once the names are accepted, and stays so.
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, usedNames, usedKinds sets.Set[string]) {
	requested, accepted := crd.Spec.Names, crd.Status.AcceptedNames
	names := accepted
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionUnknown}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}
	if err := freeOrOurs(requested.Plural, accepted.Plural, usedNames); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := freeOrOurs(requested.Singular, accepted.Singular, usedNames); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	if !reflect.DeepEqual(requested.ShortNames, accepted.ShortNames) {
		var errs []string
		ours := sets.New(accepted.ShortNames...)
		for _, sn := range requested.ShortNames {
			if ours.Has(sn) {
				continue
			}
			if err := freeOrOurs(sn, "", usedNames); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			msg := strings.Join(errs, ", ")
			if len(errs) > 1 {
				msg = "[" + msg + "]"
			}
			conflict("ShortNamesConflict", errors.New(msg))
		} else {
			names.ShortNames = requested.ShortNames
		}
	}
	if err := freeOrOurs(requested.Kind, accepted.Kind, usedKinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := freeOrOurs(requested.ListKind, accepted.ListKind, usedKinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	names.Categories = requested.Categories
	if cond.Status == apiextensionsv1.ConditionUnknown {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found"
	}
	crd.Status.AcceptedNames = names
	setCRDCondition(crd, cond)
	est := crdCondition(crd, apiextensionsv1.Established)
	switch {
	case est != nil && est.Status == apiextensionsv1.ConditionTrue:
	case cond.Status == apiextensionsv1.ConditionTrue:
		setCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
			Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"})
	default:
		setCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
			Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"})
	}
}

func freeOrOurs(requested, accepted string, used sets.Set[string]) error {
	if requested == accepted || !used.Has(requested) {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}

// namesTaken is every resource name and kind of crd's group that other CRDs
// have accepted, and those of the group's built-in resources.
func (s *Server) namesTaken(crd *apiextensionsv1.CustomResourceDefinition) (names, kinds sets.Set[string]) {
	names, kinds = sets.New[string](), sets.New[string]()
	for _, r := range append(slices.Clone(resources), crdResource) {
		if r.gv.Group == crd.Spec.Group {
			names.Insert(r.name, r.singular)
			names.Insert(r.shortNames...)
			kinds.Insert(r.kind, r.kind+"List")
		}
	}
	kvs, _, err := s.store.List(crdResource.prefix(""))
	if err != nil {
		return names, kinds
	}
	for _, kv := range kvs {
		other := &apiextensionsv1.CustomResourceDefinition{}
		if decodeStored(kv.Value, other) != nil || other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		a := other.Status.AcceptedNames
		names.Insert(a.Plural, a.Singular)
		names.Insert(a.ShortNames...)
		kinds.Insert(a.Kind, a.ListKind)
	}
	names.Delete("")
	kinds.Delete("")
	return names, kinds
}

// cleanupCRD is upstream's finalizer controller for one CRD being deleted:
// delete its custom resources, wait until none remain (finalizers of their
// own may hold them), then remove the customresourcecleanup finalizer.
func (s *Server) cleanupCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) {
	res := s.crds.lookupCRD(crd.Name)
	if res != nil {
		s.setTerminating(crd, "InstanceDeletionInProgress", "CustomResource deletion is in progress")
		for {
			kvs, _, err := s.store.List(res.prefix(""))
			if err != nil {
				return // the store closed; the next sync starts again
			}
			if len(kvs) == 0 {
				break
			}
			for _, kv := range kvs {
				obj, err := res.decode(kv.Value)
				if err != nil {
					continue
				}
				m := metaOf(obj)
				if m.GetDeletionTimestamp() != nil {
					continue
				}
				if _, err := s.Delete(res, m.GetNamespace(), m.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					s.setTerminating(crd, "InstanceDeletionFailed", fmt.Sprintf("could not issue all deletes: %v", err))
				}
			}
			if !sleepCtx(ctx, crdRetry) {
				return
			}
		}
	}
	_, err := s.Update(crdResource, "", crd.Name, "", func(cur runtime.Object) (runtime.Object, error) {
		c := cur.(*apiextensionsv1.CustomResourceDefinition)
		if c.UID != crd.UID {
			return nil, apierrors.NewConflict(crdResource.gr(), crd.Name, errors.New("the CustomResourceDefinition was replaced"))
		}
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == apiextensionsv1.CustomResourceCleanupFinalizer })
		return c, nil
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		s.log.Error("removing the customresourcecleanup finalizer", "name", crd.Name, "err", err)
	}
}

func (s *Server) setTerminating(crd *apiextensionsv1.CustomResourceDefinition, reason, msg string) {
	s.Update(crdResource, "", crd.Name, "status", func(cur runtime.Object) (runtime.Object, error) {
		c := cur.(*apiextensionsv1.CustomResourceDefinition)
		setCRDCondition(c, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating,
			Status: apiextensionsv1.ConditionTrue, Reason: reason, Message: msg})
		return c, nil
	})
}

// crdStorage stands for what kube-apiserver's CRD handler calls a CRD's
// storage: it lives as long as the CRD's UID, spec and accepted names stay
// the same (servingKey also follows the deletion mark, which upstream does
// not rebuild storage for), and ending it ends every watch on the CRD's
// resources, as upstream's tearDown destroys the storage and with it the
// watch cache's watchers. Clients see their watch close and re-watch (or,
// for a deleted CRD, get 404).
type crdStorage struct {
	key  string        // the CRD's UID, generation and accepted names
	done chan struct{} // closed when the storage ends
}

// crdTeardownDelay is how long a watch on an ended storage still delivers
// the events already on their way (the last custom resources' deletions,
// written just before the CRD went), as upstream's tearDown waits a second
// before destroying the storage.
const crdTeardownDelay = time.Second

func crdStorageKey(crd *apiextensionsv1.CustomResourceDefinition) string {
	return fmt.Sprintf("%s/%d/%v", crd.UID, crd.Generation, crd.Status.AcceptedNames)
}

// replace hands the storage on to res, the new entries of its CRD, when
// they were built from the same storage key, and otherwise ends it and
// gives res a new one. st may be nil (no entries before); res may be empty
// (the CRD is no longer served).
func (st *crdStorage) replace(res []*resource) {
	next := st
	if len(res) == 0 || st == nil || st.key != crdStorageKey(res[0].cr.crd) {
		if st != nil {
			close(st.done)
		}
		next = nil
		if len(res) > 0 {
			next = &crdStorage{key: crdStorageKey(res[0].cr.crd), done: make(chan struct{})}
		}
	}
	for _, r := range res {
		r.cr.storage = next
	}
}
