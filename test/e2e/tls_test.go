package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestServerRefusesInsecureNonLoopback starts a server on all addresses and checks
// that it only speaks TLS and only to holders of the token, as its kubeconfig
// describes. It binds 0.0.0.0 but connects only through 127.0.0.1.
func TestServerRefusesInsecureNonLoopback(t *testing.T) {
	// A data dir the server creates, so its mode is the server's choice.
	dataDir := filepath.Join(t.TempDir(), "data")
	srv := startServerListen(t, dataDir, "0.0.0.0:0")

	u, err := url.Parse(srv.URL)
	if err != nil || u.Scheme != "https" || u.Hostname() != "127.0.0.1" {
		t.Fatalf("server URL %q, want https://127.0.0.1:PORT", srv.URL)
	}
	block, _ := pem.Decode(srv.CAData)
	if block == nil {
		t.Fatalf("kubeconfig has no certificate-authority-data")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("certificate-authority-data is not a CA certificate (err %v)", err)
	}
	tokenFile, err := os.ReadFile(filepath.Join(dataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if srv.Token == "" || srv.Token != strings.TrimSpace(string(tokenFile)) {
		t.Fatalf("kubeconfig token %q, want the data dir's token", srv.Token)
	}

	// The client trusts only the kubeconfig's CA, so every HTTPS answer below also
	// proves the serving certificate is valid for 127.0.0.1 under that CA.
	nsPath := "/api/v1/namespaces"
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", strings.Repeat("0", len(srv.Token)), http.StatusUnauthorized},
		{"kubeconfig token", srv.Token, http.StatusOK},
	} {
		resp, body, err := doRequest(srv.Client, http.MethodGet, srv.URL+nsPath, tc.token, nil)
		if err != nil {
			t.Fatalf("%s: GET %s: %v", tc.name, nsPath, err)
		}
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET %s = %s %s, want %d", tc.name, nsPath, resp.Status, body, tc.want)
			continue
		}
		if tc.want == http.StatusOK {
			var list corev1.NamespaceList
			if err := json.Unmarshal(body, &list); err != nil || len(list.Items) == 0 {
				t.Errorf("%s: namespace list %s (err %v)", tc.name, body, err)
			}
		} else if !bytes.Contains(body, []byte(`"reason":"Unauthorized"`)) || bytes.Contains(body, []byte("NamespaceList")) {
			t.Errorf("%s: 401 body %s, want an Unauthorized Status and no data", tc.name, body)
		}
	}

	// Plain HTTP on the same port must not reach the API, token or not.
	plain := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	defer plain.CloseIdleConnections()
	plainURL := "http://" + u.Host + nsPath
	if resp, body, err := doRequest(plain, http.MethodGet, plainURL, srv.Token, nil); err == nil &&
		(resp.StatusCode < 400 || bytes.Contains(body, []byte("NamespaceList"))) {
		t.Errorf("plain HTTP GET %s = %s %s, want a failure", plainURL, resp.Status, body)
	}

	// Secrets are readable by the owner only; the CA certificate is public.
	for _, f := range []string{"token", "kubeconfig", "tls/ca.key", "tls/server.key"} {
		fi, err := os.Stat(filepath.Join(dataDir, f))
		if err != nil {
			t.Errorf("data dir lacks %s: %v", f, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(filepath.Join(dataDir, "tls", "ca.crt")); err != nil {
		t.Errorf("data dir lacks tls/ca.crt: %v", err)
	} else if fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("tls/ca.crt has mode %v, writable by others", fi.Mode().Perm())
	}
	if fi, err := os.Stat(dataDir); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir the server created has mode %v, want 0700", fi.Mode().Perm())
	}

	// Credentials handed out survive a restart: same CA, same token.
	oldCA, oldToken := srv.CAData, srv.Token
	srv.restart()
	if !bytes.Equal(srv.CAData, oldCA) || srv.Token != oldToken {
		t.Errorf("restart changed the CA or the token; kubeconfigs already handed out stop working")
	}
	if resp, body, err := srv.do(http.MethodGet, nsPath, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("after restart: GET %s: %v %s", nsPath, err, body)
	}
}
