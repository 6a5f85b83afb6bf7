package kubeproxy

// NFTProxier is kube-proxy's nftables mode (KEP-3866): one table, `ip
// kube-proxy`, that it owns entirely, written through an nft.Interface in
// transactions that the backend applies atomically (one netlink batch).
//
// A dual-stack node runs one NFTProxier per IP family, as kube-proxy does:
// the IPv6 one (Config.Family) writes `ip6 kube-proxy`, the same chains,
// sets and maps with ip6 matches and ipv6_addr keys, from the Services'
// IPv6 ClusterIPs and the IPv6 EndpointSlices; MetaProxier hands each
// proxier the objects of its family.
//
// Syncs. A full sync (at start, after any failure, when the drift monitor
// finds the table changed behind our back, and every FullSyncPeriod) re-adds
// and flushes every chain and rewrites every service's chains, and diffs the
// elements of the shared sets and maps against what the kernel lists. The
// first full sync of a process keeps the table an earlier run left (deleting
// it would cost the whole table in one batch, see below): it lists the
// chains, sets and elements there, rewrites every chain it wants, recreates
// the wanted affinity sets (their timeout is unknown) and deletes the other
// affinity sets by name; service chains nothing uses are stale (below). A
// partial sync re-renders only the services that changed and writes one
// transaction with their chains whose rules differ and the element changes,
// diffed against an in-memory copy of the kernel's elements (kube-proxy's
// nftElementStorage), so its cost follows the change, not the cluster's size.
//
// Chains nothing reaches yet are written ahead. A service port none of
// whose chains and affinity sets is in the kernel (every service at a first
// sync into an empty table, new services in a partial sync) cannot be
// reached by a packet until a map element points at it, so when there are
// at least PrepBatchServices (500) of them their chains, sets and rules go
// first, in transactions of at most 500 service ports each (the first one
// also creating the shared sets and maps, empty, if missing); then the
// sync's one transaction writes everything packets can see: the base and
// fixed chains, the changed reachable chains, the elements. A failure in
// between leaves only unreachable chains, which the retried full sync finds
// listed and rewrites or, unwanted, deletes as stale. A restarted process
// finds its chains in the table and writes them in the one transaction.
//
// Why: the kernel finds a set by name by walking the table's list of sets
// in creation order, and binds an anonymous set by walking the
// transaction's list of changes. With kube-proxy's rules (an anonymous
// numgen map in every service chain) that made 10,000 services cost 5-7 s
// in any batching (perf: nft_set_lookup_global 40%, strlen 20%,
// nf_tables_newset 14%), which is why minikit's service chains pick their
// endpoint from shared dnat-endpoints maps instead (nftDNATRule, nftBlocks:
// a block of keys per chain, 512 keys per map): the table holds a dozen
// sets and one map per 512 keys, and an endpoint replaced is an element,
// not a rule. Batches still pay: at 10,000 services x
// 5 endpoints, 2 loaded cores, batches of 500 took 0.96-1.12 s and one
// transaction 1.33-2.45 s. BenchmarkNFTSync has the figures of every kind
// of sync.
//
// Stale chains. With kernels before 6.2 a chain that a map element pointed to
// is referenced for a moment after the element is deleted, so, as kube-proxy,
// stale service chains are flushed at once and deleted by a later sync more
// than a second afterwards. Stale affinity sets are deleted at once.
//
// Shared elements. Two services may own the same element (two services on the
// same pods own the same hairpin element; two services claiming one external
// IP and port own one service-ips key with different values): every element
// remembers its owners, the element written is the one of the first owner in
// namespace/name order, and it is deleted only when its last owner lets go.
// A full sync computes the same, so partial and full syncs agree.
//
// Locking is the iptables Proxier's: mu guards what the event handlers write,
// the sync goroutine owns the rest, syncMu serializes syncs with the drift
// check and Rules, statsMu guards the statistics.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NFTConfig configures an NFTProxier.
type NFTConfig struct {
	Config
	// ServiceCIDRs are the service IP ranges: traffic to an address in them
	// that is no service's is dropped (cluster-ips-check).
	ServiceCIDRs []netip.Prefix
	// Backend names the nft backend in the statistics ("netlink", "exec").
	Backend string
	// DriftSampleChains is how many service chains the drift monitor counts
	// the rules of per check, in rotation (default 256).
	DriftSampleChains int
	// PrepBatchServices: when at least this many service ports have chains
	// that nothing reaches yet (a first sync into an empty table, many new
	// services at once), their chains are written ahead of the sync's
	// transaction in transactions of at most this many (default 500; see
	// writeUnreachable).
	PrepBatchServices int
}

