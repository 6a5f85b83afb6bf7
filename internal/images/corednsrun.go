package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ClusterDNSPlugin is a Corefile's kubernetes plugin: `kubernetes ZONES {
// pods MODE; fallthrough [ZONES]; ttl N; namespaces NS...; ignore
// empty_service; endpoint URL; kubeconfig FILE [CONTEXT] }`.
type ClusterDNSPlugin struct {
	Zones              []string // fully qualified, lowercase
	Pods               string   // disabled, insecure or verified
	TTL                uint32
	Fallthrough        []string
	Namespaces         []string
	IgnoreEmptyService bool
	Endpoint           string
	Kubeconfig         string
	KubeconfigContext  string
}

// ClusterDNSServer is one port of a Corefile whose server block has the
// kubernetes plugin, as the coredns image hands it to the cluster DNS server.
type ClusterDNSServer struct {
	Plugin ClusterDNSPlugin
	// Host and Port are where to listen ("" host: every address).
	Host string
	Port int
	// REST reaches the API: the plugin's kubeconfig or endpoint, else the
	// pod's service account (client-go's in-cluster configuration).
	REST *rest.Config
	// Upstreams are the block's `forward .` servers; CacheMaxTTL is its
	// cache's TTL cap (0: no cache).
	Upstreams   []netip.AddrPort
	CacheMaxTTL time.Duration
	// Autopath is `autopath @kubernetes`; HostSearch the pod's own search path.
	Autopath   bool
	HostSearch []string
	// NoMemo asks for every query to take the path Before sees (the log plugin).
	NoMemo bool
	// Before runs the block's other plugins and the stub-domain blocks on the
	// same port first (see dns.Config.Before).
	Before func(ctx context.Context, req *dns.Msg, client netip.Addr) (*dns.Msg, func(*dns.Msg))
	// Log is the container's log.
	Log io.Writer
	// OnListen learns the bound addresses; Synced is called once the zone
	// answers from a complete list of the cluster (the ready plugin).
	OnListen func(network string, addr net.Addr)
	Synced   func()
}

// ClusterDNS serves a ClusterDNSServer until ctx ends. The wiring supplies it:
// the cluster DNS server is the dns component's, which the kubelet (which
// resolves images through this package) must not depend on.
type ClusterDNS func(ctx context.Context, s ClusterDNSServer) error

// corefileGen is one loaded Corefile's running servers.
type corefileGen struct {
	failed   chan error
	cancel   context.CancelFunc
	lameduck time.Duration
	wg       sync.WaitGroup
	https    []*http.Server
}

// stop ends the generation; on the container's own shutdown (final) it keeps
// serving DNS for the health plugin's lameduck first.
func (g *corefileGen) stop(final bool) error {
	if final && g.lameduck > 0 {
		// Lameduck is a deliberate delay: the endpoints controller and the
		// proxies move the Service away meanwhile.
		time.Sleep(g.lameduck)
	}
	for _, h := range g.https {
		_ = h.Close()
	}
	g.cancel()
	g.wg.Wait()
	return nil
}

