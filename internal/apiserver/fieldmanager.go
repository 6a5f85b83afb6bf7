package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/minikit/minikit/internal/store"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Server-side apply and managedFields are apimachinery's managedfields
// package (structured-merge-diff), driven as kube-apiserver's handlers drive
// it: every create, update and patch records its manager's fields with
// UpdateNoErrors before the registry strategy runs; an apply patch
// (application/apply-patch+yaml) is merged with Apply, which reports
// conflicts as 409s naming the fields and their managers, and creates the
// object when it does not exist. The schemas are those the server publishes:
// the built-in OpenAPI v3 models for the built-in kinds, and for a custom
// resource the models apiextensions' builder makes of its CRD (with
// spec.preserveUnknownFields as upstream passes it). One field manager per
// resource version and subresource, built on first use.

// internalManager is the manager of the server's own writes (CRD conditions,
// namespace finalization, the kubernetes Service), as kube-apiserver names it.
const internalManager = "kube-apiserver"

// writeOpts says who writes and how, for managedFields.
type writeOpts struct {
	manager string // recorded in managedFields
	// applied: the object's managedFields are already set (by
	// FieldManager.Apply, or by a write through the scale subresource).
	applied bool
	dryRun  bool // dryRun=All: everything but the commit
	// check, when set, vets the object to be written against the stored
	// one (nil on create) before anything is written (escalationCheck).
	check func(obj, old runtime.Object) error
}

// requestWrite is how a request's write of rq.res is made: its manager,
// dryRun, and the RBAC escalation check of its user (rbac.go).
func (s *Server) requestWrite(r *http.Request, rq request) (writeOpts, error) {
	check, err := s.escalationCheck(userFrom(r), rq.res, rq.namespace)
	if err != nil {
		return writeOpts{}, err
	}
	return writeOpts{manager: managerFor(r), dryRun: isDryRun(r), check: check}, nil
}

// managerFor is the manager a request writes as: its fieldManager
// parameter, else its User-Agent up to the first slash, as kube-apiserver's
// managerOrUserAgent.
func managerFor(r *http.Request) string {
	if m := r.URL.Query().Get("fieldManager"); m != "" {
		return m
	}
	ua := strings.Split(r.UserAgent(), "/")[0]
	var b strings.Builder
	for _, c := range ua {
		if !unicode.IsPrint(c) {
			continue
		}
		if b.Len()+utf8.RuneLen(c) > metav1validation.FieldManagerMaxLength {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

// checkWriteOptions validates a write's fieldManager, force and dryRun with
// upstream's checks of PatchOptions (fieldManager required to apply,
// printable, at most 128 bytes; force only to apply): 422 naming the options
// kind and the field.
func checkWriteOptions(r *http.Request, optionsKind string, apply bool) error {
	q := r.URL.Query()
	if err := checkDryRun(q["dryRun"], optionsKind); err != nil {
		return err
	}
	opts := &metav1.PatchOptions{FieldManager: q.Get("fieldManager")}
	if f := q.Get("force"); f != "" {
		if f != "true" && f != "false" {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid value for force: %q", f))
		}
		force := f == "true"
		opts.Force = &force
	}
	pt := types.MergePatchType
	if apply {
		pt = types.ApplyYAMLPatchType
	}
	if errs := metav1validation.ValidatePatchOptions(opts, pt); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: optionsKind}, "", errs)
	}
	return nil
}

// builtinTypeConverter parses the built-in kinds with the schemas of the
// server's OpenAPI v3 documents, as kube-apiserver's TypeConverter.
var builtinTypeConverter = sync.OnceValues(func() (managedfields.TypeConverter, error) {
	st, err := openAPIStatic()
	if err != nil {
		return nil, err
	}
	models := map[string]*spec.Schema{}
	for _, doc := range st.v3 {
		if doc.Components == nil {
			continue
		}
		for name, s := range doc.Components.Schemas {
			models[name] = s
		}
	}
	return managedfields.NewTypeConverter(models, false)
})

