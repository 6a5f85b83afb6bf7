// Package upstreamproxy runs upstream kube-proxy v1.37.2 next to minikit's
// service proxy on the same API objects and compares what they write: the
// iptables rule sets, chain by chain (parity_test.go), and, for
// scripts/bench-proxy.sh, their sync and network programming metrics. The
// peer runs in a network namespace of its own that mirrors one minikit
// node's addresses; nothing runs in the root namespace.
package upstreamproxy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/minikit/minikit/internal/iptables"
)

// Save is an iptables-save text parsed into table -> chain -> rules, each rule
// without its "-A CHAIN " prefix.
type Save map[string]map[string][]string

// ParseSave reads iptables-save output (without -c); chain declarations'
// counters and policies are dropped, since only rules are compared.
func ParseSave(text string) (Save, error) {
	s := Save{}
	var cur map[string][]string
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l == "COMMIT":
		case l[0] == '*':
			cur = map[string][]string{}
			s[l[1:]] = cur
		case l[0] == ':':
			if cur == nil {
				return nil, fmt.Errorf("line %d: chain outside a table", i+1)
			}
			f := strings.Fields(l[1:])
			if _, ok := cur[f[0]]; !ok {
				cur[f[0]] = []string{}
			}
		case strings.HasPrefix(l, "-A "):
			if cur == nil {
				return nil, fmt.Errorf("line %d: rule outside a table", i+1)
			}
			name, rest, _ := strings.Cut(l[3:], " ")
			cur[name] = append(cur[name], rest)
		default:
			return nil, fmt.Errorf("line %d: cannot parse %q", i+1, l)
		}
	}
	return s, nil
}

// Exclusion is an intended difference: chains neither side compares, with why.
type Exclusion struct {
	Match  func(table, chain string) bool
	Reason string
}

// Unordered lists the chains whose rule order carries no meaning: each rule
// matches a distinct destination, kube-proxy writes them in Go map order
// (a different order at every full sync), and minikit sorts them by jump
// target (tables.go, sortByTarget). They are compared as sorted lists. The
// only order that matters in them is kept: nat KUBE-SERVICES' NodePort rule
// stays last, and in KUBE-NODEPORTS a port's counted 127.0.0.0/8 rule stays
// right before the general rule for the same port (see normalize).
var Unordered = map[string]bool{
	"nat/KUBE-SERVICES": true, "nat/KUBE-NODEPORTS": true,
	"filter/KUBE-SERVICES": true, "filter/KUBE-EXTERNAL-SERVICES": true,
	"filter/KUBE-NODEPORTS": true, "filter/KUBE-PROXY-FIREWALL": true,
}

const localhostFrags = "-d 127.0.0.0/8 |-m nfacct --nfacct-name localhost_nps_accepted_pkts "

// general returns the rule without its localhost NodePort matches, and
// whether it had them.
func general(rule string) (string, bool) {
	had := false
	for _, frag := range strings.Split(localhostFrags, "|") {
		if strings.Contains(rule, frag) {
			rule, had = strings.Replace(rule, frag, "", 1), true
		}
	}
	return rule, had
}

// normalize returns the rules of one chain in the order they are compared.
// In an unordered chain a localhost NodePort rule and the general rule of
// the same port right after it form one block; a localhost rule anywhere
// else is marked out of place, so that it shows in the diff.
func normalize(table, chain string, rules []string) []string {
	out := append([]string(nil), rules...)
	if !Unordered[table+"/"+chain] {
		return out
	}
	var tail []string
	if table == iptables.TableNAT && chain == "KUBE-SERVICES" && len(out) > 0 &&
		strings.Contains(out[len(out)-1], "-j KUBE-NODEPORTS") {
		tail, out = out[len(out)-1:], out[:len(out)-1]
	}
	var blocks [][]string
	for i := 0; i < len(out); i++ {
		g, had := general(out[i])
		switch {
		case !had:
			blocks = append(blocks, []string{out[i]})
		case i+1 < len(out) && out[i+1] == g:
			blocks = append(blocks, []string{out[i], out[i+1]})
			i++
		default:
			blocks = append(blocks, []string{"(out of place) " + out[i]})
		}
	}
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i][len(blocks[i])-1] < blocks[j][len(blocks[j])-1] })
	out = out[:0]
	for _, b := range blocks {
		out = append(out, b...)
	}
	return append(out, tail...)
}

