// Package annotations names the Ingress annotations minikit's Ingress
// controller honours, with ingress-nginx's meaning. It is a leaf of constants
// so that the API server's validation, which checks some of their values, and
// the controller, which acts on them, agree on the names without the API
// server importing the controller's model.
package annotations

const (
	// IngressClass is the legacy class annotation, read when an Ingress has
	// no spec.ingressClassName.
	IngressClass = "kubernetes.io/ingress.class"
	// SSLRedirect "false" keeps plain HTTP for a host served over TLS.
	SSLRedirect = "nginx.ingress.kubernetes.io/ssl-redirect"
	// ForceSSL "true" redirects to HTTPS even without TLS for the host.
	ForceSSL = "nginx.ingress.kubernetes.io/force-ssl-redirect"
	// RewriteTarget rewrites the matched path; its value is written into
	// nginx.conf, so the API server validates it.
	RewriteTarget = "nginx.ingress.kubernetes.io/rewrite-target"
	// UseRegex "true" makes the paths regular expressions.
	UseRegex = "nginx.ingress.kubernetes.io/use-regex"
	// BackendProtocol is HTTP, HTTPS, GRPC or GRPCS.
	BackendProtocol = "nginx.ingress.kubernetes.io/backend-protocol"
	// ProxyBodySize limits request bodies ("1m", "0" for none).
	ProxyBodySize = "nginx.ingress.kubernetes.io/proxy-body-size"
)
