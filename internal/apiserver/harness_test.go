package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// testAPI is one API server over a bbolt store in a temporary directory, served
// over loopback HTTP on port 0, as kubectl and client-go would reach it.
type testAPI struct {
	t      testing.TB
	dbPath string
	store  store.Interface
	srv    *Server
	http   *httptest.Server
	url    string
	client *http.Client
}

// apiOptions adjusts how a test server is built.
type apiOptions struct {
	history int               // store history; 0 is the store default
	vcfg    validation.Config // zero means validation.DefaultConfig()
	dbPath  string            // reuse a store file (for restarts)
}

func newTestAPI(t testing.TB) *testAPI { return newTestAPIWith(t, apiOptions{}) }

func newTestAPIWith(t testing.TB, o apiOptions) *testAPI {
	t.Helper()
	if o.dbPath == "" {
		o.dbPath = filepath.Join(t.TempDir(), "db")
	}
	if !o.vcfg.ServiceCIDR.IsValid() {
		o.vcfg = validation.DefaultConfig()
	}
	st, err := store.OpenBolt(o.dbPath, o.history)
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	srv, err := New(Config{
		Store:      st,
		Validation: o.vcfg,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Version:    "test",
	})
	if err != nil {
		st.Close()
		t.Fatalf("creating API server: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	// Enough idle connections for the concurrent tests to reuse them.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	a := &testAPI{t: t, dbPath: o.dbPath, store: st, srv: srv, http: hs, url: hs.URL, client: client}
	t.Cleanup(a.close)
	return a
}

// close stops the HTTP server and the store. Closing the store first ends open
// watches, so the HTTP server has no outstanding requests to wait for.
func (a *testAPI) close() {
	if a.http == nil {
		return
	}
	a.store.Close()
	a.client.CloseIdleConnections()
	a.http.CloseClientConnections()
	a.http.Close()
	a.http = nil
}

// response is one HTTP exchange's result.
type response struct {
	code   int
	body   []byte
	header http.Header
}

// do sends a request; body may be nil, a string, []byte (sent as is with
// contentType) or any other value (sent as JSON). header is name, value pairs.
func (a *testAPI) do(method, path, contentType string, body any, header ...string) response {
	a.t.Helper()
	r, err := a.try(method, path, contentType, body, header...)
	if err != nil {
		a.t.Fatal(err)
	}
	return r
}

// try is do without failing the test, for goroutines other than the test's.
func (a *testAPI) try(method, path, contentType string, body any, header ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return response{}, fmt.Errorf("encoding request body: %w", err)
		}
		rd = bytes.NewReader(j)
		if contentType == "" {
			contentType = "application/json"
		}
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		return response{}, fmt.Errorf("building %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading body: %w", method, path, err)
	}
	return response{code: resp.StatusCode, body: b, header: resp.Header}, nil
}

func (a *testAPI) get(path string) response { return a.do(http.MethodGet, path, "", nil) }

func (a *testAPI) post(path string, obj any) response {
	return a.do(http.MethodPost, path, "", obj)
}

func (a *testAPI) put(path string, obj any) response {
	return a.do(http.MethodPut, path, "", obj)
}

func (a *testAPI) patch(path string, pt string, patch string) response {
	return a.do(http.MethodPatch, path, pt, patch)
}

func (a *testAPI) delete(path string) response { return a.do(http.MethodDelete, path, "", nil) }

// mustCode fails the test unless the response has the wanted code, then decodes it
// into out (when not nil).
func (r response) mustCode(t testing.TB, want int, out any) {
	t.Helper()
	if r.code != want {
		t.Fatalf("got HTTP %d, want %d: %s", r.code, want, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("decoding %T: %v: %s", out, err, r.body)
		}
	}
}

// status decodes a metav1.Status body, failing the test if it is not one.
func (r response) status(t testing.TB) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("HTTP %d body is not a Status: %v: %s", r.code, err, r.body)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" {
		t.Fatalf("HTTP %d body is not a v1 Status: %s", r.code, r.body)
	}
	return st
}

// wantStatus checks an error response: HTTP code, a Status of the same code,
// the reason, and (when not empty) a message fragment.
func (r response) wantStatus(t testing.TB, code int, reason metav1.StatusReason, msg string) metav1.Status {
	t.Helper()
	if r.code != code {
		t.Fatalf("got HTTP %d, want %d: %s", r.code, code, r.body)
	}
	st := r.status(t)
	if st.Status != metav1.StatusFailure || int(st.Code) != code {
		t.Errorf("Status has status %q code %d, want Failure %d", st.Status, st.Code, code)
	}
	if st.Reason != reason {
		t.Errorf("Status reason %q, want %q (message %q)", st.Reason, reason, st.Message)
	}
	if msg != "" && !strings.Contains(st.Message, msg) {
		t.Errorf("Status message %q does not contain %q", st.Message, msg)
	}
	return st
}

// waitTimeout bounds every testutil.Eventually of these tests but the
// waits for a CRD to be Established.
const waitTimeout = 10 * time.Second

// establishTimeout bounds the wait for a CRD to be Established. The CRD
// controller compiles a CRD's CEL rules and builds its OpenAPI before it
// writes Established, one CRD at a time: the Gateway API bundle's CRDs take
// about 1.5 s in all under the race detector on an idle 2-core machine, and
// CI's unit tier runs beside four labs (load above 20), where they took
// over 10 s. This is a bound on waiting, not a speed target.
const establishTimeout = 3 * time.Minute

// gone is an Eventually condition: the object at path no longer exists.
func (a *testAPI) gone(path string) func() error {
	return func() error {
		if a.exists(path) {
			return fmt.Errorf("%s still exists", path)
		}
		return nil
	}
}

// Collection paths of the objects the tests write.
const (
	servicesPath    = "/api/v1/namespaces/default/services"
	podsPath        = "/api/v1/namespaces/default/pods"
	configMapsPath  = "/api/v1/namespaces/default/configmaps"
	nodesPath       = "/api/v1/nodes"
	namespacesPath  = "/api/v1/namespaces"
	deploymentsPath = "/apis/apps/v1/namespaces/default/deployments"
	slicesPath      = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
)

// newService is a ClusterIP Service selecting app=name with one port, 80.
func newService(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func nodePortType(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }

func newConfigMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       data,
	}
}

// newPod is a one-container pod, bound to node unless node is empty.
func newPod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}},
		},
	}
}

func newNode(name string) *corev1.Node {
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
			},
		},
	}
}

func newNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

// create posts obj to path, expects 201 and decodes the created object into obj.
func (a *testAPI) create(path string, obj any) {
	a.t.Helper()
	r := a.post(path, obj)
	// Decode into a zero value: fields the server cleared are omitted from its answer.
	v := reflect.ValueOf(obj).Elem()
	v.Set(reflect.Zero(v.Type()))
	r.mustCode(a.t, http.StatusCreated, obj)
}

// read gets path, expects 200 and decodes into out.
func (a *testAPI) read(path string, out any) {
	a.t.Helper()
	a.get(path).mustCode(a.t, http.StatusOK, out)
}

// exists reports whether path answers 200 (false on 404; anything else fails).
func (a *testAPI) exists(path string) bool {
	a.t.Helper()
	r := a.get(path)
	switch r.code {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		return false
	}
	a.t.Fatalf("GET %s: HTTP %d: %s", path, r.code, r.body)
	return false
}

// with returns a view of the server whose helpers fail t, for use in subtests.
func (a *testAPI) with(t testing.TB) *testAPI {
	c := *a
	c.t = t
	return &c
}
