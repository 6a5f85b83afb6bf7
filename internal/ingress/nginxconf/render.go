// Package nginxconf renders a config.Config as the nginx.conf an nginx Ingress
// controller (ingress-nginx) would run for the same Ingresses: a server block
// per host, location blocks per path, an upstream per Service port listing the
// endpoint addresses. It is the "nginx load balancer that updates itself" made
// readable: minikit's proxy serves exactly these servers and locations, and
// Debian's nginx accepts the file as it is (`nginx -t`) and routes the same way,
// which is how the benchmark compares the two.
//
// The rendering follows ingress-nginx's template where plain nginx can express
// it (no Lua): Prefix paths become `location /p/` plus `location = /p`, Exact
// paths `location = /p`, regex hosts `location ~* "^p"`, wildcard hosts a
// one-label server_name regex, TLS hosts a 308 to HTTPS.
package nginxconf

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/ingress/config"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ConfFile is where the configuration goes under the prefix directory.
const ConfFile = "conf/nginx.conf"

// Config says where nginx listens and keeps its files.
type Config struct {
	// Listen and ListenTLS are nginx listen addresses ("80", "0.0.0.0:443",
	// "127.0.0.1:18080").
	Listen, ListenTLS string
	// HTTPSPort is the port written into HTTPS redirects (443 is left out).
	HTTPSPort int
	// Prefix is the directory of the pid file, logs, temp files and certificates.
	Prefix string
	// Daemon is nginx's daemon directive (off for running in the foreground).
	Daemon bool
	// WorkerProcesses is nginx's worker_processes ("auto" by default).
	WorkerProcesses string
	// AccessLog turns the access log on (off by default, as in the benchmark).
	AccessLog bool
	// DefaultCertPEM and DefaultKeyPEM are the certificate served for names
	// without one (the controller's fake certificate).
	DefaultCertPEM, DefaultKeyPEM []byte
}

// Output is the rendered configuration: file names relative to the prefix.
type Output struct {
	Files map[string][]byte
}

// Conf is the nginx.conf text.
func (o *Output) Conf() string { return string(o.Files[ConfFile]) }

type renderer struct {
	b     strings.Builder
	opts  Config
	files map[string][]byte
	certs map[types.NamespacedName]string
}

// Render renders cfg.
func Render(cfg *config.Config, opts Config) (*Output, error) {
	if opts.Listen == "" {
		opts.Listen = "80"
	}
	if opts.ListenTLS == "" {
		opts.ListenTLS = "443"
	}
	if opts.HTTPSPort == 0 {
		opts.HTTPSPort = 443
	}
	if opts.Prefix == "" {
		opts.Prefix = "/etc/nginx"
	}
	if opts.WorkerProcesses == "" {
		opts.WorkerProcesses = "auto"
	}
	if len(opts.DefaultCertPEM) == 0 || len(opts.DefaultKeyPEM) == 0 {
		return nil, fmt.Errorf("rendering nginx.conf: a default certificate is required")
	}
	r := &renderer{opts: opts, files: map[string][]byte{}, certs: map[types.NamespacedName]string{}}
	r.files["certs/default-fake-certificate.pem"] = append(append([]byte{}, opts.DefaultCertPEM...), opts.DefaultKeyPEM...)
	r.header(cfg)
	r.upstreams(cfg)
	for _, s := range cfg.Servers {
		r.server(s)
	}
	r.line(0, "}")
	r.files[ConfFile] = []byte(r.b.String())
	return &Output{Files: r.files}, nil
}

// line writes one line. Control characters in what the arguments bring (the
// API refuses them in every field that reaches here) are written as \xNN, so
// no value can end a comment or a directive and start a line of its own.
func (r *renderer) line(indent int, format string, args ...any) {
	r.b.WriteString(strings.Repeat("    ", indent))
	for _, c := range []byte(fmt.Sprintf(format, args...)) {
		if c < 0x20 || c == 0x7f {
			fmt.Fprintf(&r.b, "\\x%02x", c)
			continue
		}
		r.b.WriteByte(c)
	}
	r.b.WriteByte('\n')
}

