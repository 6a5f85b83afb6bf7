package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/dns"
	"github.com/minikit/minikit/internal/images"
)

// DNSConfig configures the cluster DNS (flags of `minikit server` and
// `minikit agent`). On a server it renders the coredns ConfigMap's Corefile
// when the server installs the add-on (Corefile); on every node, Zone and
// Disabled say how the kubelet writes pods' resolv.conf.
type DNSConfig struct {
	// Disabled: a server installs no coredns add-on, and the node's pods do
	// not get the cluster DNS in their resolv.conf.
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
	// ResolvConf is the node's resolv.conf, default /etc/resolv.conf (the
	// kubelet's --resolv-conf: dnsPolicy Default pods, the coredns pods among
	// them, get its nameservers).
	ResolvConf string
	// Autopath adds "autopath @kubernetes" to the Corefile.
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

// kubeletResolvConf is the resolv.conf dnsPolicy Default pods (the coredns
// pods among them) get: DNSConfig.ResolvConf, else /etc/resolv.conf unless it names
// only loopback resolvers (systemd-resolved's stub 127.0.0.53, unreachable
// from a pod), where kubeadm points the kubelet at the real upstreams behind
// the stub, /run/systemd/resolve/resolv.conf.
func kubeletResolvConf(flag string) string {
	if flag != "" {
		return flag
	}
	const etc, systemd = "/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"
	b, err := os.ReadFile(etc)
	if err != nil || len(dns.Upstreams(b)) > 0 {
		return etc
	}
	if b, err := os.ReadFile(systemd); err == nil && len(dns.Upstreams(b)) > 0 {
		return systemd
	}
	return etc
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

// ServeClusterDNS is the coredns image's kubernetes plugin (images.ClusterDNS):
// the dns package's server, watching the API with the pod's credentials,
// listening on the pod's port, with the rest of the Corefile's chain as its
// Before hook.
func ServeClusterDNS(log *slog.Logger) images.ClusterDNS {
	return func(ctx context.Context, s images.ClusterDNSServer) error {
		p := s.Plugin
		zone := "cluster.local"
		var reverse []string
		for _, z := range p.Zones {
			z = strings.TrimSuffix(z, ".")
			switch {
			case z == "in-addr.arpa" || z == "ip6.arpa":
				// kubeadm's default: authoritative for the cluster's own
				// addresses, the rest forwarded (Config.ReverseZones empty).
			case strings.HasSuffix(z, ".in-addr.arpa") || strings.HasSuffix(z, ".ip6.arpa"):
				reverse = append(reverse, z)
			default:
				zone = z
			}
		}
		cfg := dns.Config{Zone: zone, TTL: p.TTL, Pods: p.Pods, Namespaces: p.Namespaces, IgnoreEmptyService: p.IgnoreEmptyService,
			ReverseZones: reverse, Upstreams: s.Upstreams, Autopath: s.Autopath, HostSearch: s.HostSearch,
			NoMemo: s.NoMemo, Before: s.Before, Logger: log}
		for _, f := range p.Fallthrough {
			cfg.Fallthrough = append(cfg.Fallthrough, strings.TrimSuffix(f, "."))
		}
		if s.CacheMaxTTL > 0 {
			cfg.CacheMaxTTL = s.CacheMaxTTL
		} else {
			cfg.CacheSize = -1
		}
		core, disc, err := dns.RESTClients(s.REST)
		if err != nil {
			return err
		}
		srv, err := dns.New(cfg, dns.NewInformerSource(core, disc, p.Pods == dns.PodsVerified || s.Autopath))
		if err != nil {
			return err
		}
		var l *dns.Listeners
		if s.Host == "" {
			// Both families where the pod has IPv6, else IPv4 only.
			if l, err = dns.Listen(netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(s.Port))); err != nil {
				l, err = dns.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(s.Port)))
			}
		} else if a, perr := netip.ParseAddr(s.Host); perr == nil {
			l, err = dns.Listen(netip.AddrPortFrom(a, uint16(s.Port)))
		} else {
			return fmt.Errorf("listen host %q: %w", s.Host, perr)
		}
		if err != nil {
			return err
		}
		if s.OnListen != nil {
			s.OnListen("udp", l.UDP[0].LocalAddr())
			s.OnListen("tcp", l.TCP.Addr())
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		go srv.Run(runCtx)
		go func() {
			select {
			case <-srv.Synced():
				if s.Synced != nil {
					s.Synced()
				}
			case <-runCtx.Done():
			}
		}()
		return srv.Serve(ctx, l)
	}
}
