package nginxconf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/ingress/config"

	networkingv1 "k8s.io/api/networking/v1"
)

// nginxInjections are strings crafted to end a directive, a block or a comment
// of nginx.conf and add configuration of their own.
var nginxInjections = []string{
	"/x; } server { listen 8081; location / { return 200 pwned; } } #",
	"/x\n}\nserver { listen 8081; }\n#",
	`/x" ; return 200 "pwned`,
	"/x'; return 200 'pwned",
	"/x{",
	"/x}",
	"/$host$request_uri",
	"/x\\\"; return 200 x; #",
	"/x\r\nreturn 200;",
	"/ break; return 200 pwned; rewrite ^ /",
	"x;include /etc/passwd;",
}

// TestConfInjection puts each injection into every user-controlled field of an
// Ingress that reaches the rendered nginx.conf: host, path (every path type,
// regex mode too), the rewrite-target, use-regex, backend-protocol and
// proxy-body-size annotations, the backend Service and port names, the TLS
// secret name. Each is either rejected by the API's validation with a field
// error on that field, or rendered inertly: the nginx.conf has exactly the
// directives and blocks (comments aside) that a harmless value gives, and,
// where nginx is installed, nginx -t accepts it.
func TestConfInjection(t *testing.T) {
	type field struct {
		name    string
		neutral string
		set     func(ing *networkingv1.Ingress, v string)
		path    string // field error path on rejection; "" = any value is valid Kubernetes
	}
	rule := func(ing *networkingv1.Ingress) *networkingv1.HTTPIngressPath { return &ing.Spec.Rules[0].HTTP.Paths[0] }
	annotation := func(key string) func(*networkingv1.Ingress, string) {
		return func(ing *networkingv1.Ingress, v string) { ing.Annotations[key] = v }
	}
	pathOfType := func(pt networkingv1.PathType, regex bool) func(*networkingv1.Ingress, string) {
		return func(ing *networkingv1.Ingress, v string) {
			rule(ing).Path, rule(ing).PathType = v, &pt
			if regex {
				ing.Annotations[config.AnnotationUseRegex] = "true"
			}
		}
	}
	fields := []field{
		{"host", "neutral.example.com", func(ing *networkingv1.Ingress, v string) { ing.Spec.Rules[0].Host = v }, "spec.rules[0].host"},
		{"prefix path", "/neutral", pathOfType(networkingv1.PathTypePrefix, false), "spec.rules[0].http.paths[0].path"},
		{"exact path", "/neutral", pathOfType(networkingv1.PathTypeExact, false), "spec.rules[0].http.paths[0].path"},
		{"implementation-specific path", "/neutral", pathOfType(networkingv1.PathTypeImplementationSpecific, false), "spec.rules[0].http.paths[0].path"},
		{"regex path", "/neutral", pathOfType(networkingv1.PathTypeImplementationSpecific, true), "spec.rules[0].http.paths[0].path"},
		{"rewrite-target", "/neutral", annotation(config.AnnotationRewriteTarget), "metadata.annotations[nginx.ingress.kubernetes.io/rewrite-target]"},
		{"use-regex", "false", annotation(config.AnnotationUseRegex), ""},
		{"backend-protocol", "HTTP", annotation(config.AnnotationBackendProtocol), ""},
		{"proxy-body-size", "1m", annotation(config.AnnotationProxyBodySize), ""},
		{"service name", "neutral", func(ing *networkingv1.Ingress, v string) { rule(ing).Backend.Service.Name = v }, "spec.rules[0].http.paths[0].backend.service.name"},
		{"port name", "neutral", func(ing *networkingv1.Ingress, v string) {
			rule(ing).Backend.Service.Port = networkingv1.ServiceBackendPort{Name: v}
		}, "spec.rules[0].http.paths[0].backend.service.port.name"},
		{"tls secret", "neutral", func(ing *networkingv1.Ingress, v string) { ing.Spec.TLS[0].SecretName = v }, "spec.tls[0].secretName"},
		{"label", "neutral", func(ing *networkingv1.Ingress, v string) { ing.Labels = map[string]string{"app": v} }, "metadata.labels"},
	}
	cfgV := validation.DefaultConfig()
	dc, dk := pair(t, "fake")
	opts := Config{Prefix: "/etc/nginx", DefaultCertPEM: dc, DefaultKeyPEM: dk}
	for _, f := range fields {
		for _, evil := range nginxInjections {
			ing := injectionIngress()
			f.set(ing, evil)
			if errs := validation.Validate(ing, nil, cfgV); len(errs) > 0 {
				if f.path == "" {
					t.Errorf("%s %q: rejected (%v), but any value is valid Kubernetes", f.name, evil, errs)
					continue
				}
				found := false
				for _, e := range errs {
					found = found || e.Field == f.path || strings.HasPrefix(e.Field, f.path)
				}
				if !found {
					t.Errorf("%s %q: rejected, but not with an error on %s: %v", f.name, evil, f.path, errs)
				}
				continue
			}
			neutral := injectionIngress()
			f.set(neutral, f.neutral)
			got, want := renderIngress(t, ing, opts).Conf(), renderIngress(t, neutral, opts).Conf()
			gs, err := nginxSkeleton(got)
			if err != nil {
				t.Errorf("%s %q: the rendered nginx.conf does not parse: %v\n%s", f.name, evil, err, got)
				continue
			}
			ws, err := nginxSkeleton(want)
			if err != nil {
				t.Fatal(err)
			}
			if gs != ws {
				t.Errorf("%s %q changed the structure of nginx.conf:\n%s\n--- nginx.conf:\n%s", f.name, evil, diff(ws, gs), got)
				continue
			}
			nginxTest(t, f.name, evil, ing, opts)
		}
	}
}

