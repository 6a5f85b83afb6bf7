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
)

// TestCustomResourceBadInput: what kube-apiserver refuses, refused with its
// code and a message naming the field, and nothing written.
func TestCustomResourceBadInput(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	big := widget("big", map[string]any{"free": map[string]any{"blob": strings.Repeat("x", 10<<20)}})
	expensive := widgetCRD()
	expensive.Name, expensive.Spec.Names.Plural, expensive.Spec.Names.Singular = "gadgets.example.com", "gadgets", "gadget"
	expensive.Spec.Names.Kind, expensive.Spec.Names.ListKind, expensive.Spec.Names.ShortNames = "Gadget", "GadgetList", nil
	spec := expensive.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	// A list of unbounded strings compared pairwise: its estimated cost is far
	// over the per-rule budget.
	spec.Properties["tags"] = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{
		Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}},
		XValidations: apiextensionsv1.ValidationRules{{Rule: "self.all(x, self.all(y, x == y || x.contains(y)))"}}}
	expensive.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	for _, tc := range []struct {
		name, path string
		body       any
		code       int
		reason     metav1.StatusReason
		msg        string
	}{
		{"a 10 MB custom resource", widgetsPath, big, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"a version that is not served", "/apis/example.com/v1alpha1/namespaces/default/widgets",
			strings.Replace(mustJSON(t, widget("w", map[string]any{})), "example.com/v1", "example.com/v1alpha1", 1),
			http.StatusNotFound, metav1.StatusReasonNotFound, ""},
		{"a value against the schema", widgetsPath, widget("w", map[string]any{"color": "ultraviolet-ish"}),
			http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "spec.color: Too long"},
		{"a CEL rule over the cost budget", crdsPath, expensive, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			"estimated rule cost exceeds budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := a.store.Rev()
			a.with(t).post(tc.path, tc.body).wantStatus(t, tc.code, tc.reason, tc.msg)
			if got := a.store.Rev(); got != rev {
				t.Errorf("store revision moved from %d to %d", rev, got)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCustomResourcesMigrate: `minikit store migrate` (store.Migrate) moves
// CRDs and custom resources from bbolt to etcd; a server on etcd serves them
// as they were, Established, with their managedFields.
func TestCustomResourcesMigrate(t *testing.T) {
	src := openShared(t)
	srv, err := New(Config{Store: src, Logger: quietLog, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	a := sharedAPI(t, src, srv)
	a.establish(widgetCRD(), widgetsPath)
	a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  color: red\n").obj(t, http.StatusCreated)
	srv.Shutdown(t.Context())

	dst, err := store.OpenEtcd(context.Background(), store.EtcdConfig{Endpoints: []string{etcdtest.Start(t)}, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	if _, err := store.Migrate(context.Background(), src, dst, false); err != nil {
		t.Fatal(err)
	}
	srv2, err := New(Config{Store: dst, Logger: quietLog, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Shutdown(t.Context()) })
	b := sharedAPI(t, dst, srv2)
	b.waitEstablished("widgets.example.com", widgetsPath)
	o := b.get(widgetsPath+"/w").obj(t, http.StatusOK)
	if o.at("spec.color") != "red" || o.at("spec.replicas") != float64(1) {
		t.Fatalf("migrated widget %v", o)
	}
	// The migrated ownership holds: another manager conflicts with alice.
	b.patch(widgetsPath+"/w?fieldManager=bob", applyYAML, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  color: green\n").
		wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict, `conflict with "alice"`)
}

// TestCRDServedWhenEstablished: the moment a client sees a CRD Established,
// discovery lists its resource and its path answers, as a client that waits
// for Established (kubectl wait, envtest, controller-runtime) expects.
func TestCRDServedWhenEstablished(t *testing.T) {
	a := newTestAPI(t)
	for i := range 5 {
		crd := widgetCRD()
		group := fmt.Sprintf("e%d.example.com", i)
		crd.Name, crd.Spec.Group = "widgets."+group, group
		a.post(crdsPath, crd).mustCode(t, http.StatusCreated, nil)
		testutil.Eventually(t, establishTimeout, crd.Name+" Established", func() error {
			var got apiextensionsv1.CustomResourceDefinition
			a.read(crdsPath+"/"+crd.Name, &got)
			if !crdConditionTrue(&got, apiextensionsv1.Established) {
				return fmt.Errorf("conditions %v", got.Status.Conditions)
			}
			return nil
		})
		var list metav1.APIResourceList
		a.get("/apis/"+group+"/v1").mustCode(t, http.StatusOK, &list)
		if len(list.APIResources) == 0 || list.APIResources[0].Name != "widgets" {
			t.Fatalf("discovery of %s right after Established: %+v", group, list.APIResources)
		}
		a.get("/apis/"+group+"/v1/namespaces/default/widgets").mustCode(t, http.StatusOK, nil)
	}
}
