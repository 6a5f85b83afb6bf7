package apiserver

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every namespace has its default ServiceAccount from the moment it exists,
// and its kubernetes.io/metadata.name label, which cannot be changed.
func TestNamespaceDefaultsAndLabel(t *testing.T) {
	a := newTestAPI(t)
	for _, ns := range []string{"default", "kube-system"} {
		if !a.exists("/api/v1/namespaces/" + ns + "/serviceaccounts/default") {
			t.Errorf("built-in namespace %s has no default ServiceAccount", ns)
		}
	}
	a.create(namespacesPath, newNamespace("team-a"))
	var sa corev1.ServiceAccount
	a.read("/api/v1/namespaces/team-a/serviceaccounts/default", &sa)
	if sa.UID == "" || sa.CreationTimestamp.IsZero() {
		t.Errorf("default ServiceAccount lacks identity: %+v", sa.ObjectMeta)
	}
	var ns corev1.Namespace
	a.read(namespacesPath+"/team-a", &ns)
	if got := ns.Labels[corev1.LabelMetadataName]; got != "team-a" {
		t.Errorf("label %s = %q, want team-a", corev1.LabelMetadataName, got)
	}
	a.patch(namespacesPath+"/team-a", "application/merge-patch+json",
		`{"metadata":{"labels":{"kubernetes.io/metadata.name":"other","team":"a"}}}`).mustCode(t, http.StatusOK, &ns)
	if ns.Labels[corev1.LabelMetadataName] != "team-a" || ns.Labels["team"] != "a" {
		t.Errorf("labels after patch = %v, want metadata.name kept as team-a and team=a added", ns.Labels)
	}
	a.patch(namespacesPath+"/team-a", "application/json-patch+json",
		`[{"op":"remove","path":"/metadata/labels/kubernetes.io~1metadata.name"}]`).mustCode(t, http.StatusOK, &ns)
	if ns.Labels[corev1.LabelMetadataName] != "team-a" {
		t.Errorf("labels after removing the name label = %v, want it back", ns.Labels)
	}
}

// Pods run as a ServiceAccount: default unless named, refused when it does
// not exist, with the token volume and mount Kubernetes adds unless
// automountServiceAccountToken is false on the pod or the account.
func TestPodServiceAccountAdmission(t *testing.T) {
	a := newTestAPI(t)
	pod := newPod("web", "", nil)
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	a.create(podsPath, pod)
	if pod.Spec.ServiceAccountName != "default" || pod.Spec.DeprecatedServiceAccount != "default" {
		t.Errorf("serviceAccountName %q, serviceAccount %q, want default for both", pod.Spec.ServiceAccountName, pod.Spec.DeprecatedServiceAccount)
	}
	if len(pod.Spec.Volumes) != 1 {
		t.Fatalf("volumes = %+v, want the one token volume", pod.Spec.Volumes)
	}
	v := pod.Spec.Volumes[0]
	if !strings.HasPrefix(v.Name, "kube-api-access-") || len(v.Name) != len("kube-api-access-")+5 || v.Projected == nil {
		t.Fatalf("volume = %+v, want projected kube-api-access-XXXXX", v)
	}
	src := v.Projected.Sources
	if len(src) != 3 || src[0].ServiceAccountToken == nil || src[0].ServiceAccountToken.Path != "token" ||
		*src[0].ServiceAccountToken.ExpirationSeconds != 3607 ||
		src[1].ConfigMap == nil || src[1].ConfigMap.Name != "kube-root-ca.crt" || src[1].ConfigMap.Items[0].Path != "ca.crt" ||
		src[2].DownwardAPI == nil || src[2].DownwardAPI.Items[0].FieldRef.FieldPath != "metadata.namespace" ||
		*v.Projected.DefaultMode != 0o644 {
		b, _ := json.Marshal(v.Projected)
		t.Errorf("projected sources = %s", b)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		want := corev1.VolumeMount{Name: v.Name, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}
		if len(c.VolumeMounts) != 1 || !reflect.DeepEqual(c.VolumeMounts[0], want) {
			t.Errorf("container %s mounts = %+v, want %+v", c.Name, c.VolumeMounts, want)
		}
	}

	off := false
	noMount := newPod("no-mount", "", nil)
	noMount.Spec.AutomountServiceAccountToken = &off
	a.create(podsPath, noMount)
	if len(noMount.Spec.Volumes) != 0 || len(noMount.Spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("automountServiceAccountToken: false still mounted %+v", noMount.Spec.Volumes)
	}
	a.create("/api/v1/namespaces/default/serviceaccounts", &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "robot"}, AutomountServiceAccountToken: &off})
	robot := newPod("robot", "", nil)
	robot.Spec.ServiceAccountName = "robot"
	a.create(podsPath, robot)
	if len(robot.Spec.Volumes) != 0 || robot.Spec.DeprecatedServiceAccount != "robot" {
		t.Errorf("pod of a non-automounting account: volumes %+v, serviceAccount %q", robot.Spec.Volumes, robot.Spec.DeprecatedServiceAccount)
	}

	ghost := newPod("ghost", "", nil)
	ghost.Spec.ServiceAccountName = "nobody"
	a.post(podsPath, ghost).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`pods "ghost" is forbidden: error looking up service account default/nobody: serviceaccount "nobody" not found`)
	a.post("/api/v1/namespaces/nowhere/pods", newPod("x", "", nil)).wantStatus(t, http.StatusNotFound, metav1.StatusReasonNotFound, `namespaces "nowhere" not found`)
}

