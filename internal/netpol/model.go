package netpol

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Set types the enforcer creates.
const (
	setNet    = "hash:net"     // peer addresses: /32 pods and ipBlock CIDRs
	setIPPort = "hash:ip,port" // egress named ports: pod address, protocol:port
)

// Set is one ipset of the desired state.
type Set struct {
	Name string
	Type string
	// Family is ipset's family of the set: "" for inet (IPv4, ipset's
	// default), "inet6" for IPv6.
	Family string
	// Entries are canonical and sorted: "10.244.1.5/32", "10.0.0.0/8" for
	// hash:net; "10.244.1.5,tcp:8080" for hash:ip,port; IPv6 addresses in
	// netip's form ("fd00:10:244:1::5/128") in an inet6 set.
	Entries []string
	// Owner says which policy rule it serves, for logs and trace.
	Owner string
}

// Chain is one of the enforcer's chains with its rules in restore syntax.
type Chain struct {
	Name  string
	Rules []string
}

// State is the whole desired state of the enforcer on one node.
type State struct {
	Chains []Chain // sorted by name
	Sets   []Set   // sorted by name
	// Problems lists what was left out (an invalid selector, an unknown
	// protocol); objects the API validated never have any.
	Problems []string
	// SCTPRules counts the SCTP rules left out with Input.NoSCTP.
	SCTPRules int
}

// Input is what Compute works from.
type Input struct {
	NodeName   string
	Policies   []*networkingv1.NetworkPolicy
	Pods       []*corev1.Pod
	Namespaces []*corev1.Namespace
	// NoSCTP leaves SCTP rules out (the kernel refused them).
	NoSCTP bool
	// Family is the IP family enforced: IPv4 ("" too) for iptables, IPv6
	// for ip6tables. A dual-stack node runs one enforcer per family, as it
	// runs one proxier per family: each state holds its family's pod
	// addresses and ipBlocks only, so a peer matches on both families and an
	// ipBlock on its own.
	Family corev1.IPFamily
}

// family is what differs between the IPv4 and IPv6 renderings.
type family struct {
	v6 bool
}

func familyOf(f corev1.IPFamily) family { return family{v6: f == corev1.IPv6Protocol} }

