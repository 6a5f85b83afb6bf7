package apiserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	extv1beta1 "k8s.io/api/extensions/v1beta1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// cafeV1beta1 is the chapter's manifest, as written.
const cafeV1beta1 = `apiVersion: extensions/v1beta1
kind: Ingress
metadata:
  name: cafe-ingress
spec:
  tls:
  - hosts:
    - cafe.example.com
    secretName: cafe-secret
  rules:
  - host: cafe.example.com
    http:
      paths:
      - path: /tea
        backend:
          serviceName: tea-svc
          servicePort: 80
      - path: /coffee
        backend:
          serviceName: coffee-svc
          servicePort: 80
`

// v1beta1API serves the API with the extensions/v1beta1 hook in front, as route
// does, and returns clients for it.
func v1beta1API(t *testing.T) (string, kubernetes.Interface) {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) >= 4 && parts[0] == "apis" {
			gv := schema.GroupVersion{Group: parts[1], Version: parts[2]}
			if isIngressV1beta1(gv, parts[3:]) {
				if err := srv.serveIngressV1beta1(w, r, gv, parts[3:]); err != nil {
					writeError(w, r, err, nil)
				}
				return
			}
		}
		srv.Handler().ServeHTTP(w, r)
	})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { st.Close(); hs.Close() })
	c, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, c
}

func TestIngressV1beta1CreateAsWrittenServedAsV1(t *testing.T) {
	url, c := v1beta1API(t)
	ctx := context.Background()
	req, _ := http.NewRequest("POST", url+"/apis/extensions/v1beta1/namespaces/default/ingresses", strings.NewReader(cafeV1beta1))
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	if w := resp.Header.Get("Warning"); w != ingressV1beta1Warning {
		t.Errorf("Warning = %q, want %q", w, ingressV1beta1Warning)
	}
	if !strings.Contains(string(body), `"apiVersion":"extensions/v1beta1"`) || !strings.Contains(string(body), `"serviceName":"tea-svc"`) {
		t.Errorf("create answered %s, want the v1beta1 form", body)
	}

	// Stored once, as v1: pathType filled with ImplementationSpecific.
	v1, err := c.NetworkingV1().Ingresses("default").Get(ctx, "cafe-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := v1.Spec.Rules[0].HTTP.Paths[0]
	if p.Path != "/tea" || *p.PathType != networkingv1.PathTypeImplementationSpecific || p.Backend.Service.Name != "tea-svc" || p.Backend.Service.Port.Number != 80 {
		t.Errorf("v1 path = %+v", p)
	}
	if v1.Spec.TLS[0].SecretName != "cafe-secret" {
		t.Errorf("v1 tls = %+v", v1.Spec.TLS)
	}

	// Read back through the typed v1beta1 client, list included.
	old, err := c.ExtensionsV1beta1().Ingresses("default").Get(ctx, "cafe-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if old.Spec.Rules[0].HTTP.Paths[1].Backend.ServiceName != "coffee-svc" || old.Spec.Rules[0].HTTP.Paths[1].Backend.ServicePort != intstr.FromInt32(80) {
		t.Errorf("v1beta1 get = %+v", old.Spec.Rules[0].HTTP.Paths[1])
	}
	list, err := c.ExtensionsV1beta1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Spec.Rules[0].HTTP.Paths[0].Backend.ServiceName != "tea-svc" {
		t.Fatalf("v1beta1 list = %+v, %v", list, err)
	}
	if _, err := c.ExtensionsV1beta1().Ingresses("default").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) ||
		!strings.Contains(err.Error(), `ingresses.extensions "nope" not found`) {
		t.Errorf("missing v1beta1 ingress: %v", err)
	}
}

func TestIngressV1beta1UpdatePatchWatchDelete(t *testing.T) {
	_, c := v1beta1API(t)
	ctx := context.Background()
	ing := &extv1beta1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: extv1beta1.IngressSpec{Backend: &extv1beta1.IngressBackend{ServiceName: "web", ServicePort: intstr.FromString("http")}}}
	created, err := c.ExtensionsV1beta1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := c.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
	if v1.Spec.DefaultBackend == nil || v1.Spec.DefaultBackend.Service.Port.Name != "http" {
		t.Fatalf("spec.backend not converted to defaultBackend: %+v", v1.Spec)
	}

	w, err := c.ExtensionsV1beta1().Ingresses("default").Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created.Spec.Backend.ServicePort = intstr.FromInt32(8080)
	if _, err := c.ExtensionsV1beta1().Ingresses("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := `{"spec":{"rules":[{"host":"web.example","http":{"paths":[{"path":"/","backend":{"serviceName":"web","servicePort":80}}]}}]}}`
	patched, err := c.ExtensionsV1beta1().Ingresses("default").Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Spec.Rules[0].Host != "web.example" || patched.Spec.Backend.ServicePort.IntVal != 8080 {
		t.Errorf("patched = %+v", patched.Spec)
	}
	v1, _ = c.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
	if *v1.Spec.Rules[0].HTTP.Paths[0].PathType != networkingv1.PathTypeImplementationSpecific || v1.Spec.DefaultBackend.Service.Port.Number != 8080 {
		t.Errorf("v1 after update and patch = %+v", v1.Spec)
	}
	// The watch sees both changes in the v1beta1 form.
	for i := 0; i < 2; i++ {
		select {
		case ev := <-w.ResultChan():
			got, ok := ev.Object.(*extv1beta1.Ingress)
			if ev.Type != watch.Modified || !ok || got.Spec.Backend.ServicePort.IntVal != 8080 {
				t.Fatalf("watch event %d: %s %#v", i, ev.Type, ev.Object)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no watch event %d", i)
		}
	}
	// Invalid as v1 is invalid as v1beta1: validation runs on the converted object.
	bad := &extv1beta1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: extv1beta1.IngressSpec{Rules: []extv1beta1.IngressRule{{Host: "1.2.3.4"}}}}
	if _, err := c.ExtensionsV1beta1().Ingresses("default").Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("IP host accepted: %v", err)
	}
	if err := c.ExtensionsV1beta1().Ingresses("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after v1beta1 delete, v1 get: %v", err)
	}
}

func TestIngressV1beta1Discovery(t *testing.T) {
	_, c := v1beta1API(t)
	res, err := c.Discovery().ServerResourcesForGroupVersion("extensions/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range res.APIResources {
		found = found || (r.Name == "ingresses" && r.Kind == "Ingress" && r.Namespaced)
	}
	if !found {
		t.Errorf("extensions/v1beta1 discovery lacks ingresses: %+v", res.APIResources)
	}
}
