// Package iptablestest holds Fake, a stateful in-memory iptables.Interface
// for tests that render rules without root or an iptables binary (the proxy,
// the network policy enforcer, the node agent). It is a package of its own so
// that production code importing iptables does not carry the fake.
package iptablestest

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/iptables"
)

// Fake is a stateful in-memory iptables for unit-tier tests (test/README.md). It enforces what
// the kernel enforces and a no-op fake would hide: rules may only be added to
// existing chains, a jump must name an existing chain or a known target, a
// chain can only be deleted when it is empty and nothing jumps to it, and an
// iptables-restore applies each table atomically at COMMIT or not at all.
// Rules are kept exactly as written (no iptables-save normalisation), so
// golden text compares what a component wrote.
type Fake struct {
	mu     sync.Mutex
	tables map[string]*fakeTable

	// RandomFully is what HasRandomFully reports.
	RandomFully bool
	// FakeBackend is what Backend reports (default NFTables).
	FakeBackend iptables.Backend
	// RestoreErr, when set, makes the next Restore or ReplaceTables fail
	// without applying anything, then clears itself.
	RestoreErr error

	// Restores records every restore input in order.
	Restores []FakeRestore
	// Execs counts per-rule operations (EnsureChain, EnsureRule, DeleteRule,
	// DeleteChain): each is one iptables exec for the real implementation.
	Execs int
}

// FakeRestore is one recorded iptables-restore.
type FakeRestore struct {
	Data    string
	NoFlush bool
}

type fakeTable struct {
	name   string
	chains map[string]*fakeChain
}

type fakeChain struct {
	policy string // "-" for user chains
	rules  [][]string
}

// NewFake returns a Fake with empty filter, nat and mangle tables.
func NewFake() *Fake {
	f := &Fake{tables: map[string]*fakeTable{}, RandomFully: true, FakeBackend: iptables.NFTables}
	for _, t := range []string{iptables.TableFilter, iptables.TableNAT, iptables.TableMangle} {
		f.tables[t] = newFakeTable(t)
	}
	return f
}

func newFakeTable(name string) *fakeTable {
	t := &fakeTable{name: name, chains: map[string]*fakeChain{}}
	for _, c := range iptables.BuiltinChains(name) {
		t.chains[c] = &fakeChain{policy: "ACCEPT"}
	}
	return t
}

func (t *fakeTable) clone() *fakeTable {
	n := &fakeTable{name: t.name, chains: make(map[string]*fakeChain, len(t.chains))}
	for k, c := range t.chains {
		n.chains[k] = &fakeChain{policy: c.policy, rules: slices.Clone(c.rules)}
	}
	return n
}

func (f *Fake) table(name string) (*fakeTable, error) {
	t, ok := f.tables[name]
	if !ok {
		return nil, fmt.Errorf("table %q does not exist", name)
	}
	return t, nil
}

var knownTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "REJECT": true, "QUEUE": true,
	"DNAT": true, "SNAT": true, "MASQUERADE": true, "REDIRECT": true, "MARK": true,
	"CONNMARK": true, "LOG": true, "NFLOG": true, "TRACE": true, "NOTRACK": true,
	"CT": true, "CHECKSUM": true, "TCPMSS": true, "TPROXY": true, "AUDIT": true,
}

// jumpTarget returns the chain a rule jumps or goes to, "" if none.
func jumpTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "--jump" || args[i] == "-g" || args[i] == "--goto" {
			return args[i+1]
		}
	}
	return ""
}

// checkTargets fails if a rule jumps to a chain that does not exist.
func (t *fakeTable) checkTargets() error {
	for name, c := range t.chains {
		for _, r := range c.rules {
			j := jumpTarget(r)
			if j == "" || knownTargets[j] {
				continue
			}
			if _, ok := t.chains[j]; !ok {
				return fmt.Errorf("rule in chain %s jumps to missing chain %s: Couldn't load target `%s'", name, j, j)
			}
		}
	}
	return nil
}