// crTypeConverter parses a CRD's custom resources, every version, with the
// models apiextensions' builder makes of it; without a schema (impossible in
// v1, kept for safety) fields are deduced and atomic, as upstream.
func crTypeConverter(crd *apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	specs := []*spec3.OpenAPI{}
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	if merged.Components == nil || len(merged.Components.Schemas) == 0 {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	return managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
}

type fmKey struct {
	res *resource
	sub string
}

// builtinFieldManagers caches the built-in kinds' field managers (the
// resources table is shared by every server of the process).
var builtinFieldManagers sync.Map // fmKey -> *managedfields.FieldManager

// fieldManager is the field manager of res's writes through sub ("" or
// "status").
func (s *Server) fieldManager(res *resource, sub string) (*managedfields.FieldManager, error) {
	key := fmKey{res, sub}
	cache := &builtinFieldManagers
	if res.cr != nil {
		cache = &res.cr.fieldManagers
	}
	if fm, ok := cache.Load(key); ok {
		return fm.(*managedfields.FieldManager), nil
	}
	fm, err := newFieldManager(res, sub)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("field manager of %s: %w", res.gvk(), err))
	}
	actual, _ := cache.LoadOrStore(key, fm)
	return actual.(*managedfields.FieldManager), nil
}

func newFieldManager(res *resource, sub string) (*managedfields.FieldManager, error) {
	gvk := res.gvk()
	apiVersion := fieldpath.APIVersion(gvk.GroupVersion().String())
	if cv := res.cr; cv != nil {
		tc, err := cv.typeConverter()
		if err != nil {
			return nil, err
		}
		st := cv.strategy
		if sub == "status" {
			st = cv.status
		}
		reset := map[fieldpath.APIVersion]fieldpath.Filter{}
		if rs, ok := st.(interface {
			GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
		}); ok {
			reset = fieldpath.NewExcludeFilterSetMap(rs.GetResetFields())
		}
		return managedfields.NewDefaultCRDFieldManager(tc, crConvertor{}, crDefaulter{cv}, unstructuredscheme.NewUnstructuredCreator(),
			gvk, gvk.GroupVersion(), sub, reset)
	}
	tc, err := builtinTypeConverter()
	if err != nil {
		return nil, err
	}
	var sch *runtime.Scheme = clientscheme.Scheme
	if gvk.Group == apiextensionsv1.GroupName {
		sch = crdScheme
	}
	// The fields the strategy resets, as upstream's GetResetFields: a
	// resource with a status subresource keeps status out of the main
	// resource's writes, and spec (metadata for CRDs) out of status writes.
	var paths []fieldpath.Path
	switch {
	case sub == "status":
		paths = append(paths, fieldpath.MakePathOrDie("spec"))
		if res.name == "deployments" {
			paths = append(paths, fieldpath.MakePathOrDie("metadata", "labels"))
		}
		if res.name == "pods" || res.name == "servicecidrs" || res == crdResource {
			paths = append(paths, fieldpath.MakePathOrDie("metadata"))
		}
	case res.status:
		paths = append(paths, fieldpath.MakePathOrDie("status"))
	}
	reset := map[fieldpath.APIVersion]fieldpath.Filter{}
	if len(paths) > 0 {
		reset[apiVersion] = fieldpath.NewExcludeSetFilter(fieldpath.NewSet(paths...))
	}
	return managedfields.NewDefaultFieldManager(tc, sch, sch, sch, gvk, gvk.GroupVersion(), sub, reset)
}

// crConvertor converts custom resources between versions as conversion
// strategy None does: by setting apiVersion, on a copy (as upstream's safe
// converter: the field manager's typed values share their maps with the
// objects it converts).
type crConvertor struct{}

func (crConvertor) Convert(in, out, _ any) error {
	ui, ok1 := in.(*unstructured.Unstructured)
	uo, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return fmt.Errorf("cannot convert %T to %T", in, out)
	}
	uo.Object = ui.DeepCopy().Object
	return nil
}

