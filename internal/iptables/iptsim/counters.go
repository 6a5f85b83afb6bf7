package iptsim

import (
	"maps"
	"slices"
)

// Counter is the packet and byte count of one rule, or of a built-in chain's
// policy (Rule 0), as iptables-save -c printed it.
type Counter struct {
	Table   string `json:"table"`
	Chain   string `json:"chain"`
	Rule    int    `json:"rule"`
	Text    string `json:"text"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Counters lists every rule's counters, and every built-in chain's policy
// counters, table by table in the order the rules were saved.
func (r *Rules) Counters() []Counter {
	var out []Counter
	for _, t := range slices.Sorted(maps.Keys(r.tables)) {
		for _, c := range r.order[t] {
			for i := 0; i <= len(r.tables[t][c]); i++ {
				if ctr, ok := r.Counter(t, c, i); ok {
					out = append(out, ctr)
				}
			}
		}
	}
	return out
}

// Counter returns the counters of rule (1-based) of table/chain, or of the
// chain's policy for rule 0.
func (r *Rules) Counter(table, chain string, rule int) (Counter, bool) {
	if rule == 0 {
		p, ok := r.policies[table][chain]
		return Counter{Table: table, Chain: chain, Text: "policy " + p.verdict, Packets: p.packets, Bytes: p.bytes}, ok
	}
	rs := r.tables[table][chain]
	if rule < 1 || rule > len(rs) {
		return Counter{}, false
	}
	return Counter{Table: table, Chain: chain, Rule: rule, Text: rs[rule-1].text, Packets: rs[rule-1].packets, Bytes: rs[rule-1].bytes}, true
}

// Moved returns the counters that grew from before to after, as deltas. A
// rule is the same rule when it has the same position and text in both; a
// rule that was added, removed or moved in between is not reported, since its
// counters cannot be attributed.
func Moved(before, after *Rules) []Counter {
	var out []Counter
	for _, a := range after.Counters() {
		b, ok := before.Counter(a.Table, a.Chain, a.Rule)
		if !ok || b.Text != a.Text || a.Packets <= b.Packets {
			continue
		}
		a.Packets -= b.Packets
		a.Bytes -= b.Bytes
		out = append(out, a)
	}
	return out
}