// startCorefile starts every port's servers and the health, ready and
// metrics endpoints of blocks.
func startCorefile(ctx context.Context, c *container, blocks []corefileBlock) (*corefileGen, error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &corefileGen{failed: make(chan error, 16), cancel: cancel}
	fail := func(err error) {
		select {
		case g.failed <- err:
		default:
		}
	}
	byPort := map[int][]*corefileBlock{}
	var ports []int
	for i := range blocks {
		b := &blocks[i]
		if byPort[b.port] == nil {
			ports = append(ports, b.port)
		}
		byPort[b.port] = append(byPort[b.port], b)
		if b.lameduck > g.lameduck {
			g.lameduck = b.lameduck
		}
	}
	sort.Ints(ports)
	var notReady atomic.Int32
	started := func() error {
		for _, port := range ports {
			grp := &corednsServer{c: c, zones: byPort[port]}
			var main *corefileBlock
			host := c.listenHost
			for _, b := range grp.zones {
				if b.kubernetes != nil {
					main = b
				}
				if b.bind != "" {
					host = b.bind
				}
			}
			if main == nil {
				udp, err := c.listenUDP(host, port)
				if err != nil {
					return fmt.Errorf("listening on udp port %d: %w", port, err)
				}
				tcp, err := c.listenTCP(host, port)
				if err != nil {
					udp.Close()
					return fmt.Errorf("listening on tcp port %d: %w", port, err)
				}
				for _, s := range []*dns.Server{{PacketConn: udp, Handler: grp}, {Listener: tcp, Handler: grp}} {
					g.wg.Add(1)
					go func() {
						defer g.wg.Done()
						if err := s.ActivateAndServe(); err != nil && runCtx.Err() == nil {
							fail(err)
						}
					}()
					go func() { <-runCtx.Done(); _ = s.Shutdown() }()
				}
				fmt.Fprintf(c.stdout, ".:%d\n", port)
				continue
			}
			if c.clusterDNS == nil {
				return errors.New("plugin/kubernetes: this minikit process has no cluster DNS server")
			}
			srv, err := c.clusterDNSServer(grp, main, port)
			if err != nil {
				return err
			}
			srv.Host = host
			notReady.Add(1)
			var once sync.Once
			srv.Synced = func() { once.Do(func() { notReady.Add(-1) }) }
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				if err := c.clusterDNS(runCtx, srv); err != nil && runCtx.Err() == nil {
					fail(err)
				}
			}()
			for _, z := range main.zones {
				fmt.Fprintf(c.stdout, "%s:%d\n", z, port)
			}
		}
		return nil
	}
	if err := started(); err != nil {
		fmt.Fprintf(c.stdout, "[ERROR] %v\n", err)
		g.cancel()
		g.wg.Wait()
		return nil, err
	}
	fmt.Fprintf(c.stdout, "CoreDNS-1.12.0\nlinux/%s, %s, minikit\n", runtime.GOARCH, runtime.Version())
	mux := map[string]*http.ServeMux{}
	handle := func(addr, path string, h http.HandlerFunc) {
		if addr == "" {
			return
		}
		if strings.HasSuffix(addr, ":0") {
			// Port 0 (tests): each plugin its own port.
			addr += " " + path
		}
		if mux[addr] == nil {
			mux[addr] = http.NewServeMux()
		}
		mux[addr].HandleFunc(path, h)
	}
	for _, b := range blocks {
		handle(b.health, "/health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK") })
		handle(b.ready, "/ready", func(w http.ResponseWriter, _ *http.Request) {
			if notReady.Load() > 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "kubernetes")
				return
			}
			io.WriteString(w, "OK")
		})
		handle(b.prometheus, "/metrics", func(w http.ResponseWriter, _ *http.Request) { writeCoreDNSMetrics(w, blocks) })
	}
	addrs := make([]string, 0, len(mux))
	for a := range mux {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		ln, err := c.listenTCPAddr(strings.Fields(a)[0])
		if err != nil {
			_ = g.stop(false)
			return nil, fmt.Errorf("listening on %s: %w", a, err)
		}
		hs := &http.Server{Handler: mux[a], ReadHeaderTimeout: 10 * time.Second}
		g.https = append(g.https, hs)
		go func() { _ = hs.Serve(ln) }()
	}
	if c.ready != nil {
		c.readyOnce.Do(c.ready)
	}
	return g, nil
}

// listenTCPAddr listens on a plugin's HOST:PORT (":8080", "localhost:9153").
func (c *container) listenTCPAddr(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "" {
		host = c.listenHost
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil {
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	return c.listenTCP(host, p)
}

// clusterDNSServer is the kubernetes block of a port, and the Before hook
// that gives the rest of the port's chain its turn.
func (c *container) clusterDNSServer(grp *corednsServer, main *corefileBlock, port int) (ClusterDNSServer, error) {
	s := ClusterDNSServer{Plugin: *main.kubernetes, Host: c.listenHost, Port: port, Log: c.stdout,
		OnListen: c.onListen, Autopath: main.autopath, CacheMaxTTL: main.cache, NoMemo: main.log}
	if main.forwardFrom == "." {
		for _, f := range main.forward {
			ap, err := netip.ParseAddrPort(f)
			if err != nil {
				return s, fmt.Errorf("plugin/forward: %w", err)
			}
			s.Upstreams = append(s.Upstreams, ap)
		}
	}
	if main.autopath {
		if b, err := os.ReadFile(filepath.Join(c.root, "etc/resolv.conf")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[0] == "search" {
					s.HostSearch = f[1:]
				}
			}
		}
	}
	rc, err := c.clusterREST(main.kubernetes)
	if err != nil {
		return s, fmt.Errorf("plugin/kubernetes: %w", err)
	}
	s.REST = rc
	s.Before = func(ctx context.Context, req *dns.Msg, client netip.Addr) (*dns.Msg, func(*dns.Msg)) {
		q := req.Question[0]
		from := &net.UDPAddr{IP: client.AsSlice()}
		switch b := grp.block(q.Name); {
		case b == nil:
			// No server block of this port has the zone.
			m := new(dns.Msg)
			m.SetRcode(req, dns.RcodeRefused)
			return m, nil
		case b != main:
			m := grp.answer(b, req, from)
			grp.logQuery(b, req, m, from, time.Now())
			return m, nil
		}
		start := time.Now()
		var after []func(*dns.Msg)
		orig := q.Name
		for _, r := range main.rewrites {
			if n := r.apply(q.Name); n != "" {
				req.Question[0].Name = n
				after = append(after, func(m *dns.Msg) {
					m.Question = []dns.Question{{Name: orig, Qtype: q.Qtype, Qclass: q.Qclass}}
					for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
						for _, rr := range sec {
							if strings.EqualFold(rr.Header().Name, n) {
								rr.Header().Name = orig
							}
						}
					}
				})
				break
			}
		}
		if main.hosts != nil {
			if m, ok := hostsAnswer(main.hosts, req); ok {
				for _, f := range after {
					f(m)
				}
				grp.logQuery(main, req, m, from, start)
				return m, nil
			}
		}
		if main.forwardFrom != "" && main.forwardFrom != "." && dns.IsSubDomain(main.forwardFrom, strings.ToLower(req.Question[0].Name)) {
			m := grp.exchange(main, req)
			for _, f := range after {
				f(m)
			}
			grp.logQuery(main, req, m, from, start)
			return m, nil
		}
		if main.log {
			after = append(after, func(m *dns.Msg) { grp.logQuery(main, req, m, from, start) })
		}
		if main.loadbalance {
			after = append(after, shuffleAnswer)
		}
		if len(after) == 0 {
			return nil, nil
		}
		return nil, func(m *dns.Msg) {
			for _, f := range after {
				f(m)
			}
		}
	}
	return s, nil
}