func (crConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("cannot convert %T", in)
	}
	u = u.DeepCopy()
	gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok {
		return nil, fmt.Errorf("%s cannot be converted to %v", u.GroupVersionKind(), target)
	}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func (crConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// crDefaulter applies a custom resource version's schema defaults to
// merged apply results, as upstream's unstructuredDefaulter.
type crDefaulter struct{ cv *crVersion }

func (d crDefaulter) Default(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && d.cv.structural != nil && u.GroupVersionKind() == d.cv.gvk {
		structuraldefaulting.Default(u.Object, d.cv.structural)
	}
}

// crdTypeConverter is a CRD's type converter, built on first use and
// shared by its versions.
type crdTypeConverter struct {
	crd  *apiextensionsv1.CustomResourceDefinition
	once sync.Once
	tc   managedfields.TypeConverter
	err  error
}

func (cv *crVersion) typeConverter() (managedfields.TypeConverter, error) {
	t := cv.tc
	t.once.Do(func() { t.tc, t.err = crTypeConverter(t.crd) })
	return t.tc, t.err
}

// recordUpdate sets obj's managedFields for a non-apply write of obj over
// live (an empty object on create), as upstream's handlers do before the
// strategy runs.
func (s *Server) recordUpdate(res *resource, sub string, wo writeOpts, live, obj runtime.Object) (runtime.Object, error) {
	if wo.applied || (sub != "" && sub != "status") {
		return obj, nil
	}
	fm, err := s.fieldManager(res, sub)
	if err != nil {
		return nil, err
	}
	gvk := res.gvk()
	live.GetObjectKind().SetGroupVersionKind(gvk)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return fm.UpdateNoErrors(live, obj, wo.manager), nil
}

// applyPatch is a server-side apply of patch (YAML or JSON) over live (an
// empty object when creating), as kube-apiserver's applyPatcher: the merge
// and its conflicts, then the strict check of duplicate fields per
// fieldValidation.
func (s *Server) serverSideApply(res *resource, sub string, live runtime.Object, patch []byte, manager string, force bool, mode string) (runtime.Object, []string, error) {
	fm, err := s.fieldManager(res, sub)
	if err != nil {
		return nil, nil, err
	}
	patchObj := &unstructured.Unstructured{Object: map[string]any{}}
	if err := utilyaml.Unmarshal(patch, &patchObj.Object); err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
	}
	live.GetObjectKind().SetGroupVersionKind(res.gvk())
	obj, err := fm.Apply(live, patchObj, manager, force)
	if err != nil {
		return nil, nil, applyError(err)
	}
	var warnings []string
	if mode == metav1.FieldValidationStrict || mode == metav1.FieldValidationWarn {
		if err := utilyaml.UnmarshalStrict(patch, &map[string]any{}); err != nil {
			if mode == metav1.FieldValidationStrict {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding patch: %v", err))
			}
			warnings = append(warnings, err.Error())
		}
	}
	return obj, warnings, nil
}

// scaleFieldManager is the field manager of autoscaling/v1 Scale, the
// scale subresource's own kind.
var scaleFieldManager = sync.OnceValues(func() (*managedfields.FieldManager, error) {
	tc, err := builtinTypeConverter()
	if err != nil {
		return nil, err
	}
	sch := clientscheme.Scheme
	return managedfields.NewDefaultFieldManager(tc, sch, sch, sch, scaleGVK, scaleGVK.GroupVersion(), "scale", nil)
})

// replicasPaths maps each version of res's kind to where its replicas live,
// for upstream's ScaleHandler.
func replicasPaths(res *resource) managedfields.ResourcePathMappings {
	if res.cr == nil {
		return managedfields.ResourcePathMappings{res.gv.String(): fieldpath.MakePathOrDie("spec", "replicas")}
	}
	out := managedfields.ResourcePathMappings{}
	for _, v := range res.cr.crd.Spec.Versions {
		subs, err := apihelpers.GetSubresourcesForVersion(res.cr.crd, v.Name)
		if err != nil || subs == nil || subs.Scale == nil {
			continue
		}
		var parts []any
		for _, p := range splitPath(subs.Scale.SpecReplicasPath) {
			parts = append(parts, p)
		}
		if path, err := fieldpath.MakePath(parts...); err == nil {
			out[schema.GroupVersion{Group: res.gv.Group, Version: v.Name}.String()] = path
		}
	}
	return out
}

