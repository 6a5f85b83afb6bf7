package trace

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/netpol"
)

// PolicyVerdict is a NetworkPolicy decision on a path, at the hop where the
// node's enforcer takes it: the egress of a source pod on the node that
// forwards the first packet, the ingress of a destination pod on the node
// that delivers it.
type PolicyVerdict struct {
	Node      string `json:"node"`
	Direction string `json:"direction"` // egress or ingress
	Pod       string `json:"pod"`       // namespace/name of the isolated pod
	Verdict   string `json:"verdict"`   // allowed or rejected
	// By is the comment of the rule that decided: "ns/policy ingress rule
	// 0" for an allowing rule, "ns/pod ingress: no NetworkPolicy allows"
	// for the final REJECT.
	By    string `json:"by"`
	Chain string `json:"chain"`
	Rule  int    `json:"rule"`
	// Confirmed is set by --live: whether that rule's counter moved.
	Confirmed *bool `json:"confirmed,omitempty"`
}

// String is the verdict as one line of output.
func (v PolicyVerdict) String() string {
	s := fmt.Sprintf("network policy on %s: %s of %s %s", v.Node, v.Direction, v.Pod, v.Verdict)
	if v.Verdict == "allowed" {
		s += " by " + v.By
	} else {
		s += ": " + v.By
	}
	return s + fmt.Sprintf(" (filter %s #%d)", v.Chain, v.Rule)
}

// policyVerdicts reads the enforcer's decisions out of a walk's steps: a
// jump from the hook (or a dispatch) chain into a pod chain opens one (its comment is
// "ns/pod direction"), the first allow mark set in a policy chain or the
// pod chain's own RETURN for the node's or the pod's own traffic allows it,
// its REJECT rejects it.
func policyVerdicts(node string, steps []iptsim.Step) []PolicyVerdict {
	var out []PolicyVerdict
	var cur *PolicyVerdict
	for _, s := range steps {
		switch {
		case strings.HasPrefix(s.Target, netpol.PrefixPod) && strings.HasPrefix(s.Chain, netpol.PrefixPolicy):
			// From the hook chain or a /28 dispatch chain.
			pod, dir, _ := strings.Cut(s.Comment, " ")
			out = append(out, PolicyVerdict{Node: node, Direction: dir, Pod: pod})
			cur = &out[len(out)-1]
		case cur == nil || cur.Verdict != "" || s.Rule == 0:
		case strings.HasPrefix(s.Chain, netpol.PrefixPolicy) && s.Target == "MARK" && s.Mark&0x10000 != 0,
			strings.HasPrefix(s.Chain, netpol.PrefixPod) && s.Target == "RETURN" && strings.HasSuffix(s.Comment, "itself"):
			cur.Verdict, cur.By, cur.Chain, cur.Rule = "allowed", s.Comment, s.Chain, s.Rule
		case strings.HasPrefix(s.Chain, netpol.PrefixPod) && (s.Target == "REJECT" || s.Target == "DROP"):
			cur.Verdict, cur.By, cur.Chain, cur.Rule = "rejected", s.Comment, s.Chain, s.Rule
		}
	}
	return out
}

// policySets reads the enforcer's ipsets of a node's namespace, for the
// tracer's -m set matches.
func policySets(netns string) (map[string]iptsim.IPSet, error) {
	out := map[string]iptsim.IPSet{}
	err := in(netns, func() error {
		s, err := netpol.NewNetlinkSets()
		if err != nil {
			return err
		}
		all, err := s.List()
		if err != nil {
			return err
		}
		for name, set := range all {
			out[name] = iptsim.IPSet{Type: set.Type, Entries: set.Entries}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the ipsets of %s: %w", nsName(netns), err)
	}
	return out, nil
}

// deliveringHop walks the filter FORWARD chain of the node that delivers an
// accepted path's packet to its pod, when that is another node than the one
// traced: its pods' ingress policy is judged there.
func (r *run) deliveringHop(res *Result, p *Path, pkt iptsim.Packet) error {
	if p.Route == nil || p.Route.Kind != "node" || p.Endpoint == nil || p.Endpoint.HostNetwork {
		return nil
	}
	n := r.node(p.Route.Node)
	if n == nil {
		return nil
	}
	netns, err := r.nodeNetns(n)
	if err != nil {
		return err
	}
	dst, err := netip.ParseAddrPort(p.Dst)
	if err != nil {
		return nil
	}
	save, err := saveRules(netns, r.fam)
	if err != nil {
		return err
	}
	rules, err := iptsim.Parse(save)
	if err != nil {
		return fmt.Errorf("parsing the rules of node %s: %w", n.Name, err)
	}
	sets, _ := policySets(netns) // see Run
	local, err := addrs(netns, r.fam)
	if err != nil {
		return err
	}
	hop := iptsim.Packet{Src: pkt.Src, Dst: dst, Proto: pkt.Proto}
	if p.Masquerade && p.Route.Src != "" {
		hop.Src, _ = netip.ParseAddr(p.Route.Src)
	}
	if rt, err := r.route(netns, hop.Src); err == nil {
		hop.In = rt.Dev
	}
	out := func(d netip.Addr) string {
		if rt, err := r.route(netns, d); err == nil {
			return rt.Dev
		}
		return ""
	}
	outs, err := rules.Forward(iptsim.Node{Addrs: local, Out: out, Sets: sets}, hop)
	if err != nil {
		return fmt.Errorf("tracing through the filter FORWARD chain of node %s: %w", n.Name, err)
	}
	if len(outs) == 0 {
		return nil
	}
	vs := policyVerdicts(n.Name, outs[0].Steps)
	p.Policy = append(p.Policy, vs...)
	p.hops = append(p.hops, hopRules{node: n.Name, netns: netns})
	for _, v := range vs {
		if v.Verdict == "rejected" {
			p.Why = strings.TrimPrefix(p.Why+"; ", "; ") + fmt.Sprintf("node %s rejects it: %s (filter %s #%d)", n.Name, v.By, v.Chain, v.Rule)
		}
	}
	return nil
}

// hopRules is another node whose counters --live reads for a path's policy
// verdicts.
type hopRules struct{ node, netns string }

// confirmPolicy sets Confirmed on every verdict of the paths whose rule's
// counter moved on its node (moved maps a node to its moved counters), and
// takes back the live confirmation of the path the kernel took when one of
// its verdicts' counters did not move.
func confirmPolicy(l *Live, paths []Path, moved map[string][]iptsim.Counter) {
	defer func() {
		if l == nil || l.Path < 0 || l.Path >= len(paths) {
			return
		}
		for _, v := range paths[l.Path].Policy {
			if v.Confirmed != nil && !*v.Confirmed {
				l.Confirmed = false
				l.Notes = append(l.Notes, fmt.Sprintf("filter %s #%d on %s is on the predicted path but its counter did not move", v.Chain, v.Rule, v.Node))
			}
		}
	}()
	for i := range paths {
		for j := range paths[i].Policy {
			v := &paths[i].Policy[j]
			ok := false
			for _, c := range moved[v.Node] {
				ok = ok || (c.Table == "filter" && c.Chain == v.Chain && c.Rule == v.Rule)
			}
			v.Confirmed = &ok
		}
	}
}

// rejectedFurther names the node that rejects an accepted path further on
// (the destination pod's ingress policy there), "" if none does.
func (p *Path) rejectedFurther() string {
	for _, v := range p.Policy {
		if v.Verdict == "rejected" && p.Verdict == "ACCEPT" {
			return v.Node
		}
	}
	return ""
}
