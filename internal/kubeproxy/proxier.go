// Package kubeproxy is minikit's service proxy: kube-proxy's iptables mode,
// reproduced chain for chain (names, comments, probabilities, traffic
// policies) so that `iptables-save` on a minikit node shows what the
// Kubernetes documentation and kube-proxy show. It owns every KUBE-* chain in
// the nat, filter and mangle tables and the jump rules from built-in chains
// into them, and nothing else: other programs' chains and rules, and the node
// agent's MINIKIT-* chains, are left as they are.
//
// Services and EndpointSlices arrive as events (the wiring runs the
// informers); each event marks its service dirty and asks the bounded-frequency
// runner for a sync. A sync re-renders only the dirty services and applies the
// result with one iptables-restore: a full sync (the whole rule set) at start,
// after any failure, when the flush monitor finds our rules gone, and hourly;
// otherwise a partial sync that compares only the dirty services' chains (and
// the shared top-level chains when their part of them changed) with what the
// kernel holds and rewrites those that differ, so its cost follows the change,
// not the cluster's size. tables.go explains the restore input shape and why.
//
// A dual-stack node runs one Proxier per IP family, as kube-proxy does: the
// IPv6 one (Config.Family) writes the same chains with ip6tables-restore from
// the Services' IPv6 ClusterIPs and the IPv6 EndpointSlices, and MetaProxier
// (metaproxier.go) hands each proxier the objects of its family.
//
// Its nftables mode (--proxy-mode nftables, KEP-3866) is NFTProxier
// (nft_proxier.go, nft_render.go): kube-proxy's `ip kube-proxy` table, written
// in transactions through package nft.
//
// Locking: mu guards the objects the event handlers write (services, slices,
// dirty, needFull, nodeIP). Everything else is owned by the sync goroutine
// (the runner calls syncProxyRules from one goroutine only), except stats,
// which statsMu guards for the debug endpoint.
package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/kubeproxy/nfacct"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config configures a Proxier. Zero durations take kube-proxy's defaults.
type Config struct {
	NodeName string
	// Family is the IP family the proxier serves (kube-proxy runs one
	// proxier per family): "" or IPv4 writes iptables, IPv6 ip6tables
	// (the ipt given to New must be an IPv6 runner) from the Services'
	// IPv6 ClusterIPs and the IPv6 EndpointSlices. NodeIP and ClusterCIDR
	// are of this family.
	Family corev1.IPFamily
	NodeIP netip.Addr
	// ClusterCIDR is the pod network (kube-proxy's --cluster-cidr): traffic
	// from it is pod traffic, everything else reaching a cluster IP is
	// masqueraded.
	ClusterCIDR netip.Prefix
	// MasqueradeAll masquerades pod traffic to cluster IPs too.
	MasqueradeAll bool

	// MinSyncPeriod is the minimum time between two syncs, start to start
	// (default 1 s, burst 2).
	MinSyncPeriod time.Duration
	// SyncPeriod is how often the flush monitor looks for our rules and how
	// long a failed sync waits before its retry (default 30 s).
	SyncPeriod time.Duration
	// FullSyncPeriod is the longest time between two full syncs (default 1 h).
	FullSyncPeriod time.Duration

	Logger *slog.Logger
	Clock  Clock
	// Conntrack is the conntrack table (default: netlink in this namespace).
	Conntrack Conntrack
	// HealthCheckListen opens a health check node port (default ":PORT").
	HealthCheckListen func(port int) (net.Listener, error)
	// TCPBeLiberal is net.netfilter.nf_conntrack_tcp_be_liberal; when nil it
	// is read from /proc. When set, the INVALID drop rule is left out.
	TCPBeLiberal *bool

	// NoLocalhostNodePorts is kube-proxy's --iptables-localhost-nodeports=false:
	// NodePorts do not answer on 127.0.0.0/8. By default they do, as with
	// kube-proxy: nat KUBE-SERVICES sends 127.0.0.0/8 on to KUBE-NODEPORTS,
	// RouteLocalnet is called, and KUBE-FIREWALL drops packets to 127.0.0.0/8
	// that come from elsewhere and were not NATed (CVE-2020-8558).
	NoLocalhostNodePorts bool
	// RouteLocalnet sets net.ipv4.conf.all.route_localnet=1 in the proxy's
	// namespace (the node agent does it, recording the old value for minikit
	// down); called after every full sync while localhost NodePorts are on.
	// Without it the 127.0.0.0/8 rules are written but the kernel drops the
	// DNATed packets as martians.
	RouteLocalnet func() error
	// NFAcct holds the accounting objects kube-proxy counts with
	// (localhost_nps_accepted_pkts, ct_state_invalid_dropped_pkts); they are
	// created before every full sync, and the rules count with a counter only
	// while it exists, as kube-proxy's do. nil: no counters.
	NFAcct nfacct.Interface
}

