package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/minikit/minikit/internal/netns"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/nft/nftsim"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
)

// RulesReader reads a node namespace's proxy rules, read-only.
type RulesReader interface {
	// Mode is the node's proxy mode (trace.ModeIPTables or ModeNFTables).
	Mode(ns string) (string, error)
	// IPTables is iptables-save -c of the nat and filter tables, parsed.
	IPTables(ns string) (*iptsim.Rules, error)
	// IPTablesIPv6 is the same of ip6tables-save -c: a dual-stack node's
	// IPv6 proxier's rules.
	IPTablesIPv6(ns string) (*iptsim.Rules, error)
	// NFT is `nft -j list table ip kube-proxy`.
	NFT(ns string) ([]byte, error)
}

// kernelRules reads them from the kernel: iptables-save -c through package
// iptables, nft through package trace, both inside the namespace.
type kernelRules struct{}

func (kernelRules) Mode(ns string) (string, error) { return trace.Mode(ns) }

func (kernelRules) IPTables(ns string) (*iptsim.Rules, error) {
	return saveParsed(ns, iptables.SaveCounters)
}

func (kernelRules) IPTablesIPv6(ns string) (*iptsim.Rules, error) {
	return saveParsed(ns, iptables.SaveCountersIPv6)
}

func saveParsed(ns string, saveCounters func(netnsPath, table string) ([]byte, error)) (*iptsim.Rules, error) {
	var save strings.Builder
	for _, table := range []string{"nat", "filter"} {
		b, err := saveCounters(netns.NetNSPath(ns), table)
		if err != nil {
			return nil, fmt.Errorf("reading the %s table of netns %s: %w", table, ns, err)
		}
		save.Write(b)
	}
	return iptsim.Parse(save.String())
}

func (kernelRules) NFT(nodeNS string) ([]byte, error) { return trace.NFTRuleset(nodeNS) }

// ChainNode is one rule (or map element) of a Service's chain tree and the
// rules of the chain it jumps or goes to.
type ChainNode struct {
	Chain string `json:"chain"`
	Rule  int    `json:"rule"` // 1-based; 0 for a map element
	Text  string `json:"text"`
	// Packets and Bytes are the rule's counters (iptables-save -c); nil
	// where the kernel keeps none (kube-proxy's nftables rules have no
	// counter statements).
	Packets  *uint64      `json:"packets,omitempty"`
	Bytes    *uint64      `json:"bytes,omitempty"`
	Target   string       `json:"target,omitempty"`
	Children []*ChainNode `json:"children,omitempty"`
}

// ChainTree is a Service's rules on one node.
type ChainTree struct {
	Service string       `json:"service"` // NAMESPACE/NAME
	Node    string       `json:"node"`
	Mode    string       `json:"mode"`
	Roots   []*ChainNode `json:"roots"`
}

// serveChains is GET /api/chains?service=NAMESPACE/NAME[&node=NODE]: the
// Service's chain tree in NODE's rules (default: the first node).
func (s *Server) serveChains(r *http.Request) (any, error) {
	q := r.URL.Query()
	key := q.Get("service")
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return nil, badRequest("chains: service=NAMESPACE/NAME is required, not %q", key)
	}
	g, _ := s.live.snapshot()
	if !slices.ContainsFunc(g.Services, func(sv topology.Service) bool { return sv.Namespace == ns && sv.Name == name }) {
		return nil, badRequest("chains: the lab has no Service %s", key)
	}
	nodeName := q.Get("node")
	var nodes []string
	for _, h := range g.Hosts {
		if h.Kind == topology.KindNode {
			nodes = append(nodes, h.Name)
		}
	}
	if nodeName == "" && len(nodes) > 0 {
		nodeName = nodes[0]
	}
	if !slices.Contains(nodes, nodeName) {
		return nil, badRequest("chains: the lab has no node %q (nodes: %s)", nodeName, strings.Join(nodes, ", "))
	}
	nodeNS := lab.NS(s.cfg.Lab.Name, nodeName)
	mode, err := s.cfg.Rules.Mode(nodeNS)
	if err != nil {
		return nil, fmt.Errorf("reading the proxy mode of node %s: %w", nodeName, err)
	}
	t := &ChainTree{Service: key, Node: nodeName, Mode: mode}
	switch mode {
	case trace.ModeNFTables:
		js, err := s.cfg.Rules.NFT(nodeNS)
		if err != nil {
			return nil, fmt.Errorf("reading the nftables rules of node %s: %w", nodeName, err)
		}
		if t.Roots, err = nftTree(js, ns, name); err != nil {
			return nil, fmt.Errorf("reading the nftables rules of node %s: %w", nodeName, err)
		}
	default:
		rules, err := s.cfg.Rules.IPTables(nodeNS)
		if err != nil {
			return nil, fmt.Errorf("reading the iptables rules of node %s: %w", nodeName, err)
		}
		t.Roots = iptablesTree(rules, ns, name)
	}
	return t, nil
}

