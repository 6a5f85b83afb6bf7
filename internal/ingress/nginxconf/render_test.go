package nginxconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func ptr[T any](v T) *T { return &v }

func pair(t *testing.T, cn string) ([]byte, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

type svc struct {
	name string
	eps  []string
}

func input(t *testing.T, services []svc, ings ...*networkingv1.Ingress) config.Input {
	in := config.Input{Class: config.DefaultClass, Ingresses: ings, IngressClasses: []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}}}
	for _, s := range services {
		in.Services = append(in.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: s.name}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}}}
		for _, ep := range s.eps {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ep}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
		}
		in.EndpointSlices = append(in.EndpointSlices, sl)
	}
	return in
}

func ingress(name string, ann map[string]string, host string, paths ...networkingv1.HTTPIngressPath) *networkingv1.Ingress {
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: ann,
		CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000, 0))},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}}}}}}
}

func path(p string, typ networkingv1.PathType, service string) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: p, PathType: &typ, Backend: networkingv1.IngressBackend{
		Service: &networkingv1.IngressServiceBackend{Name: service, Port: networkingv1.ServiceBackendPort{Number: 80}}}}
}

// cafe is the chapter's cafe with cafe-secret, as the controller sees it after
// the v1beta1 conversion (ImplementationSpecific paths).
func cafe(t *testing.T) (*config.Config, Config) {
	crt, key := pair(t, "cafe.example.com")
	ing := ingress("cafe-ingress", nil, "cafe.example.com",
		path("/tea", networkingv1.PathTypeImplementationSpecific, "tea-svc"),
		path("/coffee", networkingv1.PathTypeImplementationSpecific, "coffee-svc"))
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"cafe.example.com"}, SecretName: "cafe-secret"}}
	in := input(t, []svc{{"tea-svc", []string{"10.244.1.3", "10.244.2.4", "10.244.2.5"}}, {"coffee-svc", []string{"10.244.1.2", "10.244.2.3"}}}, ing)
	in.Secrets = []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cafe-secret"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}}
	dc, dk := pair(t, "fake")
	return config.Build(in), Config{Prefix: "/etc/nginx", DefaultCertPEM: dc, DefaultKeyPEM: dk}
}

// TestCafeGolden pins the rendering of the chapter's cafe (certificates aside).
func TestCafeGolden(t *testing.T) {
	cfg, opts := cafe(t)
	out, err := Render(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "cafe.conf")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, []byte(out.Conf()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got := out.Conf(); got != string(want) {
		t.Errorf("nginx.conf differs from %s (go test -update rewrites it):\n%s", golden, diff(string(want), got))
	}
	if len(out.Files) != 3 || out.Files["certs/default-cafe-secret.pem"] == nil {
		t.Errorf("files = %v, want nginx.conf, the default certificate and cafe-secret", keys(out.Files))
	}
}

func keys(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// diff shows the first differing lines.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ": want " + x + "\n got  " + y
		}
	}
	return ""
}

// TestNginxAcceptsWhatIsRendered runs Debian's nginx -t on renderings of every
// kind of location: nginx must accept what students are shown.
func TestNginxAcceptsWhatIsRendered(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("nginx is not installed (scripts/deps.sh installs it): the rendered nginx.conf cannot be checked")
		}
		t.Skip("needs nginx")
	}
	cafeCfg, opts := cafe(t)
	other := func() *config.Config {
		regex := ingress("rewrite", map[string]string{config.AnnotationRewriteTarget: "/$2"}, "r.example",
			path("/something(/|$)(.*)", networkingv1.PathTypeImplementationSpecific, "app"))
		mixed := ingress("mixed", map[string]string{config.AnnotationBackendProtocol: "HTTPS"}, "*.wild.example",
			path("/", networkingv1.PathTypePrefix, "app"), path("/", networkingv1.PathTypeExact, "app"),
			path("/foo", networkingv1.PathTypePrefix, "app"), path("/foo/", networkingv1.PathTypePrefix, "app"),
			path("/foo", networkingv1.PathTypeExact, "app"), path("/empty", networkingv1.PathTypePrefix, "empty"),
			path("/missing", networkingv1.PathTypePrefix, "missing"), path(`/we"ird {x}`, networkingv1.PathTypeExact, "app"))
		grpc := ingress("grpc", map[string]string{config.AnnotationBackendProtocol: "GRPC", config.AnnotationSSLRedirect: "false"}, "grpc.example",
			path("/", networkingv1.PathTypePrefix, "app"))
		grpc.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"grpc.example"}}}
		def := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"},
			Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "app", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
		return config.Build(input(t, []svc{{"app", []string{"10.244.1.9"}}, {"empty", nil}}, regex, mixed, grpc, def))
	}()
	for name, cfg := range map[string]*config.Config{"cafe": cafeCfg, "everything else": other, "nothing": config.Empty()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			o := opts
			o.Prefix, o.Listen, o.ListenTLS, o.HTTPSPort = dir, "127.0.0.1:18980", "127.0.0.1:18943", 8443
			out, err := Render(cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"logs", "temp"} {
				os.MkdirAll(filepath.Join(dir, d), 0o755)
			}
			for f, data := range out.Files {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(nginx, "-t", "-q", "-p", dir, "-c", filepath.Join(dir, ConfFile), "-e", filepath.Join(dir, "logs", "error.log"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nginx -t: %v\n%s\n%s", err, b, out.Conf())
			}
		})
	}
}

func TestRenderedLocations(t *testing.T) {
	in := input(t, []svc{{"app", []string{"10.244.1.9"}}, {"empty", nil}},
		ingress("a", nil, "*.foo.com", path("/foo", networkingv1.PathTypePrefix, "app"), path("/foo", networkingv1.PathTypeExact, "app"),
			path("/bar/", networkingv1.PathTypePrefix, "app"), path("/none", networkingv1.PathTypePrefix, "empty")),
		ingress("b", map[string]string{config.AnnotationUseRegex: "true"}, "re.example", path("/api/v[12]", networkingv1.PathTypeImplementationSpecific, "app")))
	dc, dk := pair(t, "fake")
	out, err := Render(config.Build(in), Config{DefaultCertPEM: dc, DefaultKeyPEM: dk})
	if err != nil {
		t.Fatal(err)
	}
	conf := out.Conf()
	for _, want := range []string{
		`server_name ~^(?<subdomain>[\w-]+)\.foo\.com$;`, // one label, as the spec says
		`location = "/foo" {`,                            // Exact
		`location "/foo/" {`,                             // Prefix /foo ...
		`location "/bar/" {`, `location = "/bar" {`,      // ... and its exact twin
		`location ~* "^/api/v[12]" {`, // regex host
		"return 503;",                 // no endpoints
		"upstream default-app-80 {",
		"server 10.244.1.9:8080 max_fails=0;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	if strings.Count(conf, `location = "/foo" {`) != 1 {
		t.Errorf("exact /foo rendered twice:\n%s", conf)
	}
}