// tokenAPI is an API server that requires the cluster token, as off loopback.
type tokenAPI struct {
	t     *testing.T
	srv   *Server
	h     http.Handler
	token string
}

func newTokenAPI(t *testing.T) *tokenAPI {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef"
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Token: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &tokenAPI{t: t, srv: srv, h: srv.Handler(), token: token}
}

func (a *tokenAPI) do(method, path, token, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

// requestToken asks for a token of default/default bound to pod.
func (a *tokenAPI) requestToken(pod *corev1.Pod) string {
	a.t.Helper()
	tr := authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	b, _ := json.Marshal(tr)
	r := a.do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", a.token, string(b))
	if r.Code != http.StatusCreated {
		a.t.Fatalf("token request: HTTP %d: %s", r.Code, r.Body)
	}
	if err := json.Unmarshal(r.Body.Bytes(), &tr); err != nil {
		a.t.Fatal(err)
	}
	if tr.Kind != "TokenRequest" || tr.Status.Token == "" || tr.Status.ExpirationTimestamp.Sub(time.Now()) < 59*time.Minute {
		a.t.Fatalf("token request answer = %s", r.Body)
	}
	return tr.Status.Token
}

func wantCode(t *testing.T, what string, r *httptest.ResponseRecorder, code int, msg string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("%s: HTTP %d, want %d: %s", what, r.Code, code, r.Body)
		return
	}
	if msg != "" && !strings.Contains(r.Body.String(), msg) {
		t.Errorf("%s: body %s does not contain %q", what, r.Body, msg)
	}
}

