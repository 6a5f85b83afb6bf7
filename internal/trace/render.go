package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubeproxy"
)

// trie merges paths on their common steps, so the rendering branches where
// the kernel's choice does (a statistic match, usually).
type trie struct {
	key      string
	step     *Step
	path     int // for a leaf: the index of the path it ends
	leaf     bool
	children []*trie
}

func (t *trie) child(key string) *trie {
	for _, c := range t.children {
		if c.key == key {
			return c
		}
	}
	c := &trie{key: key}
	t.children = append(t.children, c)
	return c
}

func buildTrie(paths []Path) *trie {
	root := &trie{}
	for i := range paths {
		n := root
		for j := range paths[i].Steps {
			s := &paths[i].Steps[j]
			n = n.child(fmt.Sprintf("%s|%s|%d|%s|%s", s.Table, s.Chain, s.Rule, s.Text, s.Mark))
			if n.step == nil {
				n.step = s
			}
		}
		leaf := n.child("path " + strconv.Itoa(i))
		leaf.leaf, leaf.path = true, i
	}
	root.sort()
	return root
}

// sort orders the branches of a chain by rule position, as the kernel
// tries them; paths' own order is most probable first.
func (t *trie) sort() {
	sort.SliceStable(t.children, func(i, j int) bool {
		a, b := t.children[i], t.children[j]
		if a.leaf || b.leaf {
			return !a.leaf && b.leaf
		}
		if a.step.Table == b.step.Table && a.step.Chain == b.step.Chain {
			return a.step.Rule < b.step.Rule
		}
		return false
	})
	for _, c := range t.children {
		c.sort()
	}
}

// quiet says the tree leaves a step out: the end of a chain that only
// returns to its caller, unless it is a service's chain, where falling off
// is the news (no endpoint rule, no local endpoint, source not allowed).
func quiet(s *Step) bool {
	if s.Table == nftTable {
		return s.Rule == 0 && s.Target == "RETURN" && !nftServiceChain(s.Chain)
	}
	return s.Rule == 0 && s.Target == "RETURN" && !kubeproxy.ServiceChain(s.Chain)
}

func pct(p float64) string { return strconv.FormatFloat(p*100, 'f', 1, 64) + "%" }

// ruleBody is a saved rule without its "-A CHAIN " prefix.
func ruleBody(s *Step) string {
	return strings.TrimPrefix(s.Text, "-A "+s.Chain+" ")
}

func stepLine(s *Step) string {
	if s.Rule == 0 {
		if s.Target == "RETURN" {
			return fmt.Sprintf("%s %s: end of chain, back to the caller", s.Table, s.Chain)
		}
		return fmt.Sprintf("%s %s: no rule matched, chain policy %s", s.Table, s.Chain, s.Target)
	}
	l := fmt.Sprintf("%s %s #%d: %s", s.Table, s.Chain, s.Rule, ruleBody(s))
	var notes []string
	if s.Probability < 1 {
		notes = append(notes, fmt.Sprintf("random p=%.4f, this branch %s", s.Probability, pct(s.Branch)))
	}
	if s.Mark != "" {
		notes = append(notes, "mark now "+s.Mark)
	}
	if s.DNAT != "" {
		notes = append(notes, "DNAT to "+s.DNAT)
	}
	if s.Masquerade {
		notes = append(notes, "SNAT to the outgoing interface's address")
	}
	if len(notes) > 0 {
		l += "   [" + strings.Join(notes, "; ") + "]"
	}
	return l
}

func (p *Path) summary() string {
	var b strings.Builder
	switch p.Verdict {
	case "ACCEPT":
		fmt.Fprintf(&b, "=> %s %s (%s)", p.Verdict, p.Dst, pct(p.Probability))
		if p.Masquerade {
			b.WriteString(", source masqueraded")
		} else {
			b.WriteString(", source kept")
		}
		if p.Route != nil {
			b.WriteString(", " + p.Route.String())
		}
		if p.Endpoint != nil {
			b.WriteString(", reaches " + p.Endpoint.String())
		}
	default:
		fmt.Fprintf(&b, "=> %s (%s)", p.Verdict, pct(p.Probability))
	}
	if p.Why != "" {
		b.WriteString(": " + p.Why)
	}
	return b.String()
}

// String is the routing decision as one line of output.
func (r *Route) String() string {
	switch r.Kind {
	case "bridge":
		s := "out " + r.Dev + " (bridge)"
		if r.Veth != "" {
			s += " via veth " + r.Veth
		}
		return s
	case "node":
		return fmt.Sprintf("out %s via %s (node %s)", r.Dev, r.Via, r.Node)
	case "vxlan":
		return fmt.Sprintf("out %s via %s, VXLAN encapsulated to %s's %s:%d (VNI %d)", r.Dev, r.Via, r.Node, r.Tunnel, cni.VXLANPort, cni.VXLANVNI)
	case "local":
		return "delivered locally (" + r.Dev + ")"
	}
	s := "out " + r.Dev
	if r.Via != "" {
		s += " via " + r.Via
	}
	return s
}

