package kubeproxy

// This file renders kube-proxy's nftables mode (pkg/proxy/nftables/proxier.go
// of v1.37.2: setupNFTables, syncProxyRules, writeServiceToEndpointDNATs and
// writeServiceToEndpointJumps) from the same servicePorts and endpoints the
// iptables mode renders: the fixed skeleton of the `ip kube-proxy` table, and
// per service port its chains, affinity sets and the elements it owns in the
// shared sets and maps. Rule texts are written exactly as kube-proxy writes
// them (knftables.Concat: words joined with single spaces, "@" glued to the
// set name), so `nft list table ip kube-proxy` on a minikit node reads like
// kube-proxy's documentation. Rendering is pure; nft_proxier.go turns it into
// transactions.

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/nft"
)

// NFTTableName is the nftables mode's table, in family ip (and, on a
// dual-stack node, ip6: the IPv6 proxier's table of the same name).
const NFTTableName = "kube-proxy"

// The table, its base chains, and the chains, sets and maps every sync has;
// the names are kube-proxy's.
const (
	nftTableName = NFTTableName

	nftFilterPreroutingPreDNAT = "filter-prerouting-pre-dnat"
	nftFilterOutputPreDNAT     = "filter-output-pre-dnat"
	nftFilterInput             = "filter-input"
	nftFilterForward           = "filter-forward"
	nftFilterOutput            = "filter-output"
	nftNATPrerouting           = "nat-prerouting"
	nftNATOutput               = "nat-output"
	nftNATPostrouting          = "nat-postrouting"

	nftServicesChain       = "services"
	nftServiceIPsMap       = "service-ips"
	nftServiceNodePortsMap = "service-nodeports"
	nftNodePortIPsSet      = "nodeport-ips"
	nftClusterIPsSet       = "cluster-ips"

	nftServiceEndpointsCheck  = "service-endpoints-check"
	nftNodePortEndpointsCheck = "nodeport-endpoints-check"
	nftNoEndpointServicesMap  = "no-endpoint-services"
	nftNoEndpointNodePortsMap = "no-endpoint-nodeports"
	nftRejectChain            = "reject-chain"
	nftClusterIPsCheck        = "cluster-ips-check"
	nftFirewallIPsMap         = "firewall-ips"
	nftFirewallCheck          = "firewall-check"
	nftMasquerading           = "masquerading"
	nftHairpinSet             = "hairpin-connections"
	// nftDNATMapPrefix + "PROTO-N" are minikit's own maps: the services'
	// endpoints, each service chain picking from its block of keys in one
	// of them (nftBlocks).
	nftDNATMapPrefix = "dnat-endpoints-"
	// nftDNATMapKeys is how many keys one dnat-endpoints map holds (a
	// larger block gets a map of its own).
	nftDNATMapKeys = 512

	// Per-service prefixes.
	nftPrefixService  = "service-"
	nftPrefixLocal    = "local-"
	nftPrefixExternal = "external-"
	nftPrefixEndpoint = "endpoint-"
	nftPrefixAffinity = "affinity-"
	nftPrefixFirewall = "firewall-"

	// knftables' limits: names are at most 256 bytes, of which the longest
	// prefix takes 16; comments at most 128 bytes.
	nftNameBaseMax   = 256 - 16
	nftCommentMax    = 128
	nftRejectVerdict = "goto " + nftRejectChain
)

// Priorities as nft numbers: dstnat = -100, filter = 0, srcnat = 100.
const (
	nftPrioDNAT   = -100
	nftPrioFilter = 0
	nftPrioSNAT   = 100
)