// injectionIngress is a TLS Ingress with one path, for TestConfInjection to spoil.
func injectionIngress() *networkingv1.Ingress {
	ing := ingress("inj", map[string]string{}, "cafe.example.com", path("/tea", networkingv1.PathTypePrefix, "tea-svc"))
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"cafe.example.com"}, SecretName: "cafe-secret"}}
	return ing
}

func renderIngress(t *testing.T, ing *networkingv1.Ingress, opts Config) *Output {
	t.Helper()
	in := input(t, []svc{{"tea-svc", []string{"10.244.1.3"}}}, ing)
	out, err := Render(config.Build(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nginxSkeleton tokenizes nginx.conf as nginx's lexer does (comments to the end
// of the line, single and double quotes with backslash escapes, ';', '{' and
// '}' as separators) and returns its structure: one line per directive with its
// name and its number of arguments, and the blocks.
func nginxSkeleton(conf string) (string, error) {
	var out strings.Builder
	var words []string
	depth := 0
	flush := func(end string) error {
		if len(words) == 0 {
			if end == "{" || end == ";" {
				return fmt.Errorf("empty directive before %q", end)
			}
			return nil
		}
		fmt.Fprintf(&out, "%s%s/%d%s\n", strings.Repeat("  ", depth), words[0], len(words)-1, end)
		words = words[:0]
		return nil
	}
	for i := 0; i < len(conf); {
		c := conf[i]
		switch {
		case c == '#':
			for i < len(conf) && conf[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ';':
			if err := flush(";"); err != nil {
				return "", err
			}
			i++
		case c == '{':
			if err := flush("{"); err != nil {
				return "", err
			}
			depth++
			i++
		case c == '}':
			if len(words) > 0 {
				return "", fmt.Errorf("directive %q not terminated before }", words[0])
			}
			depth--
			if depth < 0 {
				return "", fmt.Errorf("unbalanced }")
			}
			fmt.Fprintf(&out, "%s}\n", strings.Repeat("  ", depth))
			i++
		case c == '"' || c == '\'':
			q := c
			var b strings.Builder
			for i++; i < len(conf) && conf[i] != q; i++ {
				if conf[i] == '\\' && i+1 < len(conf) {
					i++
				}
				b.WriteByte(conf[i])
			}
			if i == len(conf) {
				return "", fmt.Errorf("unterminated quote")
			}
			i++
			words = append(words, b.String())
		default:
			j := i
			for j < len(conf) && !strings.ContainsRune(" \t\r\n;{}\"'#", rune(conf[j])) {
				j++
			}
			// nginx reads "${" ... "}" inside a word as one variable.
			words = append(words, conf[i:j])
			i = j
		}
	}
	if depth != 0 || len(words) > 0 {
		return "", fmt.Errorf("unterminated block or directive at the end")
	}
	return out.String(), nil
}

// nginxTest runs nginx -t on a rendering where nginx is installed (CI installs
// it; TestNginxAcceptsWhatIsRendered insists on it under CI).
func nginxTest(t *testing.T, what, value string, ing *networkingv1.Ingress, opts Config) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		return
	}
	dir := t.TempDir()
	for _, d := range []string{"logs", "certs", "temp"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	opts.Prefix = dir
	out := renderIngress(t, ing, opts)
	for name, b := range out.Files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(nginx, "-t", "-q", "-p", dir, "-c", filepath.Join(dir, ConfFile), "-e", filepath.Join(dir, "logs", "error.log"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s %q: nginx -t rejects the rendering: %v\n%s", what, value, err, b)
	}
}
