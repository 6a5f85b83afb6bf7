package apiserver

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDryRun: every write with dryRun=All (kubectl's --dry-run=server and
// kubectl diff) answers what it would have done, validated and defaulted as
// a real write, and writes nothing.
func TestDryRun(t *testing.T) {
	a := newTestAPI(t)
	a.create(configMapsPath, newConfigMap("cfg", map[string]string{"a": "1"}))
	a.create(servicesPath, newService("web"))
	unchanged := func(t *testing.T, rev int64) {
		t.Helper()
		if got := a.store.Rev(); got != rev {
			t.Errorf("store revision moved from %d to %d", rev, got)
		}
	}
	t.Run("create", func(t *testing.T) {
		rev := a.store.Rev()
		var s corev1.Service
		a.post(servicesPath+"?dryRun=All", newService("new")).mustCode(t, http.StatusCreated, &s)
		if s.Spec.ClusterIP == "" || s.UID == "" || s.ResourceVersion != "" {
			t.Errorf("dry-run create answered %+v", s.ObjectMeta)
		}
		unchanged(t, rev)
		if a.exists(servicesPath + "/new") {
			t.Error("the dry-run Service exists")
		}
		// Validation runs as for a real create.
		bad := newService("bad")
		bad.Spec.Ports[0].Port = 0
		a.post(servicesPath+"?dryRun=All", bad).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "spec.ports[0].port")
	})
	t.Run("update, patch and apply", func(t *testing.T) {
		rev := a.store.Rev()
		var cm corev1.ConfigMap
		a.read(configMapsPath+"/cfg", &cm)
		cm.Data["a"] = "put"
		a.put(configMapsPath+"/cfg?dryRun=All", &cm).mustCode(t, http.StatusOK, nil)
		var got corev1.ConfigMap
		a.patch(configMapsPath+"/cfg?dryRun=All", "application/merge-patch+json", `{"data":{"a":"patched"}}`).mustCode(t, http.StatusOK, &got)
		if got.Data["a"] != "patched" || got.ResourceVersion != cm.ResourceVersion {
			t.Errorf("dry-run patch answered %v at %s", got.Data, got.ResourceVersion)
		}
		got = corev1.ConfigMap{}
		a.patch(configMapsPath+"/cfg?dryRun=All&fieldManager=m&force=true", applyYAML, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: applied\n").
			mustCode(t, http.StatusOK, &got)
		if got.Data["a"] != "applied" {
			t.Errorf("dry-run apply answered %v", got.Data)
		}
		a.patch(configMapsPath+"/fresh?dryRun=All&fieldManager=m", applyYAML, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n").
			mustCode(t, http.StatusCreated, nil)
		a.patch(deploymentsPath+"/none/scale?dryRun=All", "application/merge-patch+json", `{"spec":{"replicas":3}}`).
			wantStatus(t, http.StatusNotFound, metav1.StatusReasonNotFound, "")
		unchanged(t, rev)
		a.read(configMapsPath+"/cfg", &got)
		if got.Data["a"] != "1" || a.exists(configMapsPath+"/fresh") {
			t.Errorf("after dry runs: %v", got.Data)
		}
	})
	t.Run("delete", func(t *testing.T) {
		rev := a.store.Rev()
		a.do(http.MethodDelete, servicesPath+"/web?dryRun=All", "", nil).mustCode(t, http.StatusOK, nil)
		a.do(http.MethodDelete, configMapsPath+"?dryRun=All", "", nil).mustCode(t, http.StatusOK, nil)
		unchanged(t, rev)
		if !a.exists(servicesPath+"/web") || !a.exists(configMapsPath+"/cfg") {
			t.Error("a dry-run delete deleted")
		}
	})
	t.Run("an unknown dryRun value", func(t *testing.T) {
		rev := a.store.Rev()
		a.post(servicesPath+"?dryRun=Some", newService("x")).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`dryRun: Unsupported value: "Some": supported values: "All"`)
		a.do(http.MethodDelete, servicesPath+"/web?dryRun=Some", "", nil).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "dryRun")
		unchanged(t, rev)
	})
}
