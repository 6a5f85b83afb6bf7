package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/store/etcdtest"
	"github.com/minikit/minikit/internal/testutil"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The CRD of these tests: widgets.example.com, namespaced, with defaults, a
// CEL rule, a transition rule, the status and scale subresources, a printer
// column and a selectable field.
const (
	crdsPath    = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	widgetsPath = "/apis/example.com/v1/namespaces/default/widgets"
)

func widgetSchema() *apiextensionsv1.JSONSchemaProps {
	return &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"replicas": {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte("1")}, Minimum: ptr.To(0.0)},
					"color":    {Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"blue"`)}, MaxLength: ptr.To[int64](10)},
					"model": {Type: "string", XValidations: apiextensionsv1.ValidationRules{
						{Rule: "self == oldSelf", Message: "model is immutable"},
					}},
					"free": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
				},
				XValidations: apiextensionsv1.ValidationRules{
					{Rule: "self.replicas <= 10", Message: "at most 10 replicas"},
				},
			},
			"status": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"replicas": {Type: "integer"},
					"selector": {Type: "string"},
					"phase":    {Type: "string"},
				},
			},
		},
	}
}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
				ShortNames: []string{"wd"}, Categories: []string{"all"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: widgetSchema()},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{
						SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas",
						LabelSelectorPath: ptr.To(".status.selector"),
					},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
					{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
				},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
			}, {
				// Versions with identical schemas must have identical
				// selectableFields, as upstream's conversion hoists both.
				Name: "v1beta1", Served: true, Deprecated: true,
				Schema:           &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: widgetSchema()},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
			}, {
				Name: "v1alpha1", Served: false,
				Schema:           &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: widgetSchema()},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
			}},
		},
	}
}

// establish creates crd and waits until it is Established and its resource
// is served.
func (a *testAPI) establish(crd *apiextensionsv1.CustomResourceDefinition, served string) *apiextensionsv1.CustomResourceDefinition {
	a.t.Helper()
	a.post(crdsPath, crd).mustCode(a.t, http.StatusCreated, nil)
	return a.waitEstablished(crd.Name, served)
}

func (a *testAPI) waitEstablished(name, served string) *apiextensionsv1.CustomResourceDefinition {
	a.t.Helper()
	var got apiextensionsv1.CustomResourceDefinition
	testutil.Eventually(a.t, establishTimeout, "CRD "+name+" established", func() error {
		got = apiextensionsv1.CustomResourceDefinition{}
		if r := a.get(crdsPath + "/" + name); r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
			return fmt.Errorf("GET: HTTP %d: %s", r.code, r.body)
		}
		if c := crdCondition(&got, apiextensionsv1.Established); c == nil || c.Status != apiextensionsv1.ConditionTrue {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		if r := a.get(served); r.code != http.StatusOK {
			return fmt.Errorf("GET %s: HTTP %d", served, r.code)
		}
		return nil
	})
	return &got
}

func widget(name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name}, "spec": spec}
}

// obj is a decoded JSON object with a path getter for assertions.
type obj map[string]any

func (o obj) at(path string) any {
	var cur any = map[string]any(o)
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (r response) obj(t testing.TB, code int) obj {
	t.Helper()
	var o obj
	r.mustCode(t, code, &o)
	return o
}

func TestCRDCreateDefaultsAndConditions(t *testing.T) {
	a := newTestAPI(t)
	crd := a.establish(widgetCRD(), widgetsPath)
	if crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter {
		t.Errorf("conversion %+v, want the v1 default strategy None", crd.Spec.Conversion)
	}
	if got := crd.Status.AcceptedNames; got.Plural != "widgets" || got.Kind != "Widget" || got.ListKind != "WidgetList" || len(got.ShortNames) != 1 {
		t.Errorf("acceptedNames %+v", got)
	}
	if len(crd.Status.StoredVersions) != 1 || crd.Status.StoredVersions[0] != "v1" {
		t.Errorf("storedVersions %v, want [v1]", crd.Status.StoredVersions)
	}
	c := crdCondition(crd, apiextensionsv1.NamesAccepted)
	if c == nil || c.Status != apiextensionsv1.ConditionTrue || c.Reason != "NoConflicts" {
		t.Errorf("NamesAccepted %+v", c)
	}
	if crd.Generation != 1 {
		t.Errorf("generation %d, want 1", crd.Generation)
	}
	// The same CRD again is AlreadyExists.
	a.post(crdsPath, widgetCRD()).wantStatus(t, http.StatusConflict, metav1.StatusReasonAlreadyExists, "")
}

func TestCRDValidationErrors(t *testing.T) {
	a := newTestAPI(t)
	for _, tc := range []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinition)
		field  string
		msg    string
	}{
		{"non-structural: a property without a type", func(c *apiextensionsv1.CustomResourceDefinition) {
			s := c.Spec.Versions[0].Schema.OpenAPIV3Schema
			s.Properties["spec"] = apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{"x": {Type: "string"}}}
		}, "spec.versions[0].schema.openAPIV3Schema.properties[spec].type", "must not be empty for specified object fields"},
		{"name is not plural.group", func(c *apiextensionsv1.CustomResourceDefinition) { c.Name = "widget.example.com" },
			"metadata.name", `must be spec.names.plural+"."+spec.group`},
		{"two storage versions", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Storage = true },
			"spec.versions", "must have exactly one version marked as storage version"},
		{"CEL rule that does not compile", func(c *apiextensionsv1.CustomResourceDefinition) {
			s := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			s.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.nope > 1"}}
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
		}, "x-kubernetes-validations[0].rule", "compilation failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := widgetCRD()
			tc.mutate(crd)
			st := a.with(t).post(crdsPath, crd).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, tc.msg)
			found := false
			for _, c := range st.Details.Causes {
				found = found || strings.Contains(c.Field, tc.field)
			}
			if !found {
				t.Errorf("no cause names %s: %+v", tc.field, st.Details.Causes)
			}
		})
	}
}

func TestCRDNameConflicts(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)

	// Another CRD of the group asking for kind Widget.
	other := widgetCRD()
	other.Name, other.Spec.Names = "gizmos.example.com", apiextensionsv1.CustomResourceDefinitionNames{
		Plural: "gizmos", Singular: "gizmo", Kind: "Widget", ListKind: "GizmoList", ShortNames: []string{"wd"}}
	a.post(crdsPath, other).mustCode(t, http.StatusCreated, nil)
	// A CRD in a built-in group asking for a built-in resource's plural.
	builtin := widgetCRD()
	builtin.Name, builtin.Spec.Group = "ingresses.networking.k8s.io", "networking.k8s.io"
	builtin.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"}
	builtin.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "ingresses", Singular: "myingress", Kind: "MyIngress", ListKind: "MyIngressList"}
	a.post(crdsPath, builtin).mustCode(t, http.StatusCreated, nil)

	for _, tc := range []struct{ name, reason, msg string }{
		{"gizmos.example.com", "KindConflict", `"Widget" is already in use`},
		{"ingresses.networking.k8s.io", "PluralConflict", `"ingresses" is already in use`},
	} {
		testutil.Eventually(t, waitTimeout, tc.name+" NamesAccepted False", func() error {
			var crd apiextensionsv1.CustomResourceDefinition
			a.read(crdsPath+"/"+tc.name, &crd)
			c := crdCondition(&crd, apiextensionsv1.NamesAccepted)
			if c == nil || c.Status != apiextensionsv1.ConditionFalse || c.Reason != tc.reason || c.Message != tc.msg {
				return fmt.Errorf("NamesAccepted %+v", c)
			}
			if e := crdCondition(&crd, apiextensionsv1.Established); e == nil || e.Status != apiextensionsv1.ConditionFalse || e.Reason != "NotAccepted" {
				return fmt.Errorf("Established %+v", e)
			}
			return nil
		})
	}
	if r := a.get("/apis/example.com/v1/gizmos"); r.code != http.StatusNotFound {
		t.Errorf("the conflicting CRD is served: HTTP %d", r.code)
	}
}

func TestCRDDiscovery(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)

	var groups metav1.APIGroupList
	a.read("/apis", &groups)
	var found *metav1.APIGroup
	for i := range groups.Groups {
		if groups.Groups[i].Name == "example.com" {
			found = &groups.Groups[i]
		}
	}
	if found == nil {
		t.Fatalf("/apis has no example.com: %+v", groups)
	}
	// Served versions by priority, the first preferred; v1alpha1 is not served.
	if len(found.Versions) != 2 || found.Versions[0].Version != "v1" || found.Versions[1].Version != "v1beta1" || found.PreferredVersion.Version != "v1" {
		t.Errorf("example.com versions %+v, preferred %+v", found.Versions, found.PreferredVersion)
	}
	var g metav1.APIGroup
	a.read("/apis/example.com", &g)
	if g.Name != "example.com" {
		t.Errorf("/apis/example.com: %+v", g)
	}
	var list metav1.APIResourceList
	a.read("/apis/example.com/v1", &list)
	byName := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		byName[r.Name] = r
	}
	w := byName["widgets"]
	if w.Kind != "Widget" || !w.Namespaced || w.SingularName != "widget" || len(w.ShortNames) != 1 || w.ShortNames[0] != "wd" ||
		len(w.Categories) != 1 || len(w.Verbs) != 8 {
		t.Errorf("widgets %+v", w)
	}
	if _, ok := byName["widgets/status"]; !ok {
		t.Errorf("no widgets/status in %+v", list.APIResources)
	}
	if s := byName["widgets/scale"]; s.Kind != "Scale" || s.Group != "autoscaling" {
		t.Errorf("widgets/scale %+v", s)
	}
	// The CRDs themselves.
	a.read("/apis/apiextensions.k8s.io/v1", &list)
	if len(list.APIResources) == 0 || list.APIResources[0].Name != "customresourcedefinitions" {
		t.Errorf("apiextensions.k8s.io/v1: %+v", list.APIResources)
	}
	if r := a.get("/apis/example.com/v1alpha1/namespaces/default/widgets"); r.code != http.StatusNotFound {
		t.Errorf("unserved version: HTTP %d, want 404", r.code)
	}
}

func TestCustomResourceCRUD(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)

	// Create: defaults filled in, an unknown field pruned with a warning.
	r := a.post(widgetsPath, widget("w1", map[string]any{"unknown": 1, "free": map[string]any{"kept": true}}))
	w := r.obj(t, http.StatusCreated)
	if w.at("spec.color") != "blue" || w.at("spec.replicas") != 1.0 || w.at("spec.unknown") != nil || w.at("spec.free.kept") != true {
		t.Errorf("created %v", w)
	}
	if w.at("metadata.generation") != 1.0 || w.at("metadata.uid") == "" || w.at("metadata.namespace") != "default" {
		t.Errorf("created metadata %v", w.at("metadata"))
	}
	if h := r.header.Get("Warning"); !strings.Contains(h, `unknown field \"spec.unknown\"`) {
		t.Errorf("Warning header %q, want the unknown field", h)
	}
	// Strict field validation refuses it.
	a.post(widgetsPath+"?fieldValidation=Strict", widget("w2", map[string]any{"unknown": 1})).
		wantStatus(t, http.StatusBadRequest, metav1.StatusReasonBadRequest, `strict decoding error: unknown field "spec.unknown"`)

	// Duplicate fields: a warning, or refused when strict.
	dup := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"dup"},"spec":{"color":"red","color":"tan"}}`
	r = a.post(widgetsPath, dup)
	if d := r.obj(t, http.StatusCreated); d.at("spec.color") != "tan" || !strings.Contains(r.header.Get("Warning"), `duplicate field \"spec.color\"`) {
		t.Errorf("duplicate field: %v, Warning %q", d.at("spec"), r.header.Get("Warning"))
	}
	a.delete(widgetsPath+"/dup").mustCode(t, http.StatusOK, nil)
	a.post(widgetsPath+"?fieldValidation=Strict", strings.Replace(dup, `"dup"`, `"dup2"`, 1)).
		wantStatus(t, http.StatusBadRequest, metav1.StatusReasonBadRequest, `strict decoding error: duplicate field "spec.color"`)

	// generateName, and a second object for selectors.
	gen := widget("", map[string]any{"color": "red"})
	gen["metadata"] = map[string]any{"generateName": "w-", "labels": map[string]any{"tier": "front"}}
	g := a.post(widgetsPath, gen).obj(t, http.StatusCreated)
	genName, _ := g.at("metadata.name").(string)
	if !strings.HasPrefix(genName, "w-") || len(genName) != 7 {
		t.Errorf("generated name %q", genName)
	}

	// Get, list, selectors.
	a.get(widgetsPath+"/w1").obj(t, http.StatusOK)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"w1", genName}},
		{"?labelSelector=tier%3Dfront", []string{genName}},
		{"?fieldSelector=spec.color%3Dblue", []string{"w1"}},
		{"?fieldSelector=metadata.name%3Dw1", []string{"w1"}},
		{"?fieldSelector=metadata.namespace%3Ddefault,spec.color%3Dred", []string{genName}},
	} {
		var list struct {
			Kind  string `json:"kind"`
			Items []obj  `json:"items"`
		}
		a.read(widgetsPath+tc.query, &list)
		var names []string
		for _, it := range list.Items {
			names = append(names, it.at("metadata.name").(string))
			if it.at("apiVersion") != "example.com/v1" || it.at("spec.replicas") != 1.0 {
				t.Errorf("list item %v", it)
			}
		}
		if list.Kind != "WidgetList" || strings.Join(names, ",") != strings.Join(sortStrings(tc.want), ",") {
			t.Errorf("list%s: kind %s, names %v, want %v", tc.query, list.Kind, names, tc.want)
		}
	}
	a.get(widgetsPath+"?fieldSelector=spec.size%3D1").wantStatus(t, http.StatusBadRequest, metav1.StatusReasonBadRequest,
		`"spec.size" is not a known field selector: only "metadata.name, metadata.namespace, spec.color"`)
	// Across namespaces.
	var all struct{ Items []obj }
	a.read("/apis/example.com/v1/widgets", &all)
	if len(all.Items) != 2 {
		t.Errorf("all namespaces: %d items", len(all.Items))
	}

	// Patches: merge and JSON; strategic merge is 415 for custom resources.
	p := a.patch(widgetsPath+"/w1", "application/merge-patch+json", `{"spec":{"color":"green","unknown":2}}`).obj(t, http.StatusOK)
	if p.at("spec.color") != "green" || p.at("spec.unknown") != nil || p.at("metadata.generation") != 2.0 {
		t.Errorf("merge patched %v", p)
	}
	p = a.patch(widgetsPath+"/w1", "application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":3}]`).obj(t, http.StatusOK)
	if p.at("spec.replicas") != 3.0 {
		t.Errorf("JSON patched %v", p)
	}
	a.patch(widgetsPath+"/w1", "application/strategic-merge-patch+json", `{"spec":{"color":"red"}}`).
		wantStatus(t, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "application/merge-patch+json")

	// Update with a stale resourceVersion conflicts; with the current one it works.
	cur := a.get(widgetsPath+"/w1").obj(t, http.StatusOK)
	cur.at("spec").(map[string]any)["color"] = "black"
	a.put(widgetsPath+"/w1", cur).obj(t, http.StatusOK)
	a.put(widgetsPath+"/w1", cur).wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict, "")

	// Finalizers hold a delete; removing them completes it.
	a.patch(widgetsPath+"/w1", "application/merge-patch+json", `{"metadata":{"finalizers":["example.com/hold"]}}`).obj(t, http.StatusOK)
	d := a.delete(widgetsPath+"/w1").obj(t, http.StatusOK)
	if d.at("metadata.deletionTimestamp") == nil {
		t.Errorf("deleted with a finalizer: %v", d)
	}
	a.patch(widgetsPath+"/w1", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`).obj(t, http.StatusOK)
	if a.exists(widgetsPath + "/w1") {
		t.Error("w1 remains after its finalizer is removed")
	}
	// Delete collection.
	a.do(http.MethodDelete, widgetsPath+"?labelSelector=tier%3Dfront", "", nil).obj(t, http.StatusOK)
	if a.exists(widgetsPath + "/" + genName) {
		t.Error("deletecollection left the object")
	}
	// A namespace that does not exist.
	a.post("/apis/example.com/v1/namespaces/nope/widgets", widget("x", map[string]any{})).wantStatus(t, http.StatusNotFound, metav1.StatusReasonNotFound, "")
}

