package images

import (
	"bufio"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"
)

// runCoreDNS is the CoreDNS binary as the coredns/coredns image runs it (and
// the agnhost image bundles it as /coredns): `-conf FILE` (default
// ./Corefile). One image serves the cluster DNS (kubeadm's Corefile, the
// kube-system/coredns Deployment) and the test suites' own DNS servers. The
// plugins it has are those kubeadm's default Corefile uses — errors, health,
// ready, kubernetes, prometheus, forward, cache, loop, reload, loadbalance —
// plus hosts, rewrite (names), autopath, bind, log and whoami, and the
// Corefile's {$ENV} variables; a server block without the kubernetes plugin
// is a stub domain. Any other directive stops
// the server with the plugin's name in its log, as CoreDNS does on a
// Corefile it cannot parse. The kubernetes plugin's block is answered by the
// cluster DNS server (ClusterDNS, supplied by the wiring); the rest of the
// chain is this file's. With reload, a changed Corefile is loaded anew
// (corednsReload); one that does not parse leaves the running one in place.
func runCoreDNS(ctx context.Context, c *container, args []string) error {
	fs := c.flags("coredns")
	conf := fs.String("conf", "Corefile", "Corefile to load")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := *conf
	if !filepath.IsAbs(path) {
		path = filepath.Join("/", path)
	}
	read := func() ([]byte, []corefileBlock, error) {
		text, err := os.ReadFile(filepath.Join(c.root, path))
		if err != nil {
			return nil, nil, fmt.Errorf("loading Corefile: %w", err)
		}
		blocks, err := parseCorefile(expandCorefileEnv(string(text), c.env), func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(c.root, p)) })
		return text, blocks, err
	}
	text, blocks, err := read()
	if err != nil {
		fmt.Fprintf(c.stderr, "Error during parsing: %v\n", err)
		return err
	}
	for {
		sum := sha512.Sum512(text)
		gen, err := startCorefile(ctx, c, blocks)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "[INFO] plugin/reload: Running configuration SHA512 = %s\n", hex.EncodeToString(sum[:]))
		interval := reloadInterval(blocks)
		changed := make(chan struct{})
		watchCtx, stopWatch := context.WithCancel(ctx)
		if interval > 0 {
			go func() {
				for {
					// CoreDNS checks every interval plus up to half as much jitter.
					select {
					case <-watchCtx.Done():
						return
					case <-time.After(wait.Jitter(interval, 0.5)):
					}
					t, b, err := read()
					if err != nil {
						fmt.Fprintf(c.stdout, "[ERROR] Restart failed: %v\n", err)
						continue
					}
					if sha512.Sum512(t) == sum {
						continue
					}
					text, blocks = t, b
					close(changed)
					return
				}
			}()
		}
		select {
		case <-ctx.Done():
			stopWatch()
			return gen.stop(true)
		case err := <-gen.failed:
			stopWatch()
			_ = gen.stop(false)
			return err
		case <-changed:
			stopWatch()
			fmt.Fprintf(c.stdout, "[INFO] Reloading\n")
			if err := gen.stop(false); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "[INFO] Reloading complete\n")
		}
	}
}

// reloadInterval is the shortest reload interval of the blocks (0: no reload).
func reloadInterval(blocks []corefileBlock) time.Duration {
	var d time.Duration
	for _, b := range blocks {
		if b.reload > 0 && (d == 0 || b.reload < d) {
			d = b.reload
		}
	}
	return d
}

// corefileBlock is one server block: the zones it answers and its plugins.
type corefileBlock struct {
	zones   []string // fully qualified, "." for the root
	port    int
	plugins []string // directive names, in order (logged, counted by prometheus)
	hosts   *corednsHosts
	// forward are the upstreams (host:port, tried in order) of names under
	// forwardFrom.
	forward     []string
	forwardFrom string
	whoami      bool
	log         bool
	errors      bool
	cache       time.Duration // max TTL of cached upstream answers; 0: no cache
	rewrites    []rewriteRule
	kubernetes  *ClusterDNSPlugin
	autopath    bool
	health      string // listen address of /health ("" none)
	lameduck    time.Duration
	ready       string // listen address of /ready
	prometheus  string // listen address of /metrics
	reload      time.Duration
	bind        string // the address to listen on ("" all)
	loop        bool
	loadbalance bool
}