// Proxier programs kube-proxy's rules for the services it is told about.
type Proxier struct {
	cfg    Config
	ipt    iptables.Interface
	ct     Conntrack
	log    *slog.Logger
	clock  Clock
	health *healthServers
	changes

	randomFully  bool
	tcpBeLiberal bool
	acct         nfacct.Interface
	metrics      *syncMetrics

	// Owned by the sync goroutine.
	rendered     map[types.NamespacedName][]*serviceRules
	largeCluster bool
	written      map[string]string // "table/chain" -> rules, what the kernel holds
	kernel       kernelCounts      // sizes of what written describes
	totals       renderTotals      // sizes of what rendered holds
	// healthChecked are the services with a healthCheckNodePort.
	healthChecked map[types.NamespacedName]bool
	// fixed and countLocalhost are decided at each full sync (counters
	// available or not) and hold until the next.
	fixed          fixedOptions
	countLocalhost bool
	acctErr        map[string]string // the last error per counter, logged once
	lastFull       time.Time
	udp            udpFrontends // UDP ports at the last conntrack cleanup

	statsMu sync.Mutex
	stats   Stats

	// syncMu serializes syncs with Rules, which may rebuild lastSet from
	// rendered.
	syncMu  sync.Mutex
	synced  bool     // a sync has succeeded
	lastSet *ruleSet // the rule set of the last full sync; nil after a partial one
}

// Stats describes the proxy's syncs, for the debug endpoint.
type Stats struct {
	Syncs           int           `json:"syncs"`
	FullSyncs       int           `json:"fullSyncs"`
	PartialSyncs    int           `json:"partialSyncs"`
	SkippedSyncs    int           `json:"skippedSyncs"` // nothing had changed
	RestoreFailures int           `json:"restoreFailures"`
	LastSync        time.Time     `json:"lastSync"`
	LastFull        bool          `json:"lastFull"`
	LastDuration    time.Duration `json:"lastDurationNs"`
	LastError       string        `json:"lastError,omitempty"`
	Services        int           `json:"servicePorts"`
	Endpoints       int           `json:"endpoints"`
	FilterRules     int           `json:"filterRules"`
	NATRules        int           `json:"natRules"`
	NATChains       int           `json:"natChains"`
	// WrittenChains and WrittenBytes are the size of the last restore input.
	WrittenChains   int    `json:"lastRestoreChains"`
	WrittenBytes    int    `json:"lastRestoreBytes"`
	ConntrackPurged int    `json:"conntrackFlowsDeleted"`
	Backend         string `json:"backend"`
}

// record counts one sync that wrote chains chains (or failed with err).
func (s *Stats) record(start time.Time, full bool, took time.Duration, chains int, err error) {
	s.Syncs++
	s.LastSync, s.LastFull, s.LastDuration = start, full, took
	if err != nil {
		s.RestoreFailures++
		s.LastError = err.Error()
		return
	}
	s.LastError = ""
	switch {
	case full:
		s.FullSyncs++
	case chains == 0:
		s.SkippedSyncs++
	default:
		s.PartialSyncs++
	}
	s.WrittenChains = chains
}

