package kubeproxy

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fuzzService is one Service and its EndpointSlice built from fuzzed fields.
type fuzzService struct {
	ns, name, portName, proto                  string
	port, nodePort                             uint16
	clusterIP, extIP, lbIP, srcRange, endpoint string
	label, annotation                          string
	flags                                      uint8
}

// Flag bits of fuzzService.flags.
const (
	fzNodePort = 1 << iota
	fzLoadBalancer
	fzLocal
	fzInternalLocal
	fzAffinity
	fzNotReady
	fzTerminating
	fzOtherProxy
)

func (f fuzzService) objects() (*corev1.Service, *discovery.EndpointSlice) {
	svc := makeService(f.ns, f.name, f.clusterIP, withPorts(corev1.ServicePort{
		Name: f.portName, Protocol: corev1.Protocol(f.proto), Port: int32(f.port), TargetPort: intstr.FromInt32(int32(f.port))}))
	svc.Labels = map[string]string{"app": f.label}
	svc.Annotations = map[string]string{"note": f.annotation}
	if f.flags&fzOtherProxy != 0 {
		svc.Labels["service.kubernetes.io/service-proxy-name"] = f.label
	}
	svc.Spec.Selector = map[string]string{"app": f.label}
	if f.extIP != "" {
		svc.Spec.ExternalIPs = []string{f.extIP}
	}
	if f.flags&(fzNodePort|fzLoadBalancer) != 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = int32(f.nodePort)
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if f.flags&fzLoadBalancer != 0 {
		withLB(f.lbIP)(svc)
		if f.srcRange != "" {
			svc.Spec.LoadBalancerSourceRanges = []string{f.srcRange}
		}
	}
	if f.flags&fzLocal != 0 && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		withLocal(int32(f.nodePort) + 1)(svc)
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			svc.Spec.HealthCheckNodePort = 0
		}
	}
	if f.flags&fzInternalLocal != 0 {
		withInternalLocal()(svc)
	}
	if f.flags&fzAffinity != 0 {
		withAffinity(int32(f.port)%86400 + 1)(svc)
	}
	slice := makeSlice(f.ns, f.name, []discovery.EndpointPort{slicePort(f.portName, corev1.Protocol(f.proto), int32(f.port))},
		ep{ip: f.endpoint, node: testNode, notReady: f.flags&fzNotReady != 0, terminating: f.flags&fzTerminating != 0},
		ep{ip: "10.244.2.5", node: testOther})
	slice.Labels["app"] = f.label
	slice.Annotations = map[string]string{"note": f.annotation}
	return svc, slice
}

// admitted reports whether the API would store both objects (after its
// defaulting), as the proxier only ever sees what the API admitted.
func admitted(svc *corev1.Service, slice *discovery.EndpointSlice) bool {
	cfg := validation.DefaultConfig()
	s, sl := svc.DeepCopy(), slice.DeepCopy()
	validation.Default(s, cfg)
	validation.Default(sl, cfg)
	return len(validation.Validate(s, nil, cfg)) == 0 && len(validation.Validate(sl, nil, cfg)) == 0
}

