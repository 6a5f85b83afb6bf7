package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// HTTPS listeners (tls.mode Terminate): what their certificateRefs resolve
// to, as the Listener ResolvedRefs condition says it, and which certificate a
// TLS ClientHello gets on a data port.

const kindSecret = "Secret"

// resolveCertificates resolves an HTTPS listener's certificateRefs. Every ref
// must resolve (minikit serves all of them; the spec leaves more than one to
// the implementation): the first that does not decides the ResolvedRefs
// reason, RefNotPermitted for a cross-namespace Secret no ReferenceGrant
// allows, InvalidCertificateRef for anything else (another group or kind, a
// missing Secret, one not of type kubernetes.io/tls, a malformed pair).
func resolveCertificates(w World, gw *gatewayv1.Gateway, l gatewayv1.Listener) ([]*tls.Certificate, metav1.Condition) {
	gen := gw.Generation
	bad := func(reason gatewayv1.ListenerConditionReason, format string, args ...any) ([]*tls.Certificate, metav1.Condition) {
		return nil, cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(reason), fmt.Sprintf(format, args...), gen)
	}
	if l.TLS == nil || len(l.TLS.CertificateRefs) == 0 {
		return bad(gatewayv1.ListenerReasonInvalidCertificateRef, "listener %q: tls.certificateRefs: an HTTPS listener needs a certificate", l.Name)
	}
	var certs []*tls.Certificate
	for i, ref := range l.TLS.CertificateRefs {
		field := fmt.Sprintf("listener %q: tls.certificateRefs[%d]", l.Name, i)
		group, kind := deref(ref.Group, ""), deref(ref.Kind, kindSecret)
		ns := string(deref(ref.Namespace, gatewayv1.Namespace(gw.Namespace)))
		if group != "" || kind != kindSecret {
			return bad(gatewayv1.ListenerReasonInvalidCertificateRef, "%s: %s/%s %q: only core Secrets are supported", field, group, kind, ref.Name)
		}
		if ns != gw.Namespace && !secretGranted(w, gw.Namespace, ns, string(ref.Name)) {
			return bad(gatewayv1.ListenerReasonRefNotPermitted, "%s: Secret %s/%s: no ReferenceGrant in %q allows Gateways from %q", field, ns, ref.Name, ns, gw.Namespace)
		}
		s := w.Secrets[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if s == nil {
			return bad(gatewayv1.ListenerReasonInvalidCertificateRef, "%s: Secret %s/%s not found", field, ns, ref.Name)
		}
		c, err := parseTLSSecret(s)
		if err != nil {
			return bad(gatewayv1.ListenerReasonInvalidCertificateRef, "%s: Secret %s/%s: %v", field, ns, ref.Name, err)
		}
		certs = append(certs, c)
	}
	return certs, cond(string(gatewayv1.ListenerConditionResolvedRefs), true, string(gatewayv1.ListenerReasonResolvedRefs), "", gen)
}

// parseTLSSecret is a kubernetes.io/tls Secret's key pair.
func parseTLSSecret(s *corev1.Secret) (*tls.Certificate, error) {
	if s.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("type is %q, not %q", s.Type, corev1.SecretTypeTLS)
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return nil, errors.New("tls.crt and tls.key are required")
	}
	c, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("malformed certificate or key: %w", err)
	}
	return &c, nil
}

// secretGranted reports whether a ReferenceGrant in toNS lets Gateways of
// fromNS refer to the Secret name there.
func secretGranted(w World, fromNS, toNS, name string) bool {
	for _, g := range w.Grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return f.Group == groupGateway && f.Kind == kindGateway && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == kindSecret && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

// ServerCert is the certificate one HTTPS listener serves, for the SNI names
// its hostname covers ("" covers every name).
type ServerCert struct {
	Hostname string
	Certs    []*tls.Certificate
}

// PickCertificate chooses the certificate for a ClientHello's server name
// among a data port's HTTPS listeners, as the listeners' hostnames match
// requests: an exact hostname first, then the longest wildcard ("*.example.com"
// covers one or more labels before example.com, never example.com itself), then
// a listener without a hostname. A ClientHello without a server name gets
// the listener without a hostname. Among one listener's certificates the
// first the client supports wins. nil: no listener covers the name, and the
// handshake fails.
func PickCertificate(certs []ServerCert, hello *tls.ClientHelloInfo) *tls.Certificate {
	sni := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	var best *ServerCert
	score := -1
	for i := range certs {
		c := &certs[i]
		s := -1
		switch {
		case c.Hostname == "":
			s = 0
		case sni == "":
		case c.Hostname == sni:
			s = 1 << 20
		case wildcardMatches(c.Hostname, sni):
			s = len(c.Hostname)
		}
		if s > score {
			best, score = c, s
		}
	}
	if best == nil || len(best.Certs) == 0 {
		return nil
	}
	for _, c := range best.Certs {
		if hello.SupportsCertificate(c) == nil {
			return c
		}
	}
	return best.Certs[0]
}
