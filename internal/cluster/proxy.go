package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/informer"
	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// proxyDebugAddr is where the proxy's debug endpoint listens inside the node's
// network namespace (kube-proxy's metrics port): /rules, /stats, /healthz and
// /metrics.
const proxyDebugAddr = "127.0.0.1:10249"

// proxyHealthzAddr is kube-proxy's --healthz-bind-address: its /healthz and
// /livez answer on every address of the node, for load balancers' probes.
var proxyHealthzAddr = ":" + strconv.Itoa(kubeproxy.HealthzPort)

// ProxyMode is kube-proxy's --proxy-mode: which rules the service proxy
// writes.
type ProxyMode string

const (
	// ProxyModeIPTables writes kube-proxy's KUBE-* chains (the default: it
	// is what the book shows).
	ProxyModeIPTables ProxyMode = "iptables"
	// ProxyModeNFTables writes kube-proxy's `ip kube-proxy` nftables table.
	ProxyModeNFTables ProxyMode = "nftables"
)

// ParseProxyMode checks a --proxy-mode value; "" is the default, iptables.
func ParseProxyMode(s string) (ProxyMode, error) {
	switch ProxyMode(s) {
	case "", ProxyModeIPTables:
		return ProxyModeIPTables, nil
	case ProxyModeNFTables:
		return ProxyModeNFTables, nil
	}
	return "", fmt.Errorf("unknown proxy mode %q: want iptables or nftables", s)
}

// serviceProxy is what the wiring needs of a proxier, whichever mode it
// writes: kubeproxy.Proxier (iptables) and kubeproxy.NFTProxier (nftables).
type serviceProxy interface {
	Run(ctx context.Context)
	SetInitialized()
	OnServiceUpdate(*corev1.Service)
	OnServiceDelete(*corev1.Service)
	OnEndpointSliceUpdate(*discovery.EndpointSlice)
	OnEndpointSliceDelete(*discovery.EndpointSlice)
	SetNodeIP(netip.Addr)
	SetNode(*corev1.Node)
	Handler() http.Handler
	HealthzHandler() http.Handler
	Stats() kubeproxy.Stats
}

var (
	_ serviceProxy = (*kubeproxy.Proxier)(nil)
	_ serviceProxy = (*kubeproxy.NFTProxier)(nil)
	_ serviceProxy = (*kubeproxy.MetaProxier)(nil)
)

