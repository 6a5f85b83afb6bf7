package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/apiserver/printers"
	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, rq request) error {
	switch {
	case rq.name == "":
		switch r.Method {
		case http.MethodGet:
			if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
				return s.serveWatch(w, r, rq)
			}
			return s.serveList(w, r, rq)
		case http.MethodPost:
			return s.serveCreate(w, r, rq)
		case http.MethodDelete:
			return s.serveDeleteCollection(w, r, rq)
		}
	case rq.sub == "scale":
		return s.serveScale(w, r, rq)
	case rq.sub == "log":
		return s.servePodLog(w, r, rq)
	case rq.sub == "token":
		return s.serveTokenRequest(w, r, rq)
	default:
		switch r.Method {
		case http.MethodGet:
			return s.serveGet(w, r, rq)
		case http.MethodPut:
			return s.servePut(w, r, rq)
		case http.MethodPatch:
			return s.servePatch(w, r, rq)
		case http.MethodDelete:
			if rq.sub != "" {
				break
			}
			return s.serveDelete(w, r, rq)
		}
	}
	return apierrors.NewMethodNotSupported(rq.res.gr(), strings.ToLower(r.Method))
}

// get reads and decodes one object.
func (s *Server) get(res *resource, ns, name string) (runtime.Object, error) {
	kv, err := s.store.Get(res.key(ns, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(res.gr(), name)
	}
	if err != nil {
		return nil, err
	}
	obj, err := res.decode(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("decoding stored %s %q: %w", res.kind, name, err)
	}
	return obj, nil
}

// decode decodes a stored object for a reader: custom resources get their
// schema's defaults, as upstream applies them when reading from storage.
func (res *resource) decode(data []byte) (runtime.Object, error) {
	obj := res.newObj()
	if err := decodeStored(data, obj); err != nil {
		return nil, err
	}
	if res.cr != nil {
		res.cr.fromStorage(obj)
	}
	return obj, nil
}

// table is the Table of objs of res, with res's columns.
func (s *Server) table(res *resource, objs []runtime.Object, includeObject string) (*metav1.Table, error) {
	if res.cr != nil {
		return res.cr.tableOf(objs, includeObject)
	}
	t, err := printers.Table(res.name, objs, includeObject, s.now())
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error()) // an unknown includeObject
	}
	return t, nil
}

func (s *Server) serveGet(w http.ResponseWriter, r *http.Request, rq request) error {
	obj, err := s.get(rq.res, rq.namespace, rq.name)
	if err != nil {
		return err
	}
	return s.respond(w, r, rq.res, http.StatusOK, obj)
}

// respond writes one object, or a one-row Table when the client asked for it.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, res *resource, code int, obj runtime.Object) error {
	if wantsTable(r) && r.Method == http.MethodGet {
		t, err := s.table(res, []runtime.Object{obj}, r.URL.Query().Get("includeObject"))
		if err != nil {
			return err
		}
		writeValue(w, r, code, t)
		return nil
	}
	if v := wantsMetadata(r); v != "" {
		writeValue(w, r, code, partialMetadata(obj, v))
		return nil
	}
	b, err := encodeObject(obj, res.gvk())
	if err != nil {
		return err
	}
	writeJSON(w, r, code, b)
	return nil
}

// selectors parses labelSelector and fieldSelector query parameters.
func selectors(r *http.Request, res *resource) (labels.Selector, fields.Selector, error) {
	q := r.URL.Query()
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	fs, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
	}
	if err := res.checkFieldSelector(fs); err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	return ls, fs, nil
}

func (res *resource) matches(obj runtime.Object, ls labels.Selector, fs fields.Selector) bool {
	if !ls.Empty() && !ls.Matches(labels.Set(metaOf(obj).GetLabels())) {
		return false
	}
	return fs.Empty() || fs.Matches(res.objectFields(obj))
}

