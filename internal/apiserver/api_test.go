package apiserver

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation/validationtest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"sigs.k8s.io/yaml"
)

// collectionPaths is where kubectl posts a manifest of each apiVersion and kind,
// written out rather than derived from the server's own resource table so the
// routing is under test too. Namespaced objects go to "default".
var collectionPaths = map[string]string{
	"v1/Service":                         "/api/v1/namespaces/default/services",
	"v1/Pod":                             "/api/v1/namespaces/default/pods",
	"v1/ConfigMap":                       "/api/v1/namespaces/default/configmaps",
	"v1/Secret":                          "/api/v1/namespaces/default/secrets",
	"v1/Endpoints":                       "/api/v1/namespaces/default/endpoints",
	"v1/Event":                           "/api/v1/namespaces/default/events",
	"v1/Namespace":                       "/api/v1/namespaces",
	"v1/Node":                            "/api/v1/nodes",
	"apps/v1/Deployment":                 "/apis/apps/v1/namespaces/default/deployments",
	"apps/v1/ReplicaSet":                 "/apis/apps/v1/namespaces/default/replicasets",
	"v1/ReplicationController":           "/api/v1/namespaces/default/replicationcontrollers",
	"discovery.k8s.io/v1/EndpointSlice":  "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
	"networking.k8s.io/v1/Ingress":       "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
	"networking.k8s.io/v1/IngressClass":  "/apis/networking.k8s.io/v1/ingressclasses",
	"networking.k8s.io/v1/NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
	"networking.k8s.io/v1/ServiceCIDR":   "/apis/networking.k8s.io/v1/servicecidrs",
	"networking.k8s.io/v1/IPAddress":     "/apis/networking.k8s.io/v1/ipaddresses",
	"apps/v1/StatefulSet":                "/apis/apps/v1/namespaces/default/statefulsets",
	"apps/v1/DaemonSet":                  "/apis/apps/v1/namespaces/default/daemonsets",
	"batch/v1/Job":                       "/apis/batch/v1/namespaces/default/jobs",
}

func collectionPath(t testing.TB, manifest string) string {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(manifest), &tm); err != nil {
		t.Fatalf("reading apiVersion and kind: %v", err)
	}
	p, ok := collectionPaths[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		t.Fatalf("no collection path for %s %s", tm.APIVersion, tm.Kind)
	}
	return p
}

// TestBadManifests posts every manifest package validation knows to be invalid
// (its testdata, see validationtest) and expects what kube-apiserver answers:
// 422 Invalid naming the field, and no write.
func TestBadManifests(t *testing.T) {
	cases := validationtest.BadManifests(t, "validation/testdata")
	if len(cases) < 25 {
		t.Fatalf("validation/testdata has %d bad manifests, want at least 25", len(cases))
	}
	a := newTestAPI(t)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			a := a.with(t)
			path := collectionPath(t, tc.YAML)
			rev, list := a.store.Rev(), a.get(path)
			list.mustCode(t, http.StatusOK, nil)

			r := a.do(http.MethodPost, path, "application/yaml", tc.YAML)
			st := r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, tc.Message)
			if st.Details == nil {
				t.Fatalf("Status has no details: %s", r.body)
			}
			var fields []string
			found := false
			for _, c := range st.Details.Causes {
				fields = append(fields, c.Field)
				if c.Field == tc.Field {
					found = true
				}
			}
			if !found {
				t.Errorf("causes are on %q, want one on %q", fields, tc.Field)
			}

			if got := a.store.Rev(); got != rev {
				t.Errorf("store revision moved from %d to %d", rev, got)
			}
			if after := a.get(path); !bytes.Equal(after.body, list.body) {
				t.Errorf("list changed:\nbefore %s\nafter  %s", list.body, after.body)
			}
		})
	}
}