// ChainDiff is one chain that differs.
type ChainDiff struct {
	Table, Chain string
	// OnlyMinikit and OnlyUpstream are the differing rules, in order.
	OnlyMinikit, OnlyUpstream []string
	// Missing says the chain exists on one side only ("minikit", "upstream").
	Missing string
}

func (d ChainDiff) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s", d.Table, d.Chain)
	if d.Missing != "" {
		fmt.Fprintf(&b, " (only %s has it)", d.Missing)
	}
	b.WriteString(":\n")
	for _, r := range d.OnlyUpstream {
		fmt.Fprintf(&b, "  - upstream: -A %s %s\n", d.Chain, r)
	}
	for _, r := range d.OnlyMinikit {
		fmt.Fprintf(&b, "  + minikit:  -A %s %s\n", d.Chain, r)
	}
	return b.String()
}

// Compare diffs every KUBE-* chain of the given tables, and the KUBE-* jumps
// of the built-in chains (in order), of minikit's and upstream's rules.
// Excluded chains, and jumps into them, are left out on both sides.
func Compare(minikit, upstream Save, tables []string, excl []Exclusion) []ChainDiff {
	excluded := func(t, c string) bool {
		for _, e := range excl {
			if e.Match(t, c) {
				return true
			}
		}
		return false
	}
	var diffs []ChainDiff
	for _, t := range tables {
		m, u := minikit[t], upstream[t]
		names := map[string]bool{}
		for c := range m {
			names[c] = true
		}
		for c := range u {
			names[c] = true
		}
		var sorted []string
		for c := range names {
			sorted = append(sorted, c)
		}
		sort.Strings(sorted)
		for _, c := range sorted {
			builtin := iptables.IsBuiltin(t, c)
			if excluded(t, c) || (!builtin && !strings.HasPrefix(c, "KUBE-")) {
				continue
			}
			mr, mok := m[c]
			ur, uok := u[c]
			if builtin {
				mr, ur = kubeJumps(t, mr, excluded), kubeJumps(t, ur, excluded)
			}
			d := ChainDiff{Table: t, Chain: c}
			if !builtin && !mok {
				d.Missing = "upstream"
			} else if !builtin && !uok {
				d.Missing = "minikit"
			}
			d.OnlyMinikit, d.OnlyUpstream = lineDiff(normalize(t, c, mr), normalize(t, c, ur))
			if d.Missing != "" || len(d.OnlyMinikit) > 0 || len(d.OnlyUpstream) > 0 {
				diffs = append(diffs, d)
			}
		}
	}
	return diffs
}

// kubeJumps keeps a built-in chain's jumps into KUBE-* chains that are not excluded.
func kubeJumps(table string, rules []string, excluded func(t, c string) bool) []string {
	var out []string
	for _, r := range rules {
		args := iptables.SplitRule(r)
		for i := 0; i+1 < len(args); i++ {
			if (args[i] == "-j" || args[i] == "-g") && strings.HasPrefix(args[i+1], "KUBE-") && !excluded(table, args[i+1]) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// lineDiff returns the rules only in a and only in b when the lists differ
// (an LCS walk, so an insertion shows as one line, not a shifted list).
func lineDiff(a, b []string) (onlyA, onlyB []string) {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			onlyA = append(onlyA, a[i])
			i++
		default:
			onlyB = append(onlyB, b[j])
			j++
		}
	}
	onlyA = append(onlyA, a[i:]...)
	onlyB = append(onlyB, b[j:]...)
	return onlyA, onlyB
}