// FuzzRender builds a Service and its EndpointSlice from fuzzed names,
// namespaces, port names, protocols, IPs, label and annotation values, and
// renders the rules. Rendering never panics. For what the API admits, every
// rendered line is restore syntax, every rule is in one of our chains (KUBE-*,
// MINIKIT-*) or a jump from a built-in chain to ours, every rule's arguments
// parse as the options the renderer writes, and no user-supplied text appears
// outside a --comment argument. As root, iptables-restore --test accepts the
// input inside a throwaway network namespace.
//
//	go test -run XXX -fuzz FuzzRender -fuzztime 60s ./internal/kubeproxy/
func FuzzRender(f *testing.F) {
	add := func(s fuzzService) {
		f.Add(s.ns, s.name, s.portName, s.proto, s.port, s.nodePort, s.clusterIP, s.extIP, s.lbIP, s.srcRange, s.endpoint, s.label, s.annotation, s.flags)
	}
	base := fuzzService{ns: "default", name: "web", portName: "http", proto: "TCP", port: 80, nodePort: 30080,
		clusterIP: "10.96.0.20", extIP: "192.168.56.150", lbIP: "192.168.56.240", srcRange: "203.0.113.0/25",
		endpoint: "10.244.1.5", label: "web", annotation: "hello"}
	for _, flags := range []uint8{0, fzNodePort, fzLoadBalancer, fzLoadBalancer | fzLocal, fzInternalLocal, fzAffinity | fzNodePort,
		fzNotReady, fzNotReady | fzTerminating, fzOtherProxy, fzLoadBalancer | fzLocal | fzAffinity | fzNotReady} {
		s := base
		s.flags = flags
		add(s)
	}
	for _, proto := range []string{"UDP", "SCTP", "", "tcp", "ICMP"} {
		s := base
		s.proto = proto
		add(s)
	}
	// The injection attempts of TestRuleInjection, as seeds.
	for _, evil := range injections {
		for i := 0; i < 5; i++ {
			s := base
			s.flags = fzLoadBalancer
			switch i {
			case 0:
				s.name = evil
			case 1:
				s.ns = evil
			case 2:
				s.portName = evil
			case 3:
				s.label, s.annotation = evil, evil
			case 4:
				s.proto, s.endpoint = evil, evil
			}
			add(s)
		}
	}
	check := restoreChecker(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, ns, name, portName, proto string, port, nodePort uint16, clusterIP, extIP, lbIP, srcRange, endpoint, label, annotation string, flags uint8) {
		fs := fuzzService{ns, name, portName, proto, port, nodePort, clusterIP, extIP, lbIP, srcRange, endpoint, label, annotation, flags}
		svc, slice := fs.objects()
		ipt := iptablestest.NewFake()
		p, _ := testProxier(t, ipt)
		p.OnServiceUpdate(svc)
		p.OnEndpointSliceUpdate(slice)
		err := p.syncProxyRules() // must not panic, whatever the input
		if !admitted(svc, slice) {
			return // the API never hands the proxier such objects (see TestRuleInjection)
		}
		if err != nil {
			t.Fatalf("sync of an admitted service: %v", err)
		}
		if len(ipt.Restores) == 0 {
			t.Fatal("no restore")
		}
		data := ipt.Restores[len(ipt.Restores)-1].Data
		// The service port name ("ns/name:port") is the user text that reaches
		// the rules; it cannot occur in an address or chain name by accident.
		if err := checkRestoreText(data, []string{servicePortName(ns, name, portName)}); err != nil {
			t.Fatalf("%v\n--- restore input:\n%s", err, data)
		}
		// Label and annotation values must not reach the rules at all: the same
		// service with other values renders the same text.
		if flags&fzOtherProxy == 0 {
			neutral := fs
			neutral.label, neutral.annotation = "neutral", "neutral"
			nsvc, nslice := neutral.objects()
			ipt2 := iptablestest.NewFake()
			p2, _ := testProxier(t, ipt2)
			p2.OnServiceUpdate(nsvc)
			p2.OnEndpointSliceUpdate(nslice)
			if err := p2.syncProxyRules(); err != nil {
				t.Fatal(err)
			}
			if got := ipt2.Restores[len(ipt2.Restores)-1].Data; got != data {
				t.Fatalf("label %q / annotation %q changed the rules:\n%s", label, annotation, lineDiff(got, data))
			}
		}
		if check != nil && (n.Add(1)%64 == 1 || !fuzzing()) {
			check(t, data)
		}
	})
}

// fuzzing reports whether this run is `go test -fuzz` (not the seed corpus).
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}

// restoreChecker returns a function that runs iptables-restore --test on an
// input inside a network namespace made for this test, or nil when not root
// (the unit tier runs unprivileged; CI runs as root). The namespace is removed on
// cleanup, also on failure; nothing touches the root namespace.
func restoreChecker(f *testing.F) func(t *testing.T, data string) {
	if os.Geteuid() != 0 {
		return nil
	}
	restore, err := exec.LookPath("iptables-restore")
	if err != nil {
		f.Fatalf("running as root without iptables-restore (scripts/deps.sh installs it): %v", err)
	}
	name := fmt.Sprintf("minikit-fuzz-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		f.Fatalf("creating netns %s: %v: %s", name, err, out)
	}
	f.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			f.Errorf("removing netns %s: %v: %s", name, err, out)
		}
	})
	return func(t *testing.T, data string) {
		cmd := exec.Command("ip", "netns", "exec", name, restore, "--test", "-w")
		cmd.Stdin = strings.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-restore --test rejects the rendered rules: %v: %s\n--- input:\n%s", err, out, data)
		}
	}
}

// builtinChains may hold only jumps to our chains.
var builtinChains = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// builtinTargets are the targets the renderer uses besides our chains.
var builtinTargets = map[string]bool{"ACCEPT": true, "DROP": true, "REJECT": true, "RETURN": true, "DNAT": true, "MARK": true, "MASQUERADE": true}

// ruleOptions are the options the renderer writes and how many arguments each
// takes. A token that is none of these, where an option is expected, means
// text escaped from where it belonged.
var ruleOptions = map[string]int{
	"-m": 1, "-p": 1, "-d": 1, "-s": 1, "-j": 1, "!": 0, "--comment": 1, "--dport": 1, "--to-destination": 1,
	"--name": 1, "--set": 0, "--rcheck": 0, "--seconds": 1, "--reap": 0, "--mode": 1, "--probability": 1,
	"--dst-type": 1, "--src-type": 1, "--mark": 1, "--xor-mark": 1, "--or-mark": 1, "--random-fully": 0, "--ctstate": 1,
	"-i": 1, "-o": 1, "--nfacct-name": 1,
}

var matchModules = map[string]bool{"comment": true, "tcp": true, "udp": true, "sctp": true, "statistic": true, "recent": true,
	"addrtype": true, "mark": true, "conntrack": true, "nfacct": true}

