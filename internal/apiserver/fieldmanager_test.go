package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const applyYAML = "application/apply-patch+yaml"

// managers lists obj's managedFields as "manager/operation[/subresource]".
func managers(m []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, e := range m {
		s := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			s += "/" + e.Subresource
		}
		out = append(out, s)
	}
	return out
}

// owns reports whether manager's entry lists the field (a FieldsV1 key such
// as `f:data` then `f:a`).
func owns(t *testing.T, m []metav1.ManagedFieldsEntry, manager string, keys ...string) bool {
	t.Helper()
	for _, e := range m {
		if e.Manager != manager || e.FieldsV1 == nil {
			continue
		}
		var cur any
		if err := json.Unmarshal(e.FieldsV1.Raw, &cur); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			mm, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = mm[k]; !ok {
				return false
			}
		}
		return true
	}
	return false
}

func TestServerSideApplyConfigMap(t *testing.T) {
	a := newTestAPI(t)
	path := configMapsPath + "/cfg"
	apply := func(manager, body string, force bool) response {
		q := "?fieldManager=" + manager
		if force {
			q += "&force=true"
		}
		return a.patch(path+q, applyYAML, body)
	}
	// Apply creates the object.
	var cm corev1.ConfigMap
	apply("alice", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n  b: '2'\n", false).mustCode(t, http.StatusCreated, &cm)
	if cm.Data["a"] != "1" || cm.Data["b"] != "2" || cm.UID == "" {
		t.Fatalf("created %+v", cm)
	}
	if got := managers(cm.ManagedFields); strings.Join(got, ",") != "alice/Apply" {
		t.Fatalf("managedFields %v", got)
	}
	if !owns(t, cm.ManagedFields, "alice", "f:data", "f:a") {
		t.Fatalf("alice does not own data.a: %s", cm.ManagedFields[0].FieldsV1.Raw)
	}
	rv := cm.ResourceVersion
	// Applying the same again changes nothing, not even the resourceVersion.
	apply("alice", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n  b: '2'\n", false).mustCode(t, http.StatusOK, &cm)
	if cm.ResourceVersion != rv {
		t.Errorf("no-op apply moved the resourceVersion from %s to %s", rv, cm.ResourceVersion)
	}
	// Another manager applying a different value conflicts: 409 naming the
	// field and its manager, and nothing changes.
	r := apply("bob", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: 'x'\n", false)
	st := r.wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "alice": .data.a`)
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != ".data.a" {
		t.Errorf("conflict causes %+v", st.Details)
	}
	a.read(path, &cm)
	if cm.Data["a"] != "1" || cm.ResourceVersion != rv {
		t.Fatalf("a refused apply changed the object: %+v", cm)
	}
	// Forced, bob takes data.a over.
	apply("bob", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: 'x'\n", true).mustCode(t, http.StatusOK, &cm)
	if cm.Data["a"] != "x" || !owns(t, cm.ManagedFields, "bob", "f:data", "f:a") || owns(t, cm.ManagedFields, "alice", "f:data", "f:a") {
		t.Fatalf("after force: %+v", cm)
	}
	// A field its only manager stops applying is removed.
	cm = corev1.ConfigMap{}
	apply("alice", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata: {}\n", false).mustCode(t, http.StatusOK, &cm)
	if _, ok := cm.Data["b"]; ok || cm.Data["a"] != "x" {
		t.Fatalf("after alice stopped applying b: %+v", cm.Data)
	}
	// An update records its manager, from fieldManager or the User-Agent.
	cm.Data["c"] = "3"
	a.do(http.MethodPut, path, "", cm, "User-Agent", "kubectl-edit/v1.32.0 (linux/amd64)").mustCode(t, http.StatusOK, &cm)
	if !owns(t, cm.ManagedFields, "kubectl-edit", "f:data", "f:c") {
		t.Fatalf("update by kubectl-edit not recorded: %v", managers(cm.ManagedFields))
	}
	a.patch(path+"?fieldManager=patcher", "application/merge-patch+json", `{"data":{"d":"4"}}`).mustCode(t, http.StatusOK, &cm)
	if !owns(t, cm.ManagedFields, "patcher", "f:data", "f:d") {
		t.Fatalf("patch by patcher not recorded: %v", managers(cm.ManagedFields))
	}
	for _, e := range cm.ManagedFields {
		if e.Manager == "patcher" && e.Operation != metav1.ManagedFieldsOperationUpdate {
			t.Errorf("patcher's operation %q", e.Operation)
		}
	}
}

func TestServerSideApplyBadRequests(t *testing.T) {
	a := newTestAPI(t)
	a.create(configMapsPath, newConfigMap("cfg", map[string]string{"a": "1"}))
	path := configMapsPath + "/cfg"
	cases := []struct {
		name, path, ct, body string
		code                 int
		reason               metav1.StatusReason
		msg                  string
	}{
		{"apply without fieldManager", path, applyYAML, "apiVersion: v1\nkind: ConfigMap\n", 422, metav1.StatusReasonInvalid,
			"fieldManager: Required value: is required for apply patch"},
		{"force on a merge patch", path + "?force=true", "application/merge-patch+json", `{}`, 422, metav1.StatusReasonInvalid,
			"force: Forbidden: may not be specified for non-apply patch"},
		{"fieldManager too long", path + "?fieldManager=" + strings.Repeat("m", 129), applyYAML, "apiVersion: v1\nkind: ConfigMap\n", 422,
			metav1.StatusReasonInvalid, "fieldManager: Too long"},
		{"apply that is not YAML", path + "?fieldManager=m", applyYAML, "a: [", 400, metav1.StatusReasonBadRequest, "error decoding patch"},
		{"apply of another name", path + "?fieldManager=m", applyYAML, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n", 400,
			metav1.StatusReasonBadRequest, "does not match the name on the URL"},
		// kube-apiserver answers 500 (reason unknown) when the apply does not
		// fit the schema.
		{"apply of an unknown field", path + "?fieldManager=m", applyYAML, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\nspec: {}\n", 500,
			metav1.StatusReasonUnknown, ".spec: field not declared in schema"},
		{"strict apply with a duplicate field", path + "?fieldManager=m&fieldValidation=Strict", applyYAML,
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  z: '1'\n  z: '2'\n", 400, metav1.StatusReasonBadRequest,
			`line 7: key "z" already set in map`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rev := a.store.Rev()
			a.patch(tc.path, tc.ct, tc.body).wantStatus(t, tc.code, tc.reason, tc.msg)
			if got := a.store.Rev(); got != rev {
				t.Errorf("store revision moved from %d to %d", rev, got)
			}
		})
	}
}

// A Service applied without port protocols (defaulted to TCP, a key of the
// ports list) and then re-applied with another port keeps one entry per
// port, as kube-apiserver; a Deployment's container ports removed from the
// applied configuration are removed from the object.
func TestServerSideApplyListMapKeys(t *testing.T) {
	a := newTestAPI(t)
	svc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n  - name: http\n    port: 80\n"
	var s corev1.Service
	a.patch(servicesPath+"/web?fieldManager=kubectl", applyYAML, svc).mustCode(t, http.StatusCreated, &s)
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Protocol != corev1.ProtocolTCP || s.Spec.ClusterIP == "" {
		t.Fatalf("created %+v", s.Spec)
	}
	svc2 := svc + "  - name: https\n    port: 443\n"
	a.patch(servicesPath+"/web?fieldManager=kubectl", applyYAML, svc2).mustCode(t, http.StatusOK, &s)
	if len(s.Spec.Ports) != 2 {
		t.Fatalf("ports after second apply %+v", s.Spec.Ports)
	}
	s = corev1.Service{}
	a.patch(servicesPath+"/web?fieldManager=kubectl", applyYAML, svc).mustCode(t, http.StatusOK, &s)
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 80 {
		t.Fatalf("ports after dropping https %+v", s.Spec.Ports)
	}

	dep := func(ports string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: d}\n" +
			"  template:\n    metadata:\n      labels: {app: d}\n    spec:\n      containers:\n      - name: c\n        image: nginx\n" + ports
	}
	var d appsv1.Deployment
	a.patch(deploymentsPath+"/d?fieldManager=kubectl", applyYAML, dep("        ports:\n        - containerPort: 80\n")).mustCode(t, http.StatusCreated, &d)
	if got := d.Spec.Template.Spec.Containers[0].Ports; len(got) != 1 {
		t.Fatalf("ports %+v", got)
	}
	d = appsv1.Deployment{}
	a.patch(deploymentsPath+"/d?fieldManager=kubectl", applyYAML, dep("")).mustCode(t, http.StatusOK, &d)
	if got := d.Spec.Template.Spec.Containers[0].Ports; len(got) != 0 {
		t.Fatalf("ports after removing them from the apply: %+v", got)
	}
	// kubectl scale records its manager for spec.replicas, subresource scale.
	a.patch(deploymentsPath+"/d/scale?fieldManager=scaler", "application/merge-patch+json", `{"spec":{"replicas":3}}`).mustCode(t, http.StatusOK, nil)
	a.read(deploymentsPath+"/d", &d)
	found := false
	for _, e := range d.ManagedFields {
		if e.Manager == "scaler" && e.Subresource == "scale" && owns(t, []metav1.ManagedFieldsEntry{e}, "scaler", "f:spec", "f:replicas") {
			found = true
		}
	}
	if !found {
		t.Fatalf("scale write not recorded: %v", managers(d.ManagedFields))
	}
	// Applying replicas again now conflicts with the scaler.
	a.patch(deploymentsPath+"/d?fieldManager=kubectl", applyYAML, dep("")).wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict,
		`conflict with "scaler" with subresource "scale" using apps/v1: .spec.replicas`)
	// An autoscaler applies the scale subresource: it owns replicas, as
	// the Scale and the Deployment both show.
	var sc autoscalingv1.Scale
	a.patch(deploymentsPath+"/d/scale?fieldManager=hpa&force=true", applyYAML,
		"apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: d\nspec:\n  replicas: 4\n").mustCode(t, http.StatusOK, &sc)
	if sc.Spec.Replicas != 4 || !owns(t, sc.ManagedFields, "hpa", "f:spec", "f:replicas") || sc.ManagedFields[len(sc.ManagedFields)-1].APIVersion != "autoscaling/v1" {
		t.Fatalf("applied scale %+v", sc)
	}
	d = appsv1.Deployment{}
	a.read(deploymentsPath+"/d", &d)
	if *d.Spec.Replicas != 4 || !owns(t, d.ManagedFields, "hpa", "f:spec", "f:replicas") || owns(t, d.ManagedFields, "scaler", "f:spec", "f:replicas") {
		t.Fatalf("the Deployment after the scale apply: %d %v", *d.Spec.Replicas, managers(d.ManagedFields))
	}
	sc = autoscalingv1.Scale{}
	a.read(deploymentsPath+"/d/scale", &sc)
	if !owns(t, sc.ManagedFields, "hpa", "f:spec", "f:replicas") {
		t.Fatalf("GET scale managedFields %v", managers(sc.ManagedFields))
	}
	a.patch(deploymentsPath+"/d/scale?fieldManager=other", applyYAML,
		"apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: d\nspec:\n  replicas: 5\n").wantStatus(t, http.StatusConflict,
		metav1.StatusReasonConflict, `conflict with "hpa" with subresource "scale"`)
}

// Status is applied through the status subresource only: an apply of the
// main resource leaves it alone.
func TestServerSideApplyStatus(t *testing.T) {
	a := newTestAPI(t)
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: nginx\n"
	a.patch(podsPath+"/p?fieldManager=m", applyYAML, pod+"status:\n  message: nope\n").mustCode(t, http.StatusCreated, nil)
	var p corev1.Pod
	a.read(podsPath+"/p", &p)
	if p.Status.Message != "" {
		t.Fatalf("apply of the main resource set status: %+v", p.Status)
	}
	st := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nstatus:\n  conditions:\n  - type: Ready\n    status: 'True'\n"
	a.patch(podsPath+"/p/status?fieldManager=kubelet", applyYAML, st).mustCode(t, http.StatusOK, &p)
	ok := false
	for _, c := range p.Status.Conditions {
		ok = ok || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if !ok {
		t.Fatalf("status apply: %+v", p.Status)
	}
	if got := strings.Join(managers(p.ManagedFields), ","); !strings.Contains(got, "kubelet/Apply/status") || !strings.Contains(got, "m/Apply") {
		t.Fatalf("managedFields %s", got)
	}
}

func TestServerSideApplyCustomResource(t *testing.T) {
	a := newTestAPI(t)
	a.establish(widgetCRD(), widgetsPath)
	w := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  model: m1\n"
	o := a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, w).obj(t, http.StatusCreated)
	if o.at("spec.color") != "blue" || o.at("spec.replicas") != float64(1) {
		t.Fatalf("defaults not applied: %v", o)
	}
	a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, w+"  color: red\n").obj(t, http.StatusOK)
	a.patch(widgetsPath+"/w?fieldManager=bob", applyYAML, w+"  color: green\n").wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict,
		`conflict with "alice": .spec.color`)
	// The schema's rules hold for applied objects.
	a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, w+"  replicas: 11\n").wantStatus(t, http.StatusUnprocessableEntity,
		metav1.StatusReasonInvalid, "at most 10 replicas")
	a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, w+"  nope: 1\n").wantStatus(t, http.StatusInternalServerError,
		metav1.StatusReasonUnknown, ".spec.nope: field not declared in schema")
	// Status through its subresource.
	st := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nstatus:\n  phase: Ready\n"
	o = a.patch(widgetsPath+"/w/status?fieldManager=ctrl", applyYAML, st).obj(t, http.StatusOK)
	if o.at("status.phase") != "Ready" || o.at("spec.color") != "red" {
		t.Fatalf("after status apply: %v", o)
	}
	var m struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	a.read(widgetsPath+"/w", &m)
	if got := strings.Join(managers(m.Metadata.ManagedFields), ","); got != "alice/Apply,ctrl/Apply/status" {
		t.Fatalf("managedFields %s", got)
	}
	// The same manager applies through another served version: its fields
	// are compared across versions, and another manager still conflicts.
	beta := strings.Replace(w, "example.com/v1", "example.com/v1beta1", 1)
	betaPath := "/apis/example.com/v1beta1/namespaces/default/widgets/w"
	o = a.patch(betaPath+"?fieldManager=alice", applyYAML, beta+"  color: red\n").obj(t, http.StatusOK)
	if o.at("apiVersion") != "example.com/v1beta1" || o.at("spec.color") != "red" {
		t.Fatalf("apply through v1beta1: %v", o)
	}
	a.patch(widgetsPath+"/w?fieldManager=alice", applyYAML, w+"  color: red\n").obj(t, http.StatusOK)
	a.patch(betaPath+"?fieldManager=bob", applyYAML, beta+"  color: green\n").wantStatus(t, http.StatusConflict, metav1.StatusReasonConflict,
		`conflict with "alice"`)
	// The scale subresource of a custom resource takes an apply too. As in
	// Kubernetes, a first apply of a Scale whose replicas nobody owns (here
	// the schema's default) conflicts with "before-first-apply" unless forced.
	a.patch(widgetsPath+"/w/scale?fieldManager=hpa", applyYAML,
		"apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: w\nspec:\n  replicas: 5\n").wantStatus(t, http.StatusConflict,
		metav1.StatusReasonConflict, `conflict with "before-first-apply" with subresource "scale"`)
	var sc autoscalingv1.Scale
	a.patch(widgetsPath+"/w/scale?fieldManager=hpa&force=true", applyYAML,
		"apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: w\nspec:\n  replicas: 5\n").mustCode(t, http.StatusOK, &sc)
	o = a.get(widgetsPath+"/w").obj(t, http.StatusOK)
	if sc.Spec.Replicas != 5 || o.at("spec.replicas") != float64(5) {
		t.Fatalf("after applying the scale: %+v, %v", sc.Spec, o.at("spec"))
	}
	a.read(widgetsPath+"/w", &m)
	if got := strings.Join(managers(m.Metadata.ManagedFields), ","); !strings.Contains(got, "hpa/Apply/scale") {
		t.Fatalf("managedFields %s", got)
	}
}
