package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Input is what a Config is built from: snapshots of the API's objects (the
// controller's informer caches). Nothing is modified.
type Input struct {
	Ingresses      []*networkingv1.Ingress
	IngressClasses []*networkingv1.IngressClass
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Secrets        []*corev1.Secret
	Class          Class
}

type builder struct {
	in        Input
	cfg       *Config
	services  map[types.NamespacedName]*corev1.Service
	slices    map[types.NamespacedName][]*discoveryv1.EndpointSlice
	secrets   map[types.NamespacedName]*corev1.Secret
	upstreams map[string]*Upstream
	servers   map[string]*Server
	tlsHosts  map[string]*tlsEntry // host as written under spec.tls
	certs     map[types.NamespacedName]*TLS
}

type tlsEntry struct {
	ns     string
	secret string
}

// Build computes the Config for in. It never fails: what cannot be honoured is
// listed in Problems and answered as ingress-nginx would (404, 503, default
// certificate).
func Build(in Input) *Config {
	b := &builder{
		in:        in,
		cfg:       Empty(),
		services:  map[types.NamespacedName]*corev1.Service{},
		slices:    map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
		secrets:   map[types.NamespacedName]*corev1.Secret{},
		upstreams: map[string]*Upstream{},
		servers:   map[string]*Server{},
		tlsHosts:  map[string]*tlsEntry{},
		certs:     map[types.NamespacedName]*TLS{},
	}
	for _, s := range in.Services {
		b.services[nn(s.Namespace, s.Name)] = s
	}
	for _, s := range in.EndpointSlices {
		if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
			k := nn(s.Namespace, svc)
			b.slices[k] = append(b.slices[k], s)
		}
	}
	for _, s := range in.Secrets {
		b.secrets[nn(s.Namespace, s.Name)] = s
	}
	var ings []*networkingv1.Ingress
	for _, ing := range in.Ingresses {
		if ing.DeletionTimestamp == nil && in.Class.Serves(ing, in.IngressClasses) {
			ings = append(ings, ing)
		}
	}
	// Oldest first: on conflicts the oldest Ingress wins, as in ingress-nginx.
	slices.SortStableFunc(ings, func(a, b *networkingv1.Ingress) int {
		if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, ing := range ings {
		if err := checkRegexes(ing); err != nil {
			b.problem(ing, "ignored: %v", err)
			continue
		}
		b.cfg.Ingresses = append(b.cfg.Ingresses, nn(ing.Namespace, ing.Name))
		b.addIngress(ing)
	}
	b.finish()
	return b.cfg
}

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func (b *builder) problem(ing *networkingv1.Ingress, format string, args ...any) {
	b.cfg.Problems = append(b.cfg.Problems, fmt.Sprintf("ingress %q: ", ing.Namespace+"/"+ing.Name)+fmt.Sprintf(format, args...))
}

// checkRegexes rejects an Ingress whose paths are regexes (use-regex or
// rewrite-target) that do not compile: ingress-nginx drops such an Ingress whole.
func checkRegexes(ing *networkingv1.Ingress) error {
	if !regexMode(ing) {
		return nil
	}
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			if _, err := regexp.Compile("(?i)" + p.Path); err != nil {
				return fmt.Errorf("path %q is not a valid regular expression: %w", p.Path, err)
			}
		}
	}
	return nil
}

func regexMode(ing *networkingv1.Ingress) bool {
	return ing.Annotations[AnnotationUseRegex] == "true" || ing.Annotations[AnnotationRewriteTarget] != ""
}

func (b *builder) server(host string, ing *networkingv1.Ingress, root *Location) *Server {
	if host == "" || host == CatchAll {
		return b.cfg.catchAll
	}
	if s, ok := b.servers[host]; ok {
		return s
	}
	if root == nil {
		root = notFound()
		root.Ingress = nn(ing.Namespace, ing.Name)
		b.annotate(root, ing)
	} else {
		// Each server decides its root's redirect (its own TLS): a copy each.
		r := *root
		root = &r
	}
	s := &Server{Host: host, Root: root}
	b.servers[host] = s
	return s
}

