package cluster

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/kubeconfig"
	"github.com/minikit/minikit/internal/pki"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
)

func TestEnsureToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := ensureToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{48}$`).MatchString(tok) {
		t.Errorf("token %q, want 48 hex digits", tok)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "token"))
	st, _ := os.Stat(filepath.Join(dir, "token"))
	if string(b) != tok+"\n" || st.Mode().Perm() != 0o600 {
		t.Errorf("token file %q mode %v, want the token and a newline, 0600", b, st.Mode().Perm())
	}
	if again, err := ensureToken(dir); err != nil || again != tok {
		t.Errorf("second start: %q, %v; want the same token (agents hold it)", again, err)
	}
	// A token too short to be one minikit made is replaced.
	os.WriteFile(filepath.Join(dir, "token"), []byte("short\n"), 0o600)
	if fresh, err := ensureToken(dir); err != nil || fresh == "short" || len(fresh) != 48 {
		t.Errorf("a short token was kept: %q, %v", fresh, err)
	}
	// A joiner's token, written by writeBootstrap, is the cluster's and kept.
	cluster := strings.Repeat("c", 40)
	os.WriteFile(filepath.Join(dir, "token"), []byte(cluster+"\n"), 0o600)
	if got, _ := ensureToken(dir); got != cluster {
		t.Errorf("the cluster's token was replaced by %q", got)
	}
}

func TestEnsureServiceAccountKey(t *testing.T) {
	dir := t.TempDir()
	k, err := ensureServiceAccountKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ensureServiceAccountKey(dir)
	if err != nil || !again.Equal(k) {
		t.Fatalf("second start: %v; want the same key (tokens pods hold stay valid)", err)
	}
	path := filepath.Join(dir, "sa.key")
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("-----BEGIN EC PRIVATE KEY-----")) {
		t.Errorf("sa.key starts %q, want an EC PRIVATE KEY block", b[:min(len(b), 32)])
	}
	os.WriteFile(path, []byte("garbage"), 0o600)
	if _, err := ensureServiceAccountKey(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a corrupt sa.key: %v; want an error naming it", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "garbage" {
		t.Error("a corrupt sa.key was replaced: every token issued would silently stop working")
	}
}

// ensureTLS keeps the CA for good, keeps the serving certificate while it
// fits, and re-issues it from the same CA when the hosts grow.
func TestEnsureTLS(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"127.0.0.1", "localhost", "192.168.56.10", "10.96.0.1", "kubernetes.default.svc"}
	c1, err := ensureTLS(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c1.caPEM) {
		t.Fatal("caPEM is not a PEM certificate")
	}
	leaf, err := x509.ParseCertificate(c1.cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", h, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tls", "ca.crt")); !bytes.Equal(b, c1.caPEM) {
		t.Error("caPEM differs from tls/ca.crt (the join token hashes the one /cacerts serves)")
	}
	c2, err := ensureTLS(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c2.cert.Certificate[0], c1.cert.Certificate[0]) {
		t.Error("a restart with the same hosts re-issued the serving certificate")
	}
	c3, err := ensureTLS(dir, append(hosts, "192.168.56.20"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c3.caPEM, c1.caPEM) {
		t.Fatal("a new host replaced the CA: kubeconfigs handed out would stop working")
	}
	if leaf, _ := x509.ParseCertificate(c3.cert.Certificate[0]); leaf.VerifyHostname("192.168.56.20") != nil {
		t.Error("the new host is not in the re-issued certificate")
	}

	// A joiner's data dir gets the cluster CA (writeBootstrap): its serving
	// certificate is re-issued from that CA.
	other, err := pki.NewCA("minikit-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeBootstrap(dir, bootstrapData{CACert: string(other.CertPEM()), CAKey: string(other.KeyPEM()), SAKey: "SA", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	c4, err := ensureTLS(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if leaf, _ := x509.ParseCertificate(c4.cert.Certificate[0]); leaf.CheckSignatureFrom(other.Cert) != nil {
		t.Error("the serving certificate is not from the cluster CA the joiner got")
	}

	os.WriteFile(filepath.Join(dir, "tls", "ca.key"), []byte("garbage"), 0o600)
	if _, err := ensureTLS(dir, hosts); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("a corrupt CA key: %v; want an error naming the CA", err)
	}
}

func TestWriteBootstrapRefusesMissingSecrets(t *testing.T) {
	d := bootstrapData{CACert: "CA", CAKey: "KEY", Token: "tok"}
	if err := writeBootstrap(t.TempDir(), d); err == nil || !strings.Contains(err.Error(), "the bootstrap data has no sa.key") {
		t.Errorf("got %v, want an error naming sa.key", err)
	}
}

// The kubeconfig a server writes reaches it as kubectl would: a loopback
// server over plain HTTP without a token, an off-loopback one over TLS
// verified by the cluster CA with the token.
func TestServerKubeconfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, url, token string
		ca               []byte
		wantToken        string
	}{
		{"loopback", "http://127.0.0.1:6443", "tok", nil, ""},
		{"TLS", "https://192.168.56.10:6443", "tok", []byte("-----BEGIN CERTIFICATE-----\n"), "tok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := kubeconfig.Write(path, serverKubeconfig(tc.url, tc.token, tc.ca), 0o600, -1, -1); err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if cfg.CurrentContext != "minikit" || ctx == nil || ctx.Cluster != "minikit" || ctx.AuthInfo != "minikit-admin" || ctx.Namespace != "default" {
				t.Errorf("context %q: %+v", cfg.CurrentContext, ctx)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != tc.url || rc.BearerToken != tc.wantToken || !bytes.Equal(rc.CAData, tc.ca) {
				t.Errorf("host %q token %q CA %q; want %q %q %q", rc.Host, rc.BearerToken, rc.CAData, tc.url, tc.wantToken, tc.ca)
			}
		})
	}
}

// checkJoin ends `minikit agent` at once with an error saying what to fix
// when the server refuses its credentials, and lets it start otherwise.
func TestCheckJoin(t *testing.T) {
	gr := schema.GroupResource{Resource: "namespaces"}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for a join that goes ahead
	}{
		{"accepted", nil, ""},
		{"no default namespace yet", apierrors.NewNotFound(gr, "default"), ""},
		{"wrong token", apierrors.NewUnauthorized("bad token"), "refused the token (401 Unauthorized): use the server's DATA_DIR/token"},
		{"refused node", apierrors.NewForbidden(gr, "default", errors.New("no")), "refused this node (403 Forbidden)"},
		{"another CA", x509.UnknownAuthorityError{}, "is not the one the CA file vouches for (pass the server's DATA_DIR/tls/ca.crt with --ca-file)"},
		{"wrong name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "192.168.56.10"}, "--ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.err != nil {
					return true, nil, tc.err
				}
				return true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, nil
			})
			err := checkJoin(client, "https://192.168.56.10:6443", testutil.Logger(t))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "https://192.168.56.10:6443")):
				t.Errorf("got %v, want an error naming the server and %q", err, tc.want)
			}
		})
	}
}
