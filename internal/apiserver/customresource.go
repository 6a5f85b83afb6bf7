package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/apiserver/printers"
	"github.com/minikit/minikit/internal/store"
	autoscalingv1 "k8s.io/api/autoscaling/v1"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Custom resources are *unstructured.Unstructured objects served by the
// generic REST code (rest.go, watch.go, delete.go) under the same store
// layout as the built-in kinds (/registry/GROUP/PLURAL/...), one resource
// entry per served version of an Established CRD. What kube-apiserver's
// customresource registry does to them is done with its own code, in its
// order: on decode, prune unknown fields (unless the schema preserves them)
// and coerce metadata, then apply the schema's defaults; on write, upstream's
// registry strategy (OpenAPI v3 validation with ratcheting, metadata of
// embedded resources, list types, CEL rules with upstream's cost budgets,
// generation, status and scale semantics); on read, defaults again. Every
// version stores the same object (conversion strategy None), so a read only
// sets the apiVersion asked for.

// crStrategy is what Server uses of upstream's customresource strategies
// (whose types are not exported).
type crStrategy interface {
	PrepareForCreate(ctx context.Context, obj runtime.Object)
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
	WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string
	GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error)
}

// crVersion is one served version of a custom resource.
type crVersion struct {
	crdName     string
	gvk         schema.GroupVersionKind
	listKind    string
	namespaced  bool
	structural  *structuralschema.Structural // pruned of defaults; nil without a schema
	preserve    bool                         // spec.preserveUnknownFields
	strategy    crStrategy
	status      crStrategy // nil without the status subresource
	scale       *apiextensionsv1.CustomResourceSubresourceScale
	table       rest.TableConvertor
	warning     string                                    // deprecation warning, for deprecated versions
	selectable  []string                                  // the CRD's selectableFields, as field selector names
	terminating bool                                      // the CRD is being deleted: no new objects
	crd         *apiextensionsv1.CustomResourceDefinition // as served; never modified
	// schemaRev is the revision of the CRD these entries were built from;
	// storedPrefix is how an object stored in this version begins.
	schemaRev    int64
	storedPrefix []byte
	// Server-side apply (fieldmanager.go): the CRD's type converter, shared
	// by its versions, and this version's field managers.
	tc            *crdTypeConverter
	fieldManagers sync.Map
	// storage ends the watches on this resource when the CRD is deleted
	// or its spec or names change (crdcontroller.go); set by crdRegistry.set.
	storage *crdStorage
}

// servedAsStored reports whether a stored object can be served as its
// stored bytes: it was written in this version (encodeObject writes
// apiVersion first) after the CRD's schema took its current form, so it was
// pruned and defaulted by this schema and reading it adds nothing. Older
// objects, and those of another version, are decoded and defaulted. (With
// several servers, one may write with the former schema for the moment it
// takes to see a CRD change: such an object is served as written.)
func (cv *crVersion) servedAsStored(kv store.KV) bool {
	return kv.ModRev > cv.schemaRev && bytes.HasPrefix(kv.Value, cv.storedPrefix)
}