func (r *Result) header(w io.Writer) {
	from := r.From.Kind
	if r.From.Name != "" && r.From.Name != r.From.Kind {
		from += " " + r.From.Name
	}
	to := r.To.Addr.String() + " (" + r.To.Kind + ")"
	if r.To.Service != "" {
		to = "svc " + r.To.Service + " " + to
	}
	fmt.Fprintf(w, "trace %s %s (%s) -> %s\n", r.Proto, from, r.From.IP, to)
	ns := r.Netns
	if ns == "" {
		ns = "the root namespace"
	}
	if r.Mode == ModeNFTables {
		fmt.Fprintf(w, "rules: nft list table %s %s on node %s (%s), packet enters hook %s\n", resultNFTFamily(r), nftTable, r.Node, ns, r.Hook)
		return
	}
	save := "iptables-save"
	if r.Family == ipv6.String() {
		save = "ip6tables-save"
	}
	fmt.Fprintf(w, "rules: %s on node %s (%s), packet enters nat %s\n", save, r.Node, ns, r.Hook)
}

// Tree writes the readable form: one line per matched rule, branching where
// the paths split, each path ending in its verdict, route and destination.
func (r *Result) Tree(w io.Writer) {
	r.header(w)
	var walk func(n *trie, prefix string)
	walk = func(n *trie, prefix string) {
		for i, c := range n.children {
			line := ""
			if c.leaf {
				line = r.Paths[c.path].summary()
			} else {
				line = stepLine(c.step)
			}
			if len(n.children) == 1 && !c.leaf && quiet(c.step) {
				walk(c, prefix)
				continue
			}
			if len(n.children) == 1 {
				fmt.Fprintf(w, "%s%s\n", prefix, line)
				r.policyLines(w, c, prefix+"   ")
				walk(c, prefix)
				continue
			}
			glyph, cont := "├─ ", "│  "
			if i == len(n.children)-1 {
				glyph, cont = "└─ ", "   "
			}
			fmt.Fprintf(w, "%s%s%s\n", prefix, glyph, line)
			r.policyLines(w, c, prefix+cont+"   ")
			walk(c, prefix+cont)
		}
	}
	walk(buildTrie(r.Paths), "")
	if r.Gateway != nil {
		r.Gateway.tree(w)
	}
	if r.Live != nil {
		r.Live.tree(w, r)
	}
}

// policyLines writes a path's network policy verdicts under its summary.
func (r *Result) policyLines(w io.Writer, c *trie, prefix string) {
	if !c.leaf {
		return
	}
	for _, v := range r.Paths[c.path].Policy {
		fmt.Fprintf(w, "%s%s\n", prefix, v)
	}
}