// shuffleAnswer is the loadbalance plugin: A, AAAA and MX records in random
// order (round robin in effect), after any CNAMEs.
func shuffleAnswer(m *dns.Msg) {
	var addr, other []dns.RR
	for _, rr := range m.Answer {
		switch rr.Header().Rrtype {
		case dns.TypeA, dns.TypeAAAA, dns.TypeMX:
			addr = append(addr, rr)
		default:
			other = append(other, rr)
		}
	}
	if len(addr) < 2 {
		return
	}
	randShuffle(addr)
	m.Answer = append(other, addr...)
}

// clusterREST is how the kubernetes plugin reaches the API.
func (c *container) clusterREST(k *ClusterDNSPlugin) (*rest.Config, error) {
	if k.Kubeconfig != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: filepath.Join(c.root, k.Kubeconfig)}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: k.KubeconfigContext, ClusterInfo: clientcmdapi.Cluster{Server: k.Endpoint}}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", k.Kubeconfig, err)
		}
		return cfg, nil
	}
	if k.Endpoint != "" {
		return &rest.Config{Host: k.Endpoint}, nil
	}
	host, port := c.env["KUBERNETES_SERVICE_HOST"], c.env["KUBERNETES_SERVICE_PORT"]
	if host == "" || port == "" {
		return nil, errors.New("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")
	}
	dir := filepath.Join(c.root, serviceAccountDir)
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		BearerTokenFile: filepath.Join(dir, "token"),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")},
	}, nil
}

// corednsServer answers one port's server blocks: the longest matching
// zone's plugin chain (hosts, forward, whoami), as CoreDNS picks a server
// block.
type corednsServer struct {
	c     *container
	zones []*corefileBlock
}

func (s *corednsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	var b *corefileBlock
	var m *dns.Msg
	if len(r.Question) != 1 {
		m = new(dns.Msg)
		m.SetRcodeFormatError(r)
	} else if b = s.block(r.Question[0].Name); b == nil {
		m = new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
	} else {
		m = s.answer(b, r, w.RemoteAddr())
	}
	_ = w.WriteMsg(m)
	if b != nil {
		s.logQuery(b, r, m, w.RemoteAddr(), start)
	}
}

// logQuery is the log plugin's common log format, when the block has it.
func (s *corednsServer) logQuery(b *corefileBlock, r, m *dns.Msg, client net.Addr, start time.Time) {
	if !b.log || len(r.Question) == 0 {
		return
	}
	q := r.Question[0]
	network := "udp"
	if _, ok := client.(*net.TCPAddr); ok {
		network = "tcp"
	}
	host, port, err := net.SplitHostPort(client.String())
	if err != nil {
		host, port = client.String(), "0"
	}
	fmt.Fprintf(s.c.stdout, "[INFO] %s:%s - %d \"%s IN %s %s %d %t %d\" %s %s %d %.9fs\n",
		host, port, r.Id, dns.TypeToString[q.Qtype], q.Name, network, r.Len(),
		r.IsEdns0() != nil && r.IsEdns0().Do(), dns.MinMsgSize, dns.RcodeToString[m.Rcode], flags(m), m.Len(), time.Since(start).Seconds())
}