func (r *renderer) path(name string) string { return filepath.Join(r.opts.Prefix, name) }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (r *renderer) header(cfg *config.Config) {
	r.line(0, "# nginx.conf rendered by minikit from the Ingresses of its class: the configuration")
	r.line(0, "# an nginx Ingress controller (ingress-nginx) would run for them. minikit's proxy")
	r.line(0, "# serves exactly these servers and locations; nginx runs this file as it is:")
	r.line(0, "#   nginx -t -p %s -c %s", r.opts.Prefix, r.path(ConfFile))
	if len(cfg.Ingresses) == 0 {
		r.line(0, "# Ingresses: none")
	}
	for _, ing := range cfg.Ingresses {
		r.line(0, "# Ingress %s", ing)
	}
	for _, p := range cfg.Problems {
		r.line(0, "# problem: %s", p)
	}
	r.line(0, "")
	r.line(0, "worker_processes %s;", r.opts.WorkerProcesses)
	r.line(0, "daemon %s;", onOff(r.opts.Daemon))
	r.line(0, "pid %s;", r.path("logs/nginx.pid"))
	r.line(0, "error_log %s notice;", r.path("logs/error.log"))
	r.line(0, "")
	r.line(0, "events {")
	r.line(1, "worker_connections 16384;")
	r.line(1, "multi_accept on;")
	r.line(0, "}")
	r.line(0, "")
	r.line(0, "http {")
	for _, l := range []string{
		"default_type text/html;",
		"sendfile on;",
		"tcp_nopush on;",
		"tcp_nodelay on;",
		"keepalive_timeout 75s;",
		"keepalive_requests 1000;",
		"client_header_buffer_size 1k;",
		"large_client_header_buffers 4 8k;",
		"client_header_timeout 60s;",
		"client_body_timeout 60s;",
		"send_timeout 60s;",
		"client_max_body_size 1m;",
		"server_tokens off;",
		"server_names_hash_bucket_size 256;",
		"server_names_hash_max_size 4096;",
		"ssl_protocols TLSv1.2 TLSv1.3;",
		"ssl_prefer_server_ciphers on;",
		"ssl_session_cache shared:SSL:10m;",
		"ssl_session_timeout 10m;",
	} {
		r.line(1, "%s", l)
	}
	if r.opts.AccessLog {
		r.line(1, "access_log %s;", r.path("logs/access.log"))
	} else {
		r.line(1, "access_log off;")
	}
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		r.line(1, "%s_temp_path %s;", t, r.path("temp/"+t))
	}
	r.line(0, "")
	r.line(1, "# X-Request-ID: the client's, else a new one.")
	r.line(1, "map $http_x_request_id $req_id {")
	r.line(2, "default $http_x_request_id;")
	r.line(2, `"" $request_id;`)
	r.line(1, "}")
	r.line(1, "# Upstream connections stay open unless the client asks for an upgrade (WebSocket).")
	r.line(1, "map $http_upgrade $connection_upgrade {")
	r.line(2, "default upgrade;")
	r.line(2, `"" "";`)
	r.line(1, "}")
	r.line(1, "# HSTS on HTTPS answers of TLS hosts only (an empty value adds no header).")
	r.line(1, "map $scheme $hsts {")
	r.line(2, `https "max-age=31536000; includeSubDomains";`)
	r.line(2, `default "";`)
	r.line(1, "}")
	r.line(0, "")
}

