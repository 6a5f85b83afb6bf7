package apiserver

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// fuzzKinds are the create paths of every kind served, with a valid object of
// each as a seed.
var fuzzKinds = []struct {
	path, seed string
}{
	{"/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"a":"b"}}}`},
	{"/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node9"},"spec":{"podCIDR":"10.244.9.0/24"},"status":{"addresses":[{"type":"InternalIP","address":"192.168.56.19"}]}}`},
	{"/api/v1/namespaces/default/pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"minikit/echo","ports":[{"containerPort":8080,"name":"http"}],"readinessProbe":{"httpGet":{"path":"/","port":8080}}}]}}`},
	{"/api/v1/namespaces/default/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","annotations":{"x":"y"}},"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}],"externalIPs":["192.168.56.150"]}}`},
	{"/api/v1/namespaces/default/endpoints", `{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"web"},"subsets":[{"addresses":[{"ip":"10.244.1.5"}],"ports":[{"name":"http","port":8080}]}]}`},
	{"/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"type":"Opaque","data":{"k":"c2VjcmV0"},"stringData":{"p":"q"}}`},
	{"/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"},"binaryData":{"b":"AAE="}}`},
	{"/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e"},"involvedObject":{"kind":"Pod","name":"web","namespace":"default"},"reason":"Started","message":"m","type":"Normal"}`},
	{"/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"minikit/echo"}]}}}}`},
	{"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-x","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],"endpoints":[{"addresses":["10.244.1.5"],"conditions":{"ready":true},"nodeName":"node1"}]}`},
	{"/apis/networking.k8s.io/v1/namespaces/default/ingresses", `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"cafe","annotations":{"nginx.ingress.kubernetes.io/rewrite-target":"/$1"}},"spec":{"tls":[{"hosts":["cafe.example.com"],"secretName":"cafe"}],"rules":[{"host":"cafe.example.com","http":{"paths":[{"path":"/tea(/|$)(.*)","pathType":"ImplementationSpecific","backend":{"service":{"name":"tea","port":{"number":80}}}}]}}]}}`},
	{"/apis/networking.k8s.io/v1/ingressclasses", `{"apiVersion":"networking.k8s.io/v1","kind":"IngressClass","metadata":{"name":"nginx"},"spec":{"controller":"k8s.io/ingress-nginx"}}`},
	{"/apis/extensions/v1beta1/namespaces/default/ingresses", `{"apiVersion":"extensions/v1beta1","kind":"Ingress","metadata":{"name":"old"},"spec":{"rules":[{"host":"a.example.com","http":{"paths":[{"path":"/","backend":{"serviceName":"a","servicePort":80}}]}}]}}`},
}

// Body formats the fuzzer picks from.
var fuzzContentTypes = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}