func TestCustomResourceClusterScoped(t *testing.T) {
	a := newTestAPI(t)
	crd := widgetCRD()
	crd.Name, crd.Spec.Scope = "gadgets.example.com", apiextensionsv1.ClusterScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"}
	a.establish(crd, "/apis/example.com/v1/gadgets")
	g := widget("g1", map[string]any{})
	g["kind"] = "Gadget"
	created := a.post("/apis/example.com/v1/gadgets", g).obj(t, http.StatusCreated)
	if created.at("metadata.namespace") != nil || created.at("spec.color") != "blue" {
		t.Errorf("created %v", created)
	}
	a.get("/apis/example.com/v1/gadgets/g1").obj(t, http.StatusOK)
	if r := a.get("/apis/example.com/v1/namespaces/default/gadgets"); r.code != http.StatusNotFound {
		t.Errorf("cluster-scoped resource in a namespace: HTTP %d", r.code)
	}
	// The wrong kind is refused.
	a.post("/apis/example.com/v1/gadgets", widget("g2", map[string]any{})).wantStatus(t, http.StatusBadRequest, metav1.StatusReasonBadRequest, "does not match")
}

func TestCustomResourceValidation(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
		msg   string
	}{
		{"schema: maxLength", map[string]any{"color": "a very long color"}, "spec.color", "may not be more than 10 bytes"},
		{"schema: type", map[string]any{"replicas": "three"}, "spec.replicas", `must be of type integer`},
		{"schema: minimum", map[string]any{"replicas": -1}, "spec.replicas", "should be greater than or equal to 0"},
		{"CEL rule", map[string]any{"replicas": 11}, "spec", "at most 10 replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := a.with(t).post(widgetsPath, widget("bad", tc.spec)).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, tc.msg)
			if len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != tc.field || st.Details.Kind != "Widget" {
				t.Errorf("causes %+v kind %q, want field %s", st.Details.Causes, st.Details.Kind, tc.field)
			}
		})
	}
	if a.exists(widgetsPath + "/bad") {
		t.Error("an invalid object was stored")
	}
	// A transition rule: model may be set once, never changed.
	a.post(widgetsPath, widget("w", map[string]any{"model": "a"})).obj(t, http.StatusCreated)
	st := a.patch(widgetsPath+"/w", "application/merge-patch+json", `{"spec":{"model":"b"}}`).
		wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "model is immutable")
	if st.Details.Causes[0].Field != "spec.model" {
		t.Errorf("causes %+v", st.Details.Causes)
	}
	// A patch leaving the rule's field alone passes (ratcheting keeps an
	// unchanged value valid).
	a.patch(widgetsPath+"/w", "application/merge-patch+json", `{"spec":{"color":"red"}}`).obj(t, http.StatusOK)
}

