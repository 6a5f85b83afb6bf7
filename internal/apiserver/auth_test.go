package apiserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// With a token configured (off loopback), only the health probes and /version
// answer without it (Kubernetes' system:public-info-viewer), the probes saying
// "ok" only; everything else is 401. The token
// never appears in the logs, at any level.
func TestTokenRequired(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef"
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs bytes.Buffer
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "v9.9.9-test", Token: token,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	do := func(method, path, auth string, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		if r := do("GET", p, "", ""); r.Code != 200 || r.Body.String() != "ok" {
			t.Errorf("GET %s without a token = %d %q, want 200 ok", p, r.Code, r.Body)
		}
	}
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`
	for _, ep := range []struct{ method, path string }{
		{"GET", "/api"}, {"GET", "/apis"}, {"GET", "/api/v1"}, {"GET", "/openapi/v2"},
		{"GET", configMapsPath}, {"POST", configMapsPath}, {"GET", configMapsPath + "?watch=1"},
		{"GET", "/api/v1/namespaces/default/pods/p/log"}, {"POST", "/api/v1/namespaces/default/pods/p/exec"},
		{"DELETE", "/api/v1/namespaces/default"}, {"GET", "/nonexistent"},
	} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token[:len(token)-1], "Basic " + token, "Bearer  " + token} {
			r := do(ep.method, ep.path, auth, cm)
			resp := response{code: r.Code, body: r.Body.Bytes()}
			resp.wantStatus(t, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "")
			if strings.Contains(r.Body.String(), "v9.9.9") || strings.Contains(r.Body.String(), token) {
				t.Errorf("%s %s (%q): the 401 leaks: %s", ep.method, ep.path, auth, r.Body)
			}
		}
	}
	if r := do("POST", configMapsPath, "Bearer "+token, cm); r.Code != http.StatusCreated {
		t.Errorf("create with the token: %d %s", r.Code, r.Body)
	}
	for _, auth := range []string{"", "Bearer " + token} {
		if r := do("GET", "/version", auth, ""); r.Code != 200 || !strings.Contains(r.Body.String(), "v9.9.9-test") || strings.Contains(r.Body.String(), token) {
			t.Errorf("/version (%q): %d %s", auth, r.Code, r.Body)
		}
	}
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatalf("nothing logged at debug level: %s", logs.String())
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the token is in the logs:\n%s", logs.String())
	}
}

// Objects crafted to inject iptables or nginx syntax into what the proxy and
// the Ingress controller render are refused with a field error naming the field.
func TestInjectionIsRefused(t *testing.T) {
	a := newTestAPI(t)
	svc := `{"apiVersion":"v1","kind":"Service","metadata":{"name":%s},"spec":{"ports":[{"name":%s,"port":80,"protocol":%s}]}}`
	ing := `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"i","annotations":{"nginx.ingress.kubernetes.io/rewrite-target":%s}},"spec":{"rules":[{"host":"a.example.com","http":{"paths":[{"path":%s,"pathType":"Prefix","backend":{"service":{"name":"a","port":{"number":80}}}}]}}]}}`
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"service name with a quote", servicesPath, fmtJSON(svc, `web" -j ACCEPT "`, "http", "TCP"), "metadata.name"},
		{"service name with a newline", servicesPath, fmtJSON(svc, "web\n-A INPUT -j ACCEPT", "http", "TCP"), "metadata.name"},
		{"port name with COMMIT", servicesPath, fmtJSON(svc, "web", "x\nCOMMIT\n*filter", "TCP"), "spec.ports[0].name"},
		{"protocol with -j", servicesPath, fmtJSON(svc, "web", "http", "tcp -j ACCEPT"), "spec.ports[0].protocol"},
		{"rewrite-target closing the block", "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
			fmtJSON(ing, "/x; } server { listen 81; }", "/a"),
			"metadata.annotations[nginx.ingress.kubernetes.io/rewrite-target]"},
		{"path with a newline", "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
			fmtJSON(ing, "/$1", "/a\n}\nserver {"), "spec.rules[0].http.paths[0].path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(http.MethodPost, tc.path, "application/json", tc.body)
			st := r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "")
			found := false
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					found = found || c.Field == tc.field
				}
			}
			if !found {
				t.Errorf("no cause on %s: %s", tc.field, r.body)
			}
		})
	}
}

// fmtJSON fills format's %s verbs with JSON strings.
func fmtJSON(format string, args ...string) string {
	for _, a := range args {
		b, _ := json.Marshal(a)
		format = strings.Replace(format, "%s", string(b), 1)
	}
	return format
}