// checkRestoreText parses an iptables-restore input line by line and each rule
// with a shell-like tokenizer (iptables-restore's own quoting: double quotes
// group, backslash escapes inside them). user lists user-supplied strings that
// may appear only inside --comment arguments.
func checkRestoreText(data string, user []string) error {
	inTable := false
	for i, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		where := fmt.Sprintf("line %d %q", i+1, line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			if inTable || (line != "*nat" && line != "*filter" && line != "*mangle") {
				return fmt.Errorf("%s: unexpected table header", where)
			}
			inTable = true
		case line == "COMMIT":
			if !inTable {
				return fmt.Errorf("%s: COMMIT outside a table", where)
			}
			inTable = false
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if !inTable || len(f) != 3 || !(iptables.Owned(f[0]) && f[1] == "-" || builtinChains[f[0]] && f[1] != "-") {
				return fmt.Errorf("%s: not a declaration of one of our chains or a built-in one", where)
			}
		case strings.HasPrefix(line, "-A "):
			if !inTable {
				return fmt.Errorf("%s: rule outside a table", where)
			}
			toks, err := tokenize(line)
			if err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
			if err := checkRule(toks, user); err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
		default:
			return fmt.Errorf("%s: not restore syntax", where)
		}
	}
	if inTable {
		return fmt.Errorf("no COMMIT after the last table")
	}
	return nil
}

// token is one argument and whether it was quoted.
type token struct {
	text   string
	quoted bool
}

func tokenize(line string) ([]token, error) {
	var out []token
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			var b strings.Builder
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				b.WriteByte(line[i])
			}
			if i == len(line) {
				return nil, fmt.Errorf("unterminated quote")
			}
			i++
			if i < len(line) && line[i] != ' ' {
				return nil, fmt.Errorf("text glued to a closing quote at byte %d", i)
			}
			out = append(out, token{b.String(), true})
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				if line[j] == '"' || line[j] == '\\' {
					return nil, fmt.Errorf("quote or backslash inside an unquoted argument at byte %d", j)
				}
				j++
			}
			out = append(out, token{line[i:j], false})
			i = j
		}
	}
	return out, nil
}

func checkRule(toks []token, user []string) error {
	if len(toks) < 2 || toks[0].text != "-A" {
		return fmt.Errorf("not -A CHAIN")
	}
	chain := toks[1].text
	jumps := 0
	var target string
	for i := 2; i < len(toks); {
		opt := toks[i]
		n, ok := ruleOptions[opt.text]
		if !ok || opt.quoted {
			return fmt.Errorf("token %d %q is not an option the renderer writes", i, opt.text)
		}
		if i+n >= len(toks) {
			return fmt.Errorf("option %s lacks its argument", opt.text)
		}
		if n == 1 {
			arg := toks[i+1]
			if err := checkArg(opt.text, arg); err != nil {
				return err
			}
			if opt.text == "-j" {
				jumps++
				target = arg.text
			}
		}
		i += 1 + n
	}
	if jumps > 1 {
		return fmt.Errorf("%d jumps in one rule", jumps)
	}
	switch {
	case iptables.Owned(chain):
	case builtinChains[chain]:
		if !iptables.Owned(target) {
			return fmt.Errorf("rule in built-in chain %s does not jump to one of ours (target %q)", chain, target)
		}
	default:
		return fmt.Errorf("rule in chain %q, which is not ours", chain)
	}
	if target != "" && !iptables.Owned(target) && !builtinTargets[target] {
		return fmt.Errorf("jump to %q", target)
	}
	// User text only inside comments.
	for i, tk := range toks {
		if i > 0 && toks[i-1].text == "--comment" {
			continue
		}
		for _, u := range user {
			if len(u) >= 4 && strings.Contains(tk.text, u) {
				return fmt.Errorf("user-supplied %q in token %d %q, outside a comment", u, i, tk.text)
			}
		}
	}
	return nil
}

func checkArg(opt string, arg token) error {
	bad := func() error { return fmt.Errorf("%s %q", opt, arg.text) }
	if arg.quoted && opt != "--comment" {
		return bad()
	}
	switch opt {
	case "--comment":
		if strings.ContainsAny(arg.text, "\"\n\r\x00") {
			return bad()
		}
	case "-m":
		if !matchModules[arg.text] {
			return bad()
		}
	case "-p":
		if arg.text != "tcp" && arg.text != "udp" && arg.text != "sctp" {
			return bad()
		}
	case "-d", "-s":
		if _, err := netip.ParsePrefix(arg.text); err != nil {
			if _, err := netip.ParseAddr(arg.text); err != nil {
				return bad()
			}
		}
	case "--dport", "--seconds":
		if v, err := strconv.Atoi(arg.text); err != nil || v < 0 || v > 1<<20 {
			return bad()
		}
	case "--to-destination":
		if _, err := netip.ParseAddrPort(arg.text); err != nil {
			return bad()
		}
	case "-j", "--name":
		if !iptables.Owned(arg.text) && !builtinTargets[arg.text] {
			return bad()
		}
	case "--probability":
		if _, err := strconv.ParseFloat(arg.text, 64); err != nil {
			return bad()
		}
	default:
		if strings.ContainsAny(arg.text, "\"\\'\n") || bytes.ContainsAny([]byte(arg.text), "{};") {
			return bad()
		}
	}
	return nil
}
