package kubeproxy

import (
	"bytes"
	"slices"
	"strings"

	"github.com/minikit/minikit/internal/iptables"
)

// jumpRule is one of kube-proxy's jumps from a built-in chain into its own
// chains (iptablesJumpChains). kube-proxy installs each with `-C`, then
// `-I CHAIN 1` if missing, in this order, so in the kernel they end up in
// reverse order at the top of each built-in chain.
type jumpRule struct {
	table, from, to, comment string
	extra                    []string
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

var jumpRules = []jumpRule{
	{iptables.TableFilter, "INPUT", chainExternalServices, "kubernetes externally-visible service portals", ctNew},
	{iptables.TableFilter, "FORWARD", chainExternalServices, "kubernetes externally-visible service portals", ctNew},
	{iptables.TableFilter, "INPUT", chainNodePorts, "kubernetes health check service ports", nil},
	{iptables.TableFilter, "FORWARD", chainServices, "kubernetes service portals", ctNew},
	{iptables.TableFilter, "OUTPUT", chainServices, "kubernetes service portals", ctNew},
	{iptables.TableFilter, "FORWARD", chainForward, "kubernetes forwarding rules", nil},
	{iptables.TableFilter, "INPUT", chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{iptables.TableFilter, "OUTPUT", chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{iptables.TableFilter, "FORWARD", chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{iptables.TableNAT, "OUTPUT", chainServices, "kubernetes service portals", nil},
	{iptables.TableNAT, "PREROUTING", chainServices, "kubernetes service portals", nil},
	{iptables.TableNAT, "POSTROUTING", chainPostrouting, "kubernetes postrouting rules", nil},
	// kubelet's KUBE-FIREWALL, which kube-proxy ensures as well (without a
	// comment, as kubelet writes it), after its own jumps: so it ends up first.
	{iptables.TableFilter, "INPUT", chainFirewall, "", nil},
	{iptables.TableFilter, "OUTPUT", chainFirewall, "", nil},
}

func (j jumpRule) args() []string {
	a := slices.Clone(j.extra)
	if j.comment != "" {
		a = append(a, "-m", "comment", "--comment", j.comment)
	}
	return append(a, "-j", j.to)
}

// line is the rule in restore syntax, "-A FROM ...".
func (j jumpRule) line() string { return "-A " + j.from + " " + iptables.JoinRule(j.args()) }

// jumpsInto returns the restore lines of the jumps in table's built-in chain
// from, in the order they end up in the kernel after kube-proxy's prepends.
func jumpsInto(table, from string) []string {
	var out []string
	for i := len(jumpRules) - 1; i >= 0; i-- {
		if j := jumpRules[i]; j.table == table && j.from == from {
			out = append(out, j.line())
		}
	}
	return out
}

// ruleSet is the whole desired state of the proxy's chains.
type ruleSet struct {
	filter []chain
	nat    []chain
}

func (rs *ruleSet) chains(table string) []chain {
	if table == iptables.TableFilter {
		return rs.filter
	}
	return rs.nat
}

// countRules returns the number of rules in the set, jumps from built-in chains excluded.
func (rs *ruleSet) countRules() (filter, nat int) {
	for _, c := range rs.filter {
		filter += len(c.rules)
	}
	for _, c := range rs.nat {
		nat += len(c.rules)
	}
	return
}

// buildRuleSet puts per-service results (in a stable order) together with the
// fixed chains.
func buildRuleSet(services []*serviceRules, fx fixedOptions) *ruleSet {
	var natServices, natNodePorts []targeted
	var fNodePorts, fServices, fExternal, fFirewall []string
	var svcChains []chain
	for _, s := range services {
		natServices = append(natServices, s.natServices...)
		natNodePorts = append(natNodePorts, s.natNodePorts...)
		fNodePorts = append(fNodePorts, s.filterNodePorts...)
		fServices = append(fServices, s.filterServices...)
		fExternal = append(fExternal, s.filterExternal...)
		fFirewall = append(fFirewall, s.filterFirewall...)
		svcChains = append(svcChains, s.chains...)
	}
	rs := &ruleSet{
		filter: []chain{
			{name: chainNodePorts, rules: fNodePorts},
			{name: chainServices, rules: fServices},
			{name: chainExternalServices, rules: fExternal},
			{name: chainForward, rules: forwardRules(fx)},
			{name: chainProxyFirewall, rules: fFirewall},
			{name: chainFirewall, rules: firewallRules(fx)},
			{name: chainCanary, rules: nil},
		},
	}
	rs.nat = append([]chain{
		{name: chainServices, rules: append(sortByTarget(natServices), nodePortsTail(fx))},
		{name: chainNodePorts, rules: sortByTarget(natNodePorts)},
		{name: chainPostrouting, rules: postroutingRules(fx.randomFully)},
		{name: chainMarkMasq, rules: markMasqRules()},
		{name: chainCanary, rules: nil},
	}, svcChains...)
	return rs
}

// Restore input.
//
// The input shape, measured on the 2-core lab machine with iptables 1.8.9
// (scripts/bench-proxy.sh; the numbers are in docs/measurements.md):
//
//   - nf_tables backend, full syncs: whole nat and filter tables WITHOUT
//     --noflush. iptables-nft then skips its cache entirely; with --noflush it
//     fetches every chain the input names one netlink request at a time and
//     keeps their names in a sorted list (O(lines x chains)): 1.5 s instead of
//     0.65 s at 1,000 services, 17 minutes instead of 8 s at 10,000. Because a
//     whole-table restore replaces everything, the chains minikit does not own
//     (other software's, the node agent's MINIKIT-*) and the foreign rules of
//     the built-in chains are read right before (iptables.ReplaceTables, under
//     the process-wide iptables lock) and written back verbatim after our jumps.
//     This keeps minikit a good neighbour on a shared VM; the one thing it cannot
//     protect is a change another program commits during the restore itself,
//     and full syncs are rare (start, failures, a flush, hourly).
//   - every backend, partial syncs: --noflush with only the chains whose
//     content changed (plus -X for chains no longer used). Such an input names
//     a handful of chains, so the --noflush costs above do not arise; built-in
//     chains and foreign chains are never touched.
//   - legacy backend, full syncs: --noflush with every chain, as kube-proxy does:
//     iptables-legacy is linear either way (4.8 s at 10,000 services), and the
//     jumps from built-in chains go in per rule.

// wholeTables renders full-sync input that replaces the filter and nat tables.
func wholeTables(rs *ruleSet, state map[string]*iptables.TableState) []byte {
	// Two passes, the first only measuring: at 10,000 services the input is
	// 17 MB, and growing a buffer to that size by doubling cost more than
	// rendering the rules (fresh pages to fault in and clear, GC work).
	var w restoreWriter
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			w.buf = make([]byte, 0, w.n)
		}
		for _, table := range []string{iptables.TableFilter, iptables.TableNAT} {
			ts := state[table]
			ours := rs.chains(table)
			w.line("*", table)
			for _, c := range ts.Chains {
				w.line(":", c.Name, " ", c.Policy, " [0:0]")
			}
			for _, c := range ours {
				w.line(":", c.name, " - [0:0]")
			}
			for _, c := range ts.Chains {
				if c.Builtin() {
					for _, r := range c.Rules {
						if policyHook(r) {
							w.line(r) // stays rule 1, above our jumps
						}
					}
					for _, l := range jumpsInto(table, c.Name) {
						w.line(l)
					}
				}
				for _, r := range c.Rules {
					if c.Builtin() && (ownedJump(r) || policyHook(r)) {
						continue // written above
					}
					w.line(r)
				}
			}
			for _, c := range ours {
				for _, r := range c.rules {
					w.line(r)
				}
			}
			w.line("COMMIT")
		}
	}
	return w.buf
}

// restoreWriter writes lines into buf, or, while buf is nil, only counts
// their bytes into n.
type restoreWriter struct {
	buf []byte
	n   int
}

func (w *restoreWriter) line(parts ...string) {
	for _, p := range parts {
		if w.buf == nil {
			w.n += len(p)
		} else {
			w.buf = append(w.buf, p...)
		}
	}
	if w.buf == nil {
		w.n++
	} else {
		w.buf = append(w.buf, '\n')
	}
}

// ownedJump reports whether a built-in chain's rule jumps into a KUBE- chain.
func ownedJump(line string) bool {
	args := iptables.SplitRule(line)
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "-j" || args[i] == "-g") && ownedChain(args[i+1]) {
			return true
		}
	}
	return false
}