// A pod's token can do what RBAC grants its ServiceAccount: with upstream's
// default bindings only discovery; with a RoleBinding to view, reads in its
// namespace and nothing more (creates, deletes, exec, proxy and the
// TokenRequest itself are 403 with kube-apiserver's wording). A forged,
// expired or orphaned token is 401.
func TestServiceAccountTokenScope(t *testing.T) {
	a := newTokenAPI(t)
	var pod corev1.Pod
	b, _ := json.Marshal(newPod("web", "", nil))
	r := a.do("POST", podsPath, a.token, string(b))
	if r.Code != http.StatusCreated {
		t.Fatalf("creating pod: %d %s", r.Code, r.Body)
	}
	json.Unmarshal(r.Body.Bytes(), &pod)
	tok := a.requestToken(&pod)

	user := `User \"system:serviceaccount:default:default\"`
	for _, p := range []string{"/api", "/apis", "/api/v1", "/openapi/v2"} {
		wantCode(t, "GET "+p, a.do("GET", p, tok, ""), http.StatusOK, "")
	}
	wantCode(t, "list services unbound", a.do("GET", servicesPath, tok, ""), http.StatusForbidden,
		`services is forbidden: `+user+` cannot list resource \"services\" in API group \"\" in the namespace \"default\"`)
	wantCode(t, "bind view", a.do("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", a.token,
		`{"metadata":{"name":"view"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"default"}]}`),
		http.StatusCreated, "")
	for _, p := range []string{servicesPath, "/api/v1/namespaces/default/services/kubernetes", podsPath, deploymentsPath} {
		wantCode(t, "GET "+p, a.do("GET", p, tok, ""), http.StatusOK, "")
	}
	wantCode(t, "list pods everywhere", a.do("GET", "/api/v1/pods", tok, ""), http.StatusForbidden,
		`pods is forbidden: `+user+` cannot list resource \"pods\" in API group \"\" at the cluster scope`)
	wantCode(t, "list nodes", a.do("GET", nodesPath, tok, ""), http.StatusForbidden,
		`cannot list resource \"nodes\" in API group \"\" at the cluster scope`)
	svc, _ := json.Marshal(newService("x"))
	wantCode(t, "create service", a.do("POST", servicesPath, tok, string(svc)), http.StatusForbidden,
		`services is forbidden: `+user+` cannot create resource \"services\" in API group \"\" in the namespace \"default\"`)
	wantCode(t, "delete service", a.do("DELETE", servicesPath+"/kubernetes", tok, ""), http.StatusForbidden,
		`services \"kubernetes\" is forbidden: `+user+` cannot delete resource \"services\" in API group \"\" in the namespace \"default\"`)
	wantCode(t, "exec", a.do("POST", podsPath+"/web/exec?command=sh", tok, ""), http.StatusForbidden,
		`cannot create resource \"pods/exec\" in API group \"\" in the namespace \"default\"`)
	wantCode(t, "exec over websocket", a.do("GET", podsPath+"/web/exec?command=sh", tok, ""), http.StatusForbidden,
		`cannot create resource \"pods/exec\"`)
	wantCode(t, "proxy", a.do("GET", "/api/v1/namespaces/default/services/kubernetes/proxy", tok, ""), http.StatusForbidden,
		`cannot get resource \"services/proxy\"`)
	wantCode(t, "create namespace", a.do("POST", namespacesPath, tok, `{"metadata":{"name":"x"}}`), http.StatusForbidden,
		`cannot create resource \"namespaces\" in API group \"\" at the cluster scope`)
	wantCode(t, "patch deployment", a.do("PATCH", deploymentsPath+"/d", tok, `{}`), http.StatusForbidden,
		`deployments.apps \"d\" is forbidden: `+user+` cannot patch resource \"deployments\" in API group \"apps\"`)
	wantCode(t, "token request", a.do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", tok, `{}`), http.StatusForbidden,
		`cannot create resource \"serviceaccounts/token\"`)

	// Forged: signed by another key.
	other, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	saObj, _ := a.srv.get(saResource, "default", "default")
	forger := &Server{cfg: Config{ServiceAccountKey: other}, now: time.Now}
	forged, _, err := forger.issueToken(saObj.(*corev1.ServiceAccount), &pod, nil, []string{TokenIssuer}, 3600)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "forged token", a.do("GET", servicesPath, forged, ""), http.StatusUnauthorized, "Unauthorized")
	// Tampered: a valid token with its payload changed.
	parts := strings.Split(tok, ".")
	wantCode(t, "tampered token", a.do("GET", servicesPath, parts[0]+"."+parts[1]+"x."+parts[2], ""), http.StatusUnauthorized, "")
	// Expired: the server's clock moves past exp.
	a.srv.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	wantCode(t, "expired token", a.do("GET", servicesPath, tok, ""), http.StatusUnauthorized, "Unauthorized")
	a.srv.now = time.Now
	wantCode(t, "token again", a.do("GET", servicesPath, tok, ""), http.StatusOK, "")
	// Orphaned: the bound pod is gone.
	wantCode(t, "delete pod", a.do("DELETE", podsPath+"/web", a.token, ""), http.StatusOK, "")
	wantCode(t, "token of deleted pod", a.do("GET", servicesPath, tok, ""), http.StatusUnauthorized, "")
}

// A token for a pod must name the pod's own account; short expirations are
// refused with the field named.
func TestTokenRequestValidation(t *testing.T) {
	a := newTokenAPI(t)
	b, _ := json.Marshal(newPod("web", "", nil))
	wantCode(t, "create pod", a.do("POST", podsPath, a.token, string(b)), http.StatusCreated, "")
	wantCode(t, "short expiration", a.do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", a.token,
		`{"spec":{"expirationSeconds":60}}`), http.StatusUnprocessableEntity, "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes")
	wantCode(t, "missing account", a.do("POST", "/api/v1/namespaces/default/serviceaccounts/nobody/token", a.token, `{}`),
		http.StatusNotFound, `serviceaccounts \"nobody\" not found`)
	sa := `{"metadata":{"name":"robot"}}`
	wantCode(t, "create robot", a.do("POST", "/api/v1/namespaces/default/serviceaccounts", a.token, sa), http.StatusCreated, "")
	wantCode(t, "other pod's account", a.do("POST", "/api/v1/namespaces/default/serviceaccounts/robot/token", a.token,
		`{"spec":{"boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"web"}}}`), http.StatusBadRequest, `which runs as \"default\"`)
	wantCode(t, "no token", a.do("GET", servicesPath, "", ""), http.StatusUnauthorized, "")
}

// A server with a routable address publishes default/kubernetes as an
// EndpointSlice too, which is what kube-proxy programs 10.96.0.1 from.
func TestAPIEndpointSlice(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), AdvertiseAddress: "192.0.2.10", Port: 6443,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := srv.get(lookup("discovery.k8s.io", "v1", "endpointslices"), "default", "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(obj)
	for _, want := range []string{`"kubernetes.io/service-name":"kubernetes"`, `"addresses":["192.0.2.10"]`, `"name":"https"`, `"port":6443`, `"ready":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("slice %s lacks %s", b, want)
		}
	}
}
