package nft

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Fake is an in-memory backend with nft's semantics, for unit tests: a
// transaction applies entirely or not at all; Add creates what is missing
// and keeps what exists (a chain, set or map added again with different
// properties fails, as does a map element added again with a different
// value); Delete of a missing object fails with ErrNotFound; a rule, map
// element or chain that refers to a missing chain or set fails, and so does
// deleting a chain or set something still refers to.
type Fake struct {
	mu     sync.Mutex
	family Family
	table  string
	state  *fakeTable // nil: no table
}

type fakeTable struct {
	comment string
	chains  map[string]*fakeChain
	sets    map[string]*fakeSet
}

type fakeChain struct {
	chain Chain
	rules []Rule
}

type fakeSet struct {
	isMap    bool
	set      Set // for a map: Name, Type, Flags, Comment
	elements map[string]*Element
}

var _ Interface = (*Fake)(nil)

// NewFake returns an empty Fake for table `ip kube-proxy`.
func NewFake() *Fake { return NewFakeFamily(IPv4Family) }

// NewFakeFamily returns an empty Fake for table `FAMILY kube-proxy`; a
// table operation of another family fails, as it would name another table.
func NewFakeFamily(family Family) *Fake { return &Fake{family: family, table: "kube-proxy"} }

func (t *fakeTable) clone() *fakeTable {
	n := &fakeTable{comment: t.comment, chains: make(map[string]*fakeChain, len(t.chains)), sets: make(map[string]*fakeSet, len(t.sets))}
	for k, c := range t.chains {
		n.chains[k] = &fakeChain{chain: c.chain, rules: slices.Clone(c.rules)}
	}
	for k, s := range t.sets {
		ns := &fakeSet{isMap: s.isMap, set: s.set, elements: make(map[string]*Element, len(s.elements))}
		for ek, e := range s.elements {
			ns.elements[ek] = e
		}
		n.sets[k] = ns
	}
	return n
}

// Run applies tx atomically.
func (f *Fake) Run(_ context.Context, tx *Transaction) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st *fakeTable
	if f.state != nil {
		st = f.state.clone()
	}
	for i := range tx.Ops {
		var err error
		st, err = f.apply(st, &tx.Ops[i])
		if err != nil {
			return fmt.Errorf("nft transaction operation %d: %w", i, err)
		}
	}
	f.state = st
	return nil
}

var (
	chainRefRE = regexp.MustCompile(`\b(?:jump|goto)\s+([^\s,{}]+)`)
	setRefRE   = regexp.MustCompile(`@\s*([A-Za-z0-9_.\-/]+)`)
)

func keyString(key []string) string { return strings.Join(key, " . ") }

func keyFields(typ string) int {
	k, _, _ := strings.Cut(typ, ":")
	return len(strings.Split(strings.TrimSpace(k), "."))
}

func (f *Fake) apply(st *fakeTable, o *Op) (*fakeTable, error) {
	if o.Table != nil {
		if o.Table.Family != "" && o.Table.Family != f.family {
			return st, fmt.Errorf("table %s %s: this backend manages table %s %s", o.Table.Family, o.Table.Name, f.family, f.table)
		}
		switch o.Kind {
		case OpAdd:
			if err := checkComment("table", o.Table.Comment); err != nil {
				return st, err
			}
			if st == nil {
				st = &fakeTable{comment: o.Table.Comment, chains: map[string]*fakeChain{}, sets: map[string]*fakeSet{}}
			}
			return st, nil
		case OpFlush:
			if st == nil {
				return st, fmt.Errorf("flushing table %s %s: %w", f.family, f.table, ErrNotFound)
			}
			for _, c := range st.chains {
				c.rules = nil
			}
			for _, s := range st.sets {
				s.elements = map[string]*Element{}
			}
			return st, nil
		case OpDelete:
			if st == nil {
				return st, fmt.Errorf("deleting table %s %s: %w", f.family, f.table, ErrNotFound)
			}
			return nil, nil
		}
	}
	if st == nil {
		return st, fmt.Errorf("table %s %s: %w", f.family, f.table, ErrNotFound)
	}
	switch {
	case o.Chain != nil:
		return st, st.chainOp(o.Kind, o.Chain)
	case o.Rule != nil:
		if o.Kind != OpAdd {
			return st, fmt.Errorf("rule %q in chain %q: rules can only be added", o.Rule.Rule, o.Rule.Chain)
		}
		return st, st.addRule(o.Rule)
	case o.Set != nil:
		return st, st.setOp(o.Kind, false, *o.Set)
	case o.Map != nil:
		return st, st.setOp(o.Kind, true, Set{Name: o.Map.Name, Type: o.Map.Type, Flags: o.Map.Flags, Comment: o.Map.Comment})
	case o.Element != nil:
		return st, st.elementOp(o.Kind, o.Element)
	}
	return st, fmt.Errorf("invalid operation %+v", *o)
}