// scaleView sets a Scale's managedFields from its parent's, as upstream's
// scale subresource shows them.
func scaleView(res *resource, parent runtime.Object, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	h := managedfields.NewScaleHandler(metaOf(parent).GetManagedFields(), res.gv, replicasPaths(res))
	mf, err := h.ToSubresource()
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	sc.ManagedFields = mf
	return sc, nil
}

// scaleWrite is a write through the scale subresource, as upstream's scale
// storage does it: the current Scale (cur's, with the parent's entries for
// replicas) is updated with the request's Scale (PUT, patch) or applied
// (apply patch, with the fieldManager), recording its manager; the parent's
// managedFields are the result, mapped back by the ScaleHandler. It returns
// the Scale asked for and the parent's new managedFields.
func scaleWrite(r *http.Request, res *resource, body []byte, parent runtime.Object, cur *autoscalingv1.Scale) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error) {
	h := managedfields.NewScaleHandler(metaOf(parent).GetManagedFields(), res.gv, replicasPaths(res))
	mf, err := h.ToSubresource()
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	cur.ManagedFields = mf
	fm, err := scaleFieldManager()
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	var out runtime.Object
	if isApply(r) {
		patchObj := &unstructured.Unstructured{Object: map[string]any{}}
		if err := utilyaml.Unmarshal(body, &patchObj.Object); err != nil {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
		}
		q := r.URL.Query()
		if out, err = fm.Apply(cur, patchObj, q.Get("fieldManager"), q.Get("force") == "true"); err != nil {
			return nil, nil, applyError(err)
		}
	} else {
		in, err := requestedScale(r, body, cur.DeepCopy())
		if err != nil {
			return nil, nil, err
		}
		in.SetGroupVersionKind(scaleGVK)
		out = fm.UpdateNoErrors(cur, in, managerFor(r))
	}
	sc, ok := out.(*autoscalingv1.Scale)
	if !ok {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("scale field manager returned %T", out))
	}
	parentMF, err := h.ToParent(sc.ManagedFields)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	return sc, parentMF, nil
}

// isApply reports whether r is a server-side apply.
func isApply(r *http.Request) bool {
	return r.Method == http.MethodPatch && patchTypeOf(r) == types.ApplyYAMLPatchType
}

// applyError is kube-apiserver's answer to an apply the library refused:
// its own API errors (conflicts) as they are, anything else (a field the
// schema does not declare, a value of the wrong type) a 500 with the
// library's message.
func applyError(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
		Code: http.StatusInternalServerError, Message: err.Error()}}
}

// errDryRun ends a dry-run write's store transaction after everything but
// the commit: the store writes nothing for a transaction that fails.
var errDryRun = errors.New("dry run")

// dryRunTx is fn, made to fail with errDryRun when it succeeds in a dry run.
func dryRunTx(dryRun bool, fn func(tx store.Tx) error) func(tx store.Tx) error {
	if !dryRun {
		return fn
	}
	return func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errDryRun
	}
}

// isDryRun reports a request's dryRun=All (checkWriteOptions has refused
// any other value).
func isDryRun(r *http.Request) bool { return len(r.URL.Query()["dryRun"]) > 0 }

// checkDryRun accepts the dryRun values kube-apiserver accepts: All.
func checkDryRun(values []string, optionsKind string) error {
	for _, v := range values {
		if v != metav1.DryRunAll {
			return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: optionsKind}, "", field.ErrorList{
				field.NotSupported(field.NewPath("dryRun"), v, []string{metav1.DryRunAll})})
		}
	}
	return nil
}