// crdResources builds the resource entries of every served version of crd,
// which must have its names accepted.
func crdResources(crd *apiextensionsv1.CustomResourceDefinition) ([]*resource, error) {
	names := crd.Status.AcceptedNames
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
	var out []*resource
	tc := &crdTypeConverter{crd: crd}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind}
		cv := &crVersion{crdName: crd.Name, gvk: gvk, listKind: names.ListKind, namespaced: namespaced,
			preserve: crd.Spec.PreserveUnknownFields, terminating: crd.DeletionTimestamp != nil, crd: crd, tc: tc,
			storedPrefix: []byte(`{"apiVersion":"` + gvk.GroupVersion().String() + `",`)}
		var err error
		if cv.schemaRev, err = strconv.ParseInt(crd.ResourceVersion, 10, 64); err != nil {
			cv.schemaRev = math.MaxInt64 // never served as stored
		}
		val, err := apihelpers.GetSchemaForVersion(crd, v.Name)
		if err != nil {
			return nil, err
		}
		var props *apiextensions.JSONSchemaProps
		if val != nil {
			in := &apiextensions.CustomResourceValidation{}
			if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, in, nil); err != nil {
				return nil, fmt.Errorf("converting the schema of %s: %w", gvk, err)
			}
			props = in.OpenAPIV3Schema
			s, err := structuralschema.NewStructural(props)
			if err != nil && !crd.Spec.PreserveUnknownFields {
				return nil, fmt.Errorf("the schema of %s is not structural: %w", gvk, err)
			}
			if s != nil {
				s = s.DeepCopy()
				if err := structuraldefaulting.PruneDefaults(s); err != nil {
					return nil, fmt.Errorf("pruning the defaults of %s: %w", gvk, err)
				}
			}
			cv.structural = s
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(props)
		if err != nil {
			return nil, fmt.Errorf("compiling the schema of %s: %w", gvk, err)
		}
		subs, err := apihelpers.GetSubresourcesForVersion(crd, v.Name)
		if err != nil {
			return nil, err
		}
		var statusSpec *apiextensions.CustomResourceSubresourceStatus
		var statusValidator apiservervalidation.SchemaValidator
		if subs != nil && subs.Status != nil {
			statusSpec = &apiextensions.CustomResourceSubresourceStatus{}
			if props != nil && props.Properties != nil {
				if st, ok := props.Properties["status"]; ok {
					if statusValidator, _, err = apiservervalidation.NewSchemaValidator(&st); err != nil {
						return nil, fmt.Errorf("compiling the status schema of %s: %w", gvk, err)
					}
				}
			}
		}
		var scaleSpec *apiextensions.CustomResourceSubresourceScale
		if subs != nil && subs.Scale != nil {
			cv.scale = subs.Scale
			scaleSpec = &apiextensions.CustomResourceSubresourceScale{}
			if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(subs.Scale, scaleSpec, nil); err != nil {
				return nil, fmt.Errorf("converting the scale subresource of %s: %w", gvk, err)
			}
		}
		st := customresource.NewStrategy(unstructuredscheme.NewUnstructuredObjectTyper(), namespaced, gvk,
			validator, statusValidator, cv.structural, statusSpec, scaleSpec, v.SelectableFields)
		cv.strategy = st
		if statusSpec != nil {
			cv.status = customresource.NewStatusStrategy(st)
		}
		for _, sf := range v.SelectableFields {
			cv.selectable = append(cv.selectable, strings.TrimPrefix(sf.JSONPath, "."))
		}
		columns := v.AdditionalPrinterColumns
		if len(columns) == 0 {
			columns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date",
				Description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
				JSONPath:    ".metadata.creationTimestamp"}}
		}
		// An invalid column spec falls back to the default columns, as upstream.
		cv.table, _ = tableconvertor.New(columns)
		if v.Deprecated {
			if v.DeprecationWarning != nil {
				cv.warning = *v.DeprecationWarning
			} else {
				cv.warning = defaultDeprecationWarning(v.Name, crd.Spec)
			}
		}
		out = append(out, &resource{
			gv: gvk.GroupVersion(), name: names.Plural, singular: names.Singular, kind: names.Kind,
			namespaced: namespaced, shortNames: names.ShortNames, categories: names.Categories,
			newObj: func() runtime.Object { return &unstructured.Unstructured{} },
			status: cv.status != nil, scale: cv.scale != nil, cr: cv, ext: cv,
		})
	}
	// Discovery lists a group's versions by priority, the first preferred.
	sort.SliceStable(out, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(out[i].gv.Version, out[j].gv.Version) > 0
	})
	return out, nil
}

// defaultDeprecationWarning is upstream's text for a deprecated version without
// its own deprecationWarning.
func defaultDeprecationWarning(deprecated string, spec apiextensionsv1.CustomResourceDefinitionSpec) string {
	msg := fmt.Sprintf("%s/%s %s is deprecated", spec.Group, deprecated, spec.Names.Kind)
	var newer []string
	for _, v := range spec.Versions {
		if v.Served && !v.Deprecated && version.CompareKubeAwareVersionStrings(deprecated, v.Name) < 0 {
			newer = append(newer, v.Name)
		}
	}
	if len(newer) == 0 {
		return msg
	}
	sort.Slice(newer, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(newer[i], newer[j]) > 0 })
	return msg + fmt.Sprintf("; use %s/%s %s", spec.Group, newer[0], spec.Names.Kind)
}

