package trace

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/minikit/minikit/internal/netns"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// The proxy's nftables mode. A node runs it when its namespace has the table
// ip kube-proxy (starting one mode removes the other's rules); Run then reads
// that table with `nft -j list table ip kube-proxy` and walks it with
// nft/nftsim, which reports outcomes and steps in iptables/iptsim's shape,
// so Paths, Tree, JSON and Dot render both modes alike. Steps' Table is then
// the nft table's name, "kube-proxy".

const (
	// ModeIPTables is Result.Mode for a proxy in iptables mode.
	ModeIPTables = "iptables"
	// ModeNFTables is Result.Mode for a proxy in nftables mode.
	ModeNFTables = "nftables"

	nftFamily = "ip"
	nftTable  = "kube-proxy"
)

// nftCommand is nft run inside netns (nsenter --net, as iptables-save is),
// or here for the root namespace.
func nftCommand(ns string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command("nft", args...)
	}
	return exec.Command("nsenter", append([]string{"--net=" + netns.NetNSPath(ns), "--", "nft"}, args...)...)
}

// runNFT runs nft in netns and returns its output; a failure carries nft's
// own message.
func runNFT(ns string, stdin []byte, args ...string) ([]byte, error) {
	cmd := nftCommand(ns, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("nft %s in %s: %w: %s", strings.Join(args, " "), nsName(ns), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// errNoNFTTable says the namespace has no table ip kube-proxy (or no nft
// at all): the node runs the iptables mode. For IPv6, no table ip6
// kube-proxy: the node's proxy is in iptables mode or single-stack.
var errNoNFTTable = errors.New("no table ip kube-proxy")

// NFTRuleset is `nft -j list table ip kube-proxy` read in netns ("" for the
// machine's own), for those that show the table's chains (minikit ui).
func NFTRuleset(ns string) ([]byte, error) { return nftRules(ns, ipv4) }

// NFTRulesetIPv6 is NFTRuleset for a dual-stack node's IPv6 proxier: `nft
// -j list table ip6 kube-proxy`.
func NFTRulesetIPv6(ns string) ([]byte, error) { return nftRules(ns, ipv6) }

// nftRules is `nft -j list table ip kube-proxy` (ip6 for IPv6) in netns, or
// errNoNFTTable.
func nftRules(ns string, f family) ([]byte, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, errNoNFTTable
	}
	out, err := runNFT(ns, nil, "-j", "list", "table", f.nft(), nftTable)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, errNoNFTTable
		}
		return nil, err
	}
	return out, nil
}

// nftServiceChain says a chain of table ip kube-proxy belongs to one
// service port (PREFIX-HASH-ns/svc/proto/port, so firewall-check is not
// one): falling off its end is the news, as for KUBE-SVC-*.
func nftServiceChain(name string) bool {
	if !strings.Contains(name, "/") {
		return false
	}
	for _, p := range []string{"service-", "external-", "local-", "firewall-", "endpoint-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// whyNFT explains a path through the nftables mode's rules that did not
// reach an endpoint, as why does for iptables mode.
func whyNFT(p Path, to Target, node string) string {
	last := Step{}
	if len(p.Steps) > 0 {
		last = p.Steps[len(p.Steps)-1]
	}
	var fell []string
	// comment is the service port a no-endpoint map element named.
	comment, via := "", Step{}
	for _, s := range p.Steps {
		if s.Rule == 0 && nftServiceChain(s.Chain) {
			fell = append(fell, s.Chain)
		}
		if (s.Chain == "service-endpoints-check" || s.Chain == "nodeport-endpoints-check") && s.Rule > 0 {
			comment, via = s.Comment, s
		}
	}
	at := fmt.Sprintf("%s/%s rule %d", last.Table, last.Chain, last.Rule)
	switch {
	case p.Verdict == "DROP" && comment != "" && via.Target == "DROP":
		policy := "externalTrafficPolicy"
		if to.Kind == "cluster IP" {
			policy = "internalTrafficPolicy"
		}
		return noLocalEndpoint(policy, node, comment, fell) +
			fmt.Sprintf("; the element of %s/%s rule %d drops it", via.Table, via.Chain, via.Rule)
	case p.Verdict == "REJECT" && comment != "":
		return fmt.Sprintf("the Service %s has no endpoints: no service chain serves it, and %s/%s rule %d sends it to %s, which rejects it (icmp port unreachable: connection refused)",
			comment, via.Table, via.Chain, via.Rule, last.Chain)
	case p.Verdict == "DROP" && strings.HasPrefix(last.Chain, "firewall-"):
		return fmt.Sprintf("the source is outside loadBalancerSourceRanges: %s drops it before nat sees it", at)
	case p.Verdict == "REJECT" && last.Chain == "cluster-ips-check":
		return fmt.Sprintf("%s is a cluster IP, but no Service serves this port and protocol on it: %s rejects it", to.Addr.Addr(), at)
	case p.Verdict == "DROP" && last.Chain == "cluster-ips-check":
		return fmt.Sprintf("%s is in the service CIDR but no Service has it: %s drops it", to.Addr.Addr(), at)
	case p.Verdict != "ACCEPT":
		return fmt.Sprintf("%s by %s", p.Verdict, at)
	case !p.DNAT && to.Service != "":
		return notDNATed(p, fell)
	}
	return ""
}

// minikitRules continues the nftables walk through the rules minikit itself
// keeps in iptables whatever the proxy mode: network policy in filter
// FORWARD and the pod masquerade in nat POSTROUTING (MINIKIT-POSTROUTING).
// Every accepted outcome that leaves the node is walked through them with
// its destination after DNAT, and their steps follow kube-proxy's. (In the
// kernel, iptables-nft's base chains and kube-proxy's interleave by
// priority within each hook; the verdict, the masquerade and the policy
// verdicts do not depend on that order.)
func minikitRules(ns string, outs []iptsim.Outcome, pkt iptsim.Packet, node iptsim.Node) ([]iptsim.Outcome, error) {
	save, err := saveRules(ns, familyOf(pkt.Dst.Addr()))
	if err != nil {
		return nil, err
	}
	rules, err := iptsim.Parse(save)
	if err != nil {
		return nil, err
	}
	// See Run: without readable ipsets only a rule that matches one fails.
	node.Sets, _ = policySets(ns)
	var res []iptsim.Outcome
	for _, o := range outs {
		if o.Verdict != "ACCEPT" || o.Local {
			res = append(res, o)
			continue
		}
		p := pkt
		p.Dst = o.Dst
		ios, err := rules.Trace(node, p)
		if err != nil {
			return nil, err
		}
		for _, io := range ios {
			n := o
			n.Probability *= io.Probability
			n.Verdict = io.Verdict
			n.Masquerade = o.Masquerade || io.Masquerade
			n.Steps = append(append([]iptsim.Step(nil), o.Steps...), io.Steps...)
			res = append(res, n)
		}
	}
	return res, nil
}