// startProxy starts the node's service proxy: informers for Services,
// EndpointSlices and this Node feed the proxier, which writes kube-proxy's
// rules in the node's network namespace, in the node's proxy mode. Starting
// in one mode first removes the other mode's rules, so that switching a node
// leaves no rules of the mode it left.
func startProxy(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	log := nc.Logger.With("component", "proxy")
	mode, err := ParseProxyMode(string(nc.ProxyMode))
	if err != nil {
		return err
	}
	if nc.Agent != nil {
		if err := kubeproxy.SetConntrackSysctls(nc.Agent.EnsureSysctl, mode == ProxyModeNFTables); err != nil {
			log.Warn("setting conntrack timeouts", "err", err)
		}
	}
	cfg := kubeproxy.Config{NodeName: nc.NodeName, NodeIP: nc.NodeIP, ClusterCIDR: nc.ClusterCIDR, Logger: nc.Logger}
	// An IPv6 single-stack node (an IPv6 InternalIP alone) runs one proxier,
	// of IPv6, as kube-proxy does with --node-ip and --cluster-cidr of IPv6.
	v6only := isIPv6(nc.NodeIP) && !nc.SecondaryNodeIP.IsValid()
	if v6only {
		cfg = ipv6Config(cfg, nc.NodeIP, nc.ClusterCIDR)
		cfg.HealthCheckListen = nil
	}
	primaryFamily := nft.IPv4Family
	if v6only {
		primaryFamily = nft.IPv6Family
	}
	var p serviceProxy
	var closeBackend func()
	switch mode {
	case ProxyModeNFTables:
		backend, name, err := newNFTBackend(primaryFamily)
		if err != nil {
			log.Warn("no nftables: services will not work on this node", "err", err)
			return nil
		}
		backends := []nft.Interface{backend}
		closeBackend = func() {
			for _, b := range backends {
				closeNFT(b)
			}
		}
		if ipt, err := iptables.New(); err == nil {
			if err := kubeproxy.Cleanup(ipt); err != nil {
				log.Warn("removing the iptables mode's rules", "err", err)
			}
		}
		if nc.SecondaryNodeIP.Is6() || v6only {
			if err := cleanupProxyIPv6(); err != nil {
				log.Warn("removing the iptables mode's IPv6 rules", "err", err)
			}
		}
		// KUBE-FIREWALL is gone: route_localnet goes back to what it was
		// before the iptables mode set it, or 127.0.0.0/8 would be routable
		// unguarded (CVE-2020-8558).
		if nc.Agent != nil {
			if err := nc.Agent.ResetRouteLocalnet(); err != nil {
				log.Warn("resetting route_localnet", "err", err)
			}
		}
		var cidrs []netip.Prefix
		if nc.ServiceCIDR.IsValid() {
			cidrs = append(cidrs, nc.ServiceCIDR)
		}
		ncfg := kubeproxy.NFTConfig{Config: cfg, ServiceCIDRs: cidrs, Backend: name}
		var backend6 nft.Interface
		if p, backend6, err = newNFTProxy(ncfg, backend, nc.SecondaryNodeIP, nc.SecondaryClusterCIDR, log); err != nil {
			closeBackend()
			return err
		}
		if backend6 != nil {
			backends = append(backends, backend6)
		}
		log.Info("service proxy in nftables mode", "backend", name)
	default:
		newIPT := iptables.New
		if v6only {
			newIPT = iptables.NewIPv6
		}
		ipt, err := newIPT()
		if err != nil {
			log.Warn("no iptables: services will not work on this node", "err", err, "family", primaryFamily)
			return nil
		}
		if err := removeNFTTable(log); err != nil {
			log.Warn("removing the nftables mode's table", "err", err)
		}
		icfg := cfg
		icfg.NFAcct = nfacct.Netlink{}
		if nc.Agent != nil && !v6only {
			icfg.RouteLocalnet = nc.Agent.EnsureRouteLocalnet
		}
		var ipt6 iptables.Interface
		if isIPv6(nc.SecondaryNodeIP) {
			if ipt6, err = iptables.NewIPv6(); err != nil {
				log.Warn("no ip6tables: IPv6 services will not work on this node", "err", err)
				ipt6 = nil
			}
		}
		if p, err = newIPTablesProxy(icfg, ipt, ipt6, nc.SecondaryNodeIP, nc.SecondaryClusterCIDR, log); err != nil {
			return err
		}
	}
	factory := informers.NewSharedInformerFactory(nc.Client, 0)
	svcInf := factory.Core().V1().Services().Informer()
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	nodeInf := factory.Core().V1().Nodes().Informer()
	svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, p.OnServiceUpdate) },
		UpdateFunc: func(_, o any) { withObj(o, p.OnServiceUpdate) },
		DeleteFunc: func(o any) { withObj(o, p.OnServiceDelete) },
	})
	sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, p.OnEndpointSliceUpdate) },
		UpdateFunc: func(_, o any) { withObj(o, p.OnEndpointSliceUpdate) },
		DeleteFunc: func(o any) { withObj(o, p.OnEndpointSliceDelete) },
	})
	nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, func(n *corev1.Node) { nodeAddress(n, nc.NodeName, p) }) },
		UpdateFunc: func(_, o any) { withObj(o, func(n *corev1.Node) { nodeAddress(n, nc.NodeName, p) }) },
		DeleteFunc: func(o any) {
			withObj(o, func(n *corev1.Node) {
				if n.Name == nc.NodeName {
					p.SetNode(nil)
				}
			})
		},
	})
	factory.Start(ctx.Done())

	srv := serveProxyHTTP(wg, log, "proxy debug endpoint", proxyDebugAddr, proxyDebugHandler(p, mode))
	healthz := serveProxyHTTP(wg, log, "proxy healthz", proxyHealthzAddr, p.HealthzHandler())

	wg.Add(1)
	go func() {
		defer wg.Done()
		defer srv.Close()
		defer healthz.Close()
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
				p.SetInitialized()
			}
		}()
		p.Run(ctx)
		factory.Shutdown()
		if closeBackend != nil {
			closeBackend()
		}
	}()
	return nil
}