func TestCustomResourceStatusScaleGeneration(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	// Status on create is dropped (status subresource).
	w := widget("w", map[string]any{"replicas": 2})
	w["status"] = map[string]any{"phase": "Ready"}
	c := a.post(widgetsPath, w).obj(t, http.StatusCreated)
	if c.at("status") != nil {
		t.Errorf("status set on create: %v", c.at("status"))
	}
	// The status subresource writes status only, and does not bump generation.
	c["status"] = map[string]any{"phase": "Ready", "replicas": 2, "selector": "app=w"}
	c.at("spec").(map[string]any)["color"] = "red"
	s := a.put(widgetsPath+"/w/status", c).obj(t, http.StatusOK)
	if s.at("status.phase") != "Ready" || s.at("spec.color") != "blue" || s.at("metadata.generation") != 1.0 {
		t.Errorf("after status write: %v", s)
	}
	// The main resource ignores status, and bumps generation on spec changes only.
	s["status"] = map[string]any{"phase": "Lost"}
	u := a.put(widgetsPath+"/w", s).obj(t, http.StatusOK)
	if u.at("status.phase") != "Ready" || u.at("metadata.generation") != 1.0 {
		t.Errorf("status through the main resource: %v", u)
	}
	u = a.patch(widgetsPath+"/w", "application/merge-patch+json", `{"metadata":{"labels":{"a":"b"}}}`).obj(t, http.StatusOK)
	if u.at("metadata.generation") != 1.0 {
		t.Errorf("a metadata change bumped generation: %v", u.at("metadata"))
	}
	// Scale: read from the CRD's paths, written to spec.replicas.
	var sc struct {
		Kind   string
		Spec   struct{ Replicas int32 }
		Status struct {
			Replicas int32
			Selector string
		}
	}
	a.read(widgetsPath+"/w/scale", &sc)
	if sc.Kind != "Scale" || sc.Spec.Replicas != 2 || sc.Status.Replicas != 2 || sc.Status.Selector != "app=w" {
		t.Errorf("scale %+v", sc)
	}
	a.patch(widgetsPath+"/w/scale", "application/merge-patch+json", `{"spec":{"replicas":5}}`).mustCode(t, http.StatusOK, &sc)
	if sc.Spec.Replicas != 5 {
		t.Errorf("scaled %+v", sc)
	}
	g := a.get(widgetsPath+"/w").obj(t, http.StatusOK)
	if g.at("spec.replicas") != 5.0 || g.at("metadata.generation") != 2.0 {
		t.Errorf("after scale: %v", g)
	}
	// Scaling past the CEL rule is refused by it.
	a.patch(widgetsPath+"/w/scale", "application/merge-patch+json", `{"spec":{"replicas":50}}`).
		wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "at most 10 replicas")
}