// NFTProxier programs kube-proxy's nftables rules for the services it is
// told about.
type NFTProxier struct {
	cfg    NFTConfig
	nft    nft.Interface
	ct     Conntrack
	log    *slog.Logger
	clock  Clock
	health *healthServers
	changes

	// Owned by the sync goroutine (under syncMu).
	rendered map[types.NamespacedName][]*nftServiceRules
	// owners: set -> key -> owning service -> element; the desired state.
	owners map[string]map[string]map[types.NamespacedName]*nftElem
	// kernel: set -> key -> element; what the kernel holds (in-memory copy).
	kernel map[string]map[string]*nftElem
	// chains are the service chains the kernel holds, with their rules
	// text (to skip unchanged chains) and rule count.
	chains map[string]*nftChain
	// sets are the affinity sets the kernel holds.
	sets map[string]nft.Set
	// blocks are the service chains' blocks of dnat-endpoints keys;
	// mapsWritten the dnat-endpoints maps the kernel holds.
	blocks      *nftBlocks
	mapsWritten map[string]bool
	// fixed is the rule count of every fixed chain after the last full sync.
	fixed map[string]int
	// stale service chains, flushed, and when they became stale.
	stale         map[string]time.Time
	flushed       bool // a full sync of this process succeeded
	lastFull      time.Time
	healthChecked map[types.NamespacedName]bool
	udp           udpFrontends // UDP ports at the last conntrack cleanup
	servicePortsN int
	endpointsN    int
	rulesN        int
	driftCursor   int
	synced        bool

	syncMu sync.Mutex

	statsMu sync.Mutex
	stats   Stats
	metrics nftMetrics
	// programming is kube-proxy's network programming latency (metrics.go).
	programming *syncMetrics
}

// NewNFT returns an NFTProxier that writes through backend. Call Run to
// start it.
func NewNFT(cfg NFTConfig, backend nft.Interface) (*NFTProxier, error) {
	if backend == nil {
		return nil, errors.New("proxy: no nftables backend")
	}
	ipv6 := cfg.Family == corev1.IPv6Protocol
	if cfg.Family != "" && cfg.Family != corev1.IPv4Protocol && !ipv6 {
		return nil, fmt.Errorf("proxy: unknown IP family %q", cfg.Family)
	}
	c := &cfg.Config
	c.defaults()
	if cfg.DriftSampleChains == 0 {
		cfg.DriftSampleChains = 256
	}
	if cfg.PrepBatchServices <= 0 {
		cfg.PrepBatchServices = 500
	}
	log := c.Logger.With("component", "proxy", "mode", "nftables")
	if ipv6 {
		log = log.With("family", "ip6")
	}
	p := &NFTProxier{
		cfg: cfg, nft: backend, ct: c.Conntrack, log: log, clock: c.Clock,
		programming: newSyncMetrics(), changes: newChanges(c.NodeIP, c.Clock),
		health:        newHealthServers(c.HealthCheckListen, log),
		rendered:      map[types.NamespacedName][]*nftServiceRules{},
		owners:        map[string]map[string]map[types.NamespacedName]*nftElem{},
		kernel:        map[string]map[string]*nftElem{},
		chains:        map[string]*nftChain{},
		sets:          map[string]nft.Set{},
		blocks:        newNFTBlocks(),
		mapsWritten:   map[string]bool{},
		stale:         map[string]time.Time{},
		healthChecked: map[types.NamespacedName]bool{},
		udp:           newUDPFrontends(),
	}
	p.changes.ipv6 = ipv6
	p.stats.Backend = "nftables"
	if cfg.Backend != "" {
		p.stats.Backend += " (" + cfg.Backend + ")"
	}
	// The periodic run is SyncPeriod, as kube-proxy's: it deletes stale
	// chains; with nothing changed it writes nothing.
	p.runner = newBoundedRunner(p.syncProxyRules, c.MinSyncPeriod, c.SyncPeriod, c.SyncPeriod, 2, c.Clock)
	return p, nil
}

// Run syncs until ctx ends. Nothing is written before SetInitialized.
func (p *NFTProxier) Run(ctx context.Context) { runProxier(ctx, p.runner, p.monitor, p.health) }

// ipv6 tells whether this is a dual-stack node's IPv6 proxier.
func (p *NFTProxier) ipv6() bool { return p.changes.ipv6 }

func (p *NFTProxier) renderConfig(nodeIP netip.Addr) *nftRenderConfig {
	cfg := &nftRenderConfig{nodeIP: nodeIP, masqueradeAll: p.cfg.MasqueradeAll, ipv6: p.ipv6()}
	if p.cfg.ClusterCIDR.IsValid() && p.cfg.ClusterCIDR.Addr().Is4() != p.ipv6() {
		cfg.clusterCIDR = p.cfg.ClusterCIDR.Masked().String()
	}
	for _, c := range p.cfg.ServiceCIDRs {
		if c.Addr().Is4() != p.ipv6() {
			cfg.serviceCIDRs = append(cfg.serviceCIDRs, c.Masked().String())
		}
	}
	return cfg
}