func (r *renderer) upstreams(cfg *config.Config) {
	for _, up := range cfg.Upstreams {
		if len(up.Endpoints) == 0 {
			r.line(1, "# upstream %s: Service %s port %s has no ready endpoint (its locations answer 503)", up.Name, up.Service, up.Port)
			continue
		}
		r.line(1, "upstream %s {", up.Name)
		r.line(2, "# Service %s port %s: %d ready endpoint(s), round robin", up.Service, up.Port, len(up.Endpoints))
		for _, ep := range up.Endpoints {
			r.line(2, "server %s max_fails=0;", ep)
		}
		r.line(2, "keepalive 320;")
		r.line(2, "keepalive_timeout 60s;")
		r.line(2, "keepalive_requests 10000;")
		r.line(1, "}")
		r.line(0, "")
	}
}

// cert returns the certificate file of a server.
func (r *renderer) cert(t *config.TLS) string {
	if t == nil || t.Certificate == nil {
		return r.path("certs/default-fake-certificate.pem")
	}
	if f, ok := r.certs[t.Secret]; ok {
		return r.path(f)
	}
	f := "certs/" + t.Secret.Namespace + "-" + t.Secret.Name + ".pem"
	r.certs[t.Secret] = f
	r.files[f] = append(append([]byte{}, t.CertPEM...), t.KeyPEM...)
	return r.path(f)
}

// serverName is nginx's server_name for a host: wildcards become ingress-nginx's
// one-label regex (nginx's own "*.foo.com" would match any depth).
func serverName(host string) string {
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		return `~^(?<subdomain>[\w-]+)\.` + strings.ReplaceAll(suffix, ".", `\.`) + "$"
	}
	return host
}

func (r *renderer) server(s *config.Server) {
	if s.Host == config.CatchAll {
		r.line(1, "## catch-all server: hosts without a rule")
	} else {
		r.line(1, "## server %s", s.Host)
	}
	r.line(1, "server {")
	r.line(2, "server_name %s;", serverName(s.Host))
	if s.Host == config.CatchAll {
		r.line(2, "listen %s default_server reuseport backlog=4096;", r.opts.Listen)
		r.line(2, "listen %s ssl http2 default_server reuseport backlog=4096;", r.opts.ListenTLS)
	} else {
		r.line(2, "listen %s;", r.opts.Listen)
		r.line(2, "listen %s ssl http2;", r.opts.ListenTLS)
	}
	crt := r.cert(s.TLS)
	r.line(2, "ssl_certificate %s;", crt)
	r.line(2, "ssl_certificate_key %s;", crt)
	if s.TLS != nil && s.TLS.Secret.Name != "" && s.TLS.Certificate == nil {
		r.line(2, "# secret %s is missing or invalid: the default certificate is served", s.TLS.Secret)
	}
	r.line(0, "")
	exact := map[string]bool{}
	root := false
	for _, l := range s.Locations {
		if l.PathType == networkingv1.PathTypeExact {
			exact[l.Path] = true
			if l.Path == "/" {
				root = true
			}
		}
	}
	written := map[string]bool{}
	for _, l := range s.Locations {
		switch {
		case l.PathType == networkingv1.PathTypeExact:
			r.location(s, l, "= "+quote(l.Path))
		case s.UseRegex:
			r.location(s, l, "~* "+quote("^"+l.Path))
		default:
			norm := strings.TrimSuffix(l.Path, "/")
			if norm == "" {
				root = true
				r.location(s, l, quote("/"))
				continue
			}
			if written[norm] {
				r.line(2, "# %s %s of %s is shadowed by the longer %s/ above", l.PathType, l.Path, l.Ingress, norm)
				continue
			}
			written[norm] = true
			r.location(s, l, quote(norm+"/"))
			if !exact[norm] {
				r.location(s, l, "= "+quote(norm))
			}
		}
	}
	if !root {
		r.location(s, s.Root, quote("/"))
	}
	r.line(1, "}")
	r.line(1, "## end server %s", s.Host)
	r.line(0, "")
}