func (s *Server) serveList(w http.ResponseWriter, r *http.Request, rq request) error {
	ls, fs, err := selectors(r, rq.res)
	if err != nil {
		return err
	}
	// A fieldSelector on metadata.namespace narrows the scan like a namespaced path.
	ns := rq.namespace
	if v, ok := fs.RequiresExactMatch("metadata.namespace"); ok && rq.res.namespaced && ns == "" {
		ns = v
	}
	kvs, rev, err := s.store.List(rq.res.prefix(ns))
	if err != nil {
		return err
	}
	filter := !ls.Empty() || !fs.Empty()
	table := wantsTable(r)
	metaVersion := wantsMetadata(r)
	var raw [][]byte
	var objs []runtime.Object
	for _, kv := range kvs {
		// Custom resources are decoded to be defaulted and to take the
		// apiVersion asked for, unless they are stored as they would be
		// served (crVersion.servedAsStored).
		if !filter && !table && metaVersion == "" && (rq.res.cr == nil || rq.res.cr.servedAsStored(kv)) {
			raw = append(raw, kv.Value)
			continue
		}
		obj, err := rq.res.decode(kv.Value)
		if err != nil {
			return fmt.Errorf("decoding stored %s: %w", kv.Key, err)
		}
		if !rq.res.matches(obj, ls, fs) {
			continue
		}
		switch {
		case table:
			objs = append(objs, obj)
		case metaVersion != "":
			b, err := json.Marshal(partialMetadata(obj, metaVersion))
			if err != nil {
				return err
			}
			raw = append(raw, b)
		case rq.res.cr != nil:
			b, err := encodeObject(obj, rq.res.gvk())
			if err != nil {
				return err
			}
			raw = append(raw, b)
		default:
			raw = append(raw, kv.Value)
		}
	}
	if table {
		t, err := s.table(rq.res, objs, r.URL.Query().Get("includeObject"))
		if err != nil {
			return err
		}
		t.ResourceVersion = strconv.FormatInt(rev, 10)
		writeValue(w, r, http.StatusOK, t)
		return nil
	}
	if metaVersion != "" {
		writeJSON(w, r, http.StatusOK, listJSON("PartialObjectMetadataList", "meta.k8s.io/"+metaVersion, rev, raw))
		return nil
	}
	writeJSON(w, r, http.StatusOK, listJSON(rq.res.listKind(), rq.res.gv.String(), rev, raw))
	return nil
}

// listKind is the kind of a list of res.
func (res *resource) listKind() string {
	if res.cr != nil && res.cr.listKind != "" {
		return res.cr.listKind
	}
	return res.kind + "List"
}

// generateNameSuffix is Kubernetes' alphabet for generated names (no vowels, no
// look-alike digits), five characters long.
func generateNameSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// decodeRequest reads the request's object of rq's resource, with the
// fieldValidation the client asked for; unknown fields it was told to warn
// about become Warning headers (kubectl prints: Warning: unknown field
// "spec.x").
func decodeRequest(w http.ResponseWriter, r *http.Request, rq request) (runtime.Object, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	obj := rq.res.newObj()
	warnings, err := decodeInto(body, obj, rq.res.gvk(), fieldValidation(r))
	if err != nil {
		return nil, err
	}
	if rq.res.cr != nil {
		unknown, err := rq.res.cr.normalize(obj.(*unstructured.Unstructured), fieldValidation(r))
		if err != nil {
			return nil, err
		}
		warnings = append(warnings, unknown...)
	}
	for _, wn := range warnings {
		w.Header().Add("Warning", "299 - "+strconv.Quote(wn))
	}
	return obj, nil
}

func (s *Server) serveCreate(w http.ResponseWriter, r *http.Request, rq request) error {
	obj, err := decodeRequest(w, r, rq)
	if err != nil {
		return err
	}
	if err := checkWriteOptions(r, "CreateOptions", false); err != nil {
		return err
	}
	wo, err := s.requestWrite(r, rq)
	if err != nil {
		return err
	}
	created, err := s.create(rq.res, rq.namespace, obj, wo)
	if err != nil {
		return err
	}
	addObjectWarnings(w, created)
	return s.respond(w, r, rq.res, http.StatusCreated, created)
}

// Create stores a new object with Kubernetes' create semantics, as the
// server's own write.
func (s *Server) Create(res *resource, ns string, obj runtime.Object) (runtime.Object, error) {
	return s.create(res, ns, obj, writeOpts{manager: internalManager})
}