// nftBaseChains are kube-proxy's base chains, in its order.
var nftBaseChains = []nft.Chain{
	{Name: nftFilterPreroutingPreDNAT, Type: "filter", Hook: "prerouting", Priority: nftPrioDNAT - 10},
	{Name: nftFilterOutputPreDNAT, Type: "filter", Hook: "output", Priority: nftPrioDNAT - 10},
	{Name: nftFilterInput, Type: "filter", Hook: "input", Priority: nftPrioFilter},
	{Name: nftFilterForward, Type: "filter", Hook: "forward", Priority: nftPrioFilter},
	{Name: nftFilterOutput, Type: "filter", Hook: "output", Priority: nftPrioFilter},
	{Name: nftNATPrerouting, Type: "nat", Hook: "prerouting", Priority: nftPrioDNAT},
	{Name: nftNATOutput, Type: "nat", Hook: "output", Priority: nftPrioDNAT},
	{Name: nftNATPostrouting, Type: "nat", Hook: "postrouting", Priority: nftPrioSNAT},
}

// nftJumps are the rules from base chains into kube-proxy's top-level
// chains, in its order (nftablesJumpChains).
var nftJumps = []struct{ dst, src, extra string }{
	{nftNodePortEndpointsCheck, nftFilterInput, "ct state new"},
	{nftServiceEndpointsCheck, nftFilterInput, "ct state new"},
	{nftServiceEndpointsCheck, nftFilterForward, "ct state new"},
	{nftServiceEndpointsCheck, nftFilterOutput, "ct state new"},
	{nftFirewallCheck, nftFilterPreroutingPreDNAT, "ct state new"},
	{nftFirewallCheck, nftFilterOutputPreDNAT, "ct state new"},
	{nftServicesChain, nftNATOutput, ""},
	{nftServicesChain, nftNATPrerouting, ""},
	{nftMasquerading, nftNATPostrouting, ""},
	{nftClusterIPsCheck, nftFilterForward, "ct state new"},
	{nftClusterIPsCheck, nftFilterOutput, "ct state new"},
}

// nftManagedSets are the shared sets and maps whose elements the proxier
// keeps in memory and diffs (kube-proxy's nftElementStorage containers);
// nodeport-ips is rewritten whole by every full sync instead.
var nftManagedSets = []string{
	nftClusterIPsSet, nftServiceIPsMap, nftFirewallIPsMap, nftNoEndpointServicesMap,
	nftNoEndpointNodePortsMap, nftServiceNodePortsMap, nftHairpinSet,
}

// nftKeyFields is the number of key fields of each managed set and map.
var nftKeyFields = map[string]int{
	nftClusterIPsSet: 1, nftServiceIPsMap: 3, nftFirewallIPsMap: 3, nftNoEndpointServicesMap: 3,
	nftNoEndpointNodePortsMap: 2, nftServiceNodePortsMap: 2, nftHairpinSet: 4,
}

// checkListed says whether a backend listed an element of a managed set
// or map as it was written (the key's field count, a value for map
// elements): anything else is a backend that cannot decode the set, and
// diffing against it would write nonsense.
func checkListed(set string, e *nft.Element) error {
	_, isSet := setOrMap(set).(*nft.Set)
	fields := nftKeyFields[set]
	if strings.HasPrefix(set, nftDNATMapPrefix) {
		fields = 1
	}
	if len(e.Key) != fields || (e.Value == "") != isSet {
		return fmt.Errorf("the backend listed element %q (value %q) of %s, which has %d key fields", strings.Join(e.Key, " . "), e.Value, set, fields)
	}
	return nil
}

// nftMasqueradeRule is kube-proxy's masqueradeRule with the default
// masquerade bit 14, formatted as it formats it ("%#08x").
var nftMasqueradeRule = "mark set mark or " + masqMark

// nftHashName is kube-proxy's hashAndTruncate: the first 8 characters of
// base32(sha256(name)), "-", name, cut to the name length limit.
func nftHashName(name string) string {
	sum := sha256.Sum256([]byte(name))
	name = base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	if len(name) > nftNameBaseMax {
		name = name[:nftNameBaseMax-3] + "..."
	}
	return name
}

// nftChainBase is servicePortChainNameBase: "HASH-ns/svc/proto/portname".
func nftChainBase(sp *servicePort) string {
	return nftHashName(sp.svc.Namespace + "/" + sp.svc.Name + "/" + sp.protocol + "/" + sp.portName)
}

