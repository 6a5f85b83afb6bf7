package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Service account tokens, as kube-apiserver issues them through the
// TokenRequest API (serviceaccounts/NAME/token): ES256-signed JWTs with
// Kubernetes' claims, bound to a pod when one is named, verified on every
// request (signature, issuer, audience, expiry, and that the account and pod
// still exist with the same UIDs). A valid token authenticates as
// system:serviceaccount:NS:NAME, which RBAC authorizes (auth.go, rbac.go).

const (
	// TokenIssuer is the iss claim, kubeadm's default --service-account-issuer.
	TokenIssuer = "https://kubernetes.default.svc.cluster.local"
	// minTokenExpiration and maxTokenExpiration bound TokenRequest's
	// expirationSeconds as Kubernetes' validation does (10 minutes, 2^32 s).
	minTokenExpiration     int64 = 600
	maxTokenExpiration     int64 = 1 << 32
	defaultTokenExpiration int64 = 3600
)

// privateClaims is the "kubernetes.io" claim.
type privateClaims struct {
	Kubernetes kubernetesClaims `json:"kubernetes.io"`
}

type kubernetesClaims struct {
	Namespace      string `json:"namespace"`
	ServiceAccount ref    `json:"serviceaccount"`
	Pod            *ref   `json:"pod,omitempty"`
	Node           *ref   `json:"node,omitempty"`
}

type ref struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// NewServiceAccountKey generates a signing key for service account tokens.
func NewServiceAccountKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// keyID is the kid header: a hash of the public key, as Kubernetes computes it.
func keyID(pub *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// issueToken signs a token for sa, bound to pod when it is not nil.
func (s *Server) issueToken(sa *corev1.ServiceAccount, pod *corev1.Pod, node *corev1.Node, audiences []string, expiration int64) (string, time.Time, error) {
	key := s.cfg.ServiceAccountKey
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", keyID(&key.PublicKey)))
	if err != nil {
		return "", time.Time{}, err
	}
	now := s.now()
	exp := now.Add(time.Duration(expiration) * time.Second)
	jti := make([]byte, 16)
	rand.Read(jti)
	std := jwt.Claims{
		Issuer: TokenIssuer, Subject: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		Audience: jwt.Audience(audiences), Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), ID: fmt.Sprintf("%x-%x-%x-%x-%x", jti[:4], jti[4:6], jti[6:8], jti[8:10], jti[10:]),
	}
	priv := privateClaims{Kubernetes: kubernetesClaims{Namespace: sa.Namespace,
		ServiceAccount: ref{Name: sa.Name, UID: sa.UID}}}
	if pod != nil {
		priv.Kubernetes.Pod = &ref{Name: pod.Name, UID: pod.UID}
	}
	if node != nil {
		priv.Kubernetes.Node = &ref{Name: node.Name, UID: node.UID}
	}
	tok, err := jwt.Signed(signer).Claims(std).Claims(priv).Serialize()
	return tok, exp, err
}

// serviceAccountUser is who a verified token authenticates, with what the
// token says of the pod and node it is bound to.
type serviceAccountUser struct {
	namespace, name string
	uid             types.UID
	claims          kubernetesClaims
	credentialID    string
	audiences       []string // of the token's audiences, those the verifier accepted
}

// info is the user as kube-apiserver's service account authenticator makes
// it: its groups, and the pod, node and credential in its extra.
func (u *serviceAccountUser) info() user.Info {
	extra := map[string][]string{}
	if p := u.claims.Pod; p != nil {
		extra["authentication.kubernetes.io/pod-name"] = []string{p.Name}
		extra["authentication.kubernetes.io/pod-uid"] = []string{string(p.UID)}
	}
	if n := u.claims.Node; n != nil {
		extra["authentication.kubernetes.io/node-name"] = []string{n.Name}
		extra["authentication.kubernetes.io/node-uid"] = []string{string(n.UID)}
	}
	if u.credentialID != "" {
		extra["authentication.kubernetes.io/credential-id"] = []string{"JTI=" + u.credentialID}
	}
	groups := append(serviceaccount.MakeGroupNames(u.namespace), user.AllAuthenticated)
	return &user.DefaultInfo{Name: u.String(), UID: string(u.uid), Groups: groups, Extra: extra}
}

func (u *serviceAccountUser) String() string {
	return "system:serviceaccount:" + u.namespace + ":" + u.name
}

// looksLikeJWT tells a JWT (three base64url parts, the first a JSON header)
// from an opaque bearer token.
func looksLikeJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && strings.HasPrefix(tok, "eyJ")
}