func (s *Server) create(res *resource, ns string, obj runtime.Object, wo writeOpts) (runtime.Object, error) {
	m := metaOf(obj)
	if res.namespaced {
		if m.GetNamespace() == "" {
			m.SetNamespace(ns)
		} else if ns != "" && m.GetNamespace() != ns {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		if m.GetNamespace() == "" {
			m.SetNamespace(metav1.NamespaceDefault)
		}
	} else {
		m.SetNamespace("")
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + generateNameSuffix())
	}
	if m.GetName() == "" {
		return nil, apierrors.NewInvalid(res.gvk().GroupKind(), "", field.ErrorList{
			field.Required(field.NewPath("metadata", "name"), "name or generateName is required"),
		})
	}
	if wo.check != nil {
		if err := wo.check(obj, nil); err != nil {
			return nil, err
		}
	}
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.NewTime(s.now().Truncate(time.Second)))
	m.SetResourceVersion("")
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	if res.generation {
		m.SetGeneration(1)
	}
	obj, err := s.recordUpdate(res, "", wo, res.newObj(), obj)
	if err != nil {
		return nil, err
	}
	m = metaOf(obj)
	if res.ext != nil {
		prepared, err := res.ext.create(obj)
		if err != nil {
			return nil, err
		}
		obj, m = prepared, metaOf(prepared)
	} else if err := s.admitBuiltin(res, obj); err != nil {
		return nil, err
	}
	key := res.key(m.GetNamespace(), m.GetName())
	var created runtime.Object
	// The store may run this more than once (the etcd backend does on a
	// conflicting commit): each run starts again from the validated object,
	// so a ClusterIP or NodePort a discarded run picked is not taken for one
	// the client asked for.
	_, err = s.store.Update(dryRunTx(wo.dryRun, func(tx store.Tx) error {
		created = nil
		o := obj.DeepCopyObject()
		if res.namespaced {
			if err := checkNamespace(tx, m.GetNamespace()); err != nil {
				return err
			}
		}
		if _, exists := tx.Get(key); exists {
			return apierrors.NewAlreadyExists(res.gr(), m.GetName())
		}
		if err := s.beforeWrite(tx, res, o, nil); err != nil {
			return err
		}
		if res == nsResource {
			if err := s.createDefaultServiceAccount(tx, m.GetName()); err != nil {
				return err
			}
		}
		created = o
		return s.put(tx, res, key, o)
	}))
	if errors.Is(err, errDryRun) {
		// As kube-apiserver's dry run: the object as it would be stored,
		// without a resourceVersion.
		metaOf(created).SetResourceVersion("")
		return created, nil
	}
	if err != nil {
		return nil, err
	}
	return created, nil
}

// admitBuiltin prepares, defaults and validates a new built-in object.
func (s *Server) admitBuiltin(res *resource, obj runtime.Object) error {
	prepareForCreate(res, obj)
	if pod, ok := obj.(*corev1.Pod); ok {
		if err := s.admitPod(pod); err != nil {
			return err
		}
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		s.admitIngress(ing)
	}
	vcfg := s.validationFor(obj, func(prefix string) []store.KV { kvs, _, _ := s.store.List(prefix); return kvs })
	validation.Default(obj, vcfg)
	if errs := validation.Validate(obj, nil, vcfg); len(errs) > 0 {
		return apierrors.NewInvalid(res.gvk().GroupKind(), metaOf(obj).GetName(), errs)
	}
	return nil
}

// put encodes obj at the transaction's revision and writes it.
func (s *Server) put(tx store.Tx, res *resource, key string, obj runtime.Object) error {
	withResourceVersion(obj, tx.Rev())
	b, err := encodeObject(obj, res.gvk())
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	return tx.Put(key, b)
}

func checkNamespace(tx store.Tx, ns string) error {
	kv, ok := tx.Get(nsResource.key("", ns))
	if !ok {
		return apierrors.NewNotFound(nsResource.gr(), ns)
	}
	var n corev1.Namespace
	if err := decodeStored(kv.Value, &n); err != nil {
		return err
	}
	if n.Status.Phase == corev1.NamespaceTerminating {
		err := apierrors.NewForbidden(nsResource.gr(), ns, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace",
			Message: fmt.Sprintf("namespace %s is being terminated", ns)})
		return err
	}
	return nil
}

var nsResource = lookup("", "v1", "namespaces")

// prepareForCreate clears what a client may not set on create, as each Kubernetes
// registry strategy does.
func prepareForCreate(res *resource, obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort}
	case *corev1.Namespace:
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
		if len(o.Spec.Finalizers) == 0 {
			o.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		}
	case *corev1.Node:
		// kubelets register nodes with their status; keep it.
	default:
		if res.status {
			resetField(obj, "Status")
		}
	}
}