// FuzzDecodeAndValidate posts arbitrary bodies, as JSON, YAML or protobuf, to
// the create path of every kind. Nothing may panic (the server would answer
// 500); every rejection is a v1 Status whose code is the response's 4xx code;
// whatever is accepted is stored valid, and reads back.
//
//	go test -run XXX -fuzz FuzzDecodeAndValidate -fuzztime 60s ./internal/apiserver/
func FuzzDecodeAndValidate(f *testing.F) {
	for i, k := range fuzzKinds {
		f.Add(uint8(i), uint8(0), []byte(k.seed))
		y, err := yaml.JSONToYAML([]byte(k.seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), uint8(1), y)
		// Near misses: the wrong kind, a bad field, an unknown field, a bad name.
		f.Add(uint8(i), uint8(0), []byte(strings.Replace(k.seed, `"kind":"`, `"kind":"X`, 1)))
		f.Add(uint8(i), uint8(0), []byte(strings.Replace(k.seed, `"metadata":{`, `"metadata":{"uid":1,`, 1)))
		f.Add(uint8(i), uint8(1), []byte(strings.Replace(string(y), "metadata:", "bogus: [1, {a: 2}]\nmetadata:", 1)))
		f.Add(uint8(i), uint8(0), []byte(strings.Replace(k.seed, `"name":"`, `"name":"Bad_Name\n-j ACCEPT`, 1)))
	}
	f.Add(uint8(0), uint8(1), []byte("a: &a [*a, *a]\n"))
	f.Add(uint8(1), uint8(1), []byte("- - - - [x]\n"))
	f.Add(uint8(2), uint8(0), []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1e1000000"}}}]}}`))
	f.Add(uint8(3), uint8(2), []byte("k8s\x00\x0a\x0f\x0a\x02v1\x12\x07Service\x12\x00"))
	f.Add(uint8(5), uint8(0), []byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s2"},"data":{"k":"not base64!"}}`))

	st, err := store.OpenBolt(filepath.Join(f.TempDir(), "db"), 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "fuzz",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()

	f.Fuzz(func(t *testing.T, kind, format uint8, body []byte) {
		k := fuzzKinds[int(kind)%len(fuzzKinds)]
		ct := fuzzContentTypes[int(format)%len(fuzzContentTypes)]
		req := httptest.NewRequest(http.MethodPost, k.path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code := rec.Code
		out := rec.Body.Bytes()
		switch {
		case code == http.StatusCreated:
			var m metav1.PartialObjectMetadata
			if err := json.Unmarshal(out, &m); err != nil || m.Name == "" || m.ResourceVersion == "" {
				t.Fatalf("201 for %s but the body is no object (%v): %.500s", k.path, err, out)
			}
			// Stored valid: it reads back, and validates as an update to itself.
			res, ns := resourceOf(t, k.path)
			obj, err := srv.get(res, ns, m.Name)
			if err != nil {
				t.Fatalf("created %s %q does not read back: %v", res.kind, m.Name, err)
			}
			if errs := validation.Validate(obj, obj, validation.DefaultConfig()); len(errs) > 0 {
				t.Fatalf("stored %s %q is invalid: %v", res.kind, m.Name, errs)
			}
			// Keep the store small and the next input's name free, and give back
			// what was allocated (ClusterIPs, NodePorts) as a real delete does.
			zero := int64(0)
			if res.name != "namespaces" {
				if _, err := srv.Delete(res, ns, m.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					t.Fatalf("deleting created %s %q: %v", res.kind, m.Name, err)
				}
				if _, err := srv.get(res, ns, m.Name); err == nil && res.name != "pods" {
					// Held by finalizers: removing them completes the delete.
					srv.Update(res, ns, m.Name, "", func(cur runtime.Object) (runtime.Object, error) {
						metaOf(cur).SetFinalizers(nil)
						return cur, nil
					})
				}
			}
			srv.store.Update(func(tx store.Tx) error { return tx.Delete(res.key(ns, m.Name)) })
		case code >= 400 && code < 500:
			var s metav1.Status
			if err := json.Unmarshal(out, &s); err != nil {
				t.Fatalf("HTTP %d body is not a Status (%v): %.500s", code, err, out)
			}
			if s.Kind != "Status" || s.APIVersion != "v1" || s.Status != metav1.StatusFailure || int(s.Code) != code || s.Message == "" {
				t.Fatalf("HTTP %d answered with %+v", code, s)
			}
		default:
			t.Fatalf("POST %s (%s) answered HTTP %d: %.500s", k.path, ct, code, out)
		}
	})
}

// resourceOf maps a create path to its resource and namespace.
func resourceOf(t *testing.T, path string) (*resource, string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group, version string
	var rest []string
	if parts[0] == "api" {
		version, rest = parts[1], parts[2:]
	} else {
		group, version, rest = parts[1], parts[2], parts[3:]
	}
	if group == "extensions" {
		group, version = "networking.k8s.io", "v1" // stored as v1
	}
	ns := ""
	if len(rest) == 3 {
		ns, rest = rest[1], rest[2:]
	}
	r := lookup(group, version, rest[0])
	if r == nil {
		t.Fatalf("no resource for %s", path)
	}
	return r, ns
}