// nftEndpointBase is servicePortEndpointChainNameBase:
// "HASH-ns/svc/proto/portname__ip/port", an IPv6 address's colons (not
// allowed in a name) written as dots, as upstream does.
func nftEndpointBase(sp *servicePort, e *endpoint) string {
	return nftHashName(sp.svc.Namespace + "/" + sp.svc.Name + "/" + sp.protocol + "/" + sp.portName +
		"__" + strings.ReplaceAll(e.ip, ":", ".") + "/" + strconv.Itoa(e.port))
}

// nftServiceChain reports whether a chain is a per-service or per-endpoint
// one: they, and only they, have a "/" in their name.
func nftServiceChain(name string) bool { return strings.Contains(name, "/") }

func nftComment(s string) string {
	if len(s) > nftCommentMax {
		return s[:nftCommentMax]
	}
	return s
}

// nftRenderConfig is what rendering needs besides the services.
type nftRenderConfig struct {
	// clusterCIDR drives the local detector ("ip saddr 10.244.0.0/16");
	// empty disables it.
	clusterCIDR string
	// serviceCIDRs are dropped by cluster-ips-check when unallocated.
	serviceCIDRs  []string
	nodeIP        netip.Addr
	masqueradeAll bool
	// ipv6: the table is `ip6 kube-proxy`, the IPv6 proxier's of a
	// dual-stack node: the same chains, sets and maps, with ip6 matches
	// and ipv6_addr keys (upstream's ipX and ipvX_addr).
	ipv6 bool
}

// ip is the address match's protocol: "ip" or "ip6".
func (c *nftRenderConfig) ip() string {
	if c.ipv6 {
		return "ip6"
	}
	return "ip"
}