// is reports whether a is an address of the family (an IPv4-mapped IPv6
// address is neither: pods and ipBlocks never carry one).
func (f family) is(a netip.Addr) bool {
	if f.v6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

// host is a's single-address prefix: "10.244.1.2/32", "fd00::2/128".
func (f family) host(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }

// groupBits is the prefix length of the hook chain's dispatch groups: 16
// addresses in either family.
func (f family) groupBits() int {
	if f.v6 {
		return 124
	}
	return 28
}

// unreachable is REJECT's ICMP answer for what no policy allows.
func (f family) unreachable() string {
	if f.v6 {
		return "icmp6-port-unreachable"
	}
	return "icmp-port-unreachable"
}

// setPrefix is the prefix of the family's ipset names: ipsets are not per
// family in the kernel, so the IPv6 sets have names of their own.
func (f family) setPrefix() string {
	if f.v6 {
		return PrefixSet6
	}
	return PrefixSet
}

// setFamily is Set.Family for the family's sets.
func (f family) setFamily() string {
	if f.v6 {
		return "inet6"
	}
	return ""
}

// podInfo is a pod that has an address of the enforced family on the pod network.
type podInfo struct {
	pod *corev1.Pod
	ip  netip.Addr
}

func (p podInfo) key() string { return p.pod.Namespace + "/" + p.pod.Name }

// podAddr returns the pod's address of family f on the pod network, if it
// has one that traffic can reach: not hostNetwork (its address is the
// node's), not finished (its address may be reused).
func podAddr(p *corev1.Pod, f family) (netip.Addr, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return netip.Addr{}, false
	}
	cands := []string{p.Status.PodIP}
	for _, ip := range p.Status.PodIPs {
		cands = append(cands, ip.IP)
	}
	for _, c := range cands {
		if a, err := netip.ParseAddr(c); err == nil && f.is(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// policyTypes applies the API's defaulting: no policyTypes means Ingress,
// plus Egress when there are egress rules.
func policyTypes(p *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(p.Spec.PolicyTypes) == 0 {
		return true, len(p.Spec.Egress) > 0
	}
	for _, t := range p.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return
}

// namedPort resolves a port name against a pod's container ports.
func namedPort(p *corev1.Pod, name string, proto corev1.Protocol) (int32, bool) {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			pp := cp.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if cp.Name == name && pp == proto && cp.ContainerPort > 0 && cp.ContainerPort < 65536 {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

type direction struct {
	name string // "ingress" or "egress"
	peer string // the peer's side of the packet for -m set: "src" or "dst"
	addr string // the local pod's side: "-d" (ingress) or "-s" (egress)
}

var (
	dirIngress = direction{"ingress", "src", "-d"}
	dirEgress  = direction{"egress", "dst", "-s"}
)

// computer holds the indexes of one Compute.
type computer struct {
	in       Input
	fam      family
	st       *State
	nsLabels map[string]labels.Set
	pods     []podInfo // every reachable pod, by namespace/name
	local    []podInfo // this node's
	sets     map[string]bool
}

// Compute derives the desired chains and sets from the objects. It is pure.
func Compute(in Input) *State {
	c := &computer{in: in, fam: familyOf(in.Family), st: &State{}, nsLabels: map[string]labels.Set{}, sets: map[string]bool{}}
	for _, ns := range in.Namespaces {
		c.nsLabels[ns.Name] = labels.Set(ns.Labels)
	}
	for _, p := range in.Pods {
		if ip, ok := podAddr(p, c.fam); ok {
			pi := podInfo{p, ip}
			c.pods = append(c.pods, pi)
			if p.Spec.NodeName == in.NodeName {
				c.local = append(c.local, pi)
			}
		}
	}
	byKey := func(a, b podInfo) int { return cmp.Compare(a.key(), b.key()) }
	slices.SortFunc(c.pods, byKey)
	slices.SortFunc(c.local, byKey)
	pols := slices.Clone(in.Policies)
	slices.SortFunc(pols, func(a, b *networkingv1.NetworkPolicy) int {
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})

	// For each local pod and direction, the policy chains that select it.
	podPolicies := map[string][]polRef{}
	for _, p := range pols {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			c.problem("%s/%s: spec.podSelector: %v", p.Namespace, p.Name, err)
			continue
		}
		var selected []podInfo
		for _, lp := range c.local {
			if lp.pod.Namespace == p.Namespace && sel.Matches(labels.Set(lp.pod.Labels)) {
				selected = append(selected, lp)
			}
		}
		if len(selected) == 0 {
			continue
		}
		ing, eg := policyTypes(p)
		if ing {
			name := c.policyChain(p, dirIngress, selected)
			for _, lp := range selected {
				podPolicies[lp.key()+"/ingress"] = append(podPolicies[lp.key()+"/ingress"], polRef{name, p.Namespace + "/" + p.Name})
			}
		}
		if eg {
			name := c.policyChain(p, dirEgress, selected)
			for _, lp := range selected {
				podPolicies[lp.key()+"/egress"] = append(podPolicies[lp.key()+"/egress"], polRef{name, p.Namespace + "/" + p.Name})
			}
		}
	}

	hook := []string{
		"-A " + ChainHook + " -m conntrack --ctstate RELATED,ESTABLISHED " + comment("replies and established flows") + " -j RETURN",
	}
	if c.fam.v6 {
		// Neighbour discovery is IPv6's ARP: conntrack does not track it, and
		// between pods of a node it is bridged through FORWARD. Policies
		// judge connections, not address resolution.
		for _, typ := range []string{"neighbour-solicitation", "neighbour-advertisement"} {
			hook = append(hook, "-A "+ChainHook+" -p ipv6-icmp -m icmp6 --icmpv6-type "+typ+" "+comment("neighbour discovery")+" -j RETURN")
		}
	}
	jumps := map[direction][]podJump{}
	for _, lp := range c.local {
		for _, d := range []direction{dirEgress, dirIngress} {
			refs := podPolicies[lp.key()+"/"+d.name]
			if len(refs) == 0 {
				continue
			}
			name := podChain(lp.pod.Namespace, lp.pod.Name, d.name)
			jumps[d] = append(jumps[d], podJump{lp.ip, name, lp.key() + " " + d.name})
			c.st.Chains = append(c.st.Chains, Chain{Name: name, Rules: podChainRules(c.fam, name, lp, d, refs)})
		}
	}
	clear := "-j MARK --set-xmark 0x0/" + markAllow
	hook = append(hook, c.dispatch(dirEgress, jumps[dirEgress])...)
	hook = append(hook, "-A "+ChainHook+" "+comment("egress judged, ingress next")+" "+clear)
	hook = append(hook, c.dispatch(dirIngress, jumps[dirIngress])...)
	hook = append(hook, "-A "+ChainHook+" "+comment("judged")+" "+clear)
	c.st.Chains = append(c.st.Chains, Chain{Name: ChainHook, Rules: hook})
	slices.SortFunc(c.st.Chains, func(a, b Chain) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.st.Sets, func(a, b Set) int { return cmp.Compare(a.Name, b.Name) })
	return c.st
}

type polRef struct{ chain, name string }

// podJump is the jump from the hook chain to one pod's chain.
type podJump struct {
	ip            netip.Addr
	chain, remark string
}

// dispatchDirect is the most isolated pods per direction that the hook chain
// jumps to one by one; with more, it dispatches by /28 first.
const dispatchDirect = 16

// dispatch renders the hook chain's jumps for one direction. A packet walks
// these rules one by one, so with many isolated pods (a node's /24 holds up
// to 254) they are grouped by /28: the hook chain jumps to one chain per
// group that holds the pods' jumps, and a packet walks at most 16 + 16 rules
// instead of 254.
func (c *computer) dispatch(d direction, jumps []podJump) []string {
	line := func(chain string, j podJump) string {
		return "-A " + chain + " " + d.addr + " " + c.fam.host(j.ip) + " " + comment(j.remark) + " -j " + j.chain
	}
	if len(jumps) <= dispatchDirect {
		var out []string
		for _, j := range jumps {
			out = append(out, line(ChainHook, j))
		}
		return out
	}
	slices.SortFunc(jumps, func(a, b podJump) int { return a.ip.Compare(b.ip) })
	var out []string
	for i := 0; i < len(jumps); {
		group := netip.PrefixFrom(jumps[i].ip, c.fam.groupBits()).Masked()
		k := i
		for k < len(jumps) && group.Contains(jumps[k].ip) {
			k++
		}
		if k-i == 1 {
			out = append(out, line(ChainHook, jumps[i]))
		} else {
			name := PrefixPolicy + hash16("dispatch/"+d.name+"/"+group.String())
			var rules []string
			for _, j := range jumps[i:k] {
				rules = append(rules, line(name, j))
			}
			c.st.Chains = append(c.st.Chains, Chain{Name: name, Rules: rules})
			out = append(out, "-A "+ChainHook+" "+d.addr+" "+group.String()+" "+comment(d.name+" of "+group.String())+" -j "+name)
		}
		i = k
	}
	return out
}

func (c *computer) problem(format string, args ...any) {
	c.st.Problems = append(c.st.Problems, fmt.Sprintf(format, args...))
}

func podChainRules(f family, name string, lp podInfo, d direction, refs []polRef) []string {
	// A pod cannot block access to itself (hairpin through its own Service),
	// and traffic from its node is always allowed (kubelet probes; the node's
	// own packets take OUTPUT, but a hairpin may carry a local source).
	self := f.host(lp.ip)
	var r []string
	if d == dirIngress {
		r = append(r,
			"-A "+name+" -m addrtype --src-type LOCAL "+comment(lp.key()+" ingress: from the node itself")+" -j RETURN",
			"-A "+name+" -s "+self+" "+comment(lp.key()+" ingress: from itself")+" -j RETURN")
	} else {
		r = append(r, "-A "+name+" -d "+self+" "+comment(lp.key()+" egress: to itself")+" -j RETURN")
	}
	for _, ref := range refs {
		r = append(r,
			"-A "+name+" "+comment(ref.name)+" -j "+ref.chain,
			"-A "+name+" -m mark --mark "+markAllowMasked+" -j RETURN")
	}
	// A TCP reset for a packet a Service DNATed on this node would leave with
	// the pod's address un-NATed (for bridged packets the kernel sends it
	// straight out of the bridge port, bypassing conntrack): the client
	// ignores it and times out. ICMP port unreachable is NATed back like any
	// related packet, so the client sees a refused connection either way.
	deny := comment(lp.key() + " " + d.name + ": no NetworkPolicy allows")
	return append(r,
		"-A "+name+" -p tcp -m conntrack ! --ctstate DNAT "+deny+" -j REJECT --reject-with tcp-reset",
		"-A "+name+" "+deny+" -j REJECT --reject-with "+f.unreachable())
}

// policyChain renders the chain of one policy and direction and returns its name.
func (c *computer) policyChain(p *networkingv1.NetworkPolicy, d direction, selected []podInfo) string {
	name := policyChain(p.Namespace, p.Name, d.name)
	var rules []string
	type rule struct {
		peers []networkingv1.NetworkPolicyPeer
		ports []networkingv1.NetworkPolicyPort
	}
	var rs []rule
	if d == dirIngress {
		for _, r := range p.Spec.Ingress {
			rs = append(rs, rule{r.From, r.Ports})
		}
	} else {
		for _, r := range p.Spec.Egress {
			rs = append(rs, rule{r.To, r.Ports})
		}
	}
	pol := p.Namespace + "/" + p.Name
	mark := " -j MARK --set-xmark " + markAllowMasked
	for i, r := range rs {
		owner := fmt.Sprintf("%s %s rule %d", pol, d.name, i)
		tail := " " + comment(owner) + mark
		var nets []netip.Prefix
		if len(r.peers) > 0 {
			nets = c.peers(p, r.peers, owner)
		}
		// peerMatch matches the rule's peers; its set is made on first use
		// (an egress rule whose ports are all named needs none).
		match := ""
		peerMatch := func() string {
			if len(r.peers) == 0 || match != "" {
				return match
			}
			set := c.fam.setPrefix() + hash16(pol+"/"+d.name+"/"+strconv.Itoa(i)+"/peers")
			c.addSet(Set{Name: set, Type: setNet, Family: c.fam.setFamily(), Entries: netEntries(nets), Owner: owner})
			match = " -m set --match-set " + set + " " + d.peer
			return match
		}
		if len(r.ports) == 0 {
			rules = append(rules, "-A "+name+peerMatch()+tail)
			continue
		}
		for j, port := range r.ports {
			proto, ok := protocol(port.Protocol)
			if !ok {
				c.problem("%s: ports[%d]: unsupported protocol %q", owner, j, *port.Protocol)
				continue
			}
			if proto == "sctp" && c.in.NoSCTP {
				c.st.SCTPRules++
				continue
			}
			switch {
			case port.Port == nil:
				rules = append(rules, "-A "+name+" -p "+proto+peerMatch()+tail)
			case port.Port.Type == 0: // a number
				n := port.Port.IntVal
				if n < 1 || n > 65535 {
					c.problem("%s: ports[%d]: port %d out of range", owner, j, n)
					continue
				}
				dport := strconv.Itoa(int(n))
				if port.EndPort != nil && *port.EndPort > n && *port.EndPort <= 65535 {
					dport += ":" + strconv.Itoa(int(*port.EndPort))
				}
				rules = append(rules, "-A "+name+" -p "+proto+peerMatch()+" -m "+proto+" --dport "+dport+tail)
			case d == dirIngress:
				// Resolved per selected local pod: its own container port.
				for _, lp := range selected {
					n, ok := namedPort(lp.pod, port.Port.StrVal, corev1.Protocol(strings.ToUpper(proto)))
					if !ok {
						continue
					}
					rules = append(rules, "-A "+name+" -d "+c.fam.host(lp.ip)+" -p "+proto+peerMatch()+" -m "+proto+" --dport "+strconv.Itoa(int(n))+tail)
				}
			default:
				// Egress: the destination pod's port of that name, so the rule
				// is a set of (address, protocol:port) of the pods it may reach.
				dests := c.pods
				if len(r.peers) > 0 {
					dests = within(c.pods, nets)
				}
				var entries []string
				for _, pi := range dests {
					if n, ok := namedPort(pi.pod, port.Port.StrVal, corev1.Protocol(strings.ToUpper(proto))); ok {
						entries = append(entries, pi.ip.String()+","+proto+":"+strconv.Itoa(int(n)))
					}
				}
				slices.Sort(entries)
				entries = slices.Compact(entries)
				set := c.fam.setPrefix() + hash16(pol+"/"+d.name+"/"+strconv.Itoa(i)+"/port/"+strconv.Itoa(j))
				c.addSet(Set{Name: set, Type: setIPPort, Family: c.fam.setFamily(), Entries: entries, Owner: owner})
				rules = append(rules, "-A "+name+" -p "+proto+" -m set --match-set "+set+" dst,dst"+tail)
			}
		}
	}
	c.st.Chains = append(c.st.Chains, Chain{Name: name, Rules: rules})
	return name
}

func (c *computer) addSet(s Set) {
	if c.sets[s.Name] {
		return
	}
	c.sets[s.Name] = true
	c.st.Sets = append(c.st.Sets, s)
}

// protocol maps a policy port's protocol (TCP when unset) to iptables' name.
func protocol(p *corev1.Protocol) (string, bool) {
	if p == nil {
		return "tcp", true
	}
	switch *p {
	case corev1.ProtocolTCP:
		return "tcp", true
	case corev1.ProtocolUDP:
		return "udp", true
	case corev1.ProtocolSCTP:
		return "sctp", true
	}
	return "", false
}

// peers resolves a rule's peer list to addresses of the enforced family: the
// pods that the selector peers match as single addresses (/32, /128), and
// the ipBlocks of the family minus their own exceptions. An ipBlock of the
// other family matches nothing here: its traffic is the other enforcer's.
func (c *computer) peers(p *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, owner string) []netip.Prefix {
	var nets []netip.Prefix
	seen := map[netip.Addr]bool{}
	for k, peer := range peers {
		if peer.IPBlock != nil {
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				c.problem("%s: peers[%d].ipBlock.cidr: %v", owner, k, err)
				continue
			}
			if !c.fam.is(cidr.Addr()) {
				continue
			}
			var except []netip.Prefix
			for _, e := range peer.IPBlock.Except {
				if ep, err := netip.ParsePrefix(e); err == nil && c.fam.is(ep.Addr()) {
					except = append(except, ep.Masked())
				} else if err != nil {
					c.problem("%s: peers[%d].ipBlock.except: %v", owner, k, err)
				}
			}
			nets = append(nets, subtract(cidr.Masked(), except)...)
			continue
		}
		if peer.PodSelector == nil && peer.NamespaceSelector == nil {
			continue
		}
		podSel := labels.Everything()
		if peer.PodSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				c.problem("%s: peers[%d].podSelector: %v", owner, k, err)
				continue
			}
			podSel = s
		}
		var nsSel labels.Selector
		if peer.NamespaceSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				c.problem("%s: peers[%d].namespaceSelector: %v", owner, k, err)
				continue
			}
			nsSel = s
		}
		for _, pi := range c.pods {
			if nsSel == nil {
				if pi.pod.Namespace != p.Namespace {
					continue
				}
			} else if nl, ok := c.nsLabels[pi.pod.Namespace]; !ok || !nsSel.Matches(nl) {
				continue
			}
			if !podSel.Matches(labels.Set(pi.pod.Labels)) || seen[pi.ip] {
				continue
			}
			seen[pi.ip] = true
			nets = append(nets, netip.PrefixFrom(pi.ip, pi.ip.BitLen()))
		}
	}
	return nets
}