// serveProxyHTTP serves h on addr until the returned server is closed; a
// port it cannot listen on is logged, not fatal, as the proxy works without.
func serveProxyHTTP(wg *sync.WaitGroup, log *slog.Logger, what, addr string, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn(what+" not available", "addr", addr, "err", err)
		return srv
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what, "err", err)
		}
	}()
	return srv
}

// metricsWriter is a proxier with metrics of its own (the nftables mode's
// sync durations), served after the process metrics on /metrics.
type metricsWriter interface{ WriteMetrics(io.Writer) }

// proxyDebugHandler is the proxier's handler with kube-proxy's metrics-port
// paths: /proxyMode (the mode's name, as kube-proxy's metrics server
// answers) and /metrics: the process metrics, then the proxier's own when it
// has them.
func proxyDebugHandler(p serviceProxy, mode ProxyMode) http.Handler {
	process := withProcessMetrics(p.Handler())
	mux := http.NewServeMux()
	mux.Handle("/", process)
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		io.WriteString(w, string(mode))
	})
	mw, ok := p.(metricsWriter)
	if !ok {
		return mux
	}
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		rec := &bufferedResponse{header: http.Header{}}
		process.ServeHTTP(rec, r)
		w.Header().Set("Content-Type", rec.header.Get("Content-Type"))
		w.Write(rec.body.Bytes())
		mw.WriteMetrics(w)
	})
	return mux
}

// bufferedResponse keeps what a handler writes, to append to it.
type bufferedResponse struct {
	header http.Header
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedResponse) WriteHeader(int)             {}

// withObj calls f with o, unwrapping informer tombstones.
func withObj[T any](o any, f func(T)) {
	if v, ok := informer.As[T](o); ok {
		f(v)
	}
}

// nodeAddress gives the proxy this node and its first InternalIP of each
// family (a proxier takes the address of its own family).
func nodeAddress(n *corev1.Node, self string, p serviceProxy) {
	if n.Name != self {
		return
	}
	p.SetNode(n)
	seen := map[bool]bool{}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || seen[ip.Is4()] {
			continue
		}
		seen[ip.Is4()] = true
		p.SetNodeIP(ip)
	}
}

// newIPTablesProxy is the iptables mode's proxier: kube-proxy's one per IP
// family of the node. A node with an IPv6 InternalIP beside its IPv4 one
// (dual-stack) and ip6tables (ipt6, nil when there is none) runs a second
// proxier writing ip6tables, joined with the first by a MetaProxier; each
// proxier's health check node ports then listen on its own family only, and
// each tells pod traffic from off-cluster traffic by the pod range of its
// family (kube-proxy's --cluster-cidr with one range per family): cidr6 for
// the IPv6 one. Without an IPv6 pod range the IPv6 proxier runs without a
// local-traffic detector, as kube-proxy does without --cluster-cidr:
// off-cluster traffic to an IPv6 ClusterIP is then not masqueraded.
func newIPTablesProxy(cfg kubeproxy.Config, ipt, ipt6 iptables.Interface, ip6 netip.Addr, cidr6 netip.Prefix, log *slog.Logger) (serviceProxy, error) {
	if ipt6 == nil || !isIPv6(ip6) {
		return kubeproxy.New(cfg, ipt)
	}
	cfg.HealthCheckListen = listenFamily("tcp4")
	p4, err := kubeproxy.New(cfg, ipt)
	if err != nil {
		return nil, err
	}
	cfg6 := ipv6Config(cfg, ip6, cidr6)
	p6, err := kubeproxy.New(cfg6, ipt6)
	if err != nil {
		return nil, err
	}
	log.Info("service proxy in iptables mode, dual-stack", "nodeIPv6", ip6, "clusterCIDRv6", cfg6.ClusterCIDR)
	return kubeproxy.NewMetaProxier(p4, p6)
}

// ipv6Config is the IPv6 proxier's configuration on a dual-stack node, in
// either mode, from the IPv4 one's: its family, the node's IPv6 address, the
// IPv6 pod range when there is one (its local-traffic detector), no
// route_localnet (IPv6 has none), and health check node ports on IPv6 only.
func ipv6Config(cfg kubeproxy.Config, ip6 netip.Addr, cidr6 netip.Prefix) kubeproxy.Config {
	cfg.Family, cfg.NodeIP, cfg.ClusterCIDR = corev1.IPv6Protocol, ip6, netip.Prefix{}
	if isIPv6(cidr6.Addr()) {
		cfg.ClusterCIDR = cidr6
	}
	cfg.RouteLocalnet = nil
	cfg.HealthCheckListen = listenFamily("tcp6")
	return cfg
}