func (t *fakeTable) chainOp(kind OpKind, c *Chain) error {
	cur := t.chains[c.Name]
	switch kind {
	case OpAdd:
		if err := checkComment("chain "+c.Name, c.Comment); err != nil {
			return err
		}
		if cur == nil {
			if c.Hook != "" && c.Type == "" {
				return fmt.Errorf("adding base chain %q: no type", c.Name)
			}
			t.chains[c.Name] = &fakeChain{chain: *c}
			return nil
		}
		if c.Hook != "" && (c.Hook != cur.chain.Hook || c.Type != cur.chain.Type || c.Priority != cur.chain.Priority) {
			return fmt.Errorf("adding chain %q: exists with type %q hook %q priority %d", c.Name, cur.chain.Type, cur.chain.Hook, cur.chain.Priority)
		}
		return nil
	case OpFlush:
		if cur == nil {
			return fmt.Errorf("flushing chain %q: %w", c.Name, ErrNotFound)
		}
		cur.rules = nil
		return nil
	default:
		if cur == nil {
			return fmt.Errorf("deleting chain %q: %w", c.Name, ErrNotFound)
		}
		if ref := t.chainReferrer(c.Name); ref != "" {
			return fmt.Errorf("deleting chain %q: still referenced by %s", c.Name, ref)
		}
		delete(t.chains, c.Name)
		return nil
	}
}

func (t *fakeTable) chainReferrer(name string) string {
	for _, c := range t.chains {
		if c.chain.Name == name {
			continue
		}
		for _, r := range c.rules {
			for _, m := range chainRefRE.FindAllStringSubmatch(r.Rule, -1) {
				if m[1] == name {
					return fmt.Sprintf("a rule of chain %q", c.chain.Name)
				}
			}
		}
	}
	for _, s := range t.sets {
		for _, e := range s.elements {
			for _, m := range chainRefRE.FindAllStringSubmatch(e.Value, -1) {
				if m[1] == name {
					return fmt.Sprintf("element %q of map %q", keyString(e.Key), s.set.Name)
				}
			}
		}
	}
	return ""
}

func (t *fakeTable) addRule(r *Rule) error {
	c := t.chains[r.Chain]
	if c == nil {
		return fmt.Errorf("adding rule %q: chain %q: %w", r.Rule, r.Chain, ErrNotFound)
	}
	if strings.TrimSpace(r.Rule) == "" {
		return fmt.Errorf("adding rule to chain %q: empty rule", r.Chain)
	}
	if err := checkComment("rule "+r.Rule, r.Comment); err != nil {
		return err
	}
	for _, m := range chainRefRE.FindAllStringSubmatch(r.Rule, -1) {
		if t.chains[m[1]] == nil {
			return fmt.Errorf("adding rule %q to chain %q: target chain %q: %w", r.Rule, r.Chain, m[1], ErrNotFound)
		}
	}
	for _, m := range setRefRE.FindAllStringSubmatch(r.Rule, -1) {
		if t.sets[m[1]] == nil {
			return fmt.Errorf("adding rule %q to chain %q: set %q: %w", r.Rule, r.Chain, m[1], ErrNotFound)
		}
	}
	c.rules = append(c.rules, *r)
	return nil
}

func (t *fakeTable) setOp(kind OpKind, isMap bool, s Set) error {
	what := "set"
	if isMap {
		what = "map"
	}
	cur := t.sets[s.Name]
	if cur != nil && cur.isMap != isMap {
		return fmt.Errorf("%s %q: a %s of that name exists", what, s.Name, map[bool]string{true: "map", false: "set"}[cur.isMap])
	}
	switch kind {
	case OpAdd:
		if err := checkComment(what+" "+s.Name, s.Comment); err != nil {
			return err
		}
		if s.Type == "" {
			return fmt.Errorf("adding %s %q: no type", what, s.Name)
		}
		if isMap != strings.Contains(s.Type, ":") {
			return fmt.Errorf("adding %s %q: type %q", what, s.Name, s.Type)
		}
		if cur == nil {
			t.sets[s.Name] = &fakeSet{isMap: isMap, set: s, elements: map[string]*Element{}}
			return nil
		}
		if cur.set.Type != s.Type || !slices.Equal(cur.set.Flags, s.Flags) || cur.set.Timeout != s.Timeout {
			return fmt.Errorf("adding %s %q: exists with type %q flags %v timeout %v", what, s.Name, cur.set.Type, cur.set.Flags, cur.set.Timeout)
		}
		return nil
	case OpFlush:
		if cur == nil {
			return fmt.Errorf("flushing %s %q: %w", what, s.Name, ErrNotFound)
		}
		cur.elements = map[string]*Element{}
		return nil
	default:
		if cur == nil {
			return fmt.Errorf("deleting %s %q: %w", what, s.Name, ErrNotFound)
		}
		for _, c := range t.chains {
			for _, r := range c.rules {
				for _, m := range setRefRE.FindAllStringSubmatch(r.Rule, -1) {
					if m[1] == s.Name {
						return fmt.Errorf("deleting %s %q: still referenced by a rule of chain %q", what, s.Name, c.chain.Name)
					}
				}
			}
		}
		delete(t.sets, s.Name)
		return nil
	}
}