// TestMalformedRequests sends bodies no client should send and expects a 4xx Status,
// never a 500 or a dropped connection, and no write.
func TestMalformedRequests(t *testing.T) {
	const svcs = "/api/v1/namespaces/default/services"
	validSvc := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},"spec":{"ports":[{"port":80}]}}`
	huge := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"k":"` +
		strings.Repeat("x", 4<<20) + `"}}`
	cases := []struct {
		name, method, path, contentType string
		body                            string
		header                          []string
		code                            int
		reason                          metav1.StatusReason
	}{
		{name: "broken yaml", path: svcs, contentType: "application/yaml",
			body: "apiVersion: v1\nkind: Service\nmetadata:\n  name: [web\n", code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "yaml with tabs", path: svcs, contentType: "application/yaml",
			body: "apiVersion: v1\nkind: Service\nmetadata:\n\tname: web\n", code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "broken json", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "wrong kind for the url", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web"}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "wrong apiVersion for the url", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"apps/v1","kind":"Service","metadata":{"name":"web"}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "json array", path: svcs, contentType: "application/json",
			body: `[` + validSvc + `]`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "json string", path: svcs, contentType: "application/json",
			body: `"web"`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "empty body", path: svcs, contentType: "application/json",
			code: 400, reason: metav1.StatusReasonBadRequest},
		// An empty YAML document is JSON null: kube-apiserver decodes it as an empty
		// Service of the URL's kind, which then has no name.
		{name: "empty yaml body", path: svcs, contentType: "application/yaml",
			code: 422, reason: metav1.StatusReasonInvalid},
		{name: "deeply nested json", path: svcs, contentType: "application/json",
			body: strings.Repeat("[", 10000), code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "deeply nested json in a field", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","annotations":` + strings.Repeat("[", 10000),
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "deeply nested yaml", path: svcs, contentType: "application/yaml",
			body: strings.Repeat("[", 10000), code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "type mismatch", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},"spec":{"ports":"80"}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "unknown field with fieldValidation=Strict", path: svcs + "?fieldValidation=Strict", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},"spec":{"portz":[{"port":80}]}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "duplicate field with fieldValidation=Strict", path: svcs + "?fieldValidation=Strict", contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","name":"web2"},"spec":{"ports":[{"port":80}]}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "namespace mismatch", path: svcs, contentType: "application/json",
			body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"kube-system"},"spec":{"ports":[{"port":80}]}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "garbage protobuf", path: svcs, contentType: "application/vnd.kubernetes.protobuf",
			body: "k8s\x00garbage", code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "4 MiB body", path: "/api/v1/namespaces/default/configmaps", contentType: "application/json",
			body: huge, code: 413, reason: metav1.StatusReasonRequestEntityTooLarge},
		{name: "put with broken json", method: http.MethodPut, path: svcs + "/kubernetes", contentType: "application/json",
			body: `{"apiVersion":"v1",`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "put with a name that is not the url's", method: http.MethodPut, path: svcs + "/kubernetes", contentType: "application/json",
			body: validSvc, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "merge patch that is not json", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "application/merge-patch+json",
			body: `{"metadata":`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "json patch that is not a list", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "application/json-patch+json",
			body: `{"op":"add"}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "json patch on a missing path", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "application/json-patch+json",
			body: `[{"op":"replace","path":"/spec/nope/x","value":1}]`, code: 422, reason: metav1.StatusReasonInvalid},
		{name: "json patch whose test fails", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "application/json-patch+json",
			body: `[{"op":"test","path":"/metadata/name","value":"other"},{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
			code: 422, reason: metav1.StatusReasonInvalid},
		{name: "patch of unknown type", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "text/plain",
			body: `{}`, code: 415, reason: metav1.StatusReasonUnsupportedMediaType},
		{name: "server-side apply without a fieldManager", method: http.MethodPatch, path: svcs + "/kubernetes", contentType: "application/apply-patch+yaml",
			body: "apiVersion: v1\nkind: Service\nmetadata:\n  name: kubernetes\n", code: 422, reason: metav1.StatusReasonInvalid},
		{name: "server-side apply as CBOR", method: http.MethodPatch, path: svcs + "/kubernetes?fieldManager=kubectl", contentType: "application/apply-patch+cbor",
			body: "\xa0", code: 415, reason: metav1.StatusReasonUnsupportedMediaType},
		{name: "delete options that are not json", method: http.MethodDelete, path: svcs + "/kubernetes", contentType: "application/json",
			body: `{"gracePeriodSeconds":`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad gracePeriodSeconds", method: http.MethodDelete, path: svcs + "/kubernetes?gracePeriodSeconds=soon",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad label selector", method: http.MethodGet, path: svcs + "?labelSelector=a%20in%20(", code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad table includeObject", method: http.MethodGet, path: svcs + "?includeObject=Everything",
			header: []string{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad table includeObject on get", method: http.MethodGet, path: svcs + "/kubernetes?includeObject=Everything",
			header: []string{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad table includeObject on watch", method: http.MethodGet, path: svcs + "?watch=true&includeObject=Everything",
			header: []string{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "bad watch resourceVersion", method: http.MethodGet, path: svcs + "?watch=true&resourceVersion=yesterday",
			code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "unknown resource", method: http.MethodGet, path: "/api/v1/widgets", code: 404, reason: metav1.StatusReasonNotFound},
		{name: "unknown subresource", method: http.MethodGet, path: svcs + "/kubernetes/widgets", code: 404, reason: metav1.StatusReasonNotFound},
		{name: "create in a missing namespace", path: "/api/v1/namespaces/nowhere/services", contentType: "application/json",
			body: validSvc, code: 404, reason: metav1.StatusReasonNotFound},
	}
	a := newTestAPI(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := a.with(t)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			rev := a.store.Rev()
			r := a.do(method, tc.path, tc.contentType, tc.body, tc.header...)
			r.wantStatus(t, tc.code, tc.reason, "")
			if got := a.store.Rev(); got != rev {
				t.Errorf("store revision moved from %d to %d", rev, got)
			}
		})
	}
	// The server is still healthy after all of that.
	a.get("/api/v1/namespaces/default/services/kubernetes").mustCode(t, http.StatusOK, nil)
}

// TestFieldValidation checks the three fieldValidation modes kubectl selects with
// --validate, and that warnings reach kubectl in its own words.
func TestFieldValidation(t *testing.T) {
	a := newTestAPI(t)
	body := func(name string) string {
		return `{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `"},` +
			`"spec":{"portz":[1],"ports":[{"port":80,"nam":"x"}]}}`
	}
	cases := []struct {
		mode     string
		code     int
		warnings []string
		message  string
	}{
		{mode: "", code: 201, warnings: []string{`unknown field "spec.portz"`, `unknown field "spec.ports[0].nam"`}},
		{mode: "Warn", code: 201, warnings: []string{`unknown field "spec.portz"`, `unknown field "spec.ports[0].nam"`}},
		{mode: "Ignore", code: 201},
		{mode: "Strict", code: 400, message: `strict decoding error: unknown field "spec.portz", unknown field "spec.ports[0].nam"`},
	}
	for i, tc := range cases {
		t.Run("mode "+tc.mode, func(t *testing.T) {
			a := a.with(t)
			name := fmt.Sprintf("web-%d", i)
			for _, method := range []string{http.MethodPost, http.MethodPut} {
				path := servicesPath + "/" + name + "?fieldValidation=" + tc.mode
				if method == http.MethodPost {
					path = servicesPath + "?fieldValidation=" + tc.mode
				}
				if method == http.MethodPut && tc.code != 201 {
					continue
				}
				r := a.do(method, path, "application/json", body(name))
				if tc.code != 201 {
					r.wantStatus(t, tc.code, metav1.StatusReasonBadRequest, tc.message)
					continue
				}
				if want := map[string]int{http.MethodPost: 201, http.MethodPut: 200}[method]; r.code != want {
					t.Fatalf("%s: HTTP %d, want %d: %s", method, r.code, want, r.body)
				}
				ws, errs := utilnet.ParseWarningHeaders(r.header.Values("Warning"))
				if len(errs) > 0 {
					t.Errorf("%s: malformed Warning headers %q: %v", method, r.header.Values("Warning"), errs)
				}
				var got []string
				for _, w := range ws {
					if w.Code != 299 {
						t.Errorf("warning code %d, want 299", w.Code)
					}
					got = append(got, w.Text)
				}
				if !slices.Equal(got, tc.warnings) {
					t.Errorf("%s: warnings %q, want %q", method, got, tc.warnings)
				}
			}
		})
	}
}