func (t *fakeTable) referenced(chain string) bool {
	for _, c := range t.chains {
		for _, r := range c.rules {
			if jumpTarget(r) == chain {
				return true
			}
		}
	}
	return false
}

func (t *fakeTable) deleteChain(name string) error {
	c, ok := t.chains[name]
	switch {
	case !ok:
		return fmt.Errorf("chain %s does not exist", name)
	case c.policy != "-":
		return fmt.Errorf("cannot delete built-in chain %s", name)
	case len(c.rules) > 0:
		return fmt.Errorf("chain %s is not empty: Directory not empty", name)
	case t.referenced(name):
		return fmt.Errorf("chain %s is referenced: Too many links", name)
	}
	delete(t.chains, name)
	return nil
}

// stripCounters removes "-c PKTS BYTES" from rule arguments.
func stripCounters(args []string) []string {
	for i := 0; i+2 < len(args); i++ {
		if args[i] == "-c" || args[i] == "--set-counters" {
			return append(slices.Clone(args[:i]), args[i+3:]...)
		}
	}
	return args
}

// EnsureChain creates a minikit chain (refusing others) if it is missing.
func (f *Fake) EnsureChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs++
	if !iptables.Owned(chain) {
		return fmt.Errorf("refusing to create chain %q: not a minikit chain", chain)
	}
	t, err := f.table(table)
	if err != nil {
		return err
	}
	if _, ok := t.chains[chain]; !ok {
		t.chains[chain] = &fakeChain{policy: "-"}
	}
	return nil
}

// EnsureRule adds the rule at pos unless the chain holds it; it reports
// whether it existed. The chain, and a chain the rule jumps to, must exist.
func (f *Fake) EnsureRule(pos iptables.Position, table, chain string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs++
	t, err := f.table(table)
	if err != nil {
		return false, err
	}
	c, ok := t.chains[chain]
	if !ok {
		return false, fmt.Errorf("adding rule to %s/%s: chain does not exist", table, chain)
	}
	for _, r := range c.rules {
		if slices.Equal(r, args) {
			return true, nil
		}
	}
	if j := jumpTarget(args); j != "" && !knownTargets[j] {
		if _, ok := t.chains[j]; !ok {
			return false, fmt.Errorf("adding rule to %s/%s: Couldn't load target `%s'", table, chain, j)
		}
	}
	if pos == iptables.Prepend {
		c.rules = append([][]string{slices.Clone(args)}, c.rules...)
	} else {
		c.rules = append(c.rules, slices.Clone(args))
	}
	return false, nil
}

// HasRule reports whether the chain holds the rule (an error if the chain is missing).
func (f *Fake) HasRule(table, chain string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs++
	t, err := f.table(table)
	if err != nil {
		return false, err
	}
	c, ok := t.chains[chain]
	if !ok {
		return false, fmt.Errorf("chain %s/%s does not exist", table, chain)
	}
	return slices.ContainsFunc(c.rules, func(r []string) bool { return slices.Equal(r, args) }), nil
}

// DeleteRule removes the rule; a missing chain or rule is no error.
func (f *Fake) DeleteRule(table, chain string, args ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs++
	t, err := f.table(table)
	if err != nil {
		return err
	}
	c, ok := t.chains[chain]
	if !ok {
		return nil
	}
	for i, r := range c.rules {
		if slices.Equal(r, args) {
			c.rules = slices.Delete(c.rules, i, i+1)
			return nil
		}
	}
	return nil
}

// ChainExists reports whether the table has the chain.
func (f *Fake) ChainExists(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return false, err
	}
	_, ok := t.chains[chain]
	return ok, nil
}

// DeleteChain flushes and deletes a minikit chain (refusing others); it
// fails while a rule jumps to it, and a missing chain is no error.
func (f *Fake) DeleteChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs++
	if !iptables.Owned(chain) {
		return fmt.Errorf("refusing to delete chain %q: not a minikit chain", chain)
	}
	t, err := f.table(table)
	if err != nil {
		return err
	}
	c, ok := t.chains[chain]
	if !ok {
		return nil
	}
	c.rules = nil
	return t.deleteChain(chain)
}