func (t *fakeTable) elementOp(kind OpKind, e *Element) error {
	s := t.sets[e.Set]
	if s == nil {
		return fmt.Errorf("element %q: set or map %q: %w", keyString(e.Key), e.Set, ErrNotFound)
	}
	if n := keyFields(s.set.Type); n != len(e.Key) {
		return fmt.Errorf("element %q of %q: key has %d fields, type %q has %d", keyString(e.Key), e.Set, len(e.Key), s.set.Type, n)
	}
	k := keyString(e.Key)
	cur := s.elements[k]
	switch kind {
	case OpAdd:
		if err := checkComment("element "+k, e.Comment); err != nil {
			return err
		}
		if s.isMap && e.Value == "" {
			return fmt.Errorf("adding element %q to map %q: no value", k, e.Set)
		}
		if !s.isMap && e.Value != "" {
			return fmt.Errorf("adding element %q to set %q: sets have no values", k, e.Set)
		}
		for _, m := range chainRefRE.FindAllStringSubmatch(e.Value, -1) {
			if t.chains[m[1]] == nil {
				return fmt.Errorf("adding element %q to map %q: target chain %q: %w", k, e.Set, m[1], ErrNotFound)
			}
		}
		if cur != nil {
			if cur.Value != e.Value {
				return fmt.Errorf("adding element %q to map %q: exists with value %q, not %q", k, e.Set, cur.Value, e.Value)
			}
			return nil
		}
		c := *e
		c.Key = slices.Clone(e.Key)
		s.elements[k] = &c
		return nil
	case OpDelete:
		if cur == nil {
			return fmt.Errorf("deleting element %q of %q: %w", k, e.Set, ErrNotFound)
		}
		delete(s.elements, k)
		return nil
	}
	return fmt.Errorf("element %q of %q: elements can only be added or deleted", k, e.Set)
}

// ListChains returns the chain names, sorted.
func (f *Fake) ListChains(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil {
		return nil, nil
	}
	return sortedKeys(f.state.chains), nil
}

// ListSets returns the names of the table's sets and maps, sorted.
func (f *Fake) ListSets(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil {
		return nil, nil
	}
	return sortedKeys(f.state.sets), nil
}

// ListElements returns copies of the elements of a set or map, sorted.
func (f *Fake) ListElements(_ context.Context, set string) ([]*Element, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil || f.state.sets[set] == nil {
		return nil, fmt.Errorf("listing elements of %q: %w", set, ErrNotFound)
	}
	s := f.state.sets[set]
	out := make([]*Element, 0, len(s.elements))
	for _, k := range sortedKeys(s.elements) {
		e := *s.elements[k]
		e.Key = slices.Clone(e.Key)
		out = append(out, &e)
	}
	return out, nil
}

// CountRules returns the number of rules of a chain.
func (f *Fake) CountRules(_ context.Context, chain string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil || f.state.chains[chain] == nil {
		return 0, fmt.Errorf("counting rules of chain %q: %w", chain, ErrNotFound)
	}
	return len(f.state.chains[chain].rules), nil
}

// DeleteTable removes the table if it exists.
func (f *Fake) DeleteTable(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = nil
	return nil
}

// Rules returns a copy of a chain's rules (nil when it does not exist).
func (f *Fake) Rules(chain string) []Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil || f.state.chains[chain] == nil {
		return nil
	}
	return slices.Clone(f.state.chains[chain].rules)
}

// Dump returns the table as `nft -f` text: the table, its chains, sets and
// maps (each sorted by name), then every chain's rules in order (chains
// sorted by name), then every set's and map's elements sorted by key. It is
// "" when the table does not exist.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.state
	if st == nil {
		return ""
	}
	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }
	line(renderTable(&Table{Family: f.family, Name: f.table, Comment: st.comment}))
	chains := sortedKeys(st.chains)
	for _, n := range chains {
		c := st.chains[n].chain
		line(renderChain(f.family, f.table, &c))
	}
	sets := sortedKeys(st.sets)
	for _, isMap := range []bool{false, true} {
		for _, n := range sets {
			s := st.sets[n]
			if s.isMap != isMap {
				continue
			}
			if isMap {
				line(renderMap(f.family, f.table, &Map{Name: s.set.Name, Type: s.set.Type, Flags: s.set.Flags, Comment: s.set.Comment}))
			} else {
				line(renderSet(f.family, f.table, &s.set))
			}
		}
	}
	for _, n := range chains {
		for i := range st.chains[n].rules {
			line(renderRule(f.family, f.table, &st.chains[n].rules[i]))
		}
	}
	for _, n := range sets {
		s := st.sets[n]
		for _, k := range sortedKeys(s.elements) {
			line(renderElement("add", f.family, f.table, s.elements[k]))
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