type corednsHosts struct {
	names       map[string][]netip.Addr // fully qualified lowercase name -> addresses
	fallThrough bool
}

// rewriteRule is `rewrite name [exact|prefix|suffix|substring] FROM TO`.
type rewriteRule struct {
	match    string
	from, to string // lowercase; exact and suffix rules fully qualified
}

// apply returns the rewritten name, or "" when the rule does not match.
func (r rewriteRule) apply(name string) string {
	l := strings.ToLower(name)
	switch r.match {
	case "exact":
		if l == r.from {
			return r.to
		}
	case "prefix":
		if strings.HasPrefix(l, r.from) {
			return r.to + l[len(r.from):]
		}
	case "suffix":
		if strings.HasSuffix(l, r.from) {
			return l[:len(l)-len(r.from)] + r.to
		}
	case "substring":
		if strings.Contains(l, r.from) {
			return strings.Replace(l, r.from, r.to, 1)
		}
	}
	return ""
}

// parseCorefile reads the Caddyfile syntax CoreDNS uses: `ZONE[:PORT]... {`,
// one directive per line, a directive's own block in braces, # comments.
// expandCorefileEnv replaces the Corefile's environment variables, {$NAME}
// or {$NAME:default}, with the container's values, as CoreDNS (Caddy's
// parser) does before it reads the directives: `bind {$POD_IP}` binds the
// address the downward API gives the pod. An unset variable without a
// default is the empty string.
func expandCorefileEnv(text string, env map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, "{$")
		if i < 0 {
			break
		}
		j := strings.IndexByte(text[i:], '}')
		if j < 0 {
			break
		}
		name, def, _ := strings.Cut(text[i+2:i+j], ":")
		v, ok := env[name]
		if !ok || v == "" {
			v = def
		}
		b.WriteString(text[:i])
		b.WriteString(v)
		text = text[i+j+1:]
	}
	b.WriteString(text)
	return b.String()
}

func parseCorefile(text string, readFile func(string) ([]byte, error)) ([]corefileBlock, error) {
	var lines [][]string
	var lineNo []int
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		// Braces are tokens of their own even when glued to a word.
		line = strings.ReplaceAll(strings.ReplaceAll(line, "{", " { "), "}", " } ")
		if f := strings.Fields(line); len(f) > 0 {
			lines = append(lines, f)
			lineNo = append(lineNo, n)
		}
	}
	var blocks []corefileBlock
	for i := 0; i < len(lines); i++ {
		head := lines[i]
		if head[len(head)-1] != "{" || len(head) < 2 {
			return nil, fmt.Errorf("Corefile:%d - Error during parsing: expected a server block, got %q", lineNo[i], strings.Join(head, " "))
		}
		b, err := newCorefileBlock(head[:len(head)-1])
		if err != nil {
			return nil, err
		}
		for i++; ; i++ {
			if i >= len(lines) {
				return nil, errors.New("Corefile: unexpected EOF, missing }")
			}
			l := lines[i]
			if len(l) == 1 && l[0] == "}" {
				break
			}
			at := lineNo[i]
			var body [][]string
			if l[len(l)-1] == "{" {
				l = l[:len(l)-1]
				for i++; i < len(lines) && !(len(lines[i]) == 1 && lines[i][0] == "}"); i++ {
					body = append(body, lines[i])
				}
				if i >= len(lines) {
					return nil, errors.New("Corefile: unexpected EOF, missing }")
				}
			}
			if err := b.directive(l, body, readFile); err != nil {
				return nil, fmt.Errorf("Corefile:%d - Error during parsing: %w", at, err)
			}
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		return nil, errors.New("Corefile: no server blocks")
	}
	return blocks, nil
}