func (s *Server) servePut(w http.ResponseWriter, r *http.Request, rq request) error {
	obj, err := decodeRequest(w, r, rq)
	if err != nil {
		return err
	}
	m := metaOf(obj)
	if m.GetName() != rq.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), rq.name))
	}
	if rq.res.namespaced && m.GetNamespace() != "" && m.GetNamespace() != rq.namespace {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if err := checkWriteOptions(r, "UpdateOptions", false); err != nil {
		return err
	}
	wo, err := s.requestWrite(r, rq)
	if err != nil {
		return err
	}
	// A copy per run: Update may run mutate more than once and changes what it returns.
	updated, err := s.update(rq.res, rq.namespace, rq.name, rq.sub, wo, func(runtime.Object) (runtime.Object, error) { return obj.DeepCopyObject(), nil })
	if err != nil {
		return err
	}
	addObjectWarnings(w, updated)
	return s.respond(w, r, rq.res, http.StatusOK, updated)
}

// Update replaces an object with the one mutate returns, given the current one,
// inside one store transaction. A resourceVersion in the returned object is a
// precondition (409 Conflict when stale). sub is "" or "status".
//
// mutate runs inside the store transaction, which the store may run more than
// once (the etcd backend retries a commit that lost a race with another
// server): it gets a fresh copy of the current object each time, and must
// return an object of its own making (cur, or one built in this call) and
// change nothing outside it. The write is the server's own (managedFields).
func (s *Server) Update(res *resource, ns, name, sub string, mutate func(cur runtime.Object) (runtime.Object, error)) (runtime.Object, error) {
	return s.update(res, ns, name, sub, writeOpts{manager: internalManager}, mutate)
}

