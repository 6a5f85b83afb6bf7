package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	// applied: the object already went through FieldManager.Apply, so its
	// managedFields are set; sub "scale" records the entry as upstream's
	// scale handler does (the parent's spec.replicas, subresource scale).
	applied bool
	scale   bool
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
		if b.Len()+utf8.RuneLen(c) > fieldManagerMaxLength {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

const fieldManagerMaxLength = 128

// checkWriteOptions validates fieldManager and force as upstream validates
// Create/Update/PatchOptions: 422 with the options kind and the field.
func checkWriteOptions(r *http.Request, optionsKind string, apply bool) error {
	q := r.URL.Query()
	var errs field.ErrorList
	m := q.Get("fieldManager")
	switch {
	case apply && m == "":
		errs = append(errs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
	case len(m) > fieldManagerMaxLength:
		errs = append(errs, field.TooLong(field.NewPath("fieldManager"), "", fieldManagerMaxLength))
	default:
		for _, c := range m {
			if !unicode.IsPrint(c) {
				errs = append(errs, field.Invalid(field.NewPath("fieldManager"), m, "must only contain printable characters"))
				break
			}
		}
	}
	if f := q.Get("force"); f != "" {
		switch {
		case f != "true" && f != "false":
			return apierrors.NewBadRequest(fmt.Sprintf("invalid value for force: %q", f))
		case !apply:
			errs = append(errs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
		}
	}
	if len(errs) > 0 {
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

// fieldManager is the field manager of res's writes through sub ("",
// "status" or "scale").
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
	fmSub := sub
	if sub == "scale" {
		// Scale writes change the parent: record them as upstream's scale
		// handler does, on the parent, as subresource scale.
		sub = ""
	}
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
			gvk, gvk.GroupVersion(), fmSub, reset)
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
	return managedfields.NewDefaultFieldManager(tc, sch, sch, sch, gvk, gvk.GroupVersion(), fmSub, reset)
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
	if wo.applied {
		return obj, nil
	}
	if wo.scale {
		sub = "scale"
	}
	if sub != "" && sub != "status" && sub != "scale" {
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
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, nil, err
		}
		// A patch the schema cannot type (an undeclared field, a value of the
		// wrong type) is kube-apiserver's 500 with the library's message.
		return nil, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
			Code: http.StatusInternalServerError, Message: err.Error()}}
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
