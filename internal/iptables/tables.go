package iptables

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Backend is the kernel interface behind the iptables binaries.
type Backend string

// Backends.
const (
	NFTables Backend = "nf_tables"
	Legacy   Backend = "legacy"
)

// Chain is one chain as read from the kernel, in restore syntax.
type Chain struct {
	Name string
	// Policy is ACCEPT or DROP for a built-in chain, "-" for a user chain.
	Policy string
	// Rules are "-A NAME ..." lines, without counters.
	Rules []string
}

// Builtin reports whether the chain is a built-in one.
func (c *Chain) Builtin() bool { return c.Policy != "-" }

// TableState is the part of a table that ReplaceTables keeps: its built-in
// chains (in kernel order) and the chains the caller does not own.
type TableState struct {
	Name   string
	Chains []*Chain
}

// Chain returns the named chain, or nil.
func (t *TableState) Chain(name string) *Chain {
	for _, c := range t.Chains {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// BuiltinChains lists the built-in chains of a table in iptables-save order.
func BuiltinChains(table string) []string {
	switch table {
	case TableFilter:
		return []string{"INPUT", "FORWARD", "OUTPUT"}
	case TableNAT:
		return []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
	case TableMangle:
		return []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	case "raw":
		return []string{"PREROUTING", "OUTPUT"}
	case "security":
		return []string{"INPUT", "FORWARD", "OUTPUT"}
	}
	return nil
}

// IsBuiltin reports whether chain is a built-in chain of table.
func IsBuiltin(table, chain string) bool { return slices.Contains(BuiltinChains(table), chain) }

func detectBackend() Backend {
	out, err := exec.Command("iptables", "--version").Output()
	if err == nil && strings.Contains(string(out), "nf_tables") {
		return NFTables
	}
	return Legacy
}

func (r *runner) Backend() Backend { return r.backend }

func (r *runner) ListChains(table string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listChains(table)
}

// listChains asks nf_tables over netlink for the names alone when it can:
// iptables-save would print every rule of every chain, seconds at 10,000
// services. The legacy backend has no such shortcut.
func (r *runner) listChains(table string) ([]string, error) {
	if r.backend == NFTables {
		if all, err := nftChainDump(r.nfFamily()); err == nil {
			return chainNames(all, table), nil
		}
	}
	out, err := exec.Command(r.bin("iptables-save"), "-t", table).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w", r.bin("iptables-save"), table, err)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, ":") {
			names = append(names, strings.Fields(l[1:])[0])
		}
	}
	for _, b := range BuiltinChains(table) {
		if !slices.Contains(names, b) {
			names = append(names, b)
		}
	}
	return names, nil
}

// smallTablesChains is the most chains (all tables together) for which one
// iptables-save of every table is cheaper than an `iptables -S` per chain to
// keep: each exec costs a few milliseconds, and a save of a few dozen chains
// costs about one exec.
const smallTablesChains = 64

// chainNames is table's chains in an nftChainDump, with the built-in chains
// that the table does not have yet (an absent table has them all).
func chainNames(all []nftChain, table string) []string {
	var names []string
	for _, c := range all {
		if c.Table == table {
			names = append(names, c.Name)
		}
	}
	for _, b := range BuiltinChains(table) {
		if !slices.Contains(names, b) {
			names = append(names, b)
		}
	}
	return names
}

// readSmallTables reads the tables with one iptables-save when, as at a first
// start, they hold little (chains, an nftChainDump, tells the chain count
// without an exec), and without any exec when they hold nothing to keep (a
// fresh namespace). ok is false when the tables are too big.
func (r *runner) readSmallTables(chains []nftChain, tables []string, keep func(table, chain string) bool) (state map[string]*TableState, ok bool, err error) {
	total := 0
	for _, c := range chains {
		if slices.Contains(tables, c.Table) {
			total++
		}
	}
	if total > smallTablesChains {
		return nil, false, nil
	}
	if empty, err := nftTablesEmpty(r.nfFamily(), tables, chains); err == nil && empty {
		// Nothing to keep: the built-in chains, empty, policy ACCEPT.
		return parseSave(nil, tables, keep), true, nil
	}
	out, err := exec.Command(r.bin("iptables-save")).Output()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", r.bin("iptables-save"), err)
	}
	return parseSave(out, tables, keep), true, nil
}

// parseSave builds the TableState of each of tables from iptables-save output
// (without counters): the built-in chains in kernel order, policy ACCEPT when
// the table is absent, then the declared chains keep accepts, sorted by name.
// The text is iptables-save's own, so ParseSave reads every line of it; a line
// it could not read would be left out rather than lose the whole table.
func parseSave(out []byte, tables []string, keep func(table, chain string) bool) map[string]*TableState {
	read, _ := ParseSave(string(out))
	state := map[string]*TableState{}
	for _, t := range tables {
		ts := &TableState{Name: t}
		declared := func(name string) *SavedChain {
			if st := read[t]; st != nil {
				if c := st.Chain(name); c != nil && c.Declared {
					return c
				}
			}
			return nil
		}
		for _, b := range BuiltinChains(t) {
			c := &Chain{Name: b, Policy: "ACCEPT"}
			if sc := declared(b); sc != nil {
				if sc.Policy != "-" && sc.Policy != "" {
					c.Policy = sc.Policy
				}
				c.Rules = ruleTexts(sc)
			}
			ts.Chains = append(ts.Chains, c)
		}
		var names []string
		if st := read[t]; st != nil {
			for _, c := range st.Chains {
				if c.Declared && !IsBuiltin(t, c.Name) && keep(t, c.Name) {
					names = append(names, c.Name)
				}
			}
		}
		slices.Sort(names)
		for _, n := range names {
			ts.Chains = append(ts.Chains, &Chain{Name: n, Policy: "-", Rules: ruleTexts(declared(n))})
		}
		state[t] = ts
	}
	return state
}