// Restore records data and applies it as iptables-restore does, or fails
// with RestoreErr once when that is set.
func (f *Fake) Restore(data []byte, noFlush bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Restores = append(f.Restores, FakeRestore{Data: string(data), NoFlush: noFlush})
	if err := f.RestoreErr; err != nil {
		f.RestoreErr = nil
		return err
	}
	return f.restore(string(data), noFlush)
}

// restore applies restore input, one table at a time, each atomically.
func (f *Fake) restore(data string, noFlush bool) error {
	var work *fakeTable
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		fail := func(format string, a ...any) error {
			return fmt.Errorf("iptables-restore: line %d failed: %s", n, fmt.Sprintf(format, a...))
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '*' {
			if work != nil {
				return fail("table %s not committed", work.name)
			}
			t, err := f.table(line[1:])
			if err != nil {
				return fail("%v", err)
			}
			if noFlush {
				work = t.clone()
			} else {
				work = newFakeTable(t.name)
			}
			continue
		}
		if work == nil {
			return fail("no table selected")
		}
		if line == "COMMIT" {
			if err := work.checkTargets(); err != nil {
				return fail("%v", err)
			}
			f.tables[work.name] = work
			work = nil
			continue
		}
		if line[0] == ':' {
			fields := strings.Fields(line[1:])
			if len(fields) < 2 {
				return fail("bad chain line %q", line)
			}
			name, policy := fields[0], fields[1]
			if iptables.IsBuiltin(work.name, name) {
				work.chains[name].policy = policy
			} else if c, ok := work.chains[name]; ok {
				c.rules = nil
			} else {
				work.chains[name] = &fakeChain{policy: "-"}
			}
			continue
		}
		if line[0] == '[' {
			if i := strings.Index(line, "]"); i > 0 {
				line = strings.TrimSpace(line[i+1:])
			}
		}
		args := stripCounters(iptables.SplitRule(line))
		if len(args) == 0 {
			continue
		}
		cmd, rest := args[0], args[1:]
		chainName := ""
		if len(rest) > 0 {
			chainName = rest[0]
		}
		c := work.chains[chainName]
		switch cmd {
		case "-A", "--append":
			if c == nil {
				return fail("chain %q does not exist", chainName)
			}
			c.rules = append(c.rules, slices.Clone(rest[1:]))
		case "-I", "--insert":
			if c == nil {
				return fail("chain %q does not exist", chainName)
			}
			pos, spec := 0, rest[1:]
			if len(spec) > 0 {
				var k int
				if _, err := fmt.Sscanf(spec[0], "%d", &k); err == nil {
					pos, spec = k-1, spec[1:]
				}
			}
			if pos < 0 || pos > len(c.rules) {
				return fail("index of insertion too big")
			}
			c.rules = slices.Insert(c.rules, pos, slices.Clone(spec))
		case "-D", "--delete":
			if c == nil {
				return fail("chain %q does not exist", chainName)
			}
			i := slices.IndexFunc(c.rules, func(r []string) bool { return slices.Equal(r, rest[1:]) })
			if i < 0 {
				return fail("bad rule (does a matching rule exist in that chain?)")
			}
			c.rules = slices.Delete(c.rules, i, i+1)
		case "-N", "--new-chain":
			if c != nil {
				return fail("chain %s already exists", chainName)
			}
			work.chains[chainName] = &fakeChain{policy: "-"}
		case "-F", "--flush":
			if chainName == "" {
				for _, c := range work.chains {
					c.rules = nil
				}
			} else if c == nil {
				return fail("chain %q does not exist", chainName)
			} else {
				c.rules = nil
			}
		case "-X", "--delete-chain":
			if chainName == "" {
				return fail("-X without a chain is not supported by the fake")
			}
			if err := work.deleteChain(chainName); err != nil {
				return fail("%v", err)
			}
		default:
			return fail("unsupported command %q", cmd)
		}
	}
	if work != nil {
		return fmt.Errorf("iptables-restore: table %s: COMMIT expected", work.name)
	}
	return nil
}