func (s *corednsServer) block(name string) *corefileBlock {
	var best *corefileBlock
	bestLen := -1
	name = strings.ToLower(name)
	for _, b := range s.zones {
		for _, z := range b.zones {
			if dns.IsSubDomain(z, name) && len(z) > bestLen {
				best, bestLen = b, len(z)
			}
		}
	}
	return best
}

// hostsAnswer is the hosts plugin: the entries of a known name; for an
// unknown one, SERVFAIL without fallthrough (CoreDNS has no SOA to put in an
// NXDOMAIN), or ok=false to go on.
func hostsAnswer(h *corednsHosts, r *dns.Msg) (*dns.Msg, bool) {
	q := r.Question[0]
	m := new(dns.Msg)
	m.SetReply(r)
	addrs, known := h.names[strings.ToLower(q.Name)]
	if !known {
		if h.fallThrough {
			return nil, false
		}
		m.Rcode = dns.RcodeServerFailure
		return m, true
	}
	m.Authoritative = true
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 3600}
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6():
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return m, true
}

// answer runs block b's chain in CoreDNS's plugin order (rewrite, hosts,
// forward, whoami) for a query from client. With no plugin left to answer,
// CoreDNS replies SERVFAIL.
func (s *corednsServer) answer(b *corefileBlock, r *dns.Msg, client net.Addr) *dns.Msg {
	q := r.Question[0]
	for _, rw := range b.rewrites {
		if n := rw.apply(q.Name); n != "" {
			req := r.Copy()
			req.Question[0].Name = n
			m := s.answer(&corefileBlock{zones: b.zones, hosts: b.hosts, forward: b.forward, forwardFrom: b.forwardFrom, whoami: b.whoami, errors: b.errors}, req, client)
			m.Question = []dns.Question{q}
			for _, rr := range m.Answer {
				if strings.EqualFold(rr.Header().Name, n) {
					rr.Header().Name = q.Name
				}
			}
			return m
		}
	}
	if b.hosts != nil {
		if m, ok := hostsAnswer(b.hosts, r); ok {
			return m
		}
	}
	if len(b.forward) > 0 && dns.IsSubDomain(b.forwardFrom, strings.ToLower(q.Name)) {
		return s.exchange(b, r)
	}
	m := new(dns.Msg)
	m.SetReply(r)
	if b.whoami {
		return whoami(m, q, client)
	}
	m.Rcode = dns.RcodeServerFailure
	return m
}

// exchange is the forward plugin: the upstreams in order, over UDP and then
// TCP when the answer was truncated; SERVFAIL (logged by errors) when none
// answers.
func (s *corednsServer) exchange(b *corefileBlock, r *dns.Msg) *dns.Msg {
	var lastErr error
	for _, up := range b.forward {
		for _, network := range []string{"udp", "tcp"} {
			resp, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(r, up)
			if err != nil {
				lastErr = err
				break
			}
			if resp.Truncated && network == "udp" {
				continue
			}
			resp.Id = r.Id
			return resp
		}
	}
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	if b.errors && lastErr != nil {
		q := r.Question[0]
		fmt.Fprintf(s.c.stdout, "[ERROR] plugin/errors: 2 %s %s: %v\n", q.Name, dns.TypeToString[q.Qtype], lastErr)
	}
	return m
}

// writeCoreDNSMetrics is the prometheus plugin's page: build information and
// the plugins each server block enables.
func writeCoreDNSMetrics(w io.Writer, blocks []corefileBlock) {
	fmt.Fprintf(w, "# HELP coredns_build_info A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built.\n# TYPE coredns_build_info gauge\n")
	fmt.Fprintf(w, "coredns_build_info{goversion=%q,revision=\"minikit\",version=\"1.12.0\"} 1\n", runtime.Version())
	fmt.Fprintf(w, "# HELP coredns_plugin_enabled A metric that indicates whether a plugin is enabled on per server and zone basis.\n# TYPE coredns_plugin_enabled gauge\n")
	for _, b := range blocks {
		for _, z := range b.zones {
			for _, p := range b.plugins {
				fmt.Fprintf(w, "coredns_plugin_enabled{name=%q,server=\"dns://:%d\",view=\"\",zone=%q} 1\n", p, b.port, z)
			}
		}
	}
}

func randShuffle(rrs []dns.RR) {
	rand.Shuffle(len(rrs), func(i, j int) { rrs[i], rrs[j] = rrs[j], rrs[i] })
}