// syncProxyRules is one sync; see the top of this file.
func (p *NFTProxier) syncProxyRules() (err error) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	ctx := context.Background()
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

	// Stale chains flushed more than a second ago are deleted first, in a
	// transaction of their own, as kube-proxy does.
	if err := p.deleteStaleChains(ctx, start); err != nil {
		p.log.Error("deleting stale nftables chains; resyncing everything", "err", err)
		full = true
	}

	cfg := p.renderConfig(nodeIP)
	keys := make([]types.NamespacedName, 0, len(inputs))
	for k := range inputs {
		keys = append(keys, k)
	}
	sortKeys(keys)
	udpChanged := false
	before := make(map[types.NamespacedName][]*nftServiceRules, len(keys))
	for _, key := range keys {
		in := inputs[key]
		old := p.rendered[key]
		before[key] = old
		for _, r := range old {
			if r.sp.protocol == "udp" {
				udpChanged = true
			}
		}
		delete(p.healthChecked, key)
		if in.svc == nil {
			delete(p.rendered, key)
			p.releaseBlocks(old, nil)
			continue
		}
		var out []*nftServiceRules
		for _, sp := range servicePortsOf(in.svc, p.ipv6()) {
			if sp.protocol == "udp" {
				udpChanged = true
			}
			r := renderNFTService(cfg, sp, endpointsFor(sp, in.slices, p.cfg.NodeName, t.nodeZone), p.blocks)
			if sp.hcNodePort != 0 {
				p.healthChecked[key] = true
			}
			out = append(out, r)
		}
		p.rendered[key] = out
		p.releaseBlocks(old, out)
	}

	var ops int
	if full {
		ops, err = p.fullSync(ctx, cfg, start)
	} else {
		ops, err = p.partialSync(ctx, keys, before, start)
	}
	took := p.clock.Now().Sub(start)
	p.metrics.observe(full, took, err)
	p.statsMu.Lock()
	p.stats.record(start, full, took, ops, err)
	p.stats.Services, p.stats.Endpoints = p.servicePortsN, p.endpointsN
	p.stats.NATRules, p.stats.NATChains = p.rulesN, len(p.chains)
	p.statsMu.Unlock()
	if err != nil {
		p.log.Error("syncing nftables rules", "full", full, "took", took, "err", err)
		return err
	}
	p.synced = true
	p.programming.observeProgramming(p.clock.Now(), triggers)
	p.log.Debug("synced nftables rules", "full", full, "took", took, "servicePorts", p.servicePortsN,
		"endpoints", p.endpointsN, "chains", len(p.chains), "rules", p.rulesN, "operations", ops)
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

// managedSets are the sets and maps whose elements the proxier diffs: the
// shared ones and the dnat-endpoints maps.
func (p *NFTProxier) managedSets() []string {
	return append(append([]string(nil), nftManagedSets...), p.blocks.mapNames()...)
}

// releaseBlocks frees the dnat-endpoints blocks of old's chains that cur
// does not keep (a block freed here may be taken by a service rendered
// later in the same sync: the element diff of that one transaction moves
// the keys from one owner to the other).
func (p *NFTProxier) releaseBlocks(old, cur []*nftServiceRules) {
	keep := map[string]bool{}
	for _, r := range cur {
		for _, c := range r.blocks {
			keep[c] = true
		}
	}
	for _, r := range old {
		for _, c := range r.blocks {
			if !keep[c] {
				p.blocks.release(c)
			}
		}
	}
}