// Save renders the table as iptables-save does, rules as they were written.
func (f *Fake) Save(table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	names := t.chainNames()
	for _, n := range names {
		c := t.chains[n]
		b.WriteString(":" + n + " " + c.policy + " [0:0]\n")
	}
	for _, n := range names {
		for _, r := range t.chains[n].rules {
			b.WriteString("-A " + n + " " + iptables.JoinRule(r) + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), nil
}

// chainNames lists built-in chains first, in iptables-save order, then the
// others sorted, as iptables-save prints them.
func (t *fakeTable) chainNames() []string {
	var user []string
	for n, c := range t.chains {
		if c.policy == "-" {
			user = append(user, n)
		}
	}
	sort.Strings(user)
	var names []string
	for _, b := range iptables.BuiltinChains(t.name) {
		if _, ok := t.chains[b]; ok {
			names = append(names, b)
		}
	}
	return append(names, user...)
}

// HasRandomFully reports RandomFully.
func (f *Fake) HasRandomFully() bool { return f.RandomFully }

// Backend reports FakeBackend (NFTables when unset).
func (f *Fake) Backend() iptables.Backend {
	if f.FakeBackend == "" {
		return iptables.NFTables
	}
	return f.FakeBackend
}

// ListChains lists the table's chains in iptables-save order.
func (f *Fake) ListChains(table string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return nil, err
	}
	return t.chainNames(), nil
}

// ReplaceTables hands build the tables' chains that keep selects (built-in
// chains always) and restores its output, flushing the tables, as the real
// one does with iptables-save and iptables-restore.
func (f *Fake) ReplaceTables(tables []string, keep func(table, chain string) bool, build func(map[string]*iptables.TableState) ([]byte, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	state := map[string]*iptables.TableState{}
	for _, name := range tables {
		t, err := f.table(name)
		if err != nil {
			return err
		}
		ts := &iptables.TableState{Name: name}
		for _, n := range t.chainNames() {
			c := t.chains[n]
			if c.policy == "-" && !keep(name, n) {
				continue
			}
			ch := &iptables.Chain{Name: n, Policy: c.policy}
			for _, r := range c.rules {
				ch.Rules = append(ch.Rules, "-A "+n+" "+iptables.JoinRule(r))
			}
			ts.Chains = append(ts.Chains, ch)
		}
		state[name] = ts
	}
	data, err := build(state)
	if err != nil {
		return err
	}
	f.Restores = append(f.Restores, FakeRestore{Data: string(data)})
	if err := f.RestoreErr; err != nil {
		f.RestoreErr = nil
		return err
	}
	return f.restore(string(data), false)
}

// Helpers for tests.

// Rules returns a chain's rules as restore lines ("-A CHAIN ..."), nil if the
// chain does not exist.
func (f *Fake) Rules(table, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[table]
	if !ok {
		return nil
	}
	c, ok := t.chains[chain]
	if !ok {
		return nil
	}
	out := []string{}
	for _, r := range c.rules {
		out = append(out, "-A "+chain+" "+iptables.JoinRule(r))
	}
	return out
}

// FlushTable is `iptables -t TABLE -F`: every chain's rules go, chains stay.
func (f *Fake) FlushTable(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.tables[table].chains {
		c.rules = nil
	}
}

// DeleteUserChains is `iptables -t TABLE -F; iptables -t TABLE -X`.
func (f *Fake) DeleteUserChains(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table] = newFakeTable(table)
}

// ErrFake is a convenient error for RestoreErr.
var ErrFake = errors.New("fake iptables-restore failure")

var _ iptables.Interface = (*Fake)(nil)