func ruleTexts(c *SavedChain) []string {
	var rules []string
	for _, r := range c.Rules {
		rules = append(rules, r.Text)
	}
	return rules
}

// readChain reads one chain with `iptables -S`, which on nf_tables fetches
// only that chain from the kernel.
func (r *runner) readChain(table, name string) (*Chain, error) {
	out, err := exec.Command(r.bin("iptables"), "-w", "5", "-t", table, "-S", name).Output()
	if err != nil {
		return nil, fmt.Errorf("listing chain %s/%s: %w", table, name, err)
	}
	c := &Chain{Name: name, Policy: "-"}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, "-P "):
			if f := strings.Fields(l); len(f) >= 3 {
				c.Policy = f[2]
			}
		case strings.HasPrefix(l, "-A "):
			c.Rules = append(c.Rules, l)
		}
	}
	return c, nil
}

func (r *runner) readTables(tables []string, keep func(table, chain string) bool) (map[string]*TableState, error) {
	// On nf_tables, one netlink dump of the chains serves the size check, the
	// fresh-namespace check and every table's chain names.
	var dump []nftChain
	dumped := false
	if r.backend == NFTables {
		var err error
		dump, err = nftChainDump(r.nfFamily())
		dumped = err == nil
	}
	if dumped {
		if state, ok, err := r.readSmallTables(dump, tables, keep); ok || err != nil {
			return state, err
		}
	}
	state := map[string]*TableState{}
	for _, t := range tables {
		var names []string
		if dumped {
			names = chainNames(dump, t)
		} else {
			var err error
			if names, err = r.listChains(t); err != nil {
				return nil, err
			}
		}
		ts := &TableState{Name: t}
		for _, b := range BuiltinChains(t) {
			c, err := r.readChain(t, b)
			if err != nil {
				return nil, err
			}
			if c.Policy == "-" {
				c.Policy = "ACCEPT"
			}
			ts.Chains = append(ts.Chains, c)
		}
		slices.Sort(names)
		for _, n := range names {
			if IsBuiltin(t, n) || !keep(t, n) {
				continue
			}
			c, err := r.readChain(t, n)
			if err != nil {
				return nil, err
			}
			c.Policy = "-"
			ts.Chains = append(ts.Chains, c)
		}
		state[t] = ts
	}
	return state, nil
}

// ReplaceTables: see Interface.
//
// Reading the kept chains costs one `iptables -S` exec per chain (milliseconds
// each), which would dominate a full sync of a small rule set. nf_tables counts
// every committed change in a global generation number, so when the generation
// is still the one our last write produced, nobody changed any table since and
// the state we wrote is still exact: it is reused without reading.
//
// Counters of the kept rules restart from zero, as after any flush.
func (r *runner) ReplaceTables(tables []string, keep func(table, chain string) bool, build func(map[string]*TableState) ([]byte, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	state := r.cached
	_, ok := r.cacheValid()
	for _, t := range tables {
		if ok && state[t] == nil {
			ok = false
		}
	}
	if !ok {
		var err error
		if state, err = r.readTables(tables, keep); err != nil {
			r.cached = nil
			return err
		}
	}
	data, err := build(state)
	if err != nil {
		return err
	}
	if err := r.restore(data, false); err != nil {
		r.cached = nil
		return err
	}
	r.cached = nil
	if r.backend == NFTables {
		if gen, err := nftGeneration(); err == nil {
			r.cached, r.cachedGen = state, gen
		}
	}
	return nil
}

// cacheValid reports whether the cached state still matches the kernel.
func (r *runner) cacheValid() (uint32, bool) {
	if r.cached == nil || r.backend != NFTables {
		return 0, false
	}
	gen, err := nftGeneration()
	return gen, err == nil && gen == r.cachedGen
}

// touchesCached reports whether restore input names a chain the cached state
// holds (a built-in or a kept chain), or a table it does not know.
func touchesCached(data []byte, cached map[string]*TableState) bool {
	var ts *TableState
	for _, l := range strings.Split(string(data), "\n") {
		if len(l) < 2 {
			continue
		}
		var name string
		switch {
		case l[0] == '*':
			ts = cached[l[1:]]
			continue
		case l[0] == ':':
			name = strings.Fields(l[1:])[0]
		case l[0] == '-':
			f := strings.Fields(l)
			if len(f) < 2 {
				return true // -F or -X without a chain
			}
			name = f[1]
		default:
			continue
		}
		if ts == nil || ts.Chain(name) != nil {
			return true
		}
	}
	return false
}

// SplitRule splits one restore/save line into arguments the way
// iptables-restore does: on blanks, with double quotes grouping.
func SplitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			inQuote = !inQuote
			have = true
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

// JoinRule is SplitRule's inverse: arguments with blanks are double-quoted.
func JoinRule(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t") {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}