func (b *builder) addIngress(ing *networkingv1.Ingress) {
	var root *Location
	if db := ing.Spec.DefaultBackend; db != nil {
		root = b.location(ing, db, "/", networkingv1.PathTypePrefix)
		root.Default = true
	}
	// The catch-all server's default backend: the oldest Ingress with a
	// defaultBackend that has no rules (ingress-nginx's "catch all" case) or
	// rules without a host.
	if root != nil && b.cfg.catchAll.Root.Ingress == (types.NamespacedName{}) {
		catchAll := len(ing.Spec.Rules) == 0
		for _, r := range ing.Spec.Rules {
			catchAll = catchAll || r.Host == ""
		}
		if catchAll {
			r := *root
			b.cfg.catchAll.Root = &r
		}
	}
	var hosts []string
	for _, r := range ing.Spec.Rules {
		host := strings.ToLower(r.Host)
		hosts = append(hosts, host)
		srv := b.server(host, ing, root)
		if r.HTTP == nil {
			continue
		}
		if regexMode(ing) {
			srv.UseRegex = true
		}
		for _, p := range r.HTTP.Paths {
			pt := networkingv1.PathTypeImplementationSpecific
			if p.PathType != nil {
				pt = *p.PathType
			}
			path := p.Path
			if path == "" {
				path = "/" // v1beta1's "catch all" empty path
			}
			if dup := findLocation(srv, path, pt); dup != nil {
				b.problem(ing, "path %q (%s) of host %q is already served by ingress %q, the oldest wins", path, pt, hostName(host), dup.Ingress)
				continue
			}
			loc := b.location(ing, &p.Backend, path, pt)
			srv.Locations = append(srv.Locations, loc)
		}
	}
	for _, t := range ing.Spec.TLS {
		th := t.Hosts
		if len(th) == 0 {
			th = hosts // "defaults to the wildcard host setting": the Ingress's own hosts
		}
		for _, h := range th {
			h = strings.ToLower(h)
			if _, ok := b.tlsHosts[h]; !ok {
				b.tlsHosts[h] = &tlsEntry{ns: ing.Namespace, secret: t.SecretName}
			}
		}
	}
}

func hostName(h string) string {
	if h == "" {
		return CatchAll
	}
	return h
}

func findLocation(s *Server, path string, pt networkingv1.PathType) *Location {
	norm := func(t networkingv1.PathType) networkingv1.PathType {
		if t == networkingv1.PathTypeImplementationSpecific {
			return networkingv1.PathTypePrefix
		}
		return t
	}
	for _, l := range s.Locations {
		if l.Path == path && norm(l.PathType) == norm(pt) {
			return l
		}
	}
	return nil
}

// location builds the location for one Ingress backend.
func (b *builder) location(ing *networkingv1.Ingress, be *networkingv1.IngressBackend, path string, pt networkingv1.PathType) *Location {
	loc := &Location{Path: path, PathType: pt, Ingress: nn(ing.Namespace, ing.Name)}
	loc.norm = path
	if pt != networkingv1.PathTypeExact && len(path) > 1 {
		loc.norm = strings.TrimSuffix(path, "/")
	}
	b.annotate(loc, ing)
	switch {
	case be.Service != nil:
		up, err := b.upstream(ing.Namespace, be.Service)
		if err != nil {
			b.problem(ing, "%v", err)
			loc.Status = 503
		} else {
			loc.Upstream = up
		}
	default:
		// A resource backend (or none): nothing this controller can proxy to.
		loc.Status = 404
	}
	if regexMode(ing) {
		loc.RewriteTarget = ing.Annotations[AnnotationRewriteTarget]
	}
	return loc
}