func TestCustomResourceTableAndDeprecation(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("w", map[string]any{"color": "red"})).obj(t, http.StatusCreated)
	var table metav1.Table
	a.do(http.MethodGet, widgetsPath, "", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").mustCode(t, http.StatusOK, &table)
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if strings.Join(cols, ",") != "Name,Color,Replicas" || len(table.Rows) != 1 || table.Rows[0].Cells[1] != "red" || table.Rows[0].Cells[2] != 1.0 {
		t.Errorf("table columns %v rows %+v", cols, table.Rows)
	}
	// The deprecated version answers with upstream's default warning.
	r := a.get("/apis/example.com/v1beta1/namespaces/default/widgets/w")
	o := r.obj(t, http.StatusOK)
	if o.at("apiVersion") != "example.com/v1beta1" {
		t.Errorf("apiVersion %v", o.at("apiVersion"))
	}
	if h := r.header.Get("Warning"); !strings.Contains(h, "example.com/v1beta1 Widget is deprecated; use example.com/v1 Widget") {
		t.Errorf("Warning %q", h)
	}
	// Written through one version, listed through the other: the list
	// carries the version asked for.
	old := widget("old", map[string]any{})
	old["apiVersion"] = "example.com/v1beta1"
	a.post("/apis/example.com/v1beta1/namespaces/default/widgets", old).obj(t, http.StatusCreated)
	for _, v := range []string{"v1", "v1beta1"} {
		var list struct{ Items []obj }
		a.read("/apis/example.com/"+v+"/namespaces/default/widgets", &list)
		for _, it := range list.Items {
			if it.at("apiVersion") != "example.com/"+v || it.at("spec.replicas") != 1.0 {
				t.Errorf("listed through %s: %v", v, it)
			}
		}
	}
}