// normalize is what upstream's decoder does to a custom resource: prune
// unknown fields (reported per the fieldValidation mode, as kube-apiserver
// reports them), coerce metadata, and apply the schema's defaults.
func (cv *crVersion) normalize(u *unstructured.Unstructured, mode string) ([]string, error) {
	if cv.structural == nil {
		return nil, nil
	}
	track := mode != "Ignore"
	objectMeta, foundMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object, schemaobjectmeta.ObjectMetaOptions{
		ReturnUnknownFieldPaths: track,
	})
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding request body as %s: %v", cv.gvk.Kind, err))
	}
	apiVersion, kind := u.GetAPIVersion(), u.GetKind()
	if !cv.preserve {
		unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, cv.structural, true,
			structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: track})...)
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, cv.structural)
	}
	ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, cv.structural, false, schemaobjectmeta.CoerceOptions{
		ReturnUnknownFieldPaths: track,
	})
	if ferr != nil {
		return nil, apierrors.NewInvalid(cv.gvk.GroupKind(), u.GetName(), field.ErrorList{ferr})
	}
	unknown = append(unknown, paths...)
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	if foundMeta {
		if err := schemaobjectmeta.SetObjectMeta(u.Object, objectMeta); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	structuraldefaulting.Default(u.Object, cv.structural)
	if len(unknown) == 0 || mode == "Ignore" {
		return nil, nil
	}
	msgs := make([]string, len(unknown))
	for i, p := range unknown {
		msgs[i] = fmt.Sprintf("unknown field %q", p)
	}
	if mode == "Strict" {
		return nil, apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
	}
	return msgs, nil
}

// fromStorage applies the schema's defaults to an object read from the store,
// as upstream's storage decoder does.
func (cv *crVersion) fromStorage(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && cv.structural != nil {
		structuraldefaulting.Default(u.Object, cv.structural)
	}
}

func (cv *crVersion) invalid(u *unstructured.Unstructured, errs field.ErrorList) error {
	return apierrors.NewInvalid(cv.gvk.GroupKind(), u.GetName(), errs)
}

func (cv *crVersion) create(obj runtime.Object) (runtime.Object, error) {
	u := obj.(*unstructured.Unstructured)
	ctx := context.Background()
	cv.strategy.PrepareForCreate(ctx, u)
	if errs := cv.strategy.Validate(ctx, u); len(errs) > 0 {
		return nil, cv.invalid(u, errs)
	}
	return u, nil
}

func (cv *crVersion) update(obj, old runtime.Object, sub string) (runtime.Object, error) {
	u := obj.(*unstructured.Unstructured)
	ctx := context.Background()
	st := cv.strategy
	if sub == "status" {
		st = cv.status
	}
	st.PrepareForUpdate(ctx, u, old)
	if errs := st.ValidateUpdate(ctx, u, old); len(errs) > 0 {
		return nil, cv.invalid(u, errs)
	}
	return u, nil
}

func (cv *crVersion) knownFields() fields.Set {
	set := fields.Set{"metadata.name": ""}
	if cv.namespaced {
		set["metadata.namespace"] = ""
	}
	for _, f := range cv.selectable {
		set[f] = ""
	}
	return set
}

func (cv *crVersion) objectFields(obj runtime.Object) fields.Set {
	_, set, err := cv.strategy.GetAttrs(obj)
	if err != nil {
		return fields.Set{"metadata.name": metaOf(obj).GetName()}
	}
	return set
}