func (l *Live) tree(w io.Writer, r *Result) {
	fmt.Fprintf(w, "live: %s", l.Probe)
	switch {
	case l.Connected && l.Reply != "":
		fmt.Fprintf(w, ": answered %q\n", firstLines(body(l.Reply), 3))
	case l.Connected:
		fmt.Fprintf(w, ": connected, no answer\n")
	default:
		fmt.Fprintf(w, ": %s\n", l.Error)
	}
	if l.Conntrack != nil {
		fmt.Fprintf(w, "  conntrack on %s: %s\n", r.Node, l.Conntrack)
	} else {
		fmt.Fprintf(w, "  conntrack on %s: no entry for the probe (a packet dropped or rejected before confirmation leaves none)\n", r.Node)
	}
	chains := map[string]bool{}
	for _, p := range r.Paths {
		for _, s := range p.Steps {
			chains[s.Table+"/"+s.Chain] = true
		}
	}
	for _, e := range l.Trace {
		fmt.Fprintf(w, "  kernel trace: %s\n", e)
	}
	for _, c := range l.Moved {
		if chains[c.Table+"/"+c.Chain] {
			rule := fmt.Sprintf("#%d", c.Rule)
			if c.Rule == 0 {
				rule = "(" + c.Text + ")"
			}
			fmt.Fprintf(w, "  counter +%d pkt: %s %s %s\n", c.Packets, c.Table, c.Chain, rule)
		}
	}
	if l.Confirmed {
		took := r.Paths[l.Path].Verdict + " " + r.Paths[l.Path].Dst
		if strings.HasPrefix(l.Reached, "REJECT on ") {
			took += ", then " + l.Reached
		}
		fmt.Fprintf(w, "  confirmed: the kernel took path %d (%s)\n", l.Path+1, took)
	} else {
		fmt.Fprintf(w, "  NOT confirmed\n")
	}
	if l.Path >= 0 && l.Path < len(r.Paths) {
		for _, v := range r.Paths[l.Path].Policy {
			if v.Confirmed == nil {
				continue
			}
			state := "its counter moved: confirmed"
			if !*v.Confirmed {
				state = "its counter did NOT move"
			}
			fmt.Fprintf(w, "  policy on %s: %s of %s %s by filter %s #%d, %s\n", v.Node, v.Direction, v.Pod, v.Verdict, v.Chain, v.Rule, state)
		}
	}
	for _, n := range l.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// body is an HTTP reply's body (the lab's echo and serve_hostname answer
// HTTP), or the whole reply.
func body(s string) string {
	if strings.HasPrefix(s, "HTTP/") {
		if _, b, ok := strings.Cut(s, "\r\n\r\n"); ok {
			return b
		}
	}
	return s
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// JSON writes the result as indented JSON.
func (r *Result) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Dot writes a Graphviz digraph: one node per rule, edges labelled with
// their probability where the paths branch, verdicts coloured.
func (r *Result) Dot(w io.Writer) {
	fmt.Fprintf(w, "digraph trace {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n")
	from := r.From.Kind + " " + r.From.Name + "\\n" + r.From.IP.String()
	fmt.Fprintf(w, "  n0 [label=%s, shape=ellipse];\n", dotQuote(strings.TrimSpace(from)+"\\n-> "+r.To.Addr.String()))
	id := 0
	var gwLeaves []int // the leaves whose path ends at the Gateway's data plane
	var walk func(n *trie, parent int)
	walk = func(n *trie, parent int) {
		for _, c := range n.children {
			if !c.leaf && quiet(c.step) && len(n.children) == 1 {
				walk(c, parent)
				continue
			}
			id++
			me := id
			edge := ""
			if c.leaf {
				p := &r.Paths[c.path]
				color := map[string]string{"ACCEPT": "palegreen", "DROP": "salmon", "REJECT": "orange"}[p.Verdict]
				label := p.Verdict + " " + p.Dst
				if p.Masquerade {
					label += "\\nmasqueraded"
				}
				if p.Route != nil {
					label += "\\n" + p.Route.String()
				}
				if p.Endpoint != nil {
					label += "\\n" + p.Endpoint.String()
				}
				if r.Gateway.servedAt(p.Dst) {
					label += "\\nGateway " + r.Gateway.Name + " data plane (user space)"
					gwLeaves = append(gwLeaves, me)
				}
				if p.Why != "" {
					label += "\\n" + wrap(p.Why, 60)
				}
				fmt.Fprintf(w, "  n%d [label=%s, style=filled, fillcolor=%s, shape=ellipse];\n", me, dotQuote(label), color)
				edge = pct(p.Probability)
			} else {
				s := c.step
				label := s.Table + " " + s.Chain
				if s.Rule > 0 && s.Table == nftTable {
					label += fmt.Sprintf(" #%d\\n-> %s", s.Rule, s.Target)
				} else if s.Rule > 0 {
					label += fmt.Sprintf(" #%d\\n-j %s", s.Rule, s.Target)
				} else {
					label += "\\n(end of chain: " + s.Target + ")"
				}
				if s.Comment != "" {
					label += "\\n" + s.Comment
				}
				if s.Mark != "" {
					label += "\\nmark " + s.Mark
				}
				if s.DNAT != "" {
					label += "\\nDNAT " + s.DNAT
				}
				fmt.Fprintf(w, "  n%d [label=%s];\n", me, dotQuote(label))
				if s.Probability < 1 {
					edge = fmt.Sprintf("p=%.4f", s.Probability)
				}
			}
			if edge != "" {
				fmt.Fprintf(w, "  n%d -> n%d [label=%s];\n", parent, me, dotQuote(edge))
			} else {
				fmt.Fprintf(w, "  n%d -> n%d;\n", parent, me)
			}
			walk(c, me)
		}
	}
	walk(buildTrie(r.Paths), 0)
	if r.Gateway != nil {
		// The Gateway's part past the rules, as the tree prints it, beside
		// the paths that end at its data plane.
		var b strings.Builder
		r.Gateway.tree(&b)
		fmt.Fprintf(w, "  gateway [label=%s, shape=note];\n", dotQuote(strings.ReplaceAll(b.String(), "\n", "\\l")))
		for _, n := range gwLeaves {
			fmt.Fprintf(w, "  n%d -> gateway [style=dashed];\n", n)
		}
	}
	fmt.Fprintf(w, "}\n")
}

// dotQuote quotes a label; "\n" sequences already in it stay line breaks.
func dotQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

func wrap(s string, n int) string {
	var b strings.Builder
	col := 0
	for _, word := range strings.Fields(s) {
		if col > 0 && col+len(word) > n {
			b.WriteString("\\n")
			col = 0
		} else if col > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += len(word)
	}
	return b.String()
}

// resultNFTFamily is the nftables family of the table a result read.
func resultNFTFamily(r *Result) string {
	if r.Family == ipv6.String() {
		return ipv6.nft()
	}
	return ipv4.nft()
}