// defaults fills in what a Config leaves zero.
func (c *Config) defaults() {
	if c.MinSyncPeriod == 0 {
		c.MinSyncPeriod = time.Second
	}
	if c.SyncPeriod == 0 {
		c.SyncPeriod = 30 * time.Second
	}
	if c.FullSyncPeriod == 0 {
		c.FullSyncPeriod = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Conntrack == nil {
		c.Conntrack = netlinkConntrack{ipv6: c.Family == corev1.IPv6Protocol}
	}
}

// New returns a Proxier that writes through ipt. Call Run to start it.
func New(cfg Config, ipt iptables.Interface) (*Proxier, error) {
	if ipt == nil {
		return nil, errors.New("proxy: no iptables")
	}
	ipv6 := cfg.Family == corev1.IPv6Protocol
	if cfg.Family != "" && cfg.Family != corev1.IPv4Protocol && !ipv6 {
		return nil, fmt.Errorf("proxy: unknown IP family %q", cfg.Family)
	}
	cfg.defaults()
	log := cfg.Logger.With("component", "proxy")
	p := &Proxier{
		cfg: cfg, ipt: ipt, ct: cfg.Conntrack, log: log, clock: cfg.Clock,
		health:        newHealthServers(cfg.HealthCheckListen, log),
		randomFully:   ipt.HasRandomFully(),
		changes:       newChanges(cfg.NodeIP, cfg.Clock),
		rendered:      map[types.NamespacedName][]*serviceRules{},
		written:       map[string]string{},
		healthChecked: map[types.NamespacedName]bool{},
		udp:           newUDPFrontends(),
	}
	if cfg.TCPBeLiberal != nil {
		p.tcpBeLiberal = *cfg.TCPBeLiberal
	} else if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"); err == nil {
		p.tcpBeLiberal = strings.TrimSpace(string(b)) != "0"
	}
	p.changes.ipv6 = ipv6
	p.stats.Backend = string(ipt.Backend())
	p.acct = cfg.NFAcct
	p.metrics = newSyncMetrics()
	p.acctErr = map[string]string{}
	p.fixed = p.fixedOptions()
	p.runner = newBoundedRunner(p.syncProxyRules, cfg.MinSyncPeriod, cfg.FullSyncPeriod, cfg.SyncPeriod, 2, cfg.Clock)
	return p, nil
}

// Run syncs until ctx ends. Nothing is written before SetInitialized.
func (p *Proxier) Run(ctx context.Context) { runProxier(ctx, p.runner, p.monitor, p.health) }

// fixedOptions are the fixed chains' settings known at start; localhost
// NodePorts are IPv4's only.
func (p *Proxier) fixedOptions() fixedOptions {
	return fixedOptions{randomFully: p.randomFully, tcpBeLiberal: p.tcpBeLiberal,
		localhostNodePorts: !p.cfg.NoLocalhostNodePorts && !p.ipv6, ipv6: p.ipv6}
}

// prepareFull runs before a full sync, as kube-proxy's does: it ensures the
// nfacct counters, whose availability decides whether the rules count with
// them until the next full sync. (route_localnet comes after the sync, see
// routeLocalnet.)
func (p *Proxier) prepareFull() error {
	fx := p.fixedOptions()
	ok := map[string]bool{}
	if p.acct != nil {
		for _, name := range []string{CounterLocalhostNodePorts, CounterInvalidDropped} {
			err := p.acct.Ensure(name)
			ok[name] = err == nil
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if msg != p.acctErr[name] {
				if err != nil {
					p.log.Warn("no nfacct counter: its rules do not count and its metric is not exported", "counter", name, "err", err)
				}
				p.acctErr[name] = msg
			}
		}
	}
	fx.countInvalid = ok[CounterInvalidDropped]
	p.countLocalhost = fx.localhostNodePorts && ok[CounterLocalhostNodePorts]
	p.fixed = fx
	return nil
}