// quote writes an nginx string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func (r *renderer) location(s *config.Server, l *config.Location, match string) {
	r.line(2, "location %s {", match)
	switch {
	case l.Default && l.Ingress.Name == "":
		r.line(3, "# no rule matched: the built-in default backend")
	case l.Default:
		r.line(3, "# default backend of Ingress %s", l.Ingress)
	case l.Upstream != nil:
		r.line(3, "# Ingress %s: %s %s -> Service %s port %s", l.Ingress, l.PathType, l.Path, l.Upstream.Service, l.Upstream.Port)
	default:
		r.line(3, "# Ingress %s: %s %s", l.Ingress, l.PathType, l.Path)
	}
	if l.SSLRedirect {
		port := ""
		if r.opts.HTTPSPort != 443 {
			port = ":" + strconv.Itoa(r.opts.HTTPSPort)
		}
		r.line(3, "if ($scheme = http) {")
		r.line(4, "return 308 https://$host%s$request_uri;", port)
		r.line(3, "}")
	}
	switch {
	case l.Upstream == nil:
		r.line(3, "return %d;", l.Status)
	case len(l.Upstream.Endpoints) == 0:
		r.line(3, "return 503;")
	default:
		r.proxy(s, l)
	}
	r.line(2, "}")
	r.line(0, "")
}

func (r *renderer) proxy(s *config.Server, l *config.Location) {
	size := "0"
	if l.MaxBodySize > 0 {
		size = strconv.FormatInt(l.MaxBodySize, 10)
	}
	r.line(3, "client_max_body_size %s;", size)
	if s.TLS != nil {
		r.line(3, "add_header Strict-Transport-Security $hsts always;")
	}
	if l.RewriteTarget != "" {
		r.line(3, "rewrite %s %s break;", quote("(?i)"+l.Path), quote(l.RewriteTarget))
	}
	grpc := l.BackendProtocol == "GRPC" || l.BackendProtocol == "GRPCS"
	set := "proxy_set_header"
	if grpc {
		set = "grpc_set_header"
	} else {
		r.line(3, "proxy_http_version 1.1;")
	}
	headers := [][2]string{
		{"Host", "$http_host"},
		{"Connection", "$connection_upgrade"},
		{"Upgrade", "$http_upgrade"},
		{"X-Request-ID", "$req_id"},
		{"X-Real-IP", "$remote_addr"},
		{"X-Forwarded-For", "$remote_addr"},
		{"X-Forwarded-Host", "$http_host"},
		{"X-Forwarded-Port", "$server_port"},
		{"X-Forwarded-Proto", "$scheme"},
		{"X-Forwarded-Scheme", "$scheme"},
		{"X-Scheme", "$scheme"},
		{"X-Original-Forwarded-For", "$http_x_forwarded_for"},
		{"Proxy", `""`},
	}
	if grpc {
		headers = headers[3:]
	}
	for _, h := range headers {
		r.line(3, "%s %s %s;", set, h[0], h[1])
	}
	if grpc {
		scheme := "grpc"
		if l.BackendProtocol == "GRPCS" {
			scheme = "grpcs"
		}
		r.line(3, "grpc_connect_timeout 5s;")
		r.line(3, "grpc_read_timeout 60s;")
		r.line(3, "grpc_send_timeout 60s;")
		r.line(3, "grpc_pass %s://%s;", scheme, l.Upstream.Name)
		return
	}
	for _, d := range []string{
		"proxy_connect_timeout 5s;",
		"proxy_send_timeout 60s;",
		"proxy_read_timeout 60s;",
		"proxy_buffering off;",
		"proxy_request_buffering on;",
		"proxy_next_upstream error timeout;",
		"proxy_next_upstream_tries 3;",
		"proxy_redirect off;",
	} {
		r.line(3, "%s", d)
	}
	scheme := "http"
	if l.BackendProtocol == "HTTPS" {
		scheme = "https"
		r.line(3, "proxy_ssl_verify off;")
	}
	r.line(3, "proxy_pass %s://%s;", scheme, l.Upstream.Name)
}
