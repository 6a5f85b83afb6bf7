// Package trace explains where a connection goes: `minikit trace FROM TO`
// resolves FROM and TO through the API, reads the rules actually in the
// kernel of the node that handles the first packet (inside the node's
// network namespace, never the rules minikit meant to write): iptables-save
// in the proxy's iptables mode, walked with iptables/iptsim, or `nft -j list
// table ip kube-proxy` in its nftables mode, walked with nft/nftsim. It
// adds the route out for every outcome, and with Live sends one real probe
// and shows which counters moved (iptables) or which rules the kernel's own
// nftrace saw the probe match (nftables), and which conntrack entry the
// kernel created, confirming (or refuting) the prediction. To a Gateway's
// address and listener port (gateway.go) it adds what the kernel cannot
// say: the Gateway's user-space data plane takes the connection at the
// data port the rules DNAT to, and picks a route, rule and backend per
// request; the trace lists those candidates and the backends' ready pods.
//
// It only reads kernel state: it never writes a rule, a route or a sysctl,
// with one exception: a live probe in nftables mode adds a table of its own,
// ip minikit-trace, that marks the probe for tracing, and removes it again.
// The live probe is the one packet it sends, from FROM's own namespace.
package trace

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/kubeproxy"
)

// Result is a whole trace, as rendered by Tree, JSON and Dot.
type Result struct {
	From  Source `json:"from"`
	To    Target `json:"to"`
	Proto string `json:"proto"`
	// Node is the node whose rules were read; Netns its network namespace
	// ("" for the machine's own).
	Node  string `json:"node"`
	Netns string `json:"netns"`
	// Mode is the node's proxy mode, iptables or nftables: which rules were
	// read (iptables-save, or nft list table ip kube-proxy).
	Mode string `json:"mode"`
	// Family is the address family traced, the destination's: IPv4 or
	// IPv6 (a dual-stack node's IPv6 proxier: ip6tables, or table ip6
	// kube-proxy).
	Family string `json:"family"`
	// Hook is where the packet enters: in iptables mode the built-in nat
	// chain, PREROUTING for a packet arriving at the node, OUTPUT for one
	// the node sends; in nftables mode the hook, prerouting or output.
	Hook  string `json:"hook"`
	Paths []Path `json:"paths"`
	// Gateway is, for a TO that is a Gateway's address and listener port,
	// what the Gateway does past the kernel's rules.
	Gateway *Gateway `json:"gateway,omitempty"`
	Live    *Live    `json:"live,omitempty"`
}

// Source is FROM.
type Source struct {
	Kind  string     `json:"kind"` // pod, node, client, external, ip
	Name  string     `json:"name,omitempty"`
	IP    netip.Addr `json:"ip"`
	Node  string     `json:"node,omitempty"` // a pod's node
	Netns string     `json:"netns,omitempty"`
}

// Target is TO.
type Target struct {
	Addr    netip.AddrPort `json:"addr"`
	Service string         `json:"service,omitempty"` // namespace/name:port
	Kind    string         `json:"kind"`              // cluster IP, NodePort, external IP, loadbalancer IP, address
}

// Path is one outcome of the first packet: a verdict, the endpoint reached
// and the steps through the rules, most probable first.
type Path struct {
	Verdict     string   `json:"verdict"` // ACCEPT, DROP, REJECT
	Probability float64  `json:"probability"`
	Dst         string   `json:"dst"` // after DNAT
	DNAT        bool     `json:"dnat"`
	Masquerade  bool     `json:"masquerade"`
	Mark        string   `json:"mark"`
	Steps       []Step   `json:"steps"`
	Route       *Route   `json:"route,omitempty"`
	Endpoint    *Pod     `json:"endpoint,omitempty"`
	Why         string   `json:"why,omitempty"`
	Recent      []string `json:"recent,omitempty"`
	// Policy lists the NetworkPolicy verdicts on the way, where taken.
	Policy []PolicyVerdict `json:"policy,omitempty"`

	hops []hopRules // other nodes whose rules judged the path
}

// Step is one matched rule (or the end of a chain) in a Path.
type Step struct {
	Table       string  `json:"table"`
	Chain       string  `json:"chain"`
	Rule        int     `json:"rule"` // 1-based; 0 = fell off the end
	Text        string  `json:"text"`
	Target      string  `json:"target"`
	Comment     string  `json:"comment,omitempty"`
	Probability float64 `json:"probability"`
	Branch      float64 `json:"branch"`
	Mark        string  `json:"mark,omitempty"` // set when the step changed the mark
	DNAT        string  `json:"dnat,omitempty"`
	Masquerade  bool    `json:"masquerade,omitempty"`
	Verdict     string  `json:"verdict,omitempty"`
}

// Route is how the node sends the packet on after the rules.
type Route struct {
	Kind string `json:"kind"` // bridge, node, vxlan, local, link
	Dev  string `json:"dev"`
	Via  string `json:"via,omitempty"`
	Src  string `json:"src,omitempty"`
	// Veth is the pod's host-side veth on the bridge (Kind bridge).
	Veth string `json:"veth,omitempty"`
	// Node is the node the packet is sent to (Kind node and vxlan).
	Node string `json:"node,omitempty"`
	// Tunnel is the node's underlay address that the VXLAN device sends the
	// encapsulated packet to (Kind vxlan: the route is dev flannel.1).
	Tunnel string `json:"tunnel,omitempty"`
}