// routeLocalnet sets route_localnet=1 after a full sync wrote KUBE-FIREWALL,
// not before as kube-proxy does: 127.0.0.0/8 becomes routable only once the
// rule that drops packets to it from elsewhere is in the kernel (the node's
// API server answers plain HTTP on 127.0.0.1).
func (p *Proxier) routeLocalnet() error {
	if !p.fixed.localhostNodePorts || p.cfg.RouteLocalnet == nil {
		return nil
	}
	if err := p.cfg.RouteLocalnet(); err != nil {
		return fmt.Errorf("setting route_localnet for NodePorts on localhost: %w", err)
	}
	return nil
}

// syncProxyRules is one sync; see the package comment.
func (p *Proxier) syncProxyRules() (err error) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	start := p.clock.Now()
	t, ok := p.take(start, p.lastFull, p.cfg.FullSyncPeriod, maps.Keys(p.rendered))
	if !ok {
		return nil
	}
	full, triggers, nodeIP, inputs := t.full, t.triggers, t.nodeIP, t.inputs
	defer func() {
		if err != nil {
			p.giveBack(t)
		}
	}()
	if full {
		if err := p.prepareFull(); err != nil {
			return err
		}
	}

	cfg := &renderConfig{nodeIP: nodeIP, masqueradeAll: p.cfg.MasqueradeAll, largeCluster: p.largeCluster, countLocalhost: p.countLocalhost}
	if p.cfg.ClusterCIDR.IsValid() {
		cfg.clusterCIDR = p.cfg.ClusterCIDR.Masked().String()
	}
	udpChanged := false
	// before holds the previous rendering of every service rendered now: a
	// partial sync compares only those (its cost follows the change, not the
	// cluster's size).
	before := make(map[types.NamespacedName][]*serviceRules, len(inputs))
	render := func(key types.NamespacedName, in syncInput) {
		if p.udp.had(key) {
			udpChanged = true
		}
		old, seen := p.rendered[key]
		if _, ok := before[key]; !ok {
			before[key] = old
		}
		for _, r := range old {
			p.totals.add(r, -1)
		}
		delete(p.healthChecked, key)
		if in.svc == nil {
			if seen {
				delete(p.rendered, key)
			}
			return
		}
		var out []*serviceRules
		for _, sp := range servicePortsOf(in.svc, p.ipv6) {
			if sp.protocol == "udp" {
				udpChanged = true
			}
			r := renderService(cfg, sp, endpointsFor(sp, in.slices, p.cfg.NodeName, t.nodeZone))
			p.totals.add(r, 1)
			if sp.hcNodePort != 0 {
				p.healthChecked[key] = true
			}
			out = append(out, r)
		}
		p.rendered[key] = out
	}
	for key, in := range inputs {
		render(key, in)
	}
	// kube-proxy's large-cluster mode drops per-endpoint comments above 1,000
	// endpoints; crossing the threshold re-renders everything, in a full sync.
	total := p.totals.endpoints
	if large := total > largeClusterEndpointsThreshold; large != p.largeCluster {
		p.largeCluster = large
		cfg.largeCluster = large
		full = true
		p.takeAll(inputs)
		for key, in := range inputs {
			render(key, in)
		}
	}

	var written, bytesOut int
	var rs *ruleSet
	if full {
		rs = buildRuleSet(p.renderedInOrder(), p.fixed)
		written, bytesOut, err = p.fullSync(rs)
		if err == nil {
			err = p.routeLocalnet()
		}
	} else {
		written, bytesOut, err = p.partialSync(before)
	}
	took := p.clock.Now().Sub(start)
	p.metrics.observeSync(full, took, err == nil, start)
	if err == nil {
		p.metrics.observeProgramming(p.clock.Now(), triggers)
	}
	p.statsMu.Lock()
	p.stats.record(start, full, took, written, err)
	if err == nil {
		p.stats.WrittenBytes = bytesOut
		// After a partial sync the whole set is rebuilt only when asked for
		// (Rules), not on every sync.
		p.lastSet, p.synced = rs, true
	}
	p.stats.Services, p.stats.Endpoints = p.totals.servicePorts, total
	p.stats.FilterRules, p.stats.NATRules, p.stats.NATChains = p.kernel.filterRules, p.kernel.natRules, p.kernel.natChains
	p.statsMu.Unlock()
	if err != nil {
		p.log.Error("syncing proxy rules", "full", full, "took", took, "err", err)
		return err
	}
	p.log.Debug("synced proxy rules", "full", full, "took", took, "servicePorts", p.totals.servicePorts,
		"endpoints", total, "natRules", p.kernel.natRules, "filterRules", p.kernel.filterRules, "chainsWritten", written, "bytes", bytesOut)
	p.markUpdated()
	if full {
		p.lastFull = start
	}
	p.syncHealth()
	if udpChanged {
		p.cleanupConntrack(nodeIP)
	}
	return nil
}

