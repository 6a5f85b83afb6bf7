package kubeproxy

import (
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
)

// injections are strings crafted to break out of the rule text: quotes to end
// a --comment, newlines to start a rule or a table of their own, options, and
// restore's own commands.
var injections = []string{
	`x" -j ACCEPT "`,
	"x\n-A INPUT -j ACCEPT",
	"x\nCOMMIT\n*filter\n-A INPUT -j ACCEPT\nCOMMIT",
	`x\" -j ACCEPT #`,
	"web -j ACCEPT",
	"web' -j ACCEPT '",
	"-j",
	"*filter",
	"COMMIT",
	"x\r-A FORWARD -j ACCEPT",
	"x\x00y",
	"$(reboot)",
	"web;}{\n$host",
}

// TestRuleInjection puts each injection into every user-controlled field that
// could reach the proxy's rules: the namespace, the Service name, the port name
// and protocol, an endpoint address, label and annotation values. Each either
// is rejected by the API's validation with a field error naming that field,
// or, admitted, renders inertly: well-formed rules in our chains, the text only
// inside --comment arguments, and (labels, annotations) no effect on the rules.
func TestRuleInjection(t *testing.T) {
	base := fuzzService{ns: "default", name: "web", portName: "http", proto: "TCP", port: 80, nodePort: 30080,
		clusterIP: "10.96.0.20", extIP: "192.168.56.150", lbIP: "192.168.56.240", srcRange: "203.0.113.0/25",
		endpoint: "10.244.1.5", label: "web", annotation: "hello", flags: fzLoadBalancer}
	fields := []struct {
		name  string
		set   func(*fuzzService, string)
		field string // the field error path, if the API rejects it
	}{
		{"namespace", func(s *fuzzService, v string) { s.ns = v }, "metadata.namespace"},
		{"name", func(s *fuzzService, v string) { s.name = v }, "metadata.name"},
		{"port name", func(s *fuzzService, v string) { s.portName = v }, "spec.ports[0].name"},
		{"protocol", func(s *fuzzService, v string) { s.proto = v }, "spec.ports[0].protocol"},
		{"endpoint", func(s *fuzzService, v string) { s.endpoint = v }, "endpoints[0].addresses[0]"},
		{"label", func(s *fuzzService, v string) { s.label = v }, "metadata.labels"},
		{"annotation", func(s *fuzzService, v string) { s.annotation = v }, ""},
	}
	cfg := validation.DefaultConfig()
	ref := renderOf(t, base)
	for _, f := range fields {
		for _, evil := range injections {
			fs := base
			f.set(&fs, evil)
			svc, slice := fs.objects()
			validation.Default(svc, cfg)
			validation.Default(slice, cfg)
			errs := append(validation.Validate(svc, nil, cfg), validation.Validate(slice, nil, cfg)...)
			if len(errs) > 0 {
				if f.field == "" {
					t.Errorf("%s %q: rejected (%v), but any %s is valid in Kubernetes", f.name, evil, errs, f.name)
					continue
				}
				found := false
				for _, e := range errs {
					found = found || strings.HasPrefix(e.Field, f.field)
				}
				if !found {
					t.Errorf("%s %q: rejected, but not with an error on %s: %v", f.name, evil, f.field, errs)
				}
				continue
			}
			if f.field != "" && f.name != "label" {
				t.Errorf("%s %q: admitted by the API", f.name, evil)
			}
			got := renderOf(t, fs)
			if err := checkRestoreText(got, []string{servicePortName(fs.ns, fs.name, fs.portName)}); err != nil {
				t.Errorf("%s %q: %v\n%s", f.name, evil, err, got)
			}
			if (f.name == "label" || f.name == "annotation") && got != ref {
				t.Errorf("%s %q changed the rules:\n%s", f.name, evil, lineDiff(ref, got))
			}
		}
	}
}

func renderOf(t *testing.T, fs fuzzService) string {
	t.Helper()
	svc, slice := fs.objects()
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	p.OnServiceUpdate(svc)
	p.OnEndpointSliceUpdate(slice)
	mustSync(t, p)
	return ipt.Restores[len(ipt.Restores)-1].Data
}

// TestRendererQuotesWithoutValidation checks the renderer's own defence, for
// input the API would have refused: a comment can never end its word, and a
// port with a protocol iptables does not know gets no rules.
func TestRendererQuotesWithoutValidation(t *testing.T) {
	for in, want := range map[string]string{
		`ns/name:port`:          `ns/name:port`,
		`a b`:                   `"a b"`,
		`x" -j ACCEPT`:          `"x\" -j ACCEPT"`,
		"x\n-A INPUT -j ACCEPT": `"x-A INPUT -j ACCEPT"`,
		`back\`:                 `"back\\"`,
		``:                      `""`,
	} {
		if got := commentWord(in); got != want {
			t.Errorf("commentWord(%q) = %s, want %s", in, got, want)
		}
	}
	svc := makeService("default", "odd", "10.96.0.50", withPorts(
		corev1.ServicePort{Name: "bad", Protocol: "tcp -j ACCEPT", Port: 80},
		corev1.ServicePort{Name: "good", Protocol: corev1.ProtocolUDP, Port: 53}))
	ports := servicePorts(svc)
	if len(ports) != 1 || ports[0].protocol != "udp" {
		t.Fatalf("servicePorts kept %d ports (%v), want only the udp one", len(ports), ports)
	}
}
