package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/dns"
	"github.com/minikit/minikit/internal/dns/kubedns"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DNSConfig configures the cluster DNS server every node runs (flags of
// `minikit server` and `minikit agent`).
type DNSConfig struct {
	// Disabled turns the node's DNS server off.
	Disabled bool
	// Upstream lists the resolvers names outside the cluster go to, as "IP"
	// or "IP:port" (--dns-upstream). Empty: the nameservers of the node's
	// /etc/resolv.conf, without loopback ones and without our own addresses.
	Upstream []string
	// Zone is the cluster domain, default cluster.local.
	Zone string
	// Pods is the pod-record mode: disabled (default), insecure or verified.
	Pods string
	// TTL of cluster records, default 5.
	TTL uint32
	// ResolvConf is the node's resolv.conf, default /etc/resolv.conf.
	ResolvConf string
	// Autopath walks pods' search paths server-side (CoreDNS "autopath
	// @kubernetes"); it watches Pods.
	Autopath bool
}

// ClusterDNSIP is the kube-dns ClusterIP in a service CIDR: its tenth
// address, as the API server assigns it to kube-system/kube-dns.
func ClusterDNSIP(serviceCIDR netip.Prefix) netip.Addr {
	a := serviceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// startDNS runs the node's cluster DNS server: it waits for the node's
// podCIDR, listens on the cni0 address (the first host of the podCIDR) on
// port 53, UDP and TCP, answers from the API, and registers the listener as
// an endpoint of kube-system/kube-dns. Failures are retried until ctx ends;
// they never stop the node.
func startDNS(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	opts := nc.DNS
	if opts.Disabled {
		return nil
	}
	log := nc.Logger.With("component", "dns", "node", nc.NodeName)
	if err := (dns.Config{Zone: opts.Zone, TTL: opts.TTL, Pods: opts.Pods}).Validate(); err != nil {
		return err
	}
	upstreams, err := dnsUpstreams(opts)
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := runDNS(ctx, nc, opts, upstreams); err != nil && ctx.Err() == nil {
			log.Error("cluster DNS stopped", "err", err)
		}
	}()
	return nil
}

func dnsUpstreams(opts DNSConfig) ([]netip.AddrPort, error) {
	var ups []netip.AddrPort
	for _, s := range opts.Upstream {
		ap, err := dns.ParseUpstream(s)
		if err != nil {
			return nil, fmt.Errorf("--dns-upstream: %w", err)
		}
		ups = append(ups, ap)
	}
	return ups, nil
}

func runDNS(ctx context.Context, nc nodeContext, opts DNSConfig, upstreams []netip.AddrPort) error {
	log := nc.Logger.With("component", "dns", "node", nc.NodeName)
	cidr, err := waitNodePodCIDR(ctx, nc)
	if err != nil {
		return err
	}
	addr := cidr.Masked().Addr().Next()
	clusterDNS := ClusterDNSIP(nc.ServiceCIDR)
	if len(upstreams) == 0 {
		upstreams = resolvUpstreams(resolvPath(opts), addr, clusterDNS, nc.NodeIP)
	}
	if len(upstreams) == 0 {
		log.Warn("no upstream resolver: names outside the cluster will get SERVFAIL (set --dns-upstream)")
	}
	var l *dns.Listeners
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		if l, err = dns.Listen(netip.AddrPortFrom(addr, 53)); err == nil {
			break
		}
		log.Warn("listening", "err", err)
		if !sleepCtx(ctx, backoff) {
			return ctx.Err()
		}
	}
	cfg := dns.Config{Zone: opts.Zone, TTL: opts.TTL, Pods: opts.Pods, Autopath: opts.Autopath,
		ServiceCIDR: nc.ServiceCIDR, ClusterCIDR: nc.ClusterCIDR,
		Upstreams: upstreams, NSAddrs: []netip.Addr{addr}, Logger: nc.Logger.With("node", nc.NodeName)}
	if opts.Autopath {
		b, _ := os.ReadFile(resolvPath(opts))
		cfg.HostSearch = dns.SearchDomains(b)
	}
	srv, err := dns.New(cfg, dns.NewInformerSource(nc.Client.CoreV1().RESTClient(), nc.Client.DiscoveryV1().RESTClient(),
		opts.Pods == dns.PodsVerified || opts.Autopath))
	if err != nil {
		l.Close()
		return err
	}
	log.Info("cluster DNS listening", "address", l.Addr, "upstreams", upstreams)
	ready := make(chan struct{})
	regDone := make(chan struct{})
	// Serving outlives ctx by the lame-duck period: when the node stops, its
	// listener is withdrawn from kube-dns first, and queries the proxies still
	// send here meanwhile get answers instead of "port unreachable" (CoreDNS's
	// "health { lameduck 5s }").
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() {
		defer wg.Done()
		defer close(regDone)
		reg := &kubedns.Registrar{Client: nc.Client, NodeName: nc.NodeName, Addr: addr, Logger: nc.Logger}
		reg.Run(ctx, ready)
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		<-regDone
		t := time.NewTimer(dnsLameDuck)
		defer t.Stop()
		select {
		case <-t.C:
		case <-serveCtx.Done():
		}
		stopServing()
	}()
	go func() {
		// Publish the endpoint once the zone is synced and cni0 holds the
		// address (IP_FREEBIND let us bind before the agent made the bridge).
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-srv.Synced():
		}
		for !hasAddr(addr) {
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return
			}
		}
		close(ready)
	}()
	err = srv.Serve(serveCtx, l)
	stopServing()
	wg.Wait()
	return err
}

// dnsLameDuck is how long a stopping node keeps answering after withdrawing
// its listener: long enough for the proxies to see the change and move the
// kube-dns VIP.
const dnsLameDuck = 2 * time.Second

func resolvPath(opts DNSConfig) string {
	if opts.ResolvConf != "" {
		return opts.ResolvConf
	}
	return "/etc/resolv.conf"
}

// waitNodePodCIDR waits until the node IPAM controller gave this node a podCIDR.
func waitNodePodCIDR(ctx context.Context, nc nodeContext) (netip.Prefix, error) {
	for {
		n, err := nc.Client.CoreV1().Nodes().Get(ctx, nc.NodeName, metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil {
				return netip.Prefix{}, fmt.Errorf("parsing podCIDR %q of node %q: %w", n.Spec.PodCIDR, nc.NodeName, err)
			}
			return p, nil
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return netip.Prefix{}, ctx.Err()
		}
	}
}

// resolvUpstreams reads the node's resolvers. When the only ones are on
// loopback (systemd-resolved's stub 127.0.0.53), it uses the real upstreams
// behind the stub, as the kubelet's resolvConf hint says.
func resolvUpstreams(path string, exclude ...netip.Addr) []netip.AddrPort {
	for _, p := range []string{path, "/run/systemd/resolve/resolv.conf"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if ups := dns.Upstreams(b, exclude...); len(ups) > 0 {
			return ups
		}
	}
	return nil
}

func hasAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