// iptablesTree is the Service's rules in KUBE-SERVICES and KUBE-NODEPORTS
// (those whose comment names it), each with the rules of the chains it
// jumps to (KUBE-SVC-*, KUBE-EXT-*, KUBE-FW-*, KUBE-SVL-*, KUBE-SEP-*), down
// to the DNAT, with their counters.
func iptablesTree(rules *iptsim.Rules, ns, name string) []*ChainNode {
	byChain := map[string][]iptsim.Counter{}
	for _, c := range rules.Counters() {
		if c.Table == "nat" && c.Rule > 0 {
			byChain[c.Chain] = append(byChain[c.Chain], c)
		}
	}
	svc := ns + "/" + name
	var roots []*ChainNode
	for _, entry := range []string{"KUBE-SERVICES", "KUBE-NODEPORTS"} {
		for _, c := range byChain[entry] {
			args := iptables.SplitRule(c.Text)
			comment := flagValue(args, "--comment")
			if comment != svc && !strings.HasPrefix(comment, svc+":") && !strings.HasPrefix(comment, svc+" ") {
				continue
			}
			roots = append(roots, iptablesNode(byChain, c, 0))
		}
	}
	return roots
}

func iptablesNode(byChain map[string][]iptsim.Counter, c iptsim.Counter, depth int) *ChainNode {
	pk, by := c.Packets, c.Bytes
	args := iptables.SplitRule(c.Text)
	target := flagValue(args, "-j")
	if target == "" {
		target = flagValue(args, "-g")
	}
	n := &ChainNode{Chain: c.Chain, Rule: c.Rule, Text: c.Text, Packets: &pk, Bytes: &by, Target: target}
	if depth < 6 && serviceChain(target) {
		for _, sub := range byChain[target] {
			n.Children = append(n.Children, iptablesNode(byChain, sub, depth+1))
		}
	}
	return n
}

// serviceChain says a nat chain belongs to one Service port: its rules
// are part of the Service's tree (KUBE-MARK-MASQ and the like are not).
func serviceChain(name string) bool {
	for _, p := range []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func flagValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// nftTree is the Service's entries in the maps service-ips and
// service-nodeports (each a verdict that goes to one of its chains), then
// the rules of that chain and of every chain of the Service they name, down
// to the endpoint chains' DNAT. The chains and rule texts come from
// nft/nftsim; only the two maps' elements are read here, which the
// tracer keeps to itself.
func nftTree(js []byte, ns, name string) ([]*ChainNode, error) {
	rs, err := nftsim.Parse(js)
	if err != nil {
		return nil, err
	}
	own := "-" + ns + "/" + name + "/"
	var chains []string
	for _, c := range rs.Chains() {
		if strings.Contains(c, own) {
			chains = append(chains, c)
		}
	}
	elems, err := nftMapElems(js, "service-ips", "service-nodeports")
	if err != nil {
		return nil, err
	}
	var roots []*ChainNode
	for _, e := range elems {
		if !strings.Contains(e.target, own) {
			continue
		}
		n := &ChainNode{Chain: e.set, Text: e.text, Target: e.target}
		n.Children = nftChain(rs, chains, e.target, 0)
		roots = append(roots, n)
	}
	return roots, nil
}

func nftChain(rs *nftsim.Ruleset, chains []string, chain string, depth int) []*ChainNode {
	var out []*ChainNode
	for pos := 1; ; pos++ {
		text := rs.RuleText(chain, pos)
		if text == "" {
			break
		}
		n := &ChainNode{Chain: chain, Rule: pos, Text: text}
		for _, c := range chains {
			if c != chain && (strings.Contains(text, "goto "+c) || strings.Contains(text, "jump "+c)) {
				if n.Target == "" {
					n.Target = c
				}
				if depth < 6 {
					n.Children = append(n.Children, &ChainNode{Chain: c, Text: "chain " + c, Children: nftChain(rs, chains, c, depth+1)})
				}
			}
		}
		out = append(out, n)
	}
	return out
}

type nftElem struct {
	set, text, target string
}

// nftMapElems lists the elements of the named verdict maps whose verdict is
// a goto or jump, as "KEY : goto CHAIN".
func nftMapElems(js []byte, maps ...string) ([]nftElem, error) {
	var doc struct {
		Nftables []struct {
			Map *struct {
				Name string            `json:"name"`
				Elem []json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("parsing nft JSON: %w", err)
	}
	var out []nftElem
	for _, o := range doc.Nftables {
		if o.Map == nil || !slices.Contains(maps, o.Map.Name) {
			continue
		}
		for _, raw := range o.Map.Elem {
			var pair []json.RawMessage
			if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 {
				continue
			}
			var verdict map[string]struct {
				Target string `json:"target"`
			}
			if json.Unmarshal(pair[1], &verdict) != nil {
				continue
			}
			for kind, v := range verdict {
				if (kind == "goto" || kind == "jump") && v.Target != "" {
					out = append(out, nftElem{set: "@" + o.Map.Name, text: nftKey(pair[0]) + " : " + kind + " " + v.Target, target: v.Target})
				}
			}
		}
	}
	return out, nil
}

// nftKey prints a map key ({"concat": [...]}, {"elem": {"val": ...}} or a
// scalar) as nft does: the parts joined by " . ".
func nftKey(raw json.RawMessage) string {
	var v any
	json.Unmarshal(raw, &v)
	var str func(v any) string
	str = func(v any) string {
		switch x := v.(type) {
		case map[string]any:
			if c, ok := x["concat"].([]any); ok {
				parts := make([]string, len(c))
				for i := range c {
					parts[i] = str(c[i])
				}
				return strings.Join(parts, " . ")
			}
			if e, ok := x["elem"].(map[string]any); ok {
				return str(e["val"])
			}
			if p, ok := x["prefix"].(map[string]any); ok {
				return fmt.Sprintf("%s/%v", str(p["addr"]), p["len"])
			}
		case float64:
			return fmt.Sprint(int64(x))
		}
		return fmt.Sprint(v)
	}
	return str(v)
}