// annotate copies the per-location annotations of ing onto loc.
func (b *builder) annotate(loc *Location, ing *networkingv1.Ingress) {
	a := ing.Annotations
	loc.redirect = a[AnnotationSSLRedirect] != "false"
	loc.force = a[AnnotationForceSSL] == "true"
	loc.BackendProtocol = "HTTP"
	switch p := strings.ToUpper(a[AnnotationBackendProtocol]); p {
	case "HTTPS", "GRPC", "GRPCS":
		loc.BackendProtocol = p
	case "", "HTTP":
	default:
		b.problem(ing, "backend-protocol %q is not supported, using HTTP", a[AnnotationBackendProtocol])
	}
	loc.MaxBodySize = DefaultMaxBodySize
	if v, ok := a[AnnotationProxyBodySize]; ok {
		if n, ok := parseSize(v); ok {
			loc.MaxBodySize = n
		} else {
			b.problem(ing, "proxy-body-size %q is not a size, using 1m", v)
		}
	}
}

// parseSize reads nginx sizes: "1024", "8k", "1m", "1g" (0 means unlimited).
func parseSize(s string) (int64, bool) {
	s = strings.TrimSpace(strings.ToLower(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "g"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		// Kubernetes quantities ("1Mi") are a common slip; accept them too.
		q, qerr := resource.ParseQuantity(s)
		if qerr != nil {
			return 0, false
		}
		return q.Value() * mult, true
	}
	return n * mult, true
}

// upstream resolves a Service backend to its upstream (shared by every location
// that names the same Service port).
func (b *builder) upstream(ns string, sb *networkingv1.IngressServiceBackend) (*Upstream, error) {
	port := sb.Port.Name
	if port == "" {
		port = strconv.Itoa(int(sb.Port.Number))
	}
	name := ns + "-" + sb.Name + "-" + port
	if up, ok := b.upstreams[name]; ok {
		return up, nil
	}
	svc := b.services[nn(ns, sb.Name)]
	if svc == nil {
		return nil, fmt.Errorf("service %q not found", ns+"/"+sb.Name)
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if (sb.Port.Name != "" && p.Name == sb.Port.Name) || (sb.Port.Name == "" && p.Port == sb.Port.Number) {
			sp = p
			break
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("service %q has no port %s", ns+"/"+sb.Name, port)
	}
	up := &Upstream{Name: name, Service: nn(ns, sb.Name), Port: port}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName != "" {
			up.Endpoints = []string{net.JoinHostPort(strings.TrimSuffix(svc.Spec.ExternalName, "."), strconv.Itoa(int(sp.Port)))}
		}
	} else {
		up.Endpoints = readyEndpoints(b.slices[nn(ns, sb.Name)], sp.Name)
	}
	b.upstreams[name] = up
	return up, nil
}

// readyEndpoints lists the ready endpoints of a Service port. When none is
// ready, endpoints that still serve while terminating are used, as kube-proxy
// does, so that a rollout's last old pod keeps answering until a new one is up.
func readyEndpoints(ss []*discoveryv1.EndpointSlice, portName string) []string {
	var ready, serving []string
	for _, s := range ss {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var port int32 = -1
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				port = *p.Port
			}
		}
		if port < 0 {
			continue
		}
		ps := strconv.Itoa(int(port))
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(e.Addresses[0], ps)
			c := e.Conditions
			switch {
			case c.Ready == nil || *c.Ready:
				ready = append(ready, addr)
			case c.Serving != nil && *c.Serving:
				serving = append(serving, addr)
			}
		}
	}
	if len(ready) == 0 {
		ready = serving
	}
	slices.Sort(ready)
	return slices.Compact(ready)
}