func TestCustomResourceWatch(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	c := a.post(widgetsPath, widget("w", map[string]any{})).obj(t, http.StatusCreated)
	rv := c.at("metadata.resourceVersion").(string)
	a.patch(widgetsPath+"/w", "application/merge-patch+json", `{"spec":{"color":"red"}}`).obj(t, http.StatusOK)
	a.delete(widgetsPath+"/w").obj(t, http.StatusOK)
	r := a.get(widgetsPath + "?watch=true&timeoutSeconds=1&resourceVersion=" + rv)
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		var ev struct {
			Type   string
			Object obj
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("watch line %q: %v", line, err)
		}
		types = append(types, ev.Type+":"+fmt.Sprint(ev.Object.at("spec.color")))
	}
	if strings.Join(types, ",") != "MODIFIED:red,DELETED:red" {
		t.Errorf("watch events %v", types)
	}
}

func TestCRDDeletionDeletesCustomResources(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("a", map[string]any{})).obj(t, http.StatusCreated)
	held := widget("held", map[string]any{})
	held["metadata"] = map[string]any{"name": "held", "finalizers": []string{"example.com/hold"}}
	a.post(widgetsPath, held).obj(t, http.StatusCreated)

	var crd apiextensionsv1.CustomResourceDefinition
	a.delete(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, &crd)
	if crd.DeletionTimestamp == nil || len(crd.Finalizers) != 1 || crd.Finalizers[0] != apiextensionsv1.CustomResourceCleanupFinalizer {
		t.Errorf("deleted CRD %+v", crd.ObjectMeta)
	}
	testutil.Eventually(t, waitTimeout, "widget a deleted", a.gone(widgetsPath+"/a"))
	// The held one is marked, and keeps the CRD.
	testutil.Eventually(t, waitTimeout, "held widget marked", func() error {
		if o := a.get(widgetsPath+"/held").obj(t, http.StatusOK); o.at("metadata.deletionTimestamp") == nil {
			return fmt.Errorf("not marked")
		}
		return nil
	})
	a.read(crdsPath+"/widgets.example.com", &crd)
	if c := crdCondition(&crd, apiextensionsv1.Terminating); c == nil || c.Status != apiextensionsv1.ConditionTrue {
		t.Errorf("Terminating %+v", c)
	}
	a.post(widgetsPath, widget("new", map[string]any{})).wantStatus(t, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "")
	a.patch(widgetsPath+"/held", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`).mustCode(t, http.StatusOK, nil)
	testutil.Eventually(t, waitTimeout, "CRD deleted", a.gone(crdsPath+"/widgets.example.com"))
	testutil.Eventually(t, waitTimeout, "widgets no longer served", func() error {
		if r := a.get(widgetsPath); r.code != http.StatusNotFound {
			return fmt.Errorf("HTTP %d", r.code)
		}
		return nil
	})
	// Created again, it starts empty.
	a.establish(widgetCRD(), widgetsPath)
	var list struct{ Items []obj }
	a.read(widgetsPath, &list)
	if len(list.Items) != 0 {
		t.Errorf("%d widgets survived their CRD", len(list.Items))
	}
}

func TestCRDSurvivesRestart(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("w", map[string]any{"color": "red"})).obj(t, http.StatusCreated)
	path := a.dbPath
	a.close()

	b := newTestAPIWith(t, apiOptions{dbPath: path})
	// Served from the first request: New serves the stored CRDs.
	o := b.get(widgetsPath+"/w").obj(t, http.StatusOK)
	if o.at("spec.color") != "red" || o.at("spec.replicas") != 1.0 {
		t.Errorf("after restart %v", o)
	}
}

// TestCRDServedByEveryServer: with two servers on one store (bbolt shared
// in-process, or etcd with a client each), a CRD created on one is served by
// both, and its deletion through the other removes it from both.
func TestCRDServedByEveryServer(t *testing.T) {
	for _, backend := range []string{"bbolt", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			var stores [2]store.Interface
			switch backend {
			case "bbolt":
				st := openShared(t)
				stores = [2]store.Interface{st, st}
			case "etcd":
				ep := etcdtest.Start(t)
				for i := range stores {
					st, err := store.OpenEtcd(context.Background(), store.EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { st.Close() })
					stores[i] = st
				}
			}
			var apis []*testAPI
			for _, st := range stores {
				srv, err := New(Config{Store: st, Logger: quietLog, Version: "test"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.Shutdown(t.Context()) })
				apis = append(apis, sharedAPI(t, st, srv))
			}
			apis[0].with(t).establish(widgetCRD(), widgetsPath)
			apis[0].with(t).post(widgetsPath, widget("w", map[string]any{})).obj(t, http.StatusCreated)
			testutil.Eventually(t, waitTimeout, "second server serves widgets", func() error {
				if r := apis[1].with(t).get(widgetsPath + "/w"); r.code != http.StatusOK {
					return fmt.Errorf("HTTP %d", r.code)
				}
				return nil
			})
			apis[1].with(t).delete(crdsPath+"/widgets.example.com").mustCode(t, http.StatusOK, nil)
			for _, a := range apis {
				a.with(t).waitGone(widgetsPath)
			}
			if apis[0].with(t).exists(crdsPath + "/widgets.example.com") {
				t.Error("the CRD remains")
			}
		})
	}
}

// TestCRDDefaultsOnRead: a default added to the schema later shows in
// objects stored before, as they are read.
func TestCRDDefaultsOnRead(t *testing.T) {
	a := newTestAPI(t)
	crd := a.establish(widgetCRD(), widgetsPath)
	a.post(widgetsPath, widget("old", map[string]any{})).obj(t, http.StatusCreated)
	for i := range crd.Spec.Versions {
		spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
		spec.Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"M"`)}}
		crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	}
	var updated apiextensionsv1.CustomResourceDefinition
	a.put(crdsPath+"/widgets.example.com", crd).mustCode(t, http.StatusOK, &updated)
	if updated.Generation != 2 {
		t.Errorf("generation %d after a spec change, want 2", updated.Generation)
	}
	testutil.Eventually(t, waitTimeout, "the new default on read", func() error {
		if o := a.get(widgetsPath+"/old").obj(t, http.StatusOK); o.at("spec.size") != "M" {
			return fmt.Errorf("spec %v", o.at("spec"))
		}
		return nil
	})
	var list struct{ Items []obj }
	a.read(widgetsPath, &list)
	if len(list.Items) != 1 || list.Items[0].at("spec.size") != "M" {
		t.Errorf("list %v", list.Items)
	}
}