// deleteStaleChains deletes the stale chains flushed at least a second ago.
// A chain that is gone already (someone deleted the table) is no error: each
// is added before it is deleted.
func (p *NFTProxier) deleteStaleChains(ctx context.Context, now time.Time) error {
	tx := &nft.Transaction{}
	var names []string
	for name, at := range p.stale {
		if now.Sub(at) > time.Second {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	tx.Add(&nft.Table{Family: nftFamily(p.ipv6()), Name: nftTableName, Comment: "rules for kube-proxy"})
	for _, n := range names {
		tx.Add(&nft.Chain{Name: n})
		tx.Delete(&nft.Chain{Name: n})
		delete(p.stale, n)
	}
	p.log.Debug("deleting stale nftables chains", "chains", len(names))
	return p.nft.Run(ctx, tx)
}

// fullSync writes the whole table in one transaction. The first one of a
// process does not delete the table (that would leave packets an empty
// table between two commits, or cost one quadratic batch): it lists what
// an earlier process left, diffs the elements against it, flushes every
// chain it rewrites and removes the service chains and affinity sets
// nothing uses now, by name.
func (p *NFTProxier) fullSync(ctx context.Context, cfg *nftRenderConfig, start time.Time) (int, error) {
	tx := &nft.Transaction{}
	fixed := nftSetup(tx, cfg)
	dnatMaps := p.blocks.mapNames()
	for _, name := range dnatMaps {
		tx.Add(nftDNATMap(name, p.ipv6()))
	}

	// What the kernel holds.
	kernel := map[string]map[string]*nftElem{}
	for _, set := range p.managedSets() {
		kernel[set] = map[string]*nftElem{}
		elems, err := p.nft.ListElements(ctx, set)
		if err != nil {
			if !errors.Is(err, nft.ErrNotFound) {
				return 0, fmt.Errorf("listing the elements of %s: %w", set, err)
			}
			continue
		}
		for _, e := range elems {
			if err := checkListed(set, e); err != nil {
				return 0, err
			}
			k := strings.Join(e.Key, " . ")
			kernel[set][k] = &nftElem{set: set, key: e.Key, value: e.Value, comment: e.Comment}
		}
	}
	existing, err := p.nft.ListChains(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing nftables chains: %w", err)
	}
	knownSets := p.sets
	var oldMaps []nft.Op
	if !p.flushed {
		// An earlier process's affinity sets, of unknown timeout: the
		// wanted ones are recreated, the others deleted.
		names, err := p.nft.ListSets(ctx)
		if err != nil {
			return 0, fmt.Errorf("listing nftables sets: %w", err)
		}
		knownSets = map[string]nft.Set{}
		wanted := map[string]bool{}
		for _, name := range dnatMaps {
			wanted[name] = true
		}
		for _, name := range names {
			if strings.HasPrefix(name, "affinity-") {
				knownSets[name] = nft.Set{Name: name, Timeout: -1}
			}
			// An earlier process's dnat-endpoints maps this one does not
			// use go once the chains naming them are flushed.
			if strings.HasPrefix(name, nftDNATMapPrefix) && !wanted[name] {
				oldMaps = append(oldMaps, nft.Op{Kind: nft.OpDelete, Map: &nft.Map{Name: name}})
			}
		}
	}

	// The desired state, from scratch.
	owners := map[string]map[string]map[types.NamespacedName]*nftElem{}
	chains := map[string]*nftChain{}
	sets := map[string]nft.Set{}
	keys := p.renderedKeys()
	inKernel := make(map[string]bool, len(existing))
	for _, name := range existing {
		inKernel[name] = true
	}
	var prep []*nftServiceRules
	var final []*nftServiceRules
	p.servicePortsN, p.endpointsN, p.rulesN = 0, 0, 0
	for _, key := range keys {
		for _, r := range p.rendered[key] {
			p.countService(r, 1)
			for i := range r.chains {
				chains[r.chains[i].name] = &r.chains[i]
			}
			for i := range r.sets {
				sets[r.sets[i].Name] = r.sets[i]
			}
			for i := range r.elems {
				addOwner(owners, key, &r.elems[i])
			}
			if unreachable(r, inKernel, knownSets) {
				prep = append(prep, r)
			} else {
				final = append(final, r)
			}
		}
	}
	if len(prep) < p.cfg.PrepBatchServices {
		final, prep = append(final, prep...), nil
	}
	// The shared sets and maps go first into a new table: the kernel finds
	// a set by name by walking the table's list of sets in creation order,
	// once per element message, and affinity sets (or anonymous ones, in
	// firewall rules) ahead of them would make every element cost that walk.
	var shared []nft.Op
	for _, op := range tx.Ops {
		if op.Kind == nft.OpAdd && (op.Set != nil || op.Map != nil) {
			shared = append(shared, op)
		}
	}
	if err := p.writeUnreachable(ctx, shared, prep); err != nil {
		return 0, err
	}
	finalSets := sets
	if len(prep) > 0 {
		finalSets = map[string]nft.Set{}
		for _, r := range final {
			for _, s := range r.sets {
				finalSets[s.Name] = s
			}
		}
	}
	svcOps, ruleOps := serviceChainOps(final, true)
	tx.Ops = append(tx.Ops, svcOps...)
	// Sets listed just now exist: deleting them needs no ensure-add (their
	// old definition is unknown).
	setOps, staleSets := p.affinitySetOps(finalSets, knownSets, p.flushed)
	tx.Ops = append(tx.Ops, setOps...)
	tx.Ops = append(tx.Ops, ruleOps...)

	// Elements: diff the desired state against the kernel's.
	var touched []elemRef
	for set, byKey := range owners {
		for k := range byKey {
			touched = append(touched, elemRef{set, k})
		}
	}
	for set, byKey := range kernel {
		for k := range byKey {
			if owners[set][k] == nil {
				touched = append(touched, elemRef{set, k})
			}
		}
	}
	elemOps := elementOps(touched, owners, kernel)
	tx.Ops = append(tx.Ops, elemOps...)

	// Service chains in the kernel that nothing uses now.
	newStale := map[string]bool{}
	for _, name := range existing {
		if nftServiceChain(name) && chains[name] == nil {
			tx.Flush(&nft.Chain{Name: name})
			newStale[name] = true
		}
	}
	tx.Ops = append(tx.Ops, staleSets...)
	tx.Ops = append(tx.Ops, oldMaps...)

	if err := p.nft.Run(ctx, tx); err != nil {
		clear(p.stale)
		return 0, fmt.Errorf("applying a full nftables transaction of %d operations: %w", tx.Len(), err)
	}
	p.flushed = true
	p.mapsWritten = map[string]bool{}
	for _, name := range dnatMaps {
		p.mapsWritten[name] = true
	}
	p.owners, p.kernel, p.chains, p.sets, p.fixed = owners, kernel, chains, sets, fixed
	for name := range p.stale {
		if chains[name] != nil || !newStale[name] {
			delete(p.stale, name)
		}
	}
	for name := range newStale {
		if _, ok := p.stale[name]; !ok {
			p.stale[name] = start
		}
	}
	return tx.Len() + prepOps(prep), nil
}

// unreachable says whether nothing can send a packet into r's chains yet:
// none of them is in the kernel (so no map element, rule or verdict names
// them) and none of its affinity sets is, so writing them changes nothing
// a packet can see until a later transaction points an element at them.
func unreachable(r *nftServiceRules, inKernel map[string]bool, sets map[string]nft.Set) bool {
	for i := range r.chains {
		if inKernel[r.chains[i].name] {
			return false
		}
	}
	for _, s := range r.sets {
		if _, ok := sets[s.Name]; ok {
			return false
		}
	}
	return true
}

// serviceChainOps returns the operations that write the chains of rs: each chain
// added (and flushed, with flush), then their rules.
func serviceChainOps(rs []*nftServiceRules, flush bool) (chainOps, ruleOps []nft.Op) {
	for _, r := range rs {
		for i := range r.chains {
			c := &r.chains[i]
			chainOps = append(chainOps, nft.Op{Kind: nft.OpAdd, Chain: &nft.Chain{Name: c.name}})
			if flush {
				chainOps = append(chainOps, nft.Op{Kind: nft.OpFlush, Chain: &nft.Chain{Name: c.name}})
			}
			for j := range c.rules {
				ruleOps = append(ruleOps, nft.Op{Kind: nft.OpAdd, Rule: &c.rules[j]})
			}
		}
	}
	return chainOps, ruleOps
}

// writeUnreachable writes the chains and affinity sets of service ports
// that nothing reaches yet (unreachable) in transactions of at most
// PrepBatchServices service ports each, before the transaction that points
// the maps at them. Each of these commits is invisible to packets, so the
// sync stays atomic to them; splitting it keeps the kernel's cost per
// commit bounded (see the package doc for the numbers).
//
// first (the shared sets and maps, added empty if missing) goes into the
// first of these transactions.
func (p *NFTProxier) writeUnreachable(ctx context.Context, first []nft.Op, rs []*nftServiceRules) error {
	for len(rs) > 0 {
		n := min(len(rs), p.cfg.PrepBatchServices)
		tx := &nft.Transaction{}
		tx.Add(&nft.Table{Family: nftFamily(p.ipv6()), Name: nftTableName, Comment: "rules for kube-proxy"})
		tx.Ops = append(tx.Ops, first...)
		first = nil
		chains, rules := serviceChainOps(rs[:n], false)
		tx.Ops = append(tx.Ops, chains...)
		for _, r := range rs[:n] {
			for i := range r.sets {
				tx.Add(&r.sets[i])
			}
		}
		tx.Ops = append(tx.Ops, rules...)
		if err := p.nft.Run(ctx, tx); err != nil {
			return fmt.Errorf("writing the chains of %d new service ports (%d operations): %w", n, tx.Len(), err)
		}
		rs = rs[n:]
	}
	return nil
}

// partialUnreachable is unreachable for a partial sync: the kernel holds
// the chains and sets this process wrote and the stale chains.
func (p *NFTProxier) partialUnreachable(r *nftServiceRules) bool {
	for i := range r.chains {
		name := r.chains[i].name
		if p.chains[name] != nil {
			return false
		}
		if _, ok := p.stale[name]; ok {
			return false
		}
	}
	for _, s := range r.sets {
		if _, ok := p.sets[s.Name]; ok {
			return false
		}
	}
	return true
}

func prepOps(rs []*nftServiceRules) int {
	n := 0
	for _, r := range rs {
		n += len(r.sets)
		for i := range r.chains {
			n += 1 + len(r.chains[i].rules)
		}
	}
	return n
}

// partialSync writes the changed services' chains, sets and elements.
func (p *NFTProxier) partialSync(ctx context.Context, keys []types.NamespacedName, before map[types.NamespacedName][]*nftServiceRules, start time.Time) (int, error) {
	var chainOps, ruleOps, staleOps []nft.Op
	var touched []elemRef
	newChains := map[string]*nftChain{}
	newSets := map[string]nft.Set{}
	oldSets := map[string]nft.Set{}
	var goneChains []string
	var prep []*nftServiceRules
	for _, key := range keys {
		old, cur := before[key], p.rendered[key]
		for _, r := range old {
			p.countService(r, -1)
			for i := range r.elems {
				e := &r.elems[i]
				removeOwner(p.owners, key, e)
				touched = append(touched, elemRef{e.set, e.keyString()})
			}
			for _, s := range r.sets {
				oldSets[s.Name] = s
			}
		}
		// A changed timeout recreates the affinity sets, and with them every
		// rule that names them: the whole service is rewritten then.
		rewriteAll := false
		for _, r := range cur {
			for _, s := range r.sets {
				if k, ok := p.sets[s.Name]; ok && k.Timeout != s.Timeout {
					rewriteAll = true
				}
			}
		}
		curChains := map[string]bool{}
		for _, r := range cur {
			p.countService(r, 1)
			if p.partialUnreachable(r) {
				// Written below, ahead of the transaction when there are
				// many (writeUnreachable).
				prep = append(prep, r)
			}
			for i := range r.chains {
				c := &r.chains[i]
				curChains[c.name] = true
				if k := p.chains[c.name]; k != nil && k.text == c.text && !rewriteAll {
					continue
				}
				if len(prep) > 0 && prep[len(prep)-1] == r {
					newChains[c.name] = c
					continue
				}
				newChains[c.name] = c
				chainOps = append(chainOps, nft.Op{Kind: nft.OpAdd, Chain: &nft.Chain{Name: c.name}},
					nft.Op{Kind: nft.OpFlush, Chain: &nft.Chain{Name: c.name}})
				for j := range c.rules {
					ruleOps = append(ruleOps, nft.Op{Kind: nft.OpAdd, Rule: &c.rules[j]})
				}
			}
			for _, s := range r.sets {
				newSets[s.Name] = s
			}
			for i := range r.elems {
				e := &r.elems[i]
				addOwner(p.owners, key, e)
				touched = append(touched, elemRef{e.set, e.keyString()})
			}
		}
		for _, r := range old {
			for _, c := range r.chains {
				if !curChains[c.name] && p.chains[c.name] != nil {
					staleOps = append(staleOps, nft.Op{Kind: nft.OpFlush, Chain: &nft.Chain{Name: c.name}})
					goneChains = append(goneChains, c.name)
				}
			}
		}
	}
	// Affinity sets: of the changed services only.
	known := map[string]nft.Set{}
	for name := range oldSets {
		if s, ok := p.sets[name]; ok {
			known[name] = s
		}
	}
	for name := range newSets {
		if s, ok := p.sets[name]; ok {
			known[name] = s
		}
	}
	// dnat-endpoints maps first used now, ahead of the rules naming them.
	var mapOps []nft.Op
	var newMaps []string
	for _, name := range p.blocks.mapNames() {
		if !p.mapsWritten[name] {
			newMaps = append(newMaps, name)
			mapOps = append(mapOps, nft.Op{Kind: nft.OpAdd, Map: nftDNATMap(name, p.ipv6())})
		}
	}
	chainOps = append(mapOps, chainOps...)
	setsToAdd := newSets
	if len(prep) >= p.cfg.PrepBatchServices {
		if err := p.writeUnreachable(ctx, mapOps, prep); err != nil {
			return 0, err
		}
		setsToAdd = map[string]nft.Set{}
		prepped := map[string]bool{}
		for _, r := range prep {
			for _, s := range r.sets {
				prepped[s.Name] = true
			}
		}
		for name, s := range newSets {
			if !prepped[name] {
				setsToAdd[name] = s
			}
		}
	} else {
		c, r := serviceChainOps(prep, true)
		chainOps = append(chainOps, c...)
		ruleOps = append(ruleOps, r...)
		prep = nil
	}
	setOps, staleSetOps := p.affinitySetOps(setsToAdd, known, false)
	elemOps := elementOps(touched, p.owners, p.kernel)

	tx := &nft.Transaction{}
	tx.Ops = append(tx.Ops, chainOps...)
	tx.Ops = append(tx.Ops, setOps...)
	tx.Ops = append(tx.Ops, ruleOps...)
	tx.Ops = append(tx.Ops, elemOps...)
	tx.Ops = append(tx.Ops, staleOps...)
	tx.Ops = append(tx.Ops, staleSetOps...)
	if tx.Len() == 0 && len(prep) == 0 {
		return 0, nil
	}
	if err := p.nft.Run(ctx, tx); err != nil {
		clear(p.stale)
		return 0, fmt.Errorf("applying a partial nftables transaction of %d operations: %w", tx.Len(), err)
	}
	for _, name := range newMaps {
		p.mapsWritten[name] = true
	}
	for name, c := range newChains {
		p.chains[name] = c
		delete(p.stale, name)
	}
	for _, name := range goneChains {
		delete(p.chains, name)
		p.stale[name] = start
	}
	for name := range known {
		delete(p.sets, name)
	}
	for name, s := range newSets {
		p.sets[name] = s
	}
	return tx.Len() + prepOps(prep), nil
}

// affinitySetOps adds the wanted affinity sets (deleting and re-adding one
// whose timeout changed) and returns, separately, the deletions of the known
// sets no longer wanted, which must come after the rules naming them are
// flushed. With ensure, a deletion first adds the set, so a set that is gone
// already is no error (a full sync after the table was deleted).
func (p *NFTProxier) affinitySetOps(want, known map[string]nft.Set, ensure bool) (adds, deletes []nft.Op) {
	for _, name := range sortedSetNames(want) {
		s := want[name]
		if k, ok := known[name]; ok && k.Timeout != s.Timeout {
			old := k
			if ensure {
				adds = append(adds, nft.Op{Kind: nft.OpAdd, Set: &old})
			}
			adds = append(adds, nft.Op{Kind: nft.OpDelete, Set: &nft.Set{Name: name}})
		}
		s2 := s
		adds = append(adds, nft.Op{Kind: nft.OpAdd, Set: &s2})
	}
	for _, name := range sortedSetNames(known) {
		if _, ok := want[name]; ok {
			continue
		}
		k := known[name]
		if ensure {
			deletes = append(deletes, nft.Op{Kind: nft.OpAdd, Set: &k})
		}
		deletes = append(deletes, nft.Op{Kind: nft.OpDelete, Set: &nft.Set{Name: name}})
	}
	return adds, deletes
}

func sortedSetNames(m map[string]nft.Set) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// elemRef names one element: its set and its key as "a . b . c".
type elemRef struct{ set, key string }

func addOwner(owners map[string]map[string]map[types.NamespacedName]*nftElem, key types.NamespacedName, e *nftElem) {
	byKey := owners[e.set]
	if byKey == nil {
		byKey = map[string]map[types.NamespacedName]*nftElem{}
		owners[e.set] = byKey
	}
	k := e.keyString()
	if byKey[k] == nil {
		byKey[k] = map[types.NamespacedName]*nftElem{}
	}
	byKey[k][key] = e
}

func removeOwner(owners map[string]map[string]map[types.NamespacedName]*nftElem, key types.NamespacedName, e *nftElem) {
	k := e.keyString()
	o := owners[e.set][k]
	delete(o, key)
	if len(o) == 0 {
		delete(owners[e.set], k)
	}
}

// winner is the element the kernel should hold for a key: the first owner's
// in namespace/name order.
func winner(o map[types.NamespacedName]*nftElem) *nftElem {
	var best *types.NamespacedName
	var e *nftElem
	for k, v := range o {
		if best == nil || lessKey(k, *best) {
			k := k
			best, e = &k, v
		}
	}
	return e
}

// elementOps diffs the touched elements of the desired state (owners)
// against kernel and updates kernel to match: deletions first (a changed
// value is a delete and an add), then additions, each in a sorted order.
func elementOps(touched []elemRef, owners map[string]map[string]map[types.NamespacedName]*nftElem, kernel map[string]map[string]*nftElem) []nft.Op {
	sort.Slice(touched, func(i, j int) bool {
		if touched[i].set != touched[j].set {
			return touched[i].set < touched[j].set
		}
		return touched[i].key < touched[j].key
	})
	var dels, adds []nft.Op
	for i, t := range touched {
		if i > 0 && touched[i-1] == t {
			continue
		}
		want := winner(owners[t.set][t.key])
		have := kernel[t.set][t.key]
		if have != nil && want != nil && have.value == want.value && have.comment == want.comment {
			continue
		}
		if kernel[t.set] == nil {
			kernel[t.set] = map[string]*nftElem{}
		}
		if have != nil {
			dels = append(dels, nft.Op{Kind: nft.OpDelete, Element: &nft.Element{Set: t.set, Key: have.key}})
			delete(kernel[t.set], t.key)
		}
		if want != nil {
			adds = append(adds, nft.Op{Kind: nft.OpAdd, Element: &nft.Element{Set: t.set, Key: want.key, Value: want.value, Comment: want.comment}})
			kernel[t.set][t.key] = want
		}
	}
	return append(dels, adds...)
}

func setOrMap(name string) any {
	switch name {
	case nftClusterIPsSet, nftHairpinSet, nftNodePortIPsSet:
		return &nft.Set{Name: name}
	}
	return &nft.Map{Name: name}
}

func (p *NFTProxier) countService(r *nftServiceRules, sign int) {
	p.servicePortsN += sign
	p.endpointsN += sign * len(r.serving)
	p.rulesN += sign * r.rules
}

func lessKey(a, b types.NamespacedName) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

func sortKeys(keys []types.NamespacedName) {
	sort.Slice(keys, func(i, j int) bool { return lessKey(keys[i], keys[j]) })
}

func (p *NFTProxier) renderedKeys() []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(p.rendered))
	for k := range p.rendered {
		keys = append(keys, k)
	}
	sortKeys(keys)
	return keys
}

