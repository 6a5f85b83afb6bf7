package dns

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Config configures a cluster DNS server. The zero value serves cluster.local
// with CoreDNS's defaults and forwards nowhere.
type Config struct {
	// Zone is the cluster domain, default "cluster.local".
	Zone string
	// TTL of cluster records, default 5 (CoreDNS's default; kubeadm uses 30).
	TTL uint32
	// ServiceCIDR and ClusterCIDR give the default reverse zones, in which the
	// server is authoritative (unknown addresses are NXDOMAIN). Other
	// in-addr.arpa/ip6.arpa names are answered when they are a ClusterIP or an
	// endpoint, and forwarded otherwise (kubeadm's "fallthrough in-addr.arpa").
	ServiceCIDR, ClusterCIDR netip.Prefix
	// ReverseZones replaces the zones derived from the CIDRs.
	ReverseZones []string
	// Pods is the pod-record mode: PodsDisabled (default), PodsInsecure or PodsVerified.
	Pods string
	// Namespaces limits the exposed namespaces (empty: all).
	Namespaces []string
	// IgnoreEmptyService answers NXDOMAIN for ClusterIP services without
	// ready endpoints (CoreDNS "ignore empty_service").
	IgnoreEmptyService bool
	// Fallthrough lists zones whose NXDOMAIN answers go upstream instead.
	Fallthrough []string
	// Upstreams get every name outside the zones. Empty: such names get
	// SERVFAIL. Use Upstreams() to derive them from a resolv.conf.
	Upstreams []netip.AddrPort
	// UpstreamTimeout per upstream attempt, default 2s.
	UpstreamTimeout time.Duration
	// CacheSize is the number of upstream answers cached (default 2048; <0 disables).
	CacheSize int
	// CacheMaxTTL caps how long an upstream answer is cached, default 30s.
	CacheMaxTTL time.Duration
	// NSAddrs are the glue of the apex NS record when kube-system/kube-dns
	// does not exist (normally the listen address).
	NSAddrs []netip.Addr
	// Autopath answers a query for the first search expansion of a pod's
	// search path (<name>.<its ns>.svc.<zone>) that would be NXDOMAIN with
	// the first search expansion that exists, as a CNAME from the asked name
	// (CoreDNS "autopath @kubernetes"): one round trip instead of up to six
	// for names outside the namespace. It watches Pods to know the client's
	// namespace from its address, which works only when queries reach us
	// unmasqueraded (the proxy DNATs the kube-dns VIP without SNAT).
	Autopath bool
	// HostSearch are the node's search domains, which follow the cluster's
	// in a ClusterFirst pod's search path (for autopath).
	HostSearch []string
	// Debounce is how long changes are gathered before a rebuild, default 20ms.
	Debounce time.Duration
	// NoMemo turns off the per-snapshot memo of packed authoritative replies
	// (for measuring the uncached path).
	NoMemo bool
	// Before, when set, sees every well-formed query before the answering
	// rules: a Corefile's rewrite, hosts and stub-domain server blocks (the
	// coredns image). It returns a reply, which is sent as is (never
	// memoised), or nil to let the server answer; it may rewrite req's
	// question, and then returns after, which the server applies to its
	// reply (rewriting names back). It must give the same result for the
	// same query while the server runs: a changed Corefile makes a new server.
	Before func(ctx context.Context, req *dns.Msg, client netip.Addr) (reply *dns.Msg, after func(*dns.Msg))
	Logger *slog.Logger
}

// Server is a cluster DNS server. Create it with New, then Serve.
type Server struct {
	cfg    Config
	log    *slog.Logger
	src    Source
	ans    *answerer
	fwd    *forwarder
	cur    atomic.Pointer[state]
	kick   chan struct{}
	synced chan struct{}
	// slow bounds the UDP requests being answered off the reader goroutines
	// (memo misses, forwarding): a flood of random names must not pile up
	// goroutines waiting for an upstream.
	slow chan struct{}
	once sync.Once
}

// state is one snapshot and the memo of replies computed from it.
type state struct {
	snap *snapshot
	memo *memo
}

// Validate checks the options a user can get wrong.
func (c Config) Validate() error {
	if c.TTL > 3600 {
		return fmt.Errorf("dns: ttl %d is above 3600", c.TTL)
	}
	switch c.Pods {
	case "", PodsDisabled, PodsInsecure, PodsVerified:
	default:
		return fmt.Errorf("dns: pods mode %q is not one of disabled, insecure, verified", c.Pods)
	}
	if c.Zone != "" {
		if _, ok := dns.IsDomainName(dns.Fqdn(c.Zone)); !ok {
			return fmt.Errorf("dns: zone %q is not a domain name", c.Zone)
		}
	}
	return nil
}

// New returns a server answering from src.
func New(cfg Config, src Source) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "dns"), src: src,
		kick: make(chan struct{}, 1), synced: make(chan struct{}), slow: make(chan struct{}, maxSlowRequests)}
	s.fwd = newForwarder(cfg.Upstreams, cfg.UpstreamTimeout, cfg.CacheSize, cfg.CacheMaxTTL)
	s.ans = newAnswerer(cfg, s.fwd.lookup)
	s.cur.Store(&state{snap: buildSnapshot(Objects{}, false, time.Now(), false), memo: newMemo()})
	return s, nil
}

// withDefaults fills in the defaults documented on Config.
func (c Config) withDefaults() Config {
	if c.Zone == "" {
		c.Zone = "cluster.local"
	}
	if c.TTL == 0 {
		c.TTL = 5
	}
	if c.Pods == "" {
		c.Pods = PodsDisabled
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = 2 * time.Second
	}
	if c.CacheSize == 0 {
		c.CacheSize = 2048
	}
	if c.CacheMaxTTL == 0 {
		c.CacheMaxTTL = 30 * time.Second
	}
	if c.Debounce == 0 {
		c.Debounce = 20 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Synced is closed once the server answers from a complete first list of the
// cluster (before that, would-be NXDOMAIN answers are SERVFAIL).
func (s *Server) Synced() <-chan struct{} { return s.synced }

// Run keeps the zone in step with the source until ctx ends: every change
// notification leads, after Debounce, to a full rebuild.
func (s *Server) Run(ctx context.Context) {
	go s.src.Run(ctx, func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		t := time.NewTimer(s.cfg.Debounce)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.rebuild()
	}
}

// watchesPods says whether the source must list Pods: in verified pod mode
// and for autopath.
func (s *Server) watchesPods() bool { return s.cfg.Pods == PodsVerified || s.cfg.Autopath }

func (s *Server) rebuild() {
	start := time.Now()
	synced := s.src.Synced()
	o := s.src.Objects()
	snap := buildSnapshot(o, synced, start, s.watchesPods())
	s.cur.Store(&state{snap: snap, memo: newMemo()})
	s.log.Debug("zone rebuilt", "services", len(snap.services), "slices", len(o.EndpointSlices),
		"namespaces", len(snap.namespaces), "synced", synced, "duration", time.Since(start))
	if synced {
		s.once.Do(func() {
			s.log.Info("zone synced", "services", len(snap.services), "zone", s.ans.zone)
			close(s.synced)
		})
	}
}