func netEntries(nets []netip.Prefix) []string {
	out := make([]string, 0, len(nets))
	for _, n := range nets {
		if n.Bits() == 0 {
			// hash:net takes prefixes of 1 to 32 (128) bits: 0.0.0.0/0 (::/0)
			// is two halves.
			if n.Addr().Is6() {
				out = append(out, "::/1", "8000::/1")
			} else {
				out = append(out, "0.0.0.0/1", "128.0.0.0/1")
			}
			continue
		}
		out = append(out, n.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// within returns the pods whose address is in one of nets.
func within(pods []podInfo, nets []netip.Prefix) []podInfo {
	hosts := map[netip.Addr]bool{}
	var blocks []netip.Prefix
	for _, n := range nets {
		if n.IsSingleIP() {
			hosts[n.Addr()] = true
		} else {
			blocks = append(blocks, n)
		}
	}
	var out []podInfo
	for _, pi := range pods {
		if hosts[pi.ip] || slices.ContainsFunc(blocks, func(b netip.Prefix) bool { return b.Contains(pi.ip) }) {
			out = append(out, pi)
		}
	}
	return out
}

// subtract returns p minus the exceptions as a list of prefixes: what ipset's
// nomatch entries would express. It splits p in halves until each half is
// either inside an exception (dropped) or clear of all of them (kept), so the
// result has at most 32 (128) prefixes per exception.
func subtract(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	overlap := false
	for _, e := range except {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return nil // p lies inside an exception
		}
		if p.Overlaps(e) {
			overlap = true
		}
	}
	if !overlap || p.Bits() >= p.Addr().BitLen() {
		return []netip.Prefix{p}
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	a := p.Addr().AsSlice()
	bit := p.Bits()
	a[bit/8] |= 0x80 >> (bit % 8)
	ha, _ := netip.AddrFromSlice(a)
	hi := netip.PrefixFrom(ha, p.Bits()+1)
	return append(subtract(lo, except), subtract(hi, except)...)
}