// keepForeign tells ReplaceTables which chains to read and keep: all but ours.
func keepForeign(table, name string) bool { return !ownedChain(name) }

// noFlushInput renders --noflush input that rewrites the given chains and
// deletes the stale ones (declared first, so the input works whether or not
// they still exist, then -X, as kube-proxy does).
func noFlushInput(write map[string][]chain, stale map[string][]string) []byte {
	var b bytes.Buffer
	for _, table := range []string{iptables.TableFilter, iptables.TableNAT} {
		if len(write[table]) == 0 && len(stale[table]) == 0 {
			continue
		}
		b.WriteString("*" + table + "\n")
		for _, c := range write[table] {
			b.WriteString(":" + c.name + " - [0:0]\n")
		}
		for _, n := range stale[table] {
			b.WriteString(":" + n + " - [0:0]\n")
		}
		for _, c := range write[table] {
			for _, r := range c.rules {
				b.WriteString(r + "\n")
			}
		}
		for _, n := range stale[table] {
			b.WriteString("-X " + n + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// ruleText renders the whole rule set as iptables-restore --noflush input,
// jumps from built-in chains included as comments: what `minikit proxy rules`
// and the debug endpoint show.
func ruleText(rs *ruleSet) []byte {
	var b bytes.Buffer
	for _, table := range []string{iptables.TableFilter, iptables.TableNAT} {
		b.WriteString("*" + table + "\n")
		for _, c := range rs.chains(table) {
			b.WriteString(":" + c.name + " - [0:0]\n")
		}
		for _, from := range iptables.BuiltinChains(table) {
			for _, l := range jumpsInto(table, from) {
				b.WriteString("# " + l + "\n")
			}
		}
		for _, c := range rs.chains(table) {
			for _, r := range c.rules {
				b.WriteString(r + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

func joinRules(c chain) string {
	if c.text == "" && len(c.rules) > 0 {
		return strings.Join(c.rules, "\n")
	}
	return c.text
}