// verifyToken checks a service account token and returns its user. The
// token must be for one of audiences, the API server's own when empty.
func (s *Server) verifyToken(raw string, audiences []string) (*serviceAccountUser, error) {
	if len(audiences) == 0 {
		audiences = []string{TokenIssuer}
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return nil, fmt.Errorf("parsing token: %w", err)
	}
	var std jwt.Claims
	var priv privateClaims
	if err := tok.Claims(&s.cfg.ServiceAccountKey.PublicKey, &std, &priv); err != nil {
		return nil, fmt.Errorf("verifying token: %w", err)
	}
	// A minute's leeway on iat, nbf and exp, as kube-apiserver allows
	// (jwt.DefaultLeeway): a token one server issued is used on another whose
	// clock may be a little behind.
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: TokenIssuer, AnyAudience: jwt.Audience(audiences), Time: s.now()}, jwt.DefaultLeeway); err != nil {
		return nil, fmt.Errorf("validating token: %w", err)
	}
	k := priv.Kubernetes
	if std.Subject != "system:serviceaccount:"+k.Namespace+":"+k.ServiceAccount.Name {
		return nil, fmt.Errorf("token subject %q does not match its kubernetes.io claim", std.Subject)
	}
	obj, err := s.get(saResource, k.Namespace, k.ServiceAccount.Name)
	if err != nil || obj.(*corev1.ServiceAccount).UID != k.ServiceAccount.UID {
		return nil, fmt.Errorf("service account %s/%s has been deleted", k.Namespace, k.ServiceAccount.Name)
	}
	if k.Pod != nil {
		obj, err := s.get(podResource, k.Namespace, k.Pod.Name)
		if err != nil || obj.(*corev1.Pod).UID != k.Pod.UID {
			return nil, fmt.Errorf("pod %s/%s bound to the token has been deleted", k.Namespace, k.Pod.Name)
		}
		if obj.(*corev1.Pod).DeletionTimestamp != nil && obj.(*corev1.Pod).DeletionTimestamp.Time.Before(s.now().Add(-60*time.Second)) {
			return nil, fmt.Errorf("pod %s/%s bound to the token is being deleted", k.Namespace, k.Pod.Name)
		}
	}
	var accepted []string
	for _, a := range audiences {
		if std.Audience.Contains(a) {
			accepted = append(accepted, a)
		}
	}
	return &serviceAccountUser{namespace: k.Namespace, name: k.ServiceAccount.Name, uid: k.ServiceAccount.UID,
		claims: k, credentialID: std.ID, audiences: accepted}, nil
}

var podResource = lookup("", "v1", "pods")

// serveTokenRequest answers POST .../serviceaccounts/NAME/token.
func (s *Server) serveTokenRequest(w http.ResponseWriter, r *http.Request, rq request) error {
	if r.Method != http.MethodPost {
		return apierrors.NewMethodNotSupported(saResource.gr(), strings.ToLower(r.Method))
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var tr authenticationv1.TokenRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &tr); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("decoding TokenRequest: %v", err))
		}
	}
	gk := authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind()
	if tr.Spec.ExpirationSeconds == nil {
		e := defaultTokenExpiration
		tr.Spec.ExpirationSeconds = &e
	}
	var errs field.ErrorList
	expPath := field.NewPath("spec", "expirationSeconds")
	switch e := *tr.Spec.ExpirationSeconds; {
	case e < minTokenExpiration:
		errs = append(errs, field.Invalid(expPath, e, "may not specify a duration less than 10 minutes"))
	case e > maxTokenExpiration:
		errs = append(errs, field.TooLong(expPath, e, int(maxTokenExpiration)))
	}
	if len(tr.Spec.Audiences) == 0 {
		tr.Spec.Audiences = []string{TokenIssuer}
	}
	obj, err := s.get(saResource, rq.namespace, rq.name)
	if err != nil {
		return err
	}
	sa := obj.(*corev1.ServiceAccount)
	var pod *corev1.Pod
	var node *corev1.Node
	if b := tr.Spec.BoundObjectRef; b != nil {
		refPath := field.NewPath("spec", "boundObjectRef")
		if b.Kind != "Pod" {
			errs = append(errs, field.NotSupported(refPath.Child("kind"), b.Kind, []string{"Pod"}))
		} else {
			o, err := s.get(podResource, rq.namespace, b.Name)
			if err != nil {
				return err
			}
			pod = o.(*corev1.Pod)
			if b.UID != "" && b.UID != pod.UID {
				return apierrors.NewConflict(podResource.gr(), b.Name, fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", b.UID))
			}
			if pod.Spec.ServiceAccountName != sa.Name {
				return apierrors.NewBadRequest(fmt.Sprintf("cannot issue token for service account %q for pod %s/%s which runs as %q",
					sa.Name, pod.Namespace, pod.Name, pod.Spec.ServiceAccountName))
			}
			if pod.Spec.NodeName != "" {
				if o, err := s.get(lookup("", "v1", "nodes"), "", pod.Spec.NodeName); err == nil {
					node = o.(*corev1.Node)
				}
			}
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(gk, rq.name, errs)
	}
	tok, exp, err := s.issueToken(sa, pod, node, tr.Spec.Audiences, *tr.Spec.ExpirationSeconds)
	if err != nil {
		return fmt.Errorf("signing token for %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	tr.TypeMeta = metav1.TypeMeta{Kind: "TokenRequest", APIVersion: authenticationv1.SchemeGroupVersion.String()}
	tr.Name, tr.Namespace = sa.Name, sa.Namespace
	tr.CreationTimestamp = metav1.NewTime(s.now().Truncate(time.Second))
	tr.Status = authenticationv1.TokenRequestStatus{Token: tok, ExpirationTimestamp: metav1.NewTime(exp.Truncate(time.Second))}
	writeValue(w, r, http.StatusCreated, &tr)
	return nil
}