// Pod is the final destination.
type Pod struct {
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	Node        string `json:"node,omitempty"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
}

// String names the pod as the trace output shows it.
func (p *Pod) String() string {
	if p.HostNetwork {
		return "node " + p.Node + " (host network)"
	}
	return fmt.Sprintf("pod %s/%s on %s", p.Namespace, p.Name, p.Node)
}

// Paths turns the tracer's outcomes into Paths, explaining blocked and
// un-DNATed ones.
func Paths(outs []iptsim.Outcome, to Target, node string) []Path {
	var ps []Path
	for _, o := range outs {
		p := Path{Verdict: o.Verdict, Probability: o.Probability, Dst: o.Dst.String(), DNAT: o.DNAT,
			Masquerade: o.Masquerade, Mark: fmt.Sprintf("%#x", o.Mark), Recent: o.Recent}
		for _, s := range o.Steps {
			st := Step{Table: s.Table, Chain: s.Chain, Rule: s.Rule, Text: s.Text, Target: s.Target, Comment: s.Comment,
				Probability: s.Probability, Branch: s.Branch, Masquerade: s.Masquerade, Verdict: s.Verdict}
			if s.MarkChanged {
				st.Mark = fmt.Sprintf("%#x", s.Mark)
			}
			if s.DNAT.IsValid() {
				st.DNAT = s.DNAT.String()
			}
			p.Steps = append(p.Steps, st)
		}
		p.Policy = policyVerdicts(node, o.Steps)
		if len(o.Steps) > 0 && o.Steps[0].Table == nftTable {
			p.Why = whyNFT(p, to, node)
		} else {
			p.Why = why(p, to, node)
		}
		ps = append(ps, p)
	}
	return ps
}

// why explains a path that did not reach an endpoint.
func why(p Path, to Target, node string) string {
	last := Step{}
	if len(p.Steps) > 0 {
		last = p.Steps[len(p.Steps)-1]
	}
	var fell []string
	for _, s := range p.Steps {
		if s.Rule == 0 && s.Table == "nat" && kubeproxy.ServiceChain(s.Chain) {
			fell = append(fell, s.Chain)
		}
	}
	switch {
	case p.Verdict == "DROP" && strings.Contains(last.Comment, "has no local endpoints"):
		policy := "internalTrafficPolicy"
		if last.Chain == "KUBE-EXTERNAL-SERVICES" {
			policy = "externalTrafficPolicy"
		}
		return noLocalEndpoint(policy, node, strings.TrimSuffix(last.Comment, " has no local endpoints"), fell) +
			fmt.Sprintf("; %s/%s rule %d drops it", last.Table, last.Chain, last.Rule)
	case p.Verdict == "REJECT" && strings.Contains(last.Comment, "has no endpoints"):
		return fmt.Sprintf("the Service %s has no endpoints: there are no nat rules for it and %s/%s rule %d rejects the packet (icmp port unreachable: connection refused)",
			strings.TrimSuffix(last.Comment, " has no endpoints"), last.Table, last.Chain, last.Rule)
	case p.Verdict == "DROP" && last.Chain == "KUBE-PROXY-FIREWALL":
		return fmt.Sprintf("the source is outside loadBalancerSourceRanges: %s did not DNAT it and %s/%s rule %d drops it",
			strings.Join(fell, ", "), last.Table, last.Chain, last.Rule)
	case p.Verdict != "ACCEPT" && strings.HasSuffix(last.Comment, "no NetworkPolicy allows"):
		return fmt.Sprintf("no NetworkPolicy allows it: %s/%s rule %d (%s) rejects it", last.Table, last.Chain, last.Rule, last.Comment)
	case p.Verdict != "ACCEPT":
		return fmt.Sprintf("%s by %s/%s rule %d", p.Verdict, last.Table, last.Chain, last.Rule)
	case !p.DNAT && to.Service != "":
		return notDNATed(p, fell)
	}
	return ""
}

// notDNATed explains an accepted packet to a Service that no rule DNATed;
// fell are the service chains it left without a matching rule.
func notDNATed(p Path, fell []string) string {
	w := "no rule DNATed the packet: it leaves with destination " + p.Dst + " unchanged"
	if len(fell) > 0 {
		w += "; these chains ended without a matching rule: " + strings.Join(fell, ", ")
	}
	return w
}

// noLocalEndpoint explains a packet dropped because node has no ready
// endpoint of the service port svc under the traffic policy policy.
func noLocalEndpoint(policy, node, svc string, fell []string) string {
	w := fmt.Sprintf("%s Local: node %s has no ready endpoint of %s", policy, node, svc)
	if len(fell) > 0 {
		w += fmt.Sprintf(", so %s has no rule for this packet and nat leaves it un-DNATed", strings.Join(fell, ", "))
	}
	return w
}

// Endpoints is the sorted set of destinations the ACCEPTed paths reach.
func (r *Result) Endpoints() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range r.Paths {
		if p.Verdict == "ACCEPT" && !seen[p.Dst] {
			seen[p.Dst] = true
			out = append(out, p.Dst)
		}
	}
	sort.Strings(out)
	return out
}
