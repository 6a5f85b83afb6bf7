package images

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// mounttest reports each path it is given in the real one's words, and exits
// 1 when any report failed, after printing the others.
func TestAgnhostMounttest(t *testing.T) {
	root := podRoot(t, map[string]string{"test-volume/token": "a.b.c"})
	if err := os.Chmod(filepath.Join(root, "test-volume/token"), 0o640); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	got := runOnce(t, agnhostImage, []string{"mounttest", "--file_perm=/test-volume/token", "--file_owner=/test-volume/token",
		"--file_content=/test-volume/token", "--new_file_0660=/test-volume/new", "--file_mode=/test-volume"},
		func(c *container) { c.root = root })
	want := fmt.Sprintf(`content of file "/test-volume/new": mount-tester new file

mode of file "/test-volume": drwxr-xr-x
perms of file "/test-volume/token": -rw-r-----
owner UID of "/test-volume/token": %d
owner GID of "/test-volume/token": %d
content of file "/test-volume/token": a.b.c
`, uid, gid)
	if got.err != nil || got.stdout != want {
		t.Errorf("mounttest: %v\nstdout:\n%s\nwant:\n%s", got.err, got.stdout, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "test-volume/new")); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("new file: %v, %v; want mode 0660", fi.Mode(), err)
	}

	got = runOnce(t, agnhostImage, []string{"mounttest", "--file_perm=/missing", "--file_content=/test-volume/token"},
		func(c *container) { c.root = root })
	if exitCode(got.err) != 1 || !strings.HasPrefix(got.stdout, `error from Stat("/missing"): `) ||
		!strings.HasSuffix(got.stdout, "content of file \"/test-volume/token\": a.b.c\n") {
		t.Errorf("mounttest with a missing file: exit %d, stdout %q", exitCode(got.err), got.stdout)
	}
}

// test-service-account-issuer-discovery verifies the token at --token-path
// against the issuer's discovery document and keys, fetched with the pod's
// own credentials over TLS that trusts only the cluster CA, and fails for
// a token it cannot verify.
func TestAgnhostIssuerDiscovery(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const podToken = "pod-own-token"
	var issuer string
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + "/openid/v1/jwks",
			"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("/openid/v1/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+podToken {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	issuer = srv.URL
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	sign := func(aud string) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: issuer, Subject: "system:serviceaccount:ns:default",
			Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tt := range []struct {
		name     string
		aud      string
		wantCode int
		want     string
	}{
		{"the token verifies", "oidc-discovery-test", 0, "OK: Validated signature on JWT"},
		{"another audience does not", "someone-else", 1, "falling back to validating with external discovery"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := podRoot(t, map[string]string{
				"var/run/secrets/tokens/sa-token":                     sign(tt.aud),
				"var/run/secrets/kubernetes.io/serviceaccount/token":  podToken,
				"var/run/secrets/kubernetes.io/serviceaccount/ca.crt": string(ca),
			})
			got := runOnce(t, agnhostImage, []string{"test-service-account-issuer-discovery",
				"--token-path", "/var/run/secrets/tokens/sa-token", "--audience", "oidc-discovery-test"},
				func(c *container) {
					c.root = root
					c.env = map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
				})
			if exitCode(got.err) != tt.wantCode || !strings.Contains(got.stderr, tt.want) {
				t.Errorf("exit %d (%v), want %d; log:\n%s", exitCode(got.err), got.err, tt.wantCode, got.stderr)
			}
		})
	}
}