func (s *Server) update(res *resource, ns, name, sub string, wo writeOpts, mutate func(cur runtime.Object) (runtime.Object, error)) (runtime.Object, error) {
	key := res.key(ns, name)
	var result runtime.Object
	var storedRV string
	_, err := s.store.Update(dryRunTx(wo.dryRun, func(tx store.Tx) error {
		result = nil
		kv, ok := tx.Get(key)
		if !ok {
			return apierrors.NewNotFound(res.gr(), name)
		}
		old, err := res.decode(kv.Value)
		if err != nil {
			return err
		}
		cur := old.DeepCopyObject()
		obj, err := mutate(cur)
		if err != nil {
			return err
		}
		m, om := metaOf(obj), metaOf(old)
		storedRV = om.GetResourceVersion()
		if rv := m.GetResourceVersion(); rv != "" && rv != om.GetResourceVersion() {
			return apierrors.NewConflict(res.gr(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if res.namespaced {
			m.SetNamespace(ns)
		}
		m.SetName(name)
		m.SetUID(om.GetUID())
		m.SetCreationTimestamp(om.GetCreationTimestamp())
		m.SetDeletionTimestamp(om.GetDeletionTimestamp())
		m.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
		m.SetGeneration(om.GetGeneration())
		m.SetResourceVersion(om.GetResourceVersion())
		m.SetSelfLink("")
		if m.GetGenerateName() == "" {
			m.SetGenerateName(om.GetGenerateName())
		}
		if wo.check != nil {
			if err := wo.check(obj, old); err != nil {
				return err
			}
		}
		if obj, err = s.recordUpdate(res, sub, wo, old.DeepCopyObject(), obj); err != nil {
			return err
		}
		m = metaOf(obj)
		switch {
		case res.ext != nil:
			// Upstream's strategy does status, spec and generation.
			prepared, err := res.ext.update(obj, old, sub)
			if err != nil {
				return err
			}
			obj, m = prepared, metaOf(prepared)
		case sub == "status":
			// A status write changes status and, as Kubernetes' status
			// strategies allow, metadata; never spec. Pods (here) and
			// ServiceCIDRs (ResetObjectMetaForStatus) take status only, and
			// Deployments keep their labels, as their strategies say.
			st := old.DeepCopyObject()
			copyField(st, obj, "Status")
			if res.name != "pods" && res.name != "servicecidrs" {
				copyField(st, obj, "ObjectMeta")
				if res.name == "deployments" {
					metaOf(st).SetLabels(om.GetLabels())
				}
			}
			metaOf(st).SetResourceVersion(om.GetResourceVersion())
			metaOf(st).SetManagedFields(m.GetManagedFields())
			obj, m = st, metaOf(st)
		case sub == "finalize":
			// The finalize subresource changes spec.finalizers only.
			st := old.DeepCopyObject().(*corev1.Namespace)
			st.Spec.Finalizers = obj.(*corev1.Namespace).Spec.Finalizers
			obj, m = st, metaOf(st)
		case res.status:
			copyField(obj, old, "Status")
			if n, ok := obj.(*corev1.Namespace); ok {
				// As Kubernetes: spec.finalizers change only through finalize.
				n.Spec.Finalizers = old.(*corev1.Namespace).Spec.Finalizers
			}
		}
		if res.generation && sub == "" && specChanged(obj, old) {
			m.SetGeneration(om.GetGeneration() + 1)
		}
		if svc, ok := obj.(*corev1.Service); ok {
			keepAllocated(svc, old.(*corev1.Service))
		}
		if res.ext == nil {
			vcfg := s.validationFor(obj, tx.List)
			validation.DefaultUpdate(obj, old, vcfg)
			if errs := validation.Validate(obj, old, vcfg); len(errs) > 0 {
				return apierrors.NewInvalid(res.gvk().GroupKind(), name, errs)
			}
		}
		// An object being deleted goes once its last finalizer is removed. Pods go
		// when their node agent deletes them, namespaces when finalizeNamespace has
		// emptied them.
		if m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 && res != podResource &&
			(res != nsResource || len(obj.(*corev1.Namespace).Spec.Finalizers) == 0) {
			if err := s.beforeDelete(tx, res, old); err != nil {
				return err
			}
			result = obj
			return tx.Delete(key)
		}
		if err := s.beforeWrite(tx, res, obj, old); err != nil {
			return err
		}
		if unchanged(res, obj, kv.Value) {
			result = old
			return nil
		}
		result = obj
		return s.put(tx, res, key, obj)
	}))
	if errors.Is(err, errDryRun) {
		metaOf(result).SetResourceVersion(storedRV)
		return result, nil
	}
	if err != nil {
		return nil, err
	}
	return result, nil
}

// unchanged reports whether obj encodes to exactly what is stored, in which case
// the write is skipped and the resourceVersion does not move, as in Kubernetes.
func unchanged(res *resource, obj runtime.Object, stored []byte) bool {
	b, err := encodeObject(obj, res.gvk())
	return err == nil && string(b) == string(stored)
}

func specChanged(a, b runtime.Object) bool {
	sa, sb := substruct(a, "Spec"), substruct(b, "Spec")
	if !sa.IsValid() || !sb.IsValid() {
		return false
	}
	ja, _ := json.Marshal(sa.Interface())
	jb, _ := json.Marshal(sb.Interface())
	return string(ja) != string(jb)
}

func (s *Server) servePatch(w http.ResponseWriter, r *http.Request, rq request) error {
	pt := patchTypeOf(r)
	if pt == types.ApplyYAMLPatchType {
		// As written: the apply's own decoding reports duplicate fields.
		patch, err := readRawBody(r)
		if err != nil {
			return err
		}
		return s.serveApply(w, r, rq, patch)
	}
	patch, err := readBody(r)
	if err != nil {
		return err
	}
	if err := checkWriteOptions(r, "PatchOptions", false); err != nil {
		return err
	}
	wo, err := s.requestWrite(r, rq)
	if err != nil {
		return err
	}
	updated, err := s.patch(rq.res, rq.namespace, rq.name, rq.sub, pt, patch, fieldValidation(r), wo)
	if err != nil {
		return err
	}
	addObjectWarnings(w, updated)
	return s.respond(w, r, rq.res, http.StatusOK, updated)
}

// serveApply is a server-side apply: PATCH with application/apply-patch+yaml
// and a fieldManager, which creates the object when it does not exist (201),
// as kube-apiserver.
func (s *Server) serveApply(w http.ResponseWriter, r *http.Request, rq request, patch []byte) error {
	if err := checkWriteOptions(r, "PatchOptions", true); err != nil {
		return err
	}
	wo, err := s.requestWrite(r, rq)
	if err != nil {
		return err
	}
	wo.applied = true
	force, mode := r.URL.Query().Get("force") == "true", fieldValidation(r)
	var warnings []string
	apply := func(live runtime.Object) (runtime.Object, error) {
		obj, wn, err := s.serverSideApply(rq.res, rq.sub, live, patch, wo.manager, force, mode)
		if err != nil {
			return nil, err
		}
		warnings = wn
		if n := metaOf(obj).GetName(); n != rq.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, rq.name))
		}
		if rq.res.cr != nil {
			if _, err := rq.res.cr.normalize(obj.(*unstructured.Unstructured), "Ignore"); err != nil {
				return nil, err
			}
		}
		return obj, nil
	}
	code := http.StatusOK
	updated, err := s.update(rq.res, rq.namespace, rq.name, rq.sub, wo, func(cur runtime.Object) (runtime.Object, error) {
		obj, err := apply(cur)
		if err != nil {
			return nil, err
		}
		// An apply is against the current object unless it names a resourceVersion.
		if rv := metaOf(obj).GetResourceVersion(); rv == metaOf(cur).GetResourceVersion() {
			metaOf(obj).SetResourceVersion("")
		}
		return obj, nil
	})
	if apierrors.IsNotFound(err) && rq.sub == "" {
		var obj runtime.Object
		if obj, err = apply(rq.res.newObj()); err != nil {
			return err
		}
		m := metaOf(obj)
		if m.GetUID() != "" {
			return apierrors.NewConflict(rq.res.gr(), rq.name, fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", m.GetUID()))
		}
		if m.GetResourceVersion() != "" {
			return apierrors.NewConflict(rq.res.gr(), rq.name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		updated, err = s.create(rq.res, rq.namespace, obj, wo)
		code = http.StatusCreated
	}
	if err != nil {
		return err
	}
	for _, wn := range warnings {
		w.Header().Add("Warning", "299 - "+strconv.Quote(wn))
	}
	addObjectWarnings(w, updated)
	return s.respond(w, r, rq.res, code, updated)
}

// addObjectWarnings sends the warnings Kubernetes gives with an accepted
// write of obj (validation.Warnings) as Warning headers.
func addObjectWarnings(w http.ResponseWriter, obj runtime.Object) {
	for _, wn := range validation.Warnings(obj) {
		w.Header().Add("Warning", "299 - "+strconv.Quote(wn))
	}
}

// Patch applies a JSON merge, JSON or strategic merge patch to the current object and
// stores the result with Update semantics, as the server's own write.
func (s *Server) Patch(res *resource, ns, name, sub string, pt types.PatchType, patch []byte, mode string) (runtime.Object, error) {
	return s.patch(res, ns, name, sub, pt, patch, mode, writeOpts{manager: internalManager})
}

func (s *Server) patch(res *resource, ns, name, sub string, pt types.PatchType, patch []byte, mode string, wo writeOpts) (runtime.Object, error) {
	return s.update(res, ns, name, sub, wo, func(cur runtime.Object) (runtime.Object, error) {
		curJSON, err := encodeObject(cur, res.gvk())
		if err != nil {
			return nil, err
		}
		patched, err := applyPatch(pt, curJSON, patch, res.newObj())
		if err != nil {
			return nil, err
		}
		obj := res.newObj()
		if _, err := decodeInto(patched, obj, res.gvk(), mode); err != nil {
			return nil, err
		}
		if res.cr != nil {
			if _, err := res.cr.normalize(obj.(*unstructured.Unstructured), mode); err != nil {
				return nil, err
			}
		}
		// Without a resourceVersion in the patch, the patch applies to the current object.
		if rv := metaOf(obj).GetResourceVersion(); rv == "" || rv == metaOf(cur).GetResourceVersion() {
			metaOf(obj).SetResourceVersion("")
		}
		return obj, nil
	})
}

func applyPatch(pt types.PatchType, cur, patch []byte, schema runtime.Object) ([]byte, error) {
	var out []byte
	var err error
	switch pt {
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(patch); err == nil {
			if out, err = p.Apply(cur); err != nil {
				// A well-formed patch that does not apply (a failed test, a missing
				// path) is 422, as kube-apiserver answers; a malformed one is 400.
				return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schemaGR, "",
					fmt.Sprintf("applying %s patch: %v", pt, err), 0, false)
			}
		}
	case types.MergePatchType:
		out, err = jsonpatch.MergePatch(cur, patch)
	case types.StrategicMergePatchType:
		out, err = strategicpatch.StrategicMergePatch(cur, patch, schema)
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schemaGR, "",
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s",
				types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType, types.ApplyYAMLPatchType), 0, false)
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("applying %s patch: %v", pt, err))
	}
	return out, nil
}
