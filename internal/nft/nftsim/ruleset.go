// Package nftsim walks the first packet of a connection through the
// nftables mode's ruleset (table ip kube-proxy, as `nft -j list table ip
// kube-proxy` prints it), the way the kernel would, and reports every
// possible outcome with its probability (numgen random branches) in the
// shape iptables/iptsim reports for iptables mode: []iptsim.Outcome with their
// Steps, so `minikit trace` renders both modes alike.
//
// It walks only the one table it is given: the base chains of each hook in
// priority order (filter pre-dnat firewall check, nat dnat, filter
// input/forward/output, nat postrouting), named and anonymous sets and
// verdict maps, concatenations, numgen, fib, ct state/status and the mark.
// It knows the statements and expressions kube-proxy's rules use; a rule with
// anything else is an error, never skipped, so a test never passes by
// ignoring a match.
package nftsim

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Ruleset is one parsed table.
type Ruleset struct {
	Family string
	Table  string
	chains map[string]*chain
	// order lists the chains as the listing declared them.
	order []string
	sets  map[string]*set
}

type chain struct {
	name     string
	typ      string // filter, nat (base chains only)
	hook     string // prerouting, input, forward, output, postrouting
	prio     int
	policy   string // accept, drop
	base     bool
	rules    []*rule
	comment  string
	position map[int]int // handle -> 1-based position
}

type rule struct {
	handle  int
	exprs   []any
	comment string
	text    string
}

type set struct {
	name    string
	isMap   bool
	dynamic bool
	elems   []elem
}

// elem is a set element (data nil) or a map element.
type elem struct {
	key     any // scalar, {"concat": [...]}, {"prefix": ...}, {"range": ...}
	data    any
	comment string
}

// Parse reads `nft -j list table FAMILY NAME` (or `list ruleset` holding a
// single table: pass the table's name to ParseTable then).
func Parse(js []byte) (*Ruleset, error) { return ParseTable(js, "") }

// ParseTable reads the table named table from nft's JSON listing; "" takes
// the only table there is.
func ParseTable(js []byte, table string) (*Ruleset, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("parsing nft JSON: %w", err)
	}
	r := &Ruleset{chains: map[string]*chain{}, sets: map[string]*set{}}
	want := func(t string) bool {
		if table == "" {
			if r.Table == "" {
				r.Table = t
			}
			return t == r.Table
		}
		return t == table
	}
	for _, obj := range doc.Nftables {
		for kind, raw := range obj {
			switch kind {
			case "metainfo":
			case "table":
				var t struct{ Family, Name string }
				if err := json.Unmarshal(raw, &t); err != nil {
					return nil, fmt.Errorf("parsing table: %w", err)
				}
				if want(t.Name) {
					r.Family, r.Table = t.Family, t.Name
				}
			case "chain":
				var c struct {
					Table, Name, Type, Hook, Policy, Comment string
					Prio                                     *int
				}
				if err := json.Unmarshal(raw, &c); err != nil {
					return nil, fmt.Errorf("parsing chain: %w", err)
				}
				if !want(c.Table) {
					continue
				}
				ch := &chain{name: c.Name, typ: c.Type, hook: c.Hook, policy: c.Policy, comment: c.Comment, position: map[int]int{}}
				if c.Hook != "" && c.Prio != nil {
					ch.base, ch.prio = true, *c.Prio
					if ch.policy == "" {
						ch.policy = "accept"
					}
				}
				if _, dup := r.chains[c.Name]; dup {
					return nil, fmt.Errorf("chain %q listed twice", c.Name)
				}
				r.chains[c.Name] = ch
				r.order = append(r.order, c.Name)
			case "set", "map":
				var s struct {
					Table, Name string
					Map         any
					Flags       []string
					Elem        []any
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					return nil, fmt.Errorf("parsing %s: %w", kind, err)
				}
				if !want(s.Table) {
					continue
				}
				st := &set{name: s.Name, isMap: kind == "map"}
				for _, f := range s.Flags {
					st.dynamic = st.dynamic || f == "dynamic" || f == "timeout"
				}
				for _, e := range s.Elem {
					el, err := parseElem(e, st.isMap)
					if err != nil {
						return nil, fmt.Errorf("%s %s: %w", kind, s.Name, err)
					}
					st.elems = append(st.elems, el)
				}
				r.sets[s.Name] = st
			case "rule":
				var ru struct {
					Table, Chain, Comment string
					Handle                int
					Expr                  []any
				}
				dec := json.NewDecoder(strings.NewReader(string(raw)))
				dec.UseNumber()
				if err := dec.Decode(&ru); err != nil {
					return nil, fmt.Errorf("parsing rule: %w", err)
				}
				if !want(ru.Table) {
					continue
				}
				c, ok := r.chains[ru.Chain]
				if !ok {
					return nil, fmt.Errorf("rule %d in undeclared chain %q", ru.Handle, ru.Chain)
				}
				rl := &rule{handle: ru.Handle, exprs: normalize(ru.Expr).([]any), comment: ru.Comment}
				text, err := ruleText(rl.exprs)
				if err != nil {
					return nil, fmt.Errorf("chain %s rule %d (handle %d): %w", c.name, len(c.rules)+1, ru.Handle, err)
				}
				if rl.comment != "" {
					text += fmt.Sprintf(" comment %q", rl.comment)
				}
				rl.text = text
				c.rules = append(c.rules, rl)
				c.position[ru.Handle] = len(c.rules)
			case "element", "counter", "quota", "ct helper", "limit", "flowtable", "secmark", "synproxy", "ct timeout", "ct expectation":
				// Stateful objects kube-proxy's table may hold (its
				// localhost NodePort reject counters); rules that use
				// them are checked where they are used.
			default:
				return nil, fmt.Errorf("unknown nft object %q", kind)
			}
		}
	}
	if r.Table == "" {
		return nil, fmt.Errorf("the listing has no table %q", table)
	}
	return r, nil
}

// normalize turns json.Number into int64 or float64 throughout.
func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = normalize(x[k])
		}
		return x
	}
	return v
}

func parseElem(e any, isMap bool) (elem, error) {
	e = normalize(e)
	var el elem
	if isMap {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return el, fmt.Errorf("map element %v is not a key/value pair", e)
		}
		e, el.data = pair[0], pair[1]
	}
	if m, ok := e.(map[string]any); ok {
		if inner, ok := m["elem"].(map[string]any); ok {
			el.comment, _ = inner["comment"].(string)
			e = inner["val"]
		}
	}
	el.key = e
	return el, nil
}

// Chains lists the chain names in the order the listing declared them.
func (r *Ruleset) Chains() []string { return append([]string(nil), r.order...) }

// Position is the 1-based position in chain of the rule with handle h
// (nft's trace events name rules by handle).
func (r *Ruleset) Position(chainName string, h int) (int, bool) {
	c, ok := r.chains[chainName]
	if !ok {
		return 0, false
	}
	p, ok := c.position[h]
	return p, ok
}

// RuleText is the rule at 1-based pos in chain, as the tracer prints it.
func (r *Ruleset) RuleText(chainName string, pos int) string {
	c, ok := r.chains[chainName]
	if !ok || pos < 1 || pos > len(c.rules) {
		return ""
	}
	return c.rules[pos-1].text
}

// baseChains are the base chains on hook, in the order the kernel runs
// them (priority, then declaration order).
func (r *Ruleset) baseChains(hook string) []*chain {
	var out []*chain
	for _, n := range r.order {
		if c := r.chains[n]; c.base && c.hook == hook {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].prio < out[j].prio })
	return out
}
