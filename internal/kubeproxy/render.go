package kubeproxy

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// This file renders kube-proxy's iptables rules (pkg/proxy/iptables/proxier.go,
// syncProxyRules) from servicePorts and endpoints. Rendering is pure: the same
// input always gives the same text, so golden tests pin it down.

// chain is one chain and its rules, each a complete "-A NAME ..." line.
type chain struct {
	name  string
	rules []string
	// text is the rules joined, computed once when the chain is rendered so
	// that partial syncs compare unchanged services' chains without
	// re-joining them (a cached service's chains share their strings).
	text string
}

// targeted is a rule for a shared top-level chain together with its jump
// target; the target orders KUBE-SERVICES and KUBE-NODEPORTS (see sortByTarget).
type targeted struct {
	target string
	rule   string
	// seq orders rules of one service port with the same target: the
	// counted localhost NodePort rule must precede the general one.
	seq int
}

// serviceRules is everything one service port contributes to the rule set.
type serviceRules struct {
	sp *servicePort
	// Rules it adds to the shared chains.
	natServices, natNodePorts                                       []targeted
	filterServices, filterExternal, filterNodePorts, filterFirewall []string
	// Its own nat chains in kube-proxy's declaration order: EXT, FW, SVC, SVL, SEPs.
	chains []chain
	// Local ready endpoints, for the health check server.
	localEndpoints int
	// Serving endpoints ("ip:port"), for conntrack cleanup.
	serving []string
}

// renderConfig is what rendering needs besides the services.
type renderConfig struct {
	// clusterCIDR drives kube-proxy's DetectLocalByCIDR: traffic from it is pod
	// traffic. Empty disables the local detector.
	clusterCIDR string
	// nodeIP is used only for loadBalancerSourceRanges that contain the node.
	nodeIP        netip.Addr
	masqueradeAll bool
	// largeCluster drops per-endpoint comments, as kube-proxy does above
	// 1000 endpoints in total.
	largeCluster bool
	// countLocalhost adds kube-proxy's counted NodePort rule for
	// 127.0.0.0/8 (localhost NodePorts on, and the nfacct counter exists).
	countLocalhost bool
}

// largeClusterEndpointsThreshold is kube-proxy's.
const largeClusterEndpointsThreshold = 1000