// fullSync rewrites everything we own; see tables.go for the input shape.
func (p *Proxier) fullSync(rs *ruleSet) (chains, size int, err error) {
	for _, t := range []string{iptables.TableFilter, iptables.TableNAT} {
		chains += len(rs.chains(t))
	}
	// The mangle canary is never in a restore; the monitor polls it. It goes
	// first so that the restore is the last change (iptables.ReplaceTables
	// trusts its cached view of foreign chains only while it made the last change).
	if err := p.ipt.EnsureChain(iptables.TableMangle, chainCanary); err != nil {
		return 0, 0, err
	}
	if p.ipt.Backend() == iptables.NFTables {
		err = p.ipt.ReplaceTables([]string{iptables.TableFilter, iptables.TableNAT}, keepForeign,
			func(state map[string]*iptables.TableState) ([]byte, error) {
				data := wholeTables(rs, state)
				size = len(data)
				return data, nil
			})
		if err != nil {
			return 0, 0, fmt.Errorf("restoring whole tables: %w", err)
		}
	} else {
		// Legacy: kube-proxy's way. Chains and jumps first (per rule), then
		// one --noflush restore of every chain, deleting stale ones.
		for _, j := range jumpRules {
			if err := p.ipt.EnsureChain(j.table, j.to); err != nil {
				return 0, 0, err
			}
			if _, err := p.ipt.EnsureRule(iptables.Prepend, j.table, j.from, j.args()...); err != nil {
				return 0, 0, err
			}
		}
		write := map[string][]chain{}
		stale := map[string][]string{}
		for _, t := range []string{iptables.TableFilter, iptables.TableNAT} {
			write[t] = rs.chains(t)
			want := map[string]bool{}
			for _, c := range rs.chains(t) {
				want[c.name] = true
			}
			existing, err := p.ipt.ListChains(t)
			if err != nil {
				return 0, 0, err
			}
			for _, n := range existing {
				if ownedChain(n) && !want[n] && (t == iptables.TableNAT && ServiceChain(n)) {
					stale[t] = append(stale[t], n)
				}
			}
		}
		data := noFlushInput(write, stale)
		size = len(data)
		if err := p.ipt.Restore(data, true); err != nil {
			return 0, 0, err
		}
	}
	p.remember(rs)
	return chains, size, nil
}