// tableOf is the Table of custom resources with the CRD version's
// additionalPrinterColumns, built by upstream's table convertor.
func (cv *crVersion) tableOf(objs []runtime.Object, includeObject string) (*metav1.Table, error) {
	policy, err := printers.IncludeObject(includeObject)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	list := &unstructured.UnstructuredList{}
	for _, o := range objs {
		list.Items = append(list.Items, *o.(*unstructured.Unstructured))
	}
	t, err := cv.table.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		return nil, err
	}
	t.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"}
	if t.Rows == nil {
		t.Rows = []metav1.TableRow{}
	}
	for i := range t.Rows {
		u := &list.Items[i]
		switch policy {
		case metav1.IncludeNone:
			t.Rows[i].Object = runtime.RawExtension{}
		case metav1.IncludeMetadata:
			partial := &metav1.PartialObjectMetadata{}
			partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"))
			m := metaOf(u)
			partial.ObjectMeta = metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
				ResourceVersion: m.GetResourceVersion(), Generation: m.GetGeneration(), CreationTimestamp: m.GetCreationTimestamp(),
				DeletionTimestamp: m.GetDeletionTimestamp(), Labels: m.GetLabels(), Annotations: m.GetAnnotations(),
				OwnerReferences: m.GetOwnerReferences(), Finalizers: m.GetFinalizers(), GenerateName: m.GetGenerateName()}
			t.Rows[i].Object = runtime.RawExtension{Object: partial}
		case metav1.IncludeObject:
			u.SetGroupVersionKind(cv.gvk)
			t.Rows[i].Object = runtime.RawExtension{Object: u}
		}
	}
	return t, nil
}

// serveCustom serves a custom resource request: the version's deprecation
// warning, the scale subresource, upstream's refusals, then the generic code.
func (s *Server) serveCustom(w http.ResponseWriter, r *http.Request, rq request) error {
	cv := rq.res.cr
	if cv.warning != "" {
		w.Header().Add("Warning", "299 - "+strconv.Quote(cv.warning))
	}
	if r.Method == http.MethodPost && rq.name == "" && cv.terminating {
		return apierrors.NewMethodNotSupported(rq.res.gr(), "create")
	}
	if r.Method == http.MethodPatch {
		pt := patchTypeOf(r)
		if pt == types.StrategicMergePatchType {
			return apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schemaGR, "",
				fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
					types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType), 0, false)
		}
	}
	if rq.sub == "scale" {
		return s.serveCustomScale(w, r, rq)
	}
	return s.serveResource(w, r, rq)
}

// crdRegistry is the table of served custom resources, per CRD. The built-in
// resources table stays static; this one changes as CRDs are established,
// updated and deleted (crdcontroller.go), and request handling reads it.
type crdRegistry struct {
	mu    sync.RWMutex
	byCRD map[string]crdServing
	byGVR map[schema.GroupVersionResource]*resource
	gen   int64 // counts changes, for the OpenAPI documents (openapi.go)
}

type crdServing struct {
	built string // what the entries were built from (servingKey)
	res   []*resource
	// storage is shared by res; nil before the first entries.
	storage *crdStorage
	docs    *crdDocs // nil when they could not be built
}

func (c *crdRegistry) generation() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// docs lists the OpenAPI documents of the served CRDs, by CRD name.
func (c *crdRegistry) docs() []*crdDocs {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []*crdDocs
	for _, n := range slices.Sorted(maps.Keys(c.byCRD)) {
		if d := c.byCRD[n].docs; d != nil {
			out = append(out, d)
		}
	}
	return out
}

func (c *crdRegistry) lookup(group, version, name string) *resource {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byGVR[schema.GroupVersionResource{Group: group, Version: version, Resource: name}]
}

// all lists the served custom resources, by CRD name and then in the CRD's
// version order.
func (c *crdRegistry) all() []*resource {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []*resource
	for _, n := range slices.Sorted(maps.Keys(c.byCRD)) {
		out = append(out, c.byCRD[n].res...)
	}
	return out
}

func (c *crdRegistry) names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Collect(maps.Keys(c.byCRD))
}

// lookupCRD returns one served resource of CRD name (they share the store
// prefix), or nil.
func (c *crdRegistry) lookupCRD(name string) *resource {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if sv := c.byCRD[name]; len(sv.res) > 0 {
		return sv.res[0]
	}
	return nil
}

func (c *crdRegistry) builtFrom(name string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byCRD[name].built
}

