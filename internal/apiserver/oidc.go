package apiserver

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"

	jose "github.com/go-jose/go-jose/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Service account issuer discovery, as kube-apiserver serves it
// (ServiceAccountIssuerDiscovery, GA since v1.21): an OpenID Connect
// discovery document at /.well-known/openid-configuration naming the issuer
// of service account tokens and where its keys are, and those public keys as
// a JSON Web Key Set at /openid/v1/jwks. A relying party (another cluster, a
// cloud's workload identity, the e2e suite's OIDC check) verifies a token with
// nothing but these two documents. Both are non-resource URLs that RBAC
// authorizes; the bootstrap ClusterRole system:service-account-issuer-discovery
// grants them, bound to every service account (system:serviceaccounts), as
// upstream.

const (
	oidcConfigPath = ".well-known/openid-configuration"
	oidcJWKSPath   = "openid/v1/jwks"
)

// openIDMetadata is the discovery document (pkg/serviceaccount's
// openIDMetadata): the fields OIDC requires, with Kubernetes' values.
type openIDMetadata struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
}

// jwksURI is where the keys are: the API server's external address, as
// kube-apiserver builds it when --service-account-jwks-uri is not given;
// without one (an API inside a test process), under the issuer.
func (s *Server) jwksURI() string {
	if s.cfg.AdvertiseAddress == "" || s.cfg.Port == 0 {
		return TokenIssuer + "/" + oidcJWKSPath
	}
	return "https://" + net.JoinHostPort(s.cfg.AdvertiseAddress, strconv.Itoa(int(s.cfg.Port))) + "/" + oidcJWKSPath
}

// serveOIDC answers the two discovery paths. Both may be cached for an hour,
// as upstream says.
func (s *Server) serveOIDC(w http.ResponseWriter, r *http.Request, path string) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method)
	}
	key := s.cfg.ServiceAccountKey
	var body any
	contentType := "application/json"
	switch path {
	case oidcConfigPath:
		body = openIDMetadata{
			Issuer:        TokenIssuer,
			JWKSURI:       s.jwksURI(),
			ResponseTypes: []string{"id_token"},
			SubjectTypes:  []string{"public"},
			SigningAlgs:   []string{string(jose.ES256)},
		}
	case oidcJWKSPath:
		contentType = "application/jwk-set+json"
		body = jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
			Key: &key.PublicKey, KeyID: keyID(&key.PublicKey), Algorithm: string(jose.ES256), Use: "sig",
		}}}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, err = w.Write(b)
	}
	return err
}