// partialSync writes only the chains whose content differs from what the
// last successful sync wrote, and deletes chains no longer used. It looks only
// at the services rendered in this sync (before holds their previous
// rendering): their own chains, and the shared top-level chains when their
// contribution to them changed. An endpoint change at 10,000 services thus
// costs the same Go work as at 100.
func (p *Proxier) partialSync(before map[types.NamespacedName][]*serviceRules) (chains, size int, err error) {
	write := map[string][]chain{}
	stale := map[string][]string{}
	now := map[string]bool{}
	shared := false
	for key, old := range before {
		cur := p.rendered[key]
		for _, r := range cur {
			for _, c := range r.chains {
				k := iptables.TableNAT + "/" + c.name
				now[k] = true
				if text, ok := p.written[k]; !ok || text != joinRules(c) {
					write[iptables.TableNAT] = append(write[iptables.TableNAT], c)
				}
			}
		}
		if !sameShared(old, cur) {
			shared = true
		}
	}
	for _, old := range before {
		for _, r := range old {
			for _, c := range r.chains {
				k := iptables.TableNAT + "/" + c.name
				if _, ok := p.written[k]; ok && !now[k] {
					stale[iptables.TableNAT] = append(stale[iptables.TableNAT], c.name)
				}
			}
		}
	}
	if shared {
		top := buildRuleSet(p.sharedInOrder(), p.fixed)
		for _, t := range []string{iptables.TableFilter, iptables.TableNAT} {
			for _, c := range top.chains(t) {
				if text, ok := p.written[t+"/"+c.name]; !ok || text != joinRules(c) {
					write[t] = append(write[t], c)
				}
			}
		}
	}
	for _, t := range []string{iptables.TableFilter, iptables.TableNAT} {
		chains += len(write[t]) + len(stale[t])
		sort.Strings(stale[t])
	}
	if chains == 0 {
		return 0, 0, nil
	}
	data := noFlushInput(write, stale)
	if err := p.ipt.Restore(data, true); err != nil {
		return 0, 0, err
	}
	for t, cs := range write {
		for _, c := range cs {
			p.kernel.set(t, c.name, joinRules(c), len(c.rules), p.written)
		}
	}
	for t, names := range stale {
		for _, n := range names {
			p.kernel.remove(t, n, p.written)
		}
	}
	return chains, len(data), nil
}

// remember records rs as what the kernel holds, after a full sync.
func (p *Proxier) remember(rs *ruleSet) {
	p.written = make(map[string]string, len(rs.nat)+len(rs.filter))
	p.kernel = kernelCounts{}
	for _, t := range []string{iptables.TableFilter, iptables.TableNAT} {
		for _, c := range rs.chains(t) {
			p.kernel.set(t, c.name, joinRules(c), len(c.rules), p.written)
		}
	}
}

// kernelCounts is the size of what the kernel holds of ours, kept as chains
// are written and deleted.
type kernelCounts struct {
	filterRules, natRules, natChains int
	rules                            map[string]int // "table/chain" -> rules
}

func (k *kernelCounts) set(table, name, text string, rules int, written map[string]string) {
	key := table + "/" + name
	if k.rules == nil {
		k.rules = map[string]int{}
	}
	old, had := k.rules[key]
	k.rules[key] = rules
	written[key] = text
	if table == iptables.TableNAT {
		k.natRules += rules - old
		if !had {
			k.natChains++
		}
	} else {
		k.filterRules += rules - old
	}
}

func (k *kernelCounts) remove(table, name string, written map[string]string) {
	key := table + "/" + name
	old, had := k.rules[key]
	delete(k.rules, key)
	delete(written, key)
	if !had {
		return
	}
	if table == iptables.TableNAT {
		k.natRules -= old
		k.natChains--
	} else {
		k.filterRules -= old
	}
}

// renderTotals counts what is rendered, kept as services are re-rendered.
type renderTotals struct {
	servicePorts, endpoints int
}

func (t *renderTotals) add(r *serviceRules, sign int) {
	t.servicePorts += sign
	t.endpoints += sign * len(r.serving)
}

// sameShared reports whether two renderings of a service contribute the same
// rules to the shared chains (KUBE-SERVICES, KUBE-NODEPORTS and the filter
// chains).
func sameShared(a, b []*serviceRules) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !slices.Equal(x.natServices, y.natServices) || !slices.Equal(x.natNodePorts, y.natNodePorts) ||
			!slices.Equal(x.filterServices, y.filterServices) || !slices.Equal(x.filterExternal, y.filterExternal) ||
			!slices.Equal(x.filterNodePorts, y.filterNodePorts) || !slices.Equal(x.filterFirewall, y.filterFirewall) {
			return false
		}
	}
	return true
}

