// Package config is the Ingress controller's model: from the Ingresses of its class
// and the Services, EndpointSlices and Secrets they name, it builds the
// configuration an nginx Ingress controller would run — virtual servers per host,
// locations per path, upstreams per backend with their ready endpoints — and
// answers which location serves a request, exactly per networking.k8s.io/v1.
//
// A Config is immutable once built: the proxy swaps a whole new one in on every
// change (no reload, no dropped connection) and the nginx.conf renderer prints the
// same one, so what students read in nginx.conf is what the proxy does.
//
// Semantics (kubernetes.io Ingress docs, ingress-nginx where the spec leaves it to
// the controller):
//   - Prefix matches element by element on "/", a trailing slash ignored on both
//     sides; Exact compares the path bytes; ImplementationSpecific is Prefix.
//     The longest path wins, then Exact over Prefix, then the oldest Ingress.
//   - "*.foo.com" matches exactly one more label; exact host names win over
//     wildcards; everything else goes to the catch-all server "_".
//   - Rules of every Ingress are merged per host; for the same path and type the
//     oldest Ingress (creationTimestamp, then namespace/name) wins.
//   - Unmatched requests get the server's default backend: the Ingress
//     defaultBackend of the Ingress that created the server, else a built-in 404.
//   - A backend whose Service or port does not exist answers 503, as does one with
//     no ready endpoint (checked per request by the proxy).
//   - A host listed under spec.tls is served over HTTPS with the named
//     kubernetes.io/tls Secret (the default certificate when there is none) and its
//     plain-HTTP requests are redirected with 308, unless the Ingress says
//     nginx.ingress.kubernetes.io/ssl-redirect: "false".
package config

import (
	"crypto/tls"
	"strings"

	"github.com/minikit/minikit/internal/annotations"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations the controller honours, with ingress-nginx's meaning. The names
// live in package annotations, which the API server's validation shares;
// these are the same constants under the names the model's users know.
const (
	AnnotationIngressClass    = annotations.IngressClass
	AnnotationSSLRedirect     = annotations.SSLRedirect
	AnnotationForceSSL        = annotations.ForceSSL
	AnnotationRewriteTarget   = annotations.RewriteTarget
	AnnotationUseRegex        = annotations.UseRegex
	AnnotationBackendProtocol = annotations.BackendProtocol
	AnnotationProxyBodySize   = annotations.ProxyBodySize
)

// CatchAll is the host name of the server that answers requests whose Host matches
// no rule, as nginx's "server_name _".
const CatchAll = "_"

// DefaultMaxBodySize is ingress-nginx's proxy-body-size default, 1m.
const DefaultMaxBodySize = 1 << 20

// Config is one immutable snapshot of what the controller serves.
type Config struct {
	// Servers are the virtual hosts: the catch-all first, then by host name.
	Servers []*Server
	// Upstreams are the Service ports that locations proxy to, by name.
	Upstreams []*Upstream
	// Ingresses are the Ingresses of this controller's class, oldest first.
	Ingresses []types.NamespacedName
	// Problems lists what could not be honoured as written (a missing Service or
	// Secret, an invalid regex), for logs and tests.
	Problems []string

	exact    map[string]*Server
	wildcard map[string]*Server // "*.foo.com" under "foo.com"
	catchAll *Server
}

// Server is one virtual host.
type Server struct {
	// Host is a host name, a wildcard ("*.foo.com") or CatchAll.
	Host string
	// Locations are in the order they are tried.
	Locations []*Location
	// Root answers what no location matches: a default backend or a built-in 404.
	Root *Location
	// TLS is set when an Ingress lists the host under spec.tls.
	TLS *TLS
	// UseRegex is set when an Ingress with use-regex or rewrite-target has rules for
	// the host: then, as in ingress-nginx, every non-Exact path of the host is a
	// case-insensitive regular expression anchored at the start.
	UseRegex bool
}

// TLS is a server's certificate.
type TLS struct {
	// Secret is the Secret named by spec.tls (empty when the entry has no secretName).
	Secret types.NamespacedName
	// Certificate is the parsed key pair; nil means the default certificate is used.
	Certificate *tls.Certificate
	// CertPEM and KeyPEM are the Secret's tls.crt and tls.key, for nginx.conf.
	CertPEM, KeyPEM []byte
}

// Location is one path of a server and what answers it.
type Location struct {
	// Path is the path as written (the root location's is "/").
	Path     string
	PathType networkingv1.PathType
	// Ingress is the Ingress the location comes from (empty for the built-in 404).
	Ingress types.NamespacedName
	// Upstream is the Service port to proxy to; nil means Status answers.
	Upstream *Upstream
	// Status is the fixed answer when Upstream is nil: 404 (no service backend) or
	// 503 (the Service or its port does not exist).
	Status int
	// Default marks a server's root location (default backend or built-in 404).
	Default bool
	// SSLRedirect redirects plain-HTTP requests to HTTPS with 308.
	SSLRedirect bool
	// RewriteTarget replaces the path (with $1... from Path's capture groups).
	RewriteTarget string
	// BackendProtocol is HTTP, HTTPS, GRPC or GRPCS.
	BackendProtocol string
	// MaxBodySize bounds request bodies (0: unlimited).
	MaxBodySize int64

	norm     string // Prefix path without its trailing slash ("/" stays "/")
	regex    regexpMatcher
	rewrite  regexpMatcher
	redirect bool // the Ingress allows the TLS redirect (ssl-redirect not "false")
	force    bool // force-ssl-redirect
}

// Upstream is one Service port and its ready endpoints.
type Upstream struct {
	// Name is ingress-nginx's upstream name: namespace-service-port.
	Name    string
	Service types.NamespacedName
	// Port is the Ingress backend's port as written (number or name).
	Port string
	// Endpoints are "ip:port" of the ready endpoints, sorted; ExternalName Services
	// give "name:port".
	Endpoints []string
}

// Server returns the server for a request's Host: lowercase, without a port.
func (c *Config) Server(host string) *Server {
	if s, ok := c.exact[host]; ok {
		return s
	}
	if i := strings.IndexByte(host, '.'); i > 0 {
		if s, ok := c.wildcard[host[i+1:]]; ok {
			return s
		}
	}
	return c.catchAll
}

// CatchAllServer is the server for hosts without a rule.
func (c *Config) CatchAllServer() *Server { return c.catchAll }

// Empty is a Config that serves nothing: every request gets the built-in 404.
func Empty() *Config {
	c := &Config{exact: map[string]*Server{}, wildcard: map[string]*Server{}}
	c.catchAll = &Server{Host: CatchAll, Root: notFound()}
	c.Servers = []*Server{c.catchAll}
	return c
}

func notFound() *Location {
	return &Location{Path: "/", PathType: networkingv1.PathTypePrefix, Status: 404, Default: true, norm: "/"}
}
