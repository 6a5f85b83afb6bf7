package kubeproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// MetaProxier is kube-proxy's dual-stack metaproxier (pkg/proxy/metaproxier):
// a dual-stack node runs one proxier per IP family, each with its own sync
// loop (in iptables mode the IPv4 one writing iptables and the IPv6 one
// ip6tables; in nftables mode `ip kube-proxy` and `ip6 kube-proxy`), and
// MetaProxier hands them the objects: every Service to both (each takes its
// own family's ClusterIP), each EndpointSlice to the proxier of its
// addressType, each node address to the proxier of its family.
type MetaProxier struct {
	ipv4, ipv6 familyProxier
}

// familyProxier is one IP family's proxier, of either mode.
type familyProxier interface {
	Run(ctx context.Context)
	SetInitialized()
	OnServiceUpdate(*corev1.Service)
	OnServiceDelete(*corev1.Service)
	OnEndpointSliceUpdate(*discovery.EndpointSlice)
	OnEndpointSliceDelete(*discovery.EndpointSlice)
	SetNodeIP(netip.Addr)
	SetNode(*corev1.Node)
	Handler() http.Handler
	Stats() Stats
	// tracker is the proxier's change tracker and its sync period, for
	// the joint health check.
	tracker() (*changes, time.Duration)
}

func (p *Proxier) tracker() (*changes, time.Duration)    { return &p.changes, p.cfg.SyncPeriod }
func (p *NFTProxier) tracker() (*changes, time.Duration) { return &p.changes, p.cfg.SyncPeriod }

// NewMetaProxier joins the two iptables-mode proxiers of a dual-stack node.
func NewMetaProxier(ipv4, ipv6 *Proxier) (*MetaProxier, error) {
	if ipv4 == nil || ipv6 == nil {
		return nil, errors.New("proxy: a dual-stack proxier needs an IPv4 and an IPv6 proxier")
	}
	return newMetaProxier(ipv4, ipv6)
}

func newMetaProxier(ipv4, ipv6 familyProxier) (*MetaProxier, error) {
	c4, _ := ipv4.tracker()
	c6, _ := ipv6.tracker()
	if c4.ipv6 || !c6.ipv6 {
		return nil, errors.New("proxy: a dual-stack proxier needs an IPv4 and an IPv6 proxier")
	}
	return &MetaProxier{ipv4: ipv4, ipv6: ipv6}, nil
}

// NFTMetaProxier is MetaProxier over the two nftables-mode proxiers of a
// dual-stack node, with their sync metrics.
type NFTMetaProxier struct {
	*MetaProxier
	nft4, nft6 *NFTProxier
}

// NewNFTMetaProxier joins the two nftables-mode proxiers of a dual-stack
// node.
func NewNFTMetaProxier(ipv4, ipv6 *NFTProxier) (*NFTMetaProxier, error) {
	if ipv4 == nil || ipv6 == nil {
		return nil, errors.New("proxy: a dual-stack proxier needs an IPv4 and an IPv6 proxier")
	}
	m, err := newMetaProxier(ipv4, ipv6)
	if err != nil {
		return nil, err
	}
	return &NFTMetaProxier{MetaProxier: m, nft4: ipv4, nft6: ipv6}, nil
}

// WriteMetrics writes the sync metrics of both families' syncs, as
// kube-proxy's two proxiers observe into the same histograms.
func (m *NFTMetaProxier) WriteMetrics(w io.Writer) {
	writeMergedNFTMetrics(w, m.nft4, m.nft6)
}

// Run runs both proxiers until ctx ends.
func (m *MetaProxier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.ipv6.Run(ctx)
	}()
	m.ipv4.Run(ctx)
	wg.Wait()
}

// SetInitialized tells both proxiers that the informers have synced.
func (m *MetaProxier) SetInitialized() {
	m.ipv4.SetInitialized()
	m.ipv6.SetInitialized()
}

// OnServiceUpdate gives a Service to both proxiers; each takes its own
// family's ClusterIPs.
func (m *MetaProxier) OnServiceUpdate(svc *corev1.Service) {
	m.ipv4.OnServiceUpdate(svc)
	m.ipv6.OnServiceUpdate(svc)
}

// OnServiceDelete removes a Service from both proxiers.
func (m *MetaProxier) OnServiceDelete(svc *corev1.Service) {
	m.ipv4.OnServiceDelete(svc)
	m.ipv6.OnServiceDelete(svc)
}

// forSlice is the proxier of a slice's addressType; FQDN slices are no
// proxier's (kube-proxy ignores them), the IPv4 one drops them.
func (m *MetaProxier) forSlice(s *discovery.EndpointSlice) familyProxier {
	if s.AddressType == discovery.AddressTypeIPv6 {
		return m.ipv6
	}
	return m.ipv4
}

// OnEndpointSliceUpdate gives a slice to the proxier of its addressType.
func (m *MetaProxier) OnEndpointSliceUpdate(s *discovery.EndpointSlice) {
	m.forSlice(s).OnEndpointSliceUpdate(s)
}

// OnEndpointSliceDelete removes a slice from the proxier of its addressType.
func (m *MetaProxier) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	m.forSlice(s).OnEndpointSliceDelete(s)
}

// SetNodeIP gives the node's address to the proxier of its family.
func (m *MetaProxier) SetNodeIP(ip netip.Addr) {
	if ip.Is6() && !ip.Is4In6() {
		m.ipv6.SetNodeIP(ip)
		return
	}
	m.ipv4.SetNodeIP(ip)
}

// SetNode gives the Node (health, zone for hints) to both proxiers.
func (m *MetaProxier) SetNode(n *corev1.Node) {
	m.ipv4.SetNode(n)
	m.ipv6.SetNode(n)
}

// Handler is the IPv4 proxier's debug endpoint, with the IPv6 proxier's
// /rules and /stats as /rules6 and /stats6.
func (m *MetaProxier) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", m.ipv4.Handler())
	v6 := m.ipv6.Handler()
	for _, path := range []string{"/rules", "/stats"} {
		mux.HandleFunc(path+"6", func(w http.ResponseWriter, r *http.Request) {
			r2 := r.Clone(r.Context())
			r2.URL.Path = path
			v6.ServeHTTP(w, r2)
		})
	}
	return mux
}

// HealthzHandler is kube-proxy's healthz over both families: healthy when
// both proxiers are.
func (m *MetaProxier) HealthzHandler() http.Handler {
	c4, period := m.ipv4.tracker()
	c6, _ := m.ipv6.tracker()
	return healthzHandler(2*period, c4, c6)
}

// Stats is the IPv4 proxier's statistics, with the IPv6 proxier's counts
// added and its error reported when the IPv4 one has none.
func (m *MetaProxier) Stats() Stats {
	s, s6 := m.ipv4.Stats(), m.ipv6.Stats()
	s.Syncs += s6.Syncs
	s.FullSyncs += s6.FullSyncs
	s.PartialSyncs += s6.PartialSyncs
	s.SkippedSyncs += s6.SkippedSyncs
	s.RestoreFailures += s6.RestoreFailures
	s.Services += s6.Services
	s.Endpoints += s6.Endpoints
	s.FilterRules += s6.FilterRules
	s.NATRules += s6.NATRules
	s.NATChains += s6.NATChains
	s.ConntrackPurged += s6.ConntrackPurged
	if s.LastError == "" {
		s.LastError = s6.LastError
	}
	if s6.LastSync.IsZero() {
		s.LastSync = s6.LastSync // not synced until both have
	}
	return s
}