func (p *NFTProxier) syncHealth() { syncHealth(p.health, p.healthChecked, p.rendered) }

// cleanupConntrack deletes stale UDP flows after a sync changed UDP
// services, as the iptables mode does (staleUDPFlows decides which).
func (p *NFTProxier) cleanupConntrack(nodeIP netip.Addr) {
	n := p.udp.cleanup(p.ct, p.log, renderedPorts(p.rendered), nodeIP)
	p.statsMu.Lock()
	p.stats.ConntrackPurged += n
	p.statsMu.Unlock()
}

// Stats returns the sync statistics. NATChains and NATRules count the
// service chains and their rules.
func (p *NFTProxier) Stats() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.stats
}

// nftMetrics are kube-proxy's sync duration histograms
// (sync_proxy_rules_duration_seconds, and its full and partial variants)
// with its buckets, and its failure counter.
type nftMetrics struct {
	mu                  sync.Mutex
	all, full, partial  histogram
	failures            int
	lastSync            time.Time
	lastSyncDurationSec float64
}

// kube-proxy's buckets: exponential from 1 ms, factor 2, 15 of them.
var syncBuckets = func() []float64 {
	b := make([]float64, 15)
	v := 0.001
	for i := range b {
		b[i] = v
		v *= 2
	}
	return b
}()