func newCorefileBlock(keys []string) (corefileBlock, error) {
	b := corefileBlock{port: 53}
	for i, key := range keys {
		key = strings.TrimPrefix(key, "dns://")
		zone, port, ok := strings.Cut(key, ":")
		p := 53
		if ok {
			var err error
			p, err = strconv.Atoi(port)
			if err != nil || p < 0 || p > 65535 {
				return b, fmt.Errorf("invalid port in server block key %q", key)
			}
		}
		if i > 0 && p != b.port {
			return b, fmt.Errorf("server block keys %q: one port per block", strings.Join(keys, " "))
		}
		b.port = p
		b.zones = append(b.zones, strings.ToLower(dns.CanonicalName(zone)))
	}
	return b, nil
}

// zoneArgs are a plugin's zones: its arguments, or the block's zones.
func (b *corefileBlock) zoneArgs(args []string) []string {
	if len(args) == 0 {
		return b.zones
	}
	var z []string
	for _, a := range args {
		z = append(z, strings.ToLower(dns.CanonicalName(a)))
	}
	return z
}

func (b *corefileBlock) directive(l []string, body [][]string, readFile func(string) ([]byte, error)) error {
	b.plugins = append(b.plugins, l[0])
	switch l[0] {
	case "log":
		b.log = true
	case "errors":
		b.errors = true
	case "debug", "loadbalance":
		b.loadbalance = b.loadbalance || l[0] == "loadbalance"
	case "loop":
		b.loop = true
	case "bind":
		if len(l) != 2 {
			return errors.New("plugin/bind: minikit binds one address")
		}
		if _, err := netip.ParseAddr(l[1]); err != nil {
			return fmt.Errorf("plugin/bind: not an IP address: %q", l[1])
		}
		b.bind = l[1]
	case "reload":
		b.reload = 30 * time.Second
		if len(l) > 1 {
			d, err := time.ParseDuration(l[1])
			if err != nil || d < 2*time.Second {
				return fmt.Errorf("plugin/reload: invalid interval %q: minimum is 2s", l[1])
			}
			b.reload = d
		}
	case "health":
		b.health = ":8080"
		if len(l) > 1 {
			b.health = l[1]
		}
		for _, f := range body {
			if f[0] == "lameduck" && len(f) == 2 {
				d, err := time.ParseDuration(f[1])
				if err != nil {
					return fmt.Errorf("plugin/health: unable to parse lameduck duration value: '%v' : %v", f[1], err)
				}
				b.lameduck = d
			} else {
				return fmt.Errorf("plugin/health: unknown property %q", f[0])
			}
		}
	case "ready":
		b.ready = ":8181"
		if len(l) > 1 {
			b.ready = l[1]
		}
	case "prometheus":
		b.prometheus = "localhost:9153"
		if len(l) > 1 {
			b.prometheus = l[1]
		}
	case "cache":
		b.cache = 3600 * time.Second
		if len(l) > 1 {
			n, err := strconv.Atoi(l[1])
			if err != nil || n <= 0 {
				return fmt.Errorf("plugin/cache: invalid TTL %q", l[1])
			}
			b.cache = time.Duration(n) * time.Second
		}
	case "autopath":
		if len(l) != 2 || l[1] != "@kubernetes" {
			return errors.New("plugin/autopath: only 'autopath @kubernetes' is supported")
		}
		b.autopath = true
	case "kubernetes":
		k, err := parseKubernetesPlugin(b.zoneArgs(l[1:]), body)
		if err != nil {
			return err
		}
		b.kubernetes = k
	case "rewrite":
		r, err := parseRewrite(l[1:])
		if err != nil {
			return err
		}
		b.rewrites = append(b.rewrites, r)
	case "hosts":
		h := &corednsHosts{names: map[string][]netip.Addr{}}
		file := "/etc/hosts"
		if len(l) > 1 {
			file = l[1]
		}
		if data, err := readFile(file); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if i := strings.IndexByte(line, '#'); i >= 0 {
					line = line[:i]
				}
				if err := h.add(strings.Fields(line)); err != nil {
					return err
				}
			}
		} else if len(l) > 1 {
			return fmt.Errorf("plugin/hosts: %w", err)
		}
		for _, f := range body {
			switch f[0] {
			case "fallthrough":
				h.fallThrough = true
			case "ttl", "reload", "no_reverse":
			default:
				if err := h.add(f); err != nil {
					return err
				}
			}
		}
		b.hosts = h
	case "whoami":
		if len(l) > 1 || len(body) > 0 {
			return errors.New("plugin/whoami: Wrong argument count or unexpected line ending after 'whoami'")
		}
		b.whoami = true
	case "forward":
		if len(l) < 3 {
			return errors.New("plugin/forward: wrong argument count")
		}
		b.forwardFrom = strings.ToLower(dns.CanonicalName(l[1]))
		for _, to := range l[2:] {
			if strings.HasPrefix(to, "/") {
				// A resolv.conf: its nameservers, as CoreDNS reads them.
				data, err := readFile(to)
				if err != nil {
					return fmt.Errorf("plugin/forward: %w", err)
				}
				for _, ns := range resolvNameservers(data) {
					b.forward = append(b.forward, net.JoinHostPort(ns, "53"))
				}
				continue
			}
			to = strings.TrimPrefix(to, "dns://")
			if _, _, err := net.SplitHostPort(to); err != nil {
				to = net.JoinHostPort(to, "53")
			}
			if _, err := netip.ParseAddrPort(to); err != nil {
				return fmt.Errorf("plugin/forward: not an IP address or file: %q", to)
			}
			b.forward = append(b.forward, to)
		}
		// Options (max_concurrent, policy, health_check...) tune what this
		// forwarder does anyway.
	default:
		return fmt.Errorf("Unknown directive '%s'", l[0])
	}
	return nil
}