// isIPv6 reports whether a is an IPv6 address proper (not IPv4-mapped).
func isIPv6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

// newNFTProxy is the nftables mode's proxier, one per IP family of the node
// as in iptables mode (newIPTablesProxy): on a dual-stack node a second
// proxier writes `ip6 kube-proxy` through a backend of its own (returned,
// for closing), telling pod traffic by cidr6 as newIPTablesProxy's does, and
// a MetaProxier joins the two.
func newNFTProxy(cfg kubeproxy.NFTConfig, backend nft.Interface, ip6 netip.Addr, cidr6 netip.Prefix, log *slog.Logger) (serviceProxy, nft.Interface, error) {
	var backend6 nft.Interface
	if isIPv6(ip6) {
		var err error
		if backend6, _, err = newNFTBackend(nft.IPv6Family); err != nil {
			log.Warn("no ip6 nftables: IPv6 services will not work on this node", "err", err)
		}
	}
	if backend6 == nil {
		p, err := kubeproxy.NewNFT(cfg, backend)
		return p, nil, err
	}
	cfg.HealthCheckListen = listenFamily("tcp4")
	p4, err := kubeproxy.NewNFT(cfg, backend)
	if err != nil {
		return nil, backend6, err
	}
	cfg6 := cfg
	cfg6.Config = ipv6Config(cfg.Config, ip6, cidr6)
	p6, err := kubeproxy.NewNFT(cfg6, backend6)
	if err != nil {
		return nil, backend6, err
	}
	log.Info("service proxy in nftables mode, dual-stack", "nodeIPv6", ip6, "clusterCIDRv6", cfg6.ClusterCIDR)
	m, err := kubeproxy.NewNFTMetaProxier(p4, p6)
	return m, backend6, err
}

// listenFamily opens health check node ports on every address of one family.
func listenFamily(network string) func(port int) (net.Listener, error) {
	return func(port int) (net.Listener, error) { return net.Listen(network, ":"+strconv.Itoa(port)) }
}

// cleanupProxyIPv6 removes the iptables mode's IPv6 rules (a dual-stack
// node's ip6tables chains), for minikit down and a switch to nftables mode.
func cleanupProxyIPv6() error {
	ipt6, err := iptables.NewIPv6()
	if err != nil {
		return nil // no ip6tables: nothing of ours in it
	}
	return kubeproxy.Cleanup(ipt6)
}

// removeNFTTable removes the nftables mode's tables (ip, and the ip6 one
// of a dual-stack node), for minikit down.
func removeNFTTable(log *slog.Logger) error {
	var errs []error
	for _, fam := range []nft.Family{nft.IPv4Family, nft.IPv6Family} {
		backend, _, err := newNFTBackend(fam)
		if err != nil {
			log.Debug("no nftables; no table to remove", "family", fam, "err", err)
			return nil
		}
		errs = append(errs, kubeproxy.CleanupNFT(context.Background(), backend))
		closeNFT(backend)
	}
	return errors.Join(errs...)
}

// closeNFT closes a backend's sockets.
func closeNFT(b nft.Interface) {
	if c, ok := b.(io.Closer); ok {
		c.Close()
	}
}

// nftBackend is the Netlink backend (one nf_tables batch per transaction, no
// nft process), with `nft list table` for the debug endpoint's /rules when
// the nft binary is installed.
type nftBackend struct {
	*nft.Netlink
	exec *nft.Exec
}

func (b *nftBackend) List(ctx context.Context) (string, error) {
	if b.exec == nil {
		return "", errors.New("listing the table needs the nft binary, which is not installed")
	}
	return b.exec.List(ctx)
}

// newNFTBackend opens the nftables backend of the proxy's table of family
// fam in this network namespace.
func newNFTBackend(fam nft.Family) (nft.Interface, string, error) {
	nl, err := nft.NewNetlink(fam, kubeproxy.NFTTableName)
	if err != nil {
		return nil, "", err
	}
	b := &nftBackend{Netlink: nl}
	if ex, err := nft.NewExec(fam, kubeproxy.NFTTableName); err == nil {
		b.exec = ex
	}
	return b, "netlink", nil
}