// finish assigns certificates and redirects, orders servers and locations and
// fills the lookup maps.
func (b *builder) finish() {
	all := []*Server{b.cfg.catchAll}
	for _, s := range b.servers {
		all = append(all, s)
	}
	for _, s := range all {
		if e := b.tlsFor(s.Host); e != nil {
			s.TLS = b.cert(e)
		}
		for _, l := range append(slices.Clone(s.Locations), s.Root) {
			l.SSLRedirect = l.force || (s.TLS != nil && l.redirect)
		}
		if s.UseRegex {
			for _, l := range s.Locations {
				l.regex.re = compileLocation(l.Path)
				if l.RewriteTarget != "" {
					l.rewrite = regexpMatcher{re: compileRewrite(l.Path), template: goTemplate(l.RewriteTarget)}
				}
			}
		}
		sortLocations(s)
	}
	slices.SortFunc(all[1:], func(a, b *Server) int { return strings.Compare(a.Host, b.Host) })
	b.cfg.Servers = all
	for _, s := range all[1:] {
		if suffix, ok := strings.CutPrefix(s.Host, "*."); ok {
			b.cfg.wildcard[suffix] = s
		} else {
			b.cfg.exact[s.Host] = s
		}
	}
	for _, up := range b.upstreams {
		b.cfg.Upstreams = append(b.cfg.Upstreams, up)
	}
	slices.SortFunc(b.cfg.Upstreams, func(a, b *Upstream) int { return strings.Compare(a.Name, b.Name) })
}

// compileLocation is ingress-nginx's `location ~* "^PATH"`.
func compileLocation(path string) *regexp.Regexp {
	if re, err := regexp.Compile("(?i)^" + path); err == nil {
		return re
	}
	// Only paths of Ingresses without use-regex get here (a regex Ingress with a bad
	// path was dropped): match them literally.
	return regexp.MustCompile("(?i)^" + regexp.QuoteMeta(path))
}

// compileRewrite is the regex of `rewrite "(?i)PATH" TARGET break;`: unanchored.
func compileRewrite(path string) *regexp.Regexp {
	if re, err := regexp.Compile("(?i)" + path); err == nil {
		return re
	}
	return regexp.MustCompile("(?i)" + regexp.QuoteMeta(path))
}

// tlsFor finds the spec.tls entry for a server: its exact host, else a wildcard
// TLS host covering it by one label.
func (b *builder) tlsFor(host string) *tlsEntry {
	if e, ok := b.tlsHosts[host]; ok {
		return e
	}
	if i := strings.IndexByte(host, '.'); i > 0 && host != CatchAll {
		if e, ok := b.tlsHosts["*."+host[i+1:]]; ok {
			return e
		}
	}
	return nil
}

func (b *builder) cert(e *tlsEntry) *TLS {
	if e.secret == "" {
		return &TLS{}
	}
	key := nn(e.ns, e.secret)
	if t, ok := b.certs[key]; ok {
		return t
	}
	t := &TLS{Secret: key}
	b.certs[key] = t
	s := b.secrets[key]
	if s == nil {
		b.cfg.Problems = append(b.cfg.Problems, fmt.Sprintf("secret %q not found, using the default certificate", key))
		return t
	}
	crt, k := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	pair, err := tls.X509KeyPair(crt, k)
	if err != nil {
		b.cfg.Problems = append(b.cfg.Problems, fmt.Sprintf("secret %q holds no valid tls.crt/tls.key (%v), using the default certificate", key, err))
		return t
	}
	t.Certificate, t.CertPEM, t.KeyPEM = &pair, crt, k
	return t
}

// sortLocations orders a server's locations so that the first match is the spec's
// choice: longest path (without its trailing slash for Prefix) first, Exact
// before Prefix on a tie, then the longer path as written ("/foo/" over "/foo"),
// then the oldest Ingress (the order they were added in). In regex mode nginx
// tries regexes in order and ingress-nginx orders them longest first.
func sortLocations(s *Server) {
	slices.SortStableFunc(s.Locations, func(a, b *Location) int {
		if s.UseRegex {
			return len(b.Path) - len(a.Path)
		}
		if d := len(b.norm) - len(a.norm); d != 0 {
			return d
		}
		ae, be := a.PathType == networkingv1.PathTypeExact, b.PathType == networkingv1.PathTypeExact
		if ae != be {
			if ae {
				return -1
			}
			return 1
		}
		return len(b.Path) - len(a.Path)
	})
}