func resolvNameservers(data []byte) []string {
	var ns []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				ns = append(ns, a.String())
			}
		}
	}
	return ns
}

func parseRewrite(args []string) (rewriteRule, error) {
	if len(args) > 0 && (args[0] == "stop" || args[0] == "continue") {
		args = args[1:]
	}
	if len(args) == 0 || args[0] != "name" {
		return rewriteRule{}, errors.New("plugin/rewrite: only name rules are supported")
	}
	args = args[1:]
	r := rewriteRule{match: "exact"}
	if len(args) == 3 || len(args) == 5 {
		r.match, args = args[0], args[1:]
	}
	if len(args) == 4 && args[2] == "answer" && args[3] == "auto" {
		args = args[:2]
	}
	if len(args) != 2 {
		return rewriteRule{}, errors.New("plugin/rewrite: name rule needs FROM and TO")
	}
	r.from, r.to = strings.ToLower(args[0]), strings.ToLower(args[1])
	switch r.match {
	case "exact", "suffix":
		r.from, r.to = dns.Fqdn(r.from), dns.Fqdn(r.to)
	case "prefix", "substring":
	default:
		return rewriteRule{}, fmt.Errorf("plugin/rewrite: name match type %q is not supported (exact, prefix, suffix, substring)", r.match)
	}
	return r, nil
}