// renderedInOrder returns every rendered service port, services in
// namespace/name order.
func (p *Proxier) renderedInOrder() []*serviceRules {
	keys := make([]types.NamespacedName, 0, len(p.rendered))
	for k := range p.rendered {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Namespace != keys[j].Namespace {
			return keys[i].Namespace < keys[j].Namespace
		}
		return keys[i].Name < keys[j].Name
	})
	all := make([]*serviceRules, 0, len(keys))
	for _, k := range keys {
		all = append(all, p.rendered[k]...)
	}
	return all
}

// sharedInOrder is renderedInOrder stripped of the services' own chains, for
// building only the shared chains.
func (p *Proxier) sharedInOrder() []*serviceRules {
	all := p.renderedInOrder()
	out := make([]*serviceRules, len(all))
	for i, r := range all {
		c := *r
		c.chains = nil
		out[i] = &c
	}
	return out
}

func (p *Proxier) syncHealth() { syncHealth(p.health, p.healthChecked, p.rendered) }

// cleanupConntrack deletes stale UDP flows after a sync changed UDP services.
func (p *Proxier) cleanupConntrack(nodeIP netip.Addr) {
	n := p.udp.cleanup(p.ct, p.log, renderedPorts(p.rendered), nodeIP)
	p.statsMu.Lock()
	p.stats.ConntrackPurged += n
	p.statsMu.Unlock()
}

// monitor is kube-proxy's iptables.Monitor, extended: every SyncPeriod it
// checks the canary chains in mangle, nat and filter and one jump rule in nat
// and filter. kube-proxy polls only the mangle canary, so `iptables -t nat -F`
// goes unnoticed there (kubernetes#129128); a flush removes our jump rules, and
// checking one per table catches it within one period. Any miss forces a full
// sync.
func (p *Proxier) monitor(ctx context.Context) {
	natJump, filterJump := monitoredJumps()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(p.cfg.SyncPeriod):
		}
		p.mu.Lock()
		ready := p.initialized && !p.needFull
		p.mu.Unlock()
		if !ready {
			continue
		}
		if missing := p.missingRules(natJump, filterJump); missing != "" {
			p.log.Info("proxy rules were removed by someone else; resyncing everything", "missing", missing)
			p.forceFullSync()
		}
	}
}

// monitoredJumps are the jumps the monitor checks: nat PREROUTING ->
// KUBE-SERVICES and filter FORWARD -> KUBE-FORWARD.
func monitoredJumps() (nat, filter jumpRule) {
	for _, j := range jumpRules {
		switch {
		case j.table == iptables.TableNAT && j.from == "PREROUTING" && j.to == chainServices:
			nat = j
		case j.table == iptables.TableFilter && j.from == "FORWARD" && j.to == chainForward:
			filter = j
		}
	}
	return nat, filter
}

func (p *Proxier) missingRules(jumps ...jumpRule) string {
	for _, t := range []string{iptables.TableMangle, iptables.TableNAT, iptables.TableFilter} {
		if ok, err := p.ipt.ChainExists(t, chainCanary); err == nil && !ok {
			return t + " " + chainCanary
		}
	}
	for _, j := range jumps {
		if ok, err := p.ipt.HasRule(j.table, j.from, j.args()...); err == nil && !ok {
			return j.table + " " + j.from + " -> " + j.to
		}
	}
	return ""
}

// Stats returns the sync statistics.
func (p *Proxier) Stats() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.stats
}

// Rules returns the rule set of the last successful sync as
// iptables-restore input (jumps from built-in chains as comments).
func (p *Proxier) Rules() []byte {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	if !p.synced {
		return nil
	}
	if p.lastSet == nil {
		p.lastSet = buildRuleSet(p.renderedInOrder(), p.fixed)
	}
	return ruleText(p.lastSet)
}