// rule joins args into one restore line. Arguments are written exactly as
// given: comments with spaces already carry their double quotes.
func rule(args ...string) string {
	n := len(args)
	for _, a := range args {
		n += len(a)
	}
	var b strings.Builder
	b.Grow(n)
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

// quote writes s as one double-quoted iptables-restore word, as iptables-save
// prints a comment with spaces. The API's validation keeps names, namespaces
// and port names to DNS labels, so nothing here needs escaping in practice;
// quote does not rely on that: it escapes '"' and '\\' and drops control
// characters, so no input can end the word, the rule or the line.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// commentWord writes a comment the way iptables-save does: bare when it is one
// plain word (kube-proxy's "ns/name:port" comments are), quoted otherwise.
func commentWord(s string) string {
	if s == "" {
		return quote(s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("/:._-", c) >= 0) {
			return quote(s)
		}
	}
	return s
}

// readyAndServing are what the health check and the UDP conntrack cleanup
// keep of a service port's endpoints: how many of this node's are ready, and
// the addresses ("ip:port": a flow answered from the right IP but a target
// port the service no longer uses is stale too) of all that are serving.
func readyAndServing(local, eps []*endpoint) (localReady int, serving []string) {
	for _, e := range local {
		if e.ready {
			localReady++
		}
	}
	for _, e := range eps {
		if e.serving {
			serving = append(serving, e.addr)
		}
	}
	return localReady, serving
}

// renderService is the per-service part of syncProxyRules.
func renderService(cfg *renderConfig, sp *servicePort, eps []*endpoint) *serviceRules {
	out := &serviceRules{sp: sp}
	proto := sp.protocol
	cluster, local, reachable, hasEndpoints := categorize(sp, eps)
	out.localEndpoints, out.serving = readyAndServing(local, eps)

	usesClusterChain := len(cluster) > 0 && sp.usesClusterEndpoints()
	usesLocalChain := len(local) > 0 && sp.usesLocalEndpoints()

	internalChain, hasInternal := sp.svcChain, hasEndpoints
	if sp.internalLocal {
		internalChain = sp.svlChain
		if len(local) == 0 {
			hasInternal = false
		}
	}
	externalPolicyChain, hasExternal := sp.svcChain, hasEndpoints
	if sp.externalLocal {
		externalPolicyChain = sp.svlChain
		if len(local) == 0 {
			hasExternal = false
		}
	}
	usesExtChain := hasEndpoints && sp.externallyAccessible()
	lbChain := sp.extChain
	usesFWChain := hasEndpoints && len(sp.lbIPs) > 0 && len(sp.sourceRanges) > 0
	if usesFWChain {
		lbChain = sp.fwChain
	}

	var internalFilterTarget, internalFilterComment, externalFilterTarget, externalFilterComment string
	if !hasEndpoints {
		internalFilterTarget, externalFilterTarget = "REJECT", "REJECT"
		internalFilterComment = quote(sp.name + " has no endpoints")
		externalFilterComment = internalFilterComment
	} else {
		if !hasInternal {
			internalFilterTarget = "DROP"
			internalFilterComment = quote(sp.name + " has no local endpoints")
		}
		if !hasExternal {
			externalFilterTarget = "DROP"
			externalFilterComment = quote(sp.name + " has no local endpoints")
		}
	}

	port := strconv.Itoa(sp.port)
	cip := sp.clusterIP.String()

	// Capture the cluster IP.
	if hasInternal {
		out.natServices = append(out.natServices, targeted{target: internalChain, rule: rule("-A", chainServices,
			"-m", "comment", "--comment", quote(sp.name+" cluster IP"),
			"-m", proto, "-p", proto, "-d", cip, "--dport", port, "-j", internalChain)})
	} else {
		out.filterServices = append(out.filterServices, rule("-A", chainServices,
			"-m", "comment", "--comment", internalFilterComment,
			"-m", proto, "-p", proto, "-d", cip, "--dport", port, "-j", internalFilterTarget))
	}

	// Capture externalIPs.
	for _, ip := range sp.externalIPs {
		if hasEndpoints {
			out.natServices = append(out.natServices, targeted{target: sp.extChain, rule: rule("-A", chainServices,
				"-m", "comment", "--comment", quote(sp.name+" external IP"),
				"-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", sp.extChain)})
		}
		if !hasExternal {
			out.filterExternal = append(out.filterExternal, rule("-A", chainExternalServices,
				"-m", "comment", "--comment", externalFilterComment,
				"-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", externalFilterTarget))
		}
	}

	// Capture load-balancer ingress IPs.
	for _, ip := range sp.lbIPs {
		if hasEndpoints {
			out.natServices = append(out.natServices, targeted{target: lbChain, rule: rule("-A", chainServices,
				"-m", "comment", "--comment", quote(sp.name+" loadbalancer IP"),
				"-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", lbChain)})
		}
		if usesFWChain {
			out.filterFirewall = append(out.filterFirewall, rule("-A", chainProxyFirewall,
				"-m", "comment", "--comment", quote(sp.name+" traffic not accepted by "+sp.fwChain),
				"-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", "DROP"))
		}
	}
	if !hasExternal {
		for _, ip := range sp.lbIPs {
			out.filterExternal = append(out.filterExternal, rule("-A", chainExternalServices,
				"-m", "comment", "--comment", externalFilterComment,
				"-m", proto, "-p", proto, "-d", ip.String(), "--dport", port, "-j", externalFilterTarget))
		}
	}

	// Capture node ports. NodePorts are not subject to loadBalancerSourceRanges.
	if sp.nodePort != 0 {
		np := strconv.Itoa(sp.nodePort)
		if hasEndpoints {
			if cfg.countLocalhost {
				// Only counts: the next rule matches these packets too.
				out.natNodePorts = append(out.natNodePorts, targeted{sp.extChain, rule("-A", chainNodePorts,
					"-m", "comment", "--comment", commentWord(sp.name),
					"-m", proto, "-p", proto, "-d", "127.0.0.0/8", "--dport", np,
					"-m", "nfacct", "--nfacct-name", CounterLocalhostNodePorts, "-j", sp.extChain), 0})
			}
			out.natNodePorts = append(out.natNodePorts, targeted{sp.extChain, rule("-A", chainNodePorts,
				"-m", "comment", "--comment", commentWord(sp.name),
				"-m", proto, "-p", proto, "--dport", np, "-j", sp.extChain), 1})
		}
		if !hasExternal {
			out.filterExternal = append(out.filterExternal, rule("-A", chainExternalServices,
				"-m", "comment", "--comment", externalFilterComment,
				"-m", "addrtype", "--dst-type", "LOCAL",
				"-m", proto, "-p", proto, "--dport", np, "-j", externalFilterTarget))
		}
	}

	// Health check node port: accepted whether or not this node has endpoints.
	if sp.hcNodePort != 0 {
		out.filterNodePorts = append(out.filterNodePorts, rule("-A", chainNodePorts,
			"-m", "comment", "--comment", quote(sp.name+" health check node port"),
			"-m", "tcp", "-p", "tcp", "--dport", strconv.Itoa(sp.hcNodePort), "-j", "ACCEPT"))
	}

	// The service's own chains. Rules of the internal chain's masquerade come
	// first, as kube-proxy writes them before the endpoint rules.
	var internalMasq string
	if hasInternal {
		args := []string{"-A", internalChain,
			"-m", "comment", "--comment", quote(sp.name + " cluster IP"),
			"-m", proto, "-p", proto, "-d", cip, "--dport", port}
		if cfg.masqueradeAll {
			internalMasq = rule(append(args, "-j", chainMarkMasq)...)
		} else if cfg.clusterCIDR != "" {
			// Masquerade off-cluster traffic to a service VIP: it may have been
			// routed here from elsewhere and the reply must come back this way.
			internalMasq = rule(append(args, "!", "-s", cfg.clusterCIDR, "-j", chainMarkMasq)...)
		}
	}

	if usesExtChain {
		ext := chain{name: sp.extChain}
		if !sp.externalLocal {
			ext.rules = append(ext.rules, rule("-A", sp.extChain,
				"-m", "comment", "--comment", quote("masquerade traffic for "+sp.name+" external destinations"),
				"-j", chainMarkMasq))
		} else {
			if cfg.clusterCIDR != "" {
				// Pod -> external destination is subject to neither traffic
				// policy: it goes to every endpoint, unmasqueraded.
				ext.rules = append(ext.rules, rule("-A", sp.extChain,
					"-m", "comment", "--comment", quote("pod traffic for "+sp.name+" external destinations"),
					"-s", cfg.clusterCIDR, "-j", sp.svcChain))
			}
			ext.rules = append(ext.rules,
				rule("-A", sp.extChain,
					"-m", "comment", "--comment", quote("masquerade LOCAL traffic for "+sp.name+" external destinations"),
					"-m", "addrtype", "--src-type", "LOCAL", "-j", chainMarkMasq),
				rule("-A", sp.extChain,
					"-m", "comment", "--comment", quote("route LOCAL traffic for "+sp.name+" external destinations"),
					"-m", "addrtype", "--src-type", "LOCAL", "-j", sp.svcChain))
		}
		if hasExternal {
			ext.rules = append(ext.rules, rule("-A", sp.extChain, "-j", externalPolicyChain))
		}
		out.chains = append(out.chains, ext)
	}

	if usesFWChain {
		fw := chain{name: sp.fwChain}
		comment := quote(sp.name + " loadbalancer IP")
		allowFromNode := false
		for _, r := range sp.sourceRanges {
			fw.rules = append(fw.rules, rule("-A", sp.fwChain, "-m", "comment", "--comment", comment,
				"-s", r.String(), "-j", sp.extChain))
			if cfg.nodeIP.IsValid() && r.Contains(cfg.nodeIP) {
				allowFromNode = true
			}
		}
		if allowFromNode {
			// A node reaching its own LB VIP loops back with the VIP as source.
			for _, ip := range sp.lbIPs {
				fw.rules = append(fw.rules, rule("-A", sp.fwChain, "-m", "comment", "--comment", comment,
					"-s", ip.String(), "-j", sp.extChain))
			}
		}
		// Whatever reaches the end was not DNATed; KUBE-PROXY-FIREWALL drops it.
		fw.rules = append(fw.rules, rule("-A", sp.fwChain,
			"-m", "comment", "--comment", quote("other traffic to "+sp.name+" will be dropped by KUBE-PROXY-FIREWALL")))
		out.chains = append(out.chains, fw)
	}

	if usesClusterChain {
		c := chain{name: sp.svcChain}
		if internalChain == sp.svcChain && internalMasq != "" {
			c.rules = append(c.rules, internalMasq)
		}
		c.rules = appendEndpointRules(cfg, c.rules, sp, sp.svcChain, cluster)
		out.chains = append(out.chains, c)
	}
	if usesLocalChain {
		c := chain{name: sp.svlChain}
		if internalChain == sp.svlChain && internalMasq != "" {
			c.rules = append(c.rules, internalMasq)
		}
		c.rules = appendEndpointRules(cfg, c.rules, sp, sp.svlChain, local)
		out.chains = append(out.chains, c)
	}

	for _, e := range reachable {
		c := chain{name: e.chain}
		args := []string{"-A", e.chain}
		if !cfg.largeCluster {
			args = append(args, "-m", "comment", "--comment", commentWord(sp.name))
		}
		// Hairpin: a pod reaching itself through the service is masqueraded so
		// the reply comes back through the node.
		c.rules = append(c.rules, rule(append(args[:len(args):len(args)], "-s", e.ip, "-j", chainMarkMasq)...))
		if sp.affinity > 0 {
			args = append(args, "-m", "recent", "--name", e.chain, "--set")
		}
		args = append(args, "-m", proto, "-p", proto, "-j", "DNAT", "--to-destination", e.addr)
		c.rules = append(c.rules, rule(args...))
		out.chains = append(out.chains, c)
	}
	for i := range out.chains {
		out.chains[i].text = strings.Join(out.chains[i].rules, "\n")
	}
	return out
}

// appendEndpointRules is writeServiceToEndpointRules: affinity checks first,
// then one rule per endpoint with probability 1/(n-i), the last unconditional.
func appendEndpointRules(cfg *renderConfig, rules []string, sp *servicePort, from string, eps []*endpoint) []string {
	comment := func(e *endpoint) []string {
		if cfg.largeCluster {
			return nil
		}
		return []string{"-m", "comment", "--comment", quote(sp.name + " -> " + e.addr)}
	}
	if sp.affinity > 0 {
		secs := strconv.Itoa(sp.affinity)
		for _, e := range eps {
			args := append([]string{"-A", from}, comment(e)...)
			args = append(args, "-m", "recent", "--name", e.chain, "--rcheck", "--seconds", secs, "--reap", "-j", e.chain)
			rules = append(rules, rule(args...))
		}
	}
	n := len(eps)
	for i, e := range eps {
		args := append([]string{"-A", from}, comment(e)...)
		if i < n-1 {
			args = append(args, "-m", "statistic", "--mode", "random", "--probability", probability(n-i))
		}
		args = append(args, "-j", e.chain)
		rules = append(rules, rule(args...))
	}
	return rules
}

// Fixed rules.

// fixedOptions are the settings the fixed chains depend on, decided at each
// full sync.
type fixedOptions struct {
	randomFully  bool
	tcpBeLiberal bool
	// localhostNodePorts: NodePorts answer on 127.0.0.0/8 (route_localnet=1,
	// guarded by KUBE-FIREWALL), kube-proxy's default.
	localhostNodePorts bool
	// countInvalid: the ct_state_invalid_dropped_pkts nfacct counter exists.
	countInvalid bool
	// ipv6: the rules are ip6tables', for the IPv6 proxier of a dual-stack
	// node. Localhost NodePorts never work on IPv6 (there is no
	// route_localnet), so kube-proxy keeps ::1 out of KUBE-NODEPORTS and
	// writes no KUBE-FIREWALL rule; localhostNodePorts is false with it.
	ipv6 bool
}

func postroutingRules(randomFully bool) []string {
	masq := rule("-A", chainPostrouting,
		"-m", "comment", "--comment", quote("kubernetes service traffic requiring SNAT"), "-j", "MASQUERADE")
	if randomFully {
		masq += " --random-fully"
	}
	return []string{
		rule("-A", chainPostrouting, "-m", "mark", "!", "--mark", masqMark+"/"+masqMark, "-j", "RETURN"),
		// Clear the mark so a packet that re-traverses the stack is not masqueraded twice.
		rule("-A", chainPostrouting, "-j", "MARK", "--xor-mark", masqMark),
		masq,
	}
}

func markMasqRules() []string {
	return []string{rule("-A", chainMarkMasq, "-j", "MARK", "--or-mark", masqMark)}
}

func forwardRules(fx fixedOptions) []string {
	var r []string
	if !fx.tcpBeLiberal {
		// INVALID packets would otherwise cause stray RSTs (kubernetes#74839).
		args := []string{"-A", chainForward, "-m", "conntrack", "--ctstate", "INVALID"}
		if fx.countInvalid {
			args = append(args, "-m", "nfacct", "--nfacct-name", CounterInvalidDropped)
		}
		r = append(r, rule(append(args, "-j", "DROP")...))
	}
	return append(r,
		rule("-A", chainForward, "-m", "comment", "--comment", quote("kubernetes forwarding rules"),
			"-m", "mark", "--mark", masqMark+"/"+masqMark, "-j", "ACCEPT"),
		rule("-A", chainForward, "-m", "comment", "--comment", quote("kubernetes forwarding conntrack rule"),
			"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"))
}

// firewallRules is KUBE-FIREWALL, kubelet's chain that kube-proxy writes too
// when it serves NodePorts on localhost: route_localnet=1 lets packets to
// 127.0.0.0/8 be routed, so one from off the node to a loopback address
// (CVE-2020-8558) is dropped unless conntrack knows it (a reply) or nat
// rewrote it (a NodePort DNAT).
func firewallRules(fx fixedOptions) []string {
	if !fx.localhostNodePorts || fx.ipv6 {
		return nil
	}
	return []string{rule("-A", chainFirewall,
		"-m", "comment", "--comment", quote("block incoming localnet connections"),
		"-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8",
		"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")}
}

// nodePortsTail is the last rule of nat KUBE-SERVICES: every local
// destination goes on to KUBE-NODEPORTS, 127.0.0.0/8 included when NodePorts
// are served on localhost (kube-proxy's default), excluded otherwise; ::1
// always excluded on IPv6.
func nodePortsTail(fx fixedOptions) string {
	args := []string{"-A", chainServices,
		"-m", "comment", "--comment", quote("kubernetes service nodeports; NOTE: this must be the last rule in this chain"),
		"-m", "addrtype", "--dst-type", "LOCAL"}
	if fx.ipv6 {
		args = append(args, "!", "-d", "::1/128")
	} else if !fx.localhostNodePorts {
		args = append(args, "!", "-d", "127.0.0.0/8")
	}
	return rule(append(args, "-j", chainNodePorts)...)
}

// sortByTarget orders rules of a shared chain by descending jump target.
//
// Why: with --noflush, iptables-nft 1.8.9 records every chain a restore names
// (each rule's chain and jump target) in a sorted linked list, inserting by a
// walk from the smallest name (nft-cache.c, cache_chain_list_insert). Names
// arriving in descending order are inserted at the head in O(1); random order
// costs O(chains) each. Measured here at 10,000 services, rewriting
// KUBE-SERVICES alone took 10.8 s in random order and 1.2 s in descending
// order. The order of these rules has no meaning for packets (each matches a
// distinct destination), kube-proxy itself writes them in map order, and the
// nodeports tail is appended after them.
func sortByTarget(rs []targeted) []string {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].target != rs[j].target {
			return rs[i].target > rs[j].target
		}
		if rs[i].seq != rs[j].seq {
			return rs[i].seq < rs[j].seq
		}
		return rs[i].rule < rs[j].rule
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.rule
	}
	return out
}