// parseKubernetesPlugin reads `kubernetes ZONES { ... }` with the options
// kubeadm, k3s and the DNS docs use.
func parseKubernetesPlugin(zones []string, body [][]string) (*ClusterDNSPlugin, error) {
	k := &ClusterDNSPlugin{Zones: zones, TTL: 5, Pods: "disabled"}
	for _, f := range body {
		switch f[0] {
		case "pods":
			if len(f) != 2 || (f[1] != "disabled" && f[1] != "insecure" && f[1] != "verified") {
				return nil, fmt.Errorf("plugin/kubernetes: pods: expected one of disabled, insecure, verified, got %q", strings.Join(f[1:], " "))
			}
			k.Pods = f[1]
		case "fallthrough":
			k.Fallthrough = zones
			if len(f) > 1 {
				k.Fallthrough = nil
				for _, z := range f[1:] {
					k.Fallthrough = append(k.Fallthrough, strings.ToLower(dns.CanonicalName(z)))
				}
			}
		case "ttl":
			n, err := strconv.Atoi(strings.Join(f[1:], ""))
			if len(f) != 2 || err != nil || n < 0 || n > 3600 {
				return nil, fmt.Errorf("plugin/kubernetes: ttl must be in range [0, 3600]: %q", strings.Join(f[1:], " "))
			}
			k.TTL = uint32(n)
		case "namespaces":
			k.Namespaces = f[1:]
		case "ignore":
			if len(f) != 2 || f[1] != "empty_service" {
				return nil, fmt.Errorf("plugin/kubernetes: unable to parse ignore value: %q", strings.Join(f[1:], " "))
			}
			k.IgnoreEmptyService = true
		case "endpoint":
			if len(f) != 2 {
				return nil, errors.New("plugin/kubernetes: endpoint takes one URL")
			}
			k.Endpoint = f[1]
		case "kubeconfig":
			if len(f) < 2 || len(f) > 3 {
				return nil, errors.New("plugin/kubernetes: kubeconfig takes a file and an optional context")
			}
			k.Kubeconfig = f[1]
			if len(f) == 3 {
				k.KubeconfigContext = f[2]
			}
		case "noendpoints", "endpoint_pod_names", "labels", "multicluster", "startup_timeout":
			return nil, fmt.Errorf("plugin/kubernetes: option %q is not supported by minikit", f[0])
		default:
			return nil, fmt.Errorf("plugin/kubernetes: unknown property '%s'", f[0])
		}
	}
	return k, nil
}

// add takes one hosts line: an address, then its names.
func (h *corednsHosts) add(f []string) error {
	if len(f) == 0 {
		return nil
	}
	addr, err := netip.ParseAddr(f[0])
	if err != nil {
		return fmt.Errorf("plugin/hosts: parsing address %q: %w", f[0], err)
	}
	for _, n := range f[1:] {
		n = strings.ToLower(dns.CanonicalName(n))
		h.names[n] = append(h.names[n], addr.Unmap())
	}
	return nil
}

func flags(m *dns.Msg) string {
	var f []string
	if m.Response {
		f = append(f, "qr")
	}
	if m.Authoritative {
		f = append(f, "aa")
	}
	if m.RecursionDesired {
		f = append(f, "rd")
	}
	if m.RecursionAvailable {
		f = append(f, "ra")
	}
	return strings.Join(f, ",")
}

// whoami is CoreDNS's whoami plugin: whatever the query type, an
// authoritative empty answer whose additional section holds the client's
// address (A or AAAA under the lowercased query name) and an SRV record
// _udp.NAME or _tcp.NAME with its source port and target ".", TTL 0.
func whoami(m *dns.Msg, q dns.Question, client net.Addr) *dns.Msg {
	m.Authoritative = true
	name := strings.ToLower(q.Name)
	var ip netip.AddrPort
	proto := "udp"
	switch a := client.(type) {
	case *net.UDPAddr:
		ip = a.AddrPort()
	case *net.TCPAddr:
		ip, proto = a.AddrPort(), "tcp"
	default:
		ip, _ = netip.ParseAddrPort(client.String())
	}
	addr := ip.Addr().Unmap()
	if addr.Is4() {
		m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: q.Qclass}, A: addr.AsSlice()})
	} else {
		m.Extra = append(m.Extra, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: q.Qclass}, AAAA: addr.AsSlice()})
	}
	srvName := "_" + proto + "." + name
	if name == "." {
		srvName = "_" + proto + "."
	}
	m.Extra = append(m.Extra, &dns.SRV{Hdr: dns.RR_Header{Name: srvName, Rrtype: dns.TypeSRV, Class: q.Qclass}, Port: ip.Port(), Target: "."})
	return m
}