type histogram struct {
	counts []uint64
	sum    float64
	n      uint64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(syncBuckets))
	}
	for i, b := range syncBuckets {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for i, b := range syncBuckets {
		var c uint64
		if h.counts != nil {
			c = h.counts[i]
		}
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, c)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.n, name, h.sum, name, h.n)
}

func (m *nftMetrics) observe(full bool, took time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := took.Seconds()
	m.all.observe(s)
	if full {
		m.full.observe(s)
	} else {
		m.partial.observe(s)
	}
	if err != nil {
		m.failures++
	}
	m.lastSync, m.lastSyncDurationSec = time.Now(), s
}

// WriteMetrics writes the proxy's metrics in Prometheus text format under
// kube-proxy's names.
func (p *NFTProxier) WriteMetrics(w io.Writer) {
	m := &p.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	m.all.write(w, "kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds")
	m.full.write(w, "kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs")
	m.partial.write(w, "kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs")
	p.programming.writeProgramming(w)
	fmt.Fprintf(w, "# HELP kubeproxy_sync_proxy_rules_nftables_sync_failures_total Number of failed nftables syncs\n# TYPE kubeproxy_sync_proxy_rules_nftables_sync_failures_total counter\nkubeproxy_sync_proxy_rules_nftables_sync_failures_total %d\n", m.failures)
	if !m.lastSync.IsZero() {
		fmt.Fprintf(w, "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds The last time proxy rules were successfully synced\n# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\nkubeproxy_sync_proxy_rules_last_timestamp_seconds %d\n", m.lastSync.Unix())
	}
}

