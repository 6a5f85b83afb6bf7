package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func certFor(t *testing.T, name string) (crt, key []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (w *world) secret(name string, crt, key []byte) {
	w.in.Secrets = append(w.in.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}})
}

func TestTLSAndRedirects(t *testing.T) {
	w := newWorld()
	crt, key := certFor(t, "cafe.example.com")
	w.secret("cafe-secret", crt, key)
	wc, wk := certFor(t, "*.shop.example")
	w.secret("wild", wc, wk)

	cafe := w.ingress("cafe", "cafe.example.com", prefix("/tea"))
	cafe.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"cafe.example.com"}, SecretName: "cafe-secret"}}
	noRedirect := w.ingress("noredirect", "plain.example", prefix("/"))
	noRedirect.Annotations = map[string]string{AnnotationSSLRedirect: "false"}
	noRedirect.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"plain.example"}, SecretName: "cafe-secret"}}
	missing := w.ingress("missing", "missing.example", prefix("/"))
	missing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"missing.example"}, SecretName: "nope"}}
	noSecret := w.ingress("nosecret", "nosecret.example", prefix("/")) // tls without secretName still redirects
	noSecret.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"nosecret.example"}}}
	implicit := w.ingress("implicit", "implicit.example", prefix("/")) // tls without hosts: the Ingress's own
	implicit.Spec.TLS = []networkingv1.IngressTLS{{SecretName: "cafe-secret"}}
	shop := w.ingress("shop", "a.shop.example", prefix("/"))
	shop.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"*.shop.example"}, SecretName: "wild"}}
	w.ingress("clear", "clear.example", prefix("/"))
	c := Build(w.in)

	for _, tc := range []struct {
		host     string
		tls      bool
		cert     bool
		redirect bool
	}{
		{"cafe.example.com", true, true, true},
		{"plain.example", true, true, false},
		{"missing.example", true, false, true},
		{"nosecret.example", true, false, true},
		{"implicit.example", true, true, true},
		{"a.shop.example", true, true, true},
		{"clear.example", false, false, false},
	} {
		s := c.Server(tc.host)
		if (s.TLS != nil) != tc.tls || (tc.tls && (s.TLS.Certificate != nil) != tc.cert) {
			t.Errorf("%s: TLS %+v, want tls=%v cert=%v", tc.host, s.TLS, tc.tls, tc.cert)
		}
		for _, p := range []string{"/", "/tea", "/elsewhere"} {
			if l := s.Match(p); l.SSLRedirect != tc.redirect {
				t.Errorf("%s%s: redirect %v, want %v", tc.host, p, l.SSLRedirect, tc.redirect)
			}
		}
	}
	if !strings.Contains(strings.Join(c.Problems, "\n"), `secret "default/nope" not found`) {
		t.Errorf("problems %q lack the missing secret", c.Problems)
	}
	if s := c.Server("cafe.example.com"); string(s.TLS.CertPEM) != string(crt) {
		t.Errorf("certificate PEM not kept for nginx.conf")
	}
}

func TestRegexHostsAndRewrite(t *testing.T) {
	w := newWorld()
	re := w.ingress("rewrite", "r.example", implSpec("/something(/|$)(.*)"))
	re.Annotations = map[string]string{AnnotationRewriteTarget: "/$2"}
	// A plain Ingress on the same host: its paths become regexes too (ingress-nginx).
	w.ingress("plain", "r.example", prefix("/u"), exact("/exact"))
	bad := w.ingress("bad", "bad.example", implSpec("/(unclosed"))
	bad.Annotations = map[string]string{AnnotationUseRegex: "true"}
	c := Build(w.in)
	s := c.Server("r.example")
	if !s.UseRegex {
		t.Fatal("r.example is not in regex mode")
	}
	for _, tc := range []struct{ path, want, upstream string }{
		{"/something/new", "implementationspecific-something-dotstar", "/new"},
		{"/SOMETHING", "implementationspecific-something-dotstar", "/"},
		{"/uuid", "prefix-u", "/uuid"}, // regex is a prefix match: /u matches /uuid, the surprise the blog warns of
		{"/exact", "exact-exact", "/exact"},
		{"/other", "404", "/other"},
	} {
		l := s.Match(tc.path)
		got := "404"
		if l.Upstream != nil {
			got = l.Upstream.Service.Name
		}
		if got != tc.want || l.Rewrite(tc.path) != tc.upstream {
			t.Errorf("%s: %s rewritten to %q; want %s, %q", tc.path, got, l.Rewrite(tc.path), tc.want, tc.upstream)
		}
	}
	if c.Server("bad.example").Host != CatchAll || !strings.Contains(strings.Join(c.Problems, "\n"), "not a valid regular expression") {
		t.Errorf("an Ingress with an invalid regex must be dropped whole: %q", c.Problems)
	}
}

func TestV1beta1EmptyPathIsCatchAll(t *testing.T) {
	w := newWorld()
	ing := w.ingress("old", "h.example", implSpec("/x"))
	ing.Spec.Rules[0].HTTP.Paths[0].Path = ""
	c := Build(w.in)
	if got := answer(c, "h.example", "/anything"); got != "implementationspecific-x" {
		t.Errorf("empty v1beta1 path: /anything answered by %s", got)
	}
}

func TestGoTemplate(t *testing.T) {
	for in, want := range map[string]string{"/$2": "/${2}", "/a$1b$10": "/a${1}b${10}", "$": "$", "/x": "/x"} {
		if got := goTemplate(in); got != want {
			t.Errorf("goTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}
