package apiserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bearerTransport adds a bearer token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// A relying party verifies a service account token with nothing but the
// issuer's discovery document and keys, as the [sig-auth] spec's pod does
// with a third-party OIDC library: allowed once the account is bound to
// system:service-account-issuer-discovery, refused with kube-apiserver's
// wording before.
func TestServiceAccountIssuerDiscovery(t *testing.T) {
	a := newTokenAPI(t)
	const audience = "oidc-discovery-test"
	tr := authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}}}
	b, _ := json.Marshal(tr)
	r := a.do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", a.token, string(b))
	if r.Code != http.StatusCreated || json.Unmarshal(r.Body.Bytes(), &tr) != nil {
		t.Fatalf("token request: HTTP %d: %s", r.Code, r.Body)
	}
	token := tr.Status.Token
	// The pod talks to the API with its account's own token (the API's
	// audience), and verifies the other.
	var apiTR authenticationv1.TokenRequest
	r = a.do("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", a.token, "{}")
	if r.Code != http.StatusCreated || json.Unmarshal(r.Body.Bytes(), &apiTR) != nil {
		t.Fatalf("token request: HTTP %d: %s", r.Code, r.Body)
	}
	apiToken := apiTR.Status.Token

	wantCode(t, "the audience token at the API", a.do("GET", "/.well-known/openid-configuration", token, ""), http.StatusUnauthorized, "")
	wantCode(t, "POST to discovery", a.do("POST", "/.well-known/openid-configuration", a.token, ""), http.StatusMethodNotAllowed, "")

	// Every service account may read both documents (the bootstrap binding
	// system:service-account-issuer-discovery); without it, none may.
	wantCode(t, "removing the default binding", a.do("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:service-account-issuer-discovery", a.token, ""), http.StatusOK, "")
	wantCode(t, "discovery without the binding", a.do("GET", "/.well-known/openid-configuration", apiToken, ""), http.StatusForbidden,
		`forbidden: User \"system:serviceaccount:default:default\" cannot get path \"/.well-known/openid-configuration\"`)
	crb := rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oidc"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "default"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"}}
	b, _ = json.Marshal(crb)
	wantCode(t, "binding", a.do("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", a.token, string(b)), http.StatusCreated, "")

	var md openIDMetadata
	r = a.do("GET", "/.well-known/openid-configuration", apiToken, "")
	wantCode(t, "discovery", r, http.StatusOK, "")
	if err := json.Unmarshal(r.Body.Bytes(), &md); err != nil || md.Issuer != TokenIssuer || md.JWKSURI != TokenIssuer+"/openid/v1/jwks" ||
		strings.Join(md.SigningAlgs, ",") != "ES256" || r.Header().Get("Cache-Control") != "public, max-age=3600" {
		t.Errorf("discovery document %s (%v), Cache-Control %q", r.Body, err, r.Header().Get("Cache-Control"))
	}
	if ct := a.do("GET", "/openid/v1/jwks", apiToken, "").Header().Get("Content-Type"); ct != "application/jwk-set+json" {
		t.Errorf("keys served as %q, want application/jwk-set+json", ct)
	}

	// The relying party: every address it dials is this API server over TLS.
	srv := httptest.NewTLSServer(a.h)
	t.Cleanup(srv.Close)
	tlsClient := srv.Client()
	tr0 := tlsClient.Transport.(*http.Transport).Clone()
	tr0.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	tr0.TLSClientConfig.ServerName = "example.com" // httptest's certificate names example.com
	ctx := oidc.ClientContext(context.Background(), &http.Client{Transport: bearerTransport{token: apiToken, next: tr0}})
	provider, err := oidc.NewProvider(ctx, TokenIssuer)
	if err != nil {
		t.Fatalf("discovering the issuer: %v", err)
	}
	verifier := provider.Verifier(&oidc.Config{ClientID: audience, SupportedSigningAlgs: []string{oidc.RS256, oidc.ES256}})
	idt, err := verifier.Verify(ctx, token)
	if err != nil {
		t.Fatalf("verifying the token: %v", err)
	}
	if idt.Subject != "system:serviceaccount:default:default" {
		t.Errorf("subject %q", idt.Subject)
	}
	other := provider.Verifier(&oidc.Config{ClientID: "someone-else", SupportedSigningAlgs: []string{oidc.ES256}})
	if _, err := other.Verify(ctx, token); err == nil {
		t.Error("a token for another audience verified")
	}
	if _, err := verifier.Verify(ctx, token[:len(token)-4]+"AAAA"); err == nil {
		t.Error("a token with a broken signature verified")
	}
}