// set replaces what CRD name serves; res empty removes it.
func (c *crdRegistry) set(name, built string, res []*resource, docs *crdDocs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byCRD == nil {
		c.byCRD = map[string]crdServing{}
	}
	if _, ok := c.byCRD[name]; !ok && len(res) == 0 {
		return
	}
	c.gen++
	c.byCRD[name].storage.replace(res)
	if len(res) == 0 {
		delete(c.byCRD, name)
	} else {
		c.byCRD[name] = crdServing{built: built, res: res, docs: docs, storage: res[0].cr.storage}
	}
	c.byGVR = map[schema.GroupVersionResource]*resource{}
	for _, sv := range c.byCRD {
		for _, r := range sv.res {
			c.byGVR[r.gv.WithResource(r.name)] = r
		}
	}
}

// lookup finds a served resource: built-in, the CRDs themselves, or a
// custom resource.
func (s *Server) lookup(group, version, name string) *resource {
	if r := lookup(group, version, name); r != nil {
		return r
	}
	if group == crdResource.gv.Group && version == crdResource.gv.Version && name == crdResource.name {
		return crdResource
	}
	return s.crds.lookup(group, version, name)
}

// allResources is every served resource: the built-in table, CRDs, and the
// custom resources served now.
func (s *Server) allResources() []*resource {
	out := make([]*resource, 0, len(resources)+1)
	out = append(out, resources...)
	out = append(out, crdResource)
	return append(out, s.crds.all()...)
}

func splitPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }

// crScale is the autoscaling/v1 Scale of a custom resource, read at the
// paths the CRD's scale subresource names.
func crScale(obj runtime.Object, sc *apiextensionsv1.CustomResourceSubresourceScale) (*autoscalingv1.Scale, error) {
	u := obj.(*unstructured.Unstructured)
	spec, _, err := unstructured.NestedInt64(u.Object, splitPath(sc.SpecReplicasPath)...)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading %s: %w", sc.SpecReplicasPath, err))
	}
	status, _, err := unstructured.NestedInt64(u.Object, splitPath(sc.StatusReplicasPath)...)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading %s: %w", sc.StatusReplicasPath, err))
	}
	var sel string
	if sc.LabelSelectorPath != nil {
		sel, _, _ = unstructured.NestedString(u.Object, splitPath(*sc.LabelSelectorPath)...)
	}
	m := metaOf(obj)
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: scaleGVK.Kind, APIVersion: scaleGVK.GroupVersion().String()},
		ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(spec)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(status), Selector: sel},
	}, nil
}

// serveCustomScale is the scale subresource of a custom resource: a write
// sets the spec replicas path and goes through the resource's strategy.
func (s *Server) serveCustomScale(w http.ResponseWriter, r *http.Request, rq request) error {
	sc := rq.res.cr.scale
	var obj runtime.Object
	var err error
	switch r.Method {
	case http.MethodGet:
		obj, err = s.get(rq.res, rq.namespace, rq.name)
	case http.MethodPut, http.MethodPatch:
		var body []byte
		if body, err = readScaleBody(r); err != nil {
			return err
		}
		obj, err = s.update(rq.res, rq.namespace, rq.name, "", writeOpts{applied: true, dryRun: isDryRun(r)}, func(cur runtime.Object) (runtime.Object, error) {
			scale, err := crScale(cur, sc)
			if err != nil {
				return nil, err
			}
			in, mf, err := scaleWrite(r, rq.res, body, cur, scale)
			if err != nil {
				return nil, err
			}
			if in.ResourceVersion != "" && in.ResourceVersion != metaOf(cur).GetResourceVersion() {
				return nil, apierrors.NewConflict(rq.res.gr(), rq.name, errConflict)
			}
			u := cur.(*unstructured.Unstructured)
			if err := unstructured.SetNestedField(u.Object, int64(in.Spec.Replicas), splitPath(sc.SpecReplicasPath)...); err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			u.SetManagedFields(mf)
			u.SetResourceVersion("")
			return u, nil
		})
	default:
		return apierrors.NewMethodNotSupported(rq.res.gr(), strings.ToLower(r.Method))
	}
	if err != nil {
		return err
	}
	scale, err := crScale(obj, sc)
	if err != nil {
		return err
	}
	if scale, err = scaleView(rq.res, obj, scale); err != nil {
		return err
	}
	writeValue(w, r, http.StatusOK, scale)
	return nil
}