// add adds o's observations to h.
func (h *histogram) add(o *histogram) {
	if o.counts != nil {
		if h.counts == nil {
			h.counts = make([]uint64, len(syncBuckets))
		}
		for i, c := range o.counts {
			h.counts[i] += c
		}
	}
	h.sum += o.sum
	h.n += o.n
}

// writeMergedNFTMetrics writes the metrics of a dual-stack node's two
// nftables proxiers as one proxier's: kube-proxy's two proxiers observe
// into the same process-wide histograms and counters.
func writeMergedNFTMetrics(w io.Writer, ps ...*NFTProxier) {
	merged := &NFTProxier{programming: newSyncMetrics()}
	m := &merged.metrics
	for _, p := range ps {
		p.metrics.mu.Lock()
		m.all.add(&p.metrics.all)
		m.full.add(&p.metrics.full)
		m.partial.add(&p.metrics.partial)
		m.failures += p.metrics.failures
		if p.metrics.lastSync.After(m.lastSync) {
			m.lastSync, m.lastSyncDurationSec = p.metrics.lastSync, p.metrics.lastSyncDurationSec
		}
		p.metrics.mu.Unlock()
		p.programming.mu.Lock()
		merged.programming.programming.add(&p.programming.programming)
		p.programming.mu.Unlock()
	}
	merged.WriteMetrics(w)
}