// addrType is the family's nft address type.
func (c *nftRenderConfig) addrType() string {
	if c.ipv6 {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

// family is the table's family.
func (c *nftRenderConfig) family() nft.Family { return nftFamily(c.ipv6) }

func nftFamily(ipv6 bool) nft.Family {
	if ipv6 {
		return nft.IPv6Family
	}
	return nft.IPv4Family
}

// nftChain is one regular chain with its rules.
type nftChain struct {
	name  string
	rules []nft.Rule
	text  string // rules and comments joined, to compare renderings cheaply
}

// nftElem is one element a service port owns in a shared set or map.
type nftElem struct {
	set     string
	key     []string
	value   string
	comment string
}

func (e *nftElem) keyString() string { return strings.Join(e.key, " . ") }

// nftServiceRules is everything one service port contributes to the table.
type nftServiceRules struct {
	sp *servicePort
	// chains in kube-proxy's creation order: endpoint chains (affinity
	// only), the cluster and local policy chains, external, firewall.
	chains []nftChain
	// sets are the per-endpoint affinity sets.
	sets  []nft.Set
	elems []nftElem
	// Local ready endpoints, for the health check server.
	localEndpoints int
	// Serving endpoint IPs, for conntrack cleanup.
	serving []string
	// rules counts the rules of chains.
	rules int
	// blocks are the chains that hold a block of dnat-endpoints keys.
	blocks []string
}

// nftBlocks allocates the keys of the dnat-endpoints maps: each service
// chain that picks an endpoint by "numgen random mod N offset B map
// @dnat-endpoints-PROTO-M" owns the keys [B, B+size) of map M of its
// protocol, size the power of two at or above N when allocated, so an
// endpoint replaced is one element changed and a count that still fits
// (down to a quarter of the size) keeps its place (the rule changes, its
// mod N). A chain keeps its block across syncs,
// partial or full, until its count needs another size or the chain goes;
// freed blocks are reused, smallest first, before a map's unused keys and
// before a new map.
//
// Why many maps of nftDNATMapKeys keys and not one: binding a rule's lookup
// to a map makes the kernel walk the map's list of bindings and all its
// elements (nf_tables_bind_check_setelem), so one map for 10,000 services
// made a first full sync quadratic (6.7 s, 56 s over an earlier table).
// Maps are found by name in a list too, but there are ~100 at 10,000
// services. Maps stay for the process's life (a full sync removes an
// earlier process's ones it does not use). Owned by the sync goroutine.
type nftBlocks struct {
	byChain map[string]nftBlock
	maps    map[string][]*nftKeySpace // protocol -> its maps, by number
}

type nftBlock struct {
	proto             string
	space, base, size int
}

// nftKeySpace is one map's keys: the blocks freed, by size, and the first
// key never used.
type nftKeySpace struct {
	free      map[int][]int
	next, cap int
}

func newNFTBlocks() *nftBlocks {
	return &nftBlocks{byChain: map[string]nftBlock{}, maps: map[string][]*nftKeySpace{}}
}

// nftDNATMapName is the name of a protocol's map number i.
func nftDNATMapName(proto string, i int) string {
	return nftDNATMapPrefix + proto + "-" + strconv.Itoa(i)
}

// get returns the map and base of chain's block for n endpoints of proto,
// allocating it.
func (b *nftBlocks) get(chain, proto string, n int) (string, int) {
	size := 1
	for size < n {
		size *= 2
	}
	if cur, ok := b.byChain[chain]; ok {
		// A block keeps serving while it fits and is no more than four
		// times too large: a count going up and down moves no keys.
		if cur.proto == proto && n <= cur.size && n*4 > cur.size {
			return nftDNATMapName(proto, cur.space), cur.base
		}
		b.release(chain)
	}
	spaces := b.maps[proto]
	blk := nftBlock{proto: proto, space: -1, size: size}
	for i, ks := range spaces {
		if f := ks.free[size]; len(f) > 0 {
			blk.space, blk.base, ks.free[size] = i, f[0], f[1:]
			break
		}
	}
	if blk.space < 0 {
		for i, ks := range spaces {
			if ks.next+size <= ks.cap {
				blk.space, blk.base = i, ks.next
				ks.next += size
				break
			}
		}
	}
	if blk.space < 0 {
		ks := &nftKeySpace{free: map[int][]int{}, cap: max(nftDNATMapKeys, size), next: size}
		b.maps[proto] = append(spaces, ks)
		blk.space = len(spaces)
	}
	b.byChain[chain] = blk
	return nftDNATMapName(proto, blk.space), blk.base
}

// release frees chain's block, if it has one.
func (b *nftBlocks) release(chain string) {
	cur, ok := b.byChain[chain]
	if !ok {
		return
	}
	delete(b.byChain, chain)
	ks := b.maps[cur.proto][cur.space]
	f := ks.free[cur.size]
	i := sort.SearchInts(f, cur.base)
	ks.free[cur.size] = append(f[:i], append([]int{cur.base}, f[i:]...)...)
}

// mapNames returns the names of every map allocated, by protocol and
// number.
func (b *nftBlocks) mapNames() []string {
	var out []string
	for _, proto := range []string{"sctp", "tcp", "udp"} {
		for i := range b.maps[proto] {
			out = append(out, nftDNATMapName(proto, i))
		}
	}
	return out
}

// nftDNATMap is the declaration of a dnat-endpoints map (of IPv6
// endpoints in the ip6 table).
func nftDNATMap(name string, ipv6 bool) *nft.Map {
	proto, _, _ := strings.Cut(strings.TrimPrefix(name, nftDNATMapPrefix), "-")
	typ := nft.TypeofNumgenEndpoints(proto)
	if ipv6 {
		typ = nft.TypeofNumgenEndpoints6(proto)
	}
	return &nft.Map{Name: name, Type: typ,
		Comment: proto + " endpoints of services, in the blocks of keys their chains pick from"}
}

// renderNFTService is the per-service part of kube-proxy's syncProxyRules.
// Chains that DNAT take their block of dnat-endpoints keys from blocks.
func renderNFTService(cfg *nftRenderConfig, sp *servicePort, eps []*endpoint, blocks *nftBlocks) *nftServiceRules {
	out := &nftServiceRules{sp: sp}
	proto := sp.protocol
	port := strconv.Itoa(sp.port)
	comment := nftComment(sp.name)
	cluster, local, reachable, hasEndpoints := categorize(sp, eps)
	out.localEndpoints, out.serving = readyAndServing(local, eps)
	base := nftChainBase(sp)
	clusterChain, localChain := nftPrefixService+base, nftPrefixLocal+base
	extChain, fwChain := nftPrefixExternal+base, nftPrefixFirewall+base
	affinity := sp.affinity > 0

	chains := map[string]*nftChain{}
	var order []string
	ensure := func(name string) {
		if chains[name] == nil {
			chains[name] = &nftChain{name: name}
			order = append(order, name)
		}
	}
	add := func(chain, rule, comment string) {
		c := chains[chain]
		c.rules = append(c.rules, nft.Rule{Chain: chain, Rule: rule, Comment: comment})
	}
	elem := func(set string, key []string, value, comment string) {
		out.elems = append(out.elems, nftElem{set: set, key: key, value: value, comment: comment})
	}

	epChain := map[*endpoint]string{}
	epSet := map[*endpoint]string{}
	for _, e := range reachable {
		b := nftEndpointBase(sp, e)
		epChain[e], epSet[e] = nftPrefixEndpoint+b, nftPrefixAffinity+b
		if affinity {
			ensure(epChain[e])
		}
		if e.local {
			elem(nftHairpinSet, []string{e.ip, e.ip, proto, strconv.Itoa(e.port)}, "", "")
		}
	}

	usesClusterChain := len(cluster) > 0 && sp.usesClusterEndpoints()
	if usesClusterChain {
		ensure(clusterChain)
	}
	usesLocalChain := len(local) > 0 && sp.usesLocalEndpoints()
	if usesLocalChain {
		ensure(localChain)
	}
	internalChain, hasInternal := clusterChain, hasEndpoints
	if sp.internalLocal {
		internalChain = localChain
		if len(local) == 0 {
			hasInternal = false
		}
	}
	externalPolicyChain, hasExternal := clusterChain, hasEndpoints
	if sp.externalLocal {
		externalPolicyChain = localChain
		if len(local) == 0 {
			hasExternal = false
		}
	}
	usesExtChain := hasEndpoints && sp.externallyAccessible()
	if usesExtChain {
		ensure(extChain)
	}

	var internalVerdict, externalVerdict string
	if !hasEndpoints {
		internalVerdict, externalVerdict = nftRejectVerdict, nftRejectVerdict
	} else {
		if !hasInternal {
			internalVerdict = "drop"
		}
		if !hasExternal {
			externalVerdict = "drop"
		}
	}

	// Capture the cluster IP.
	cip := sp.clusterIP.String()
	elem(nftClusterIPsSet, []string{cip}, "", "")
	if hasInternal {
		elem(nftServiceIPsMap, []string{cip, proto, port}, "goto "+internalChain, "")
	} else {
		elem(nftNoEndpointServicesMap, []string{cip, proto, port}, internalVerdict, comment)
	}

	// Capture externalIPs.
	for _, ip := range sp.externalIPs {
		if hasEndpoints {
			elem(nftServiceIPsMap, []string{ip.String(), proto, port}, "goto "+extChain, "")
		}
		if !hasExternal {
			elem(nftNoEndpointServicesMap, []string{ip.String(), proto, port}, externalVerdict, comment)
		}
	}

	// Capture load-balancer ingress IPs.
	usesFWChain := len(sp.lbIPs) > 0 && len(sp.sourceRanges) > 0
	if usesFWChain {
		ensure(fwChain)
	}
	for _, ip := range sp.lbIPs {
		if hasEndpoints {
			elem(nftServiceIPsMap, []string{ip.String(), proto, port}, "goto "+extChain, "")
		}
		if usesFWChain {
			elem(nftFirewallIPsMap, []string{ip.String(), proto, port}, "goto "+fwChain, "")
		}
	}
	if !hasExternal {
		for _, ip := range sp.lbIPs {
			elem(nftNoEndpointServicesMap, []string{ip.String(), proto, port}, externalVerdict, comment)
		}
	}

	// Capture node ports; they are not subject to loadBalancerSourceRanges.
	if sp.nodePort != 0 {
		np := strconv.Itoa(sp.nodePort)
		if hasEndpoints {
			elem(nftServiceNodePortsMap, []string{proto, np}, "goto "+extChain, "")
		}
		if !hasExternal {
			elem(nftNoEndpointNodePortsMap, []string{proto, np}, externalVerdict, comment)
		}
	}

	if usesExtChain {
		if !sp.externalLocal {
			// Endpoints may be on other nodes: masquerade so replies return.
			add(extChain, nftMasqueradeRule, "masquerade")
		} else {
			if cfg.clusterCIDR != "" {
				// Pod -> external destination is subject to neither traffic
				// policy, as if it went out to the load balancer and back.
				add(extChain, cfg.ip()+" saddr "+cfg.clusterCIDR+" goto "+clusterChain, "short-circuit pod traffic")
			}
			// The node itself has a local source address (the LB IP is
			// local): masquerade it and send it to any endpoint.
			add(extChain, "fib saddr type local "+nftMasqueradeRule, "masquerade local traffic")
			add(extChain, "fib saddr type local goto "+clusterChain, "short-circuit local traffic")
		}
		if hasExternal {
			add(extChain, "goto "+externalPolicyChain, "")
		}
	}

	if usesFWChain {
		var sources []string
		allowFromNode := false
		for _, r := range sp.sourceRanges {
			sources = append(sources, r.String())
			if cfg.nodeIP.IsValid() && r.Contains(cfg.nodeIP) {
				allowFromNode = true
			}
		}
		if allowFromNode {
			// A node reaching its own LB VIP loops back with the VIP as source.
			for _, ip := range sp.lbIPs {
				sources = append(sources, ip.String())
			}
		}
		add(fwChain, cfg.ip()+" saddr != { "+strings.Join(sources, " , ")+" } drop", "")
	}

	if affinity {
		for _, e := range reachable {
			out.sets = append(out.sets, nft.Set{
				Name: epSet[e], Type: cfg.addrType(),
				// "dynamic" as kube-proxy: some kernels add it anyway, and a
				// later add without it would then fail.
				Flags:   []string{"dynamic", "timeout"},
				Timeout: time.Duration(sp.affinity) * time.Second,
			})
		}
	}

	if !affinity {
		dnat := func(chain string, eps []*endpoint) {
			m, base := blocks.get(chain, proto, len(eps))
			out.blocks = append(out.blocks, chain)
			add(chain, nftDNATRule(cfg.ip(), proto, m, base, len(eps)), "")
			for i, e := range eps {
				elem(m, []string{strconv.Itoa(base + i)}, e.ip+" . "+strconv.Itoa(e.port), "")
			}
		}
		if usesClusterChain {
			dnat(clusterChain, cluster)
		}
		if usesLocalChain {
			dnat(localChain, local)
		}
	} else {
		jumps := func(chain string, eps []*endpoint) {
			for _, e := range eps {
				add(chain, cfg.ip()+" saddr @"+epSet[e]+" goto "+epChain[e], "")
			}
			for i, e := range eps {
				add(chain, numgenPick(i, len(eps))+"goto "+epChain[e], "")
			}
		}
		if usesClusterChain {
			jumps(clusterChain, cluster)
		}
		if usesLocalChain {
			jumps(localChain, local)
		}
		for _, e := range reachable {
			add(epChain[e], "update @"+epSet[e]+" { "+cfg.ip()+" saddr }", "")
			add(epChain[e], "meta l4proto "+proto+" dnat to "+net.JoinHostPort(e.ip, strconv.Itoa(e.port)), "")
		}
	}

	for _, name := range order {
		c := chains[name]
		var b strings.Builder
		for _, r := range c.rules {
			b.WriteString(r.Rule)
			b.WriteString(" # ")
			b.WriteString(r.Comment)
			b.WriteByte('\n')
		}
		c.text = b.String()
		out.rules += len(c.rules)
		out.chains = append(out.chains, *c)
	}
	return out
}

// nftDNATRule is the one rule of a service chain that DNATs to one of its n
// endpoints: a random number in the chain's block [base, base+n) of keys,
// looked up in the dnat-endpoints-PROTO-M map m (nft omits "offset 0"). Maps
// per protocol because nft checks the map's typeof ("tcp dport") against
// the rule's "meta l4proto".
//
// This is where minikit parts from kube-proxy, which writes an anonymous
// map per service ("dnat ip addr . port to numgen random mod n map { 0 :
// A . P, ... }"). The kernel finds a set by walking the table's list of
// sets, once to create it and once to bind it, so 10,000 anonymous maps
// made a first full sync at 10,000 services quadratic (5.3-5.9 s). One
// shared map keeps the table's set list short, and an endpoint replaced is
// one element of a map no base chain's verdict depends on: the commit
// validates no chain. A changed endpoint count replaces this rule (its mod).
func nftDNATRule(ip, proto, m string, base, n int) string {
	r := "meta l4proto " + proto + " dnat " + ip + " to numgen random mod " + strconv.Itoa(n)
	if base != 0 {
		r += " offset " + strconv.Itoa(base)
	}
	return r + " map @" + m
}

// numgenPick is the match that takes the i-th of n choices with probability
// 1/(n-i), as nft prints it; the last choice takes what is left.
func numgenPick(i, n int) string {
	if i == n-1 {
		return ""
	}
	return "numgen random mod " + strconv.Itoa(n-i) + " 0 "
}

// nftSetup is kube-proxy's setupNFTables: the table, its base chains (added
// and flushed), the top-level chains and the jumps into them, the shared
// sets and maps, and the fixed rules. It returns the rule count of every
// fixed chain, for the drift monitor. Elements of the managed sets are the
// caller's; nodeport-ips is flushed and refilled here.
func nftSetup(tx *nft.Transaction, cfg *nftRenderConfig) map[string]int {
	counts := map[string]int{}
	rule := func(chain, text, comment string) {
		tx.Add(&nft.Rule{Chain: chain, Rule: text, Comment: comment})
		counts[chain]++
	}
	created := map[string]bool{}
	ensure := func(name string) {
		if created[name] {
			return
		}
		created[name] = true
		counts[name] += 0
		tx.Add(&nft.Chain{Name: name})
		tx.Flush(&nft.Chain{Name: name})
	}

	tx.Add(&nft.Table{Family: cfg.family(), Name: nftTableName, Comment: "rules for kube-proxy"})
	for i := range nftBaseChains {
		c := nftBaseChains[i]
		tx.Add(&c)
		tx.Flush(&nft.Chain{Name: c.Name})
		counts[c.Name] += 0
	}
	for _, j := range nftJumps {
		ensure(j.dst)
		text := "jump " + j.dst
		if j.extra != "" {
			text = j.extra + " " + text
		}
		rule(j.src, text, "")
	}
	for _, c := range []string{nftServicesChain, nftClusterIPsCheck, nftMasquerading} {
		ensure(c)
	}

	ip, addr := cfg.ip(), cfg.addrType()
	tx.Add(&nft.Set{Name: nftHairpinSet, Type: addr + " . " + addr + " . inet_proto . inet_service", Comment: "service hairpin connections"})
	rule(nftMasquerading, "mark and "+masqMark+" != 0 mark set mark xor "+masqMark+" masquerade fully-random", "")
	rule(nftMasquerading, "ct status dnat "+ip+" saddr . "+ip+" daddr . meta l4proto . th dport @"+nftHairpinSet+" masquerade fully-random", "")

	tx.Add(&nft.Set{Name: nftClusterIPsSet, Type: addr, Comment: "Active ClusterIPs"})
	rule(nftClusterIPsCheck, ip+" daddr @"+nftClusterIPsSet+" reject", "Reject traffic to invalid ports of ClusterIPs")
	if len(cfg.serviceCIDRs) > 0 {
		rule(nftClusterIPsCheck, ip+" daddr { "+strings.Join(cfg.serviceCIDRs, ",")+" } drop", "Drop traffic to unallocated ClusterIPs")
	}

	// NodePorts are accepted on the node's IP only (kube-proxy's default
	// nodePortAddresses "primary" in nftables mode): never on 127.0.0.1.
	tx.Add(&nft.Set{Name: nftNodePortIPsSet, Type: addr, Comment: "IPs that accept NodePort traffic"})
	tx.Flush(&nft.Set{Name: nftNodePortIPsSet})
	if cfg.nodeIP.IsValid() && !cfg.nodeIP.IsLoopback() {
		tx.Add(&nft.Element{Set: nftNodePortIPsSet, Key: []string{cfg.nodeIP.String()}})
	}

	tx.Add(&nft.Map{Name: nftNoEndpointServicesMap, Type: addr + " . inet_proto . inet_service : verdict",
		Comment: "vmap to drop or reject packets to services with no endpoints"})
	tx.Add(&nft.Map{Name: nftNoEndpointNodePortsMap, Type: "inet_proto . inet_service : verdict",
		Comment: "vmap to drop or reject packets to service nodeports with no endpoints"})
	tx.Add(&nft.Chain{Name: nftRejectChain, Comment: "helper for @no-endpoint-services / @no-endpoint-nodeports"})
	tx.Flush(&nft.Chain{Name: nftRejectChain})
	rule(nftRejectChain, "reject", "")
	rule(nftServiceEndpointsCheck, ip+" daddr . meta l4proto . th dport vmap @"+nftNoEndpointServicesMap, "")
	rule(nftNodePortEndpointsCheck, ip+" daddr @"+nftNodePortIPsSet+" meta l4proto . th dport vmap @"+nftNoEndpointNodePortsMap, "")

	tx.Add(&nft.Map{Name: nftFirewallIPsMap, Type: addr + " . inet_proto . inet_service : verdict",
		Comment: "destinations that are subject to LoadBalancerSourceRanges"})
	ensure(nftFirewallCheck)
	rule(nftFirewallCheck, ip+" daddr . meta l4proto . th dport vmap @"+nftFirewallIPsMap, "")

	tx.Add(&nft.Map{Name: nftServiceIPsMap, Type: addr + " . inet_proto . inet_service : verdict",
		Comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"})
	tx.Add(&nft.Map{Name: nftServiceNodePortsMap, Type: "inet_proto . inet_service : verdict", Comment: "NodePort traffic"})
	if cfg.masqueradeAll {
		rule(nftServicesChain, ip+" daddr @"+nftClusterIPsSet+" "+nftMasqueradeRule, "masquerade all clusterIP traffic")
	} else if cfg.clusterCIDR != "" {
		// Off-cluster traffic to a service VIP may have been routed here
		// from elsewhere: masquerade it so the reply comes back this way.
		rule(nftServicesChain, ip+" daddr @"+nftClusterIPsSet+" "+ip+" saddr != "+cfg.clusterCIDR+" "+nftMasqueradeRule,
			"masquerade clusterIP traffic from outside cluster")
	}
	rule(nftServicesChain, ip+" daddr . meta l4proto . th dport vmap @"+nftServiceIPsMap, "")
	rule(nftServicesChain, ip+" daddr @"+nftNodePortIPsSet+" meta l4proto . th dport vmap @"+nftServiceNodePortsMap, "")
	return counts
}
