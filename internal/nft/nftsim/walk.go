package nftsim

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// The walk reuses iptables/iptsim's Packet, Node, Outcome and Step, so that
// trace/ renders both modes with one code path. A Step's Table is the nft
// table's name, Chain the nft chain, Rule the rule's 1-based position in
// it, Text the rule in nft syntax (plus the map element a lookup chose),
// and Target, as in iptables mode, the chain jumped or gone to, or ACCEPT,
// DROP, REJECT, DNAT, MASQUERADE, MARK, RETURN; "" for a rule that only
// matched (a counter, an update of an affinity set).

type state struct {
	mark   uint32
	dst    netip.AddrPort
	dnat   bool
	masq   bool
	prob   float64
	recent []string
	steps  []iptsim.Step
}

func (st *state) step(s iptsim.Step) {
	s.Branch = st.prob
	s.Mark = st.mark
	st.steps = append(st.steps[:len(st.steps):len(st.steps)], s)
}

// result of walking a chain: verdict "" means the chain returned.
type result struct {
	st      state
	verdict string
}

type walker struct {
	r    *Ruleset
	node iptsim.Node
	pkt  iptsim.Packet
	// hook is the hook being walked: fib and ct answers depend on it.
	hook string
}

// Trace returns every outcome of pkt, most probable first: the packet runs
// through the base chains of prerouting (pkt.Local false) or output, then,
// by its destination after DNAT, input (delivered to the node) or forward
// and postrouting.
func (r *Ruleset) Trace(node iptsim.Node, pkt iptsim.Packet) ([]iptsim.Outcome, error) {
	w := &walker{r: r, node: node, pkt: pkt}
	first := "prerouting"
	if pkt.Local {
		first = "output"
	}
	var out []iptsim.Outcome
	pre, err := w.walkHook(first, []result{{st: state{dst: pkt.Dst, prob: 1}, verdict: "ACCEPT"}})
	if err != nil {
		return nil, err
	}
	for _, p := range pre {
		if p.verdict != "ACCEPT" {
			out = append(out, outcome(p, false))
			continue
		}
		local := w.node.IsLocal(p.st.dst.Addr())
		next := []string{"forward", "postrouting"}
		switch {
		case pkt.Local && local:
			// Out through lo and back in; prerouting on the way back in
			// is not walked again (its nat chains are skipped for a
			// connection already NATed, and kube-proxy's filter
			// pre-dnat chain only checks LoadBalancer source ranges).
			next = []string{"postrouting", "input"}
		case pkt.Local:
			next = []string{"postrouting"}
		case local:
			next = []string{"input"}
		}
		rs := []result{p}
		for _, h := range next {
			if rs, err = w.walkHook(h, rs); err != nil {
				return nil, err
			}
		}
		for _, x := range rs {
			out = append(out, outcome(x, local))
		}
	}
	iptsim.SortOutcomes(out)
	return out, nil
}

// walkHook runs every accepted result through the base chains of hook in
// priority order; an accept ends one base chain, not the hook.
func (w *walker) walkHook(hook string, in []result) ([]result, error) {
	w.hook = hook
	cur := in
	for _, c := range w.r.baseChains(hook) {
		var next []result
		for _, x := range cur {
			if x.verdict != "ACCEPT" {
				next = append(next, x)
				continue
			}
			if c.typ == "nat" && ((hook != "postrouting" && x.st.dnat) || (hook == "postrouting" && x.st.masq)) {
				// The kernel runs a hook's nat chains only until one of
				// them sets up the binding: a packet an earlier nat
				// chain NATed skips the later ones.
				next = append(next, x)
				continue
			}
			rs, err := w.rules(c, 0, x.st, 0)
			if err != nil {
				return nil, err
			}
			for i := range rs {
				switch rs[i].verdict {
				case "NAT":
					rs[i].verdict = "ACCEPT"
				case "":
					pol := strings.ToUpper(c.policy)
					rs[i].verdict = pol
					if n := len(rs[i].st.steps); n > 0 {
						rs[i].st.steps[n-1].Verdict = pol
					}
				}
			}
			next = append(next, rs...)
		}
		cur = next
	}
	return cur, nil
}

func outcome(r result, local bool) iptsim.Outcome {
	return iptsim.Outcome{Verdict: r.verdict, Dst: r.st.dst, DNAT: r.st.dnat, Masquerade: r.st.masq, Probability: r.st.prob,
		Recent: r.st.recent, Mark: r.st.mark, Steps: r.st.steps, Local: local && r.verdict == "ACCEPT"}
}

func (w *walker) chain(name string, st state, depth int) ([]result, error) {
	if depth > 50 {
		return nil, fmt.Errorf("jump loop at chain %s", name)
	}
	c, ok := w.r.chains[name]
	if !ok {
		return nil, fmt.Errorf("jump to missing chain %s", name)
	}
	if c.base {
		return nil, fmt.Errorf("jump to base chain %s", name)
	}
	return w.rules(c, 0, st, depth)
}

// rules walks c.rules[i:] from state st.
func (w *walker) rules(c *chain, i int, st state, depth int) ([]result, error) {
	for ; i < len(c.rules); i++ {
		outs, err := w.evalRule(c.rules[i], st)
		if err != nil {
			return nil, fmt.Errorf("chain %s rule %d (%s): %w", c.name, i+1, c.rules[i].text, err)
		}
		if len(outs) == 1 && !outs[0].matched {
			// Statements before the failing match (a mark set) still ran.
			st = outs[0].st
			continue
		}
		var res []result
		for _, o := range outs {
			s2 := o.st
			s2.prob = st.prob * o.p
			if s2.prob == 0 {
				continue
			}
			if !o.matched {
				rest, err := w.rules(c, i+1, s2, depth)
				if err != nil {
					return nil, err
				}
				res = append(res, rest...)
				continue
			}
			rs, err := w.apply(c, i, o, s2, depth)
			if err != nil {
				return nil, err
			}
			res = append(res, rs...)
		}
		return res, nil
	}
	end := iptsim.Step{Table: w.r.Table, Chain: c.name, Text: "end of chain", Target: "RETURN", Probability: 1}
	if c.base {
		end.Target = strings.ToUpper(c.policy)
		end.Text = "policy " + c.policy
	}
	st.step(end)
	return []result{{st: st}}, nil
}

// apply records the step of a matched rule and follows its verdict.
func (w *walker) apply(c *chain, i int, o ruleOut, st state, depth int) ([]result, error) {
	r := c.rules[i]
	s := o.step
	s.Table, s.Chain, s.Rule, s.Probability = w.r.Table, c.name, i+1, o.p
	s.Text = r.text + o.note
	if s.Comment == "" {
		s.Comment = r.comment
	}
	if len(o.recent) > 0 {
		st.recent = append(st.recent[:len(st.recent):len(st.recent)], o.recent...)
		s.Recent = o.recent
	}
	switch o.verdict {
	case "":
		st.step(s)
		return w.rules(c, i+1, st, depth)
	case "ACCEPT", "DROP", "REJECT":
		s.Target, s.Verdict = o.verdict, o.verdict
		st.step(s)
		return []result{{st: st, verdict: o.verdict}}, nil
	case "NAT":
		s.Verdict = "ACCEPT"
		st.step(s)
		return []result{{st: st, verdict: "NAT"}}, nil
	case "RETURN":
		s.Target = "RETURN"
		st.step(s)
		return []result{{st: st}}, nil
	case "jump", "goto":
		s.Target = o.target
		st.step(s)
		sub, err := w.chain(o.target, st, depth+1)
		if err != nil {
			return nil, err
		}
		if o.verdict == "goto" {
			// The chain gone to returns to our caller, not to us.
			return sub, nil
		}
		var out []result
		for _, x := range sub {
			if x.verdict != "" {
				out = append(out, x)
				continue
			}
			rest, err := w.rules(c, i+1, x.st, depth)
			if err != nil {
				return nil, err
			}
			out = append(out, rest...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown verdict %q", o.verdict)
}

// ruleOut is one way a rule can end for the packet: with probability p it
// matched (all its matches held) or not, leaving the state st, with a
// verdict ("" continue, ACCEPT, DROP, REJECT, RETURN, NAT, jump, goto).
type ruleOut struct {
	p       float64
	matched bool
	st      state
	verdict string
	target  string
	step    iptsim.Step
	note    string
	recent  []string
}

func (w *walker) evalRule(r *rule, st state) ([]ruleOut, error) {
	return w.stmts(r.exprs, ruleOut{p: 1, matched: true, st: st})
}

// stmts evaluates stmts in order from o; a numgen lookup forks.
func (w *walker) stmts(stmts []any, o ruleOut) ([]ruleOut, error) {
	for i, s := range stmts {
		m, ok := s.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("statement %v is not an object", s)
		}
		kind, v, err := one(m)
		if err != nil {
			return nil, err
		}
		arg, _ := v.(map[string]any)
		miss := func() ([]ruleOut, error) {
			o.matched, o.verdict = false, ""
			return []ruleOut{o}, nil
		}
		switch kind {
		case "match":
			if ng, ok := numgen(arg["left"]); ok {
				return w.numgenMatch(stmts[i+1:], arg, ng, o)
			}
			ok, err := w.match(arg, &o.st)
			if err != nil {
				return nil, err
			}
			if !ok {
				return miss()
			}
		case "counter", "log":
		case "accept", "drop":
			o.verdict = strings.ToUpper(kind)
			return []ruleOut{o}, nil
		case "reject":
			o.verdict = "REJECT"
			return []ruleOut{o}, nil
		case "return":
			o.verdict = "RETURN"
			return []ruleOut{o}, nil
		case "continue":
		case "jump", "goto":
			o.verdict, o.target = kind, str(arg["target"])
			return []ruleOut{o}, nil
		case "mangle":
			key, _ := arg["key"].(map[string]any)
			if meta, ok := key["meta"].(map[string]any); !ok || meta["key"] != "mark" {
				return nil, fmt.Errorf("unsupported mangle of %v", arg["key"])
			}
			val, err := w.eval(arg["value"], &o.st)
			if err != nil {
				return nil, err
			}
			n, ok := val.(uint64)
			if !ok {
				return nil, fmt.Errorf("mark set to a non-number %v", val)
			}
			o.st.mark = uint32(n)
			o.step.MarkChanged = true
			if o.step.Target == "" {
				o.step.Target = "MARK"
			}
		case "set":
			if op := str(arg["op"]); op != "update" && op != "add" {
				return nil, fmt.Errorf("unsupported set operation %q", op)
			}
			if _, err := w.eval(arg["elem"], &o.st); err != nil {
				return nil, err
			}
			o.recent = append(o.recent, strings.TrimPrefix(str(arg["set"]), "@"))
		case "masquerade", "snat":
			o.st.masq = true
			o.step.Masquerade = true
			o.step.Target = strings.ToUpper(kind)
			if kind == "snat" {
				o.step.Target = "SNAT"
			}
			o.verdict = "NAT"
			return []ruleOut{o}, nil
		case "dnat":
			return w.dnat(stmts[i+1:], arg, o)
		case "vmap":
			return w.vmap(stmts[i+1:], arg, o)
		default:
			return nil, fmt.Errorf("unsupported statement %q", kind)
		}
	}
	return []ruleOut{o}, nil
}

// vmap is a verdict map lookup: a named map, or an anonymous one keyed by
// numgen (one branch per number).
func (w *walker) vmap(rest []any, arg map[string]any, o ruleOut) ([]ruleOut, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("statements after a vmap")
	}
	elems, name, err := w.mapElems(arg["data"], "vmap")
	if err != nil {
		return nil, err
	}
	verdictOf := func(o ruleOut, e elem) (ruleOut, error) {
		vm, ok := e.data.(map[string]any)
		if !ok {
			return o, fmt.Errorf("vmap element data %v is not a verdict", e.data)
		}
		kind, v, err := one(vm)
		if err != nil {
			return o, err
		}
		switch kind {
		case "jump", "goto":
			t, _ := v.(map[string]any)
			o.verdict, o.target = kind, str(t["target"])
		case "accept", "drop":
			o.verdict = strings.ToUpper(kind)
		case "reject":
			o.verdict = "REJECT"
		case "return":
			o.verdict = "RETURN"
		default:
			return o, fmt.Errorf("unsupported verdict %q in a vmap", kind)
		}
		if e.comment != "" {
			o.step.Comment = e.comment
		}
		if name != "" {
			k, _ := exprText(e.key)
			d, _ := exprText(e.data)
			o.note = fmt.Sprintf("   (element %s : %s)", k, d)
		}
		return o, nil
	}
	if ng, ok := numgen(arg["key"]); ok {
		return ng.branches(o, elems, func(b ruleOut, n int64, e elem) (ruleOut, error) {
			b, err := verdictOf(b, e)
			if err != nil {
				return b, err
			}
			d, _ := exprText(e.data)
			b.note = fmt.Sprintf("   (numgen %d of %d: %s)", n-ng.offset, ng.mod, d)
			return b, nil
		})
	}
	key, err := w.eval(arg["key"], &o.st)
	if err != nil {
		return nil, err
	}
	e, found, err := lookup(elems, key)
	if err != nil {
		return nil, err
	}
	if !found {
		o.matched, o.verdict = false, ""
		return []ruleOut{o}, nil
	}
	o, err = verdictOf(o, e)
	if err != nil {
		return nil, err
	}
	return []ruleOut{o}, nil
}

// dnat rewrites the destination: to an address and port, or to the
// addr . port a numgen map picks (one branch per number).
func (w *walker) dnat(rest []any, arg map[string]any, o ruleOut) ([]ruleOut, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("statements after dnat")
	}
	to := func(o ruleOut, addr, port any) (ruleOut, error) {
		a, err := netip.ParseAddr(str(addr))
		if err != nil {
			return o, fmt.Errorf("dnat address: %w", err)
		}
		p := o.st.dst.Port()
		if port != nil {
			n, ok := port.(int64)
			if !ok {
				return o, fmt.Errorf("dnat port %v", port)
			}
			p = uint16(n)
		}
		ap := netip.AddrPortFrom(a, p)
		o.st.dst, o.st.dnat = ap, true
		o.step.DNAT, o.step.Target, o.verdict = ap, "DNAT", "NAT"
		return o, nil
	}
	if m, ok := arg["addr"].(map[string]any); ok {
		mp, ok := m["map"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("unsupported dnat address %v", arg["addr"])
		}
		if _, hasPort := arg["port"]; hasPort {
			return nil, fmt.Errorf("unsupported dnat with both a map and a port")
		}
		ng, ok := numgen(mp["key"])
		if !ok {
			return nil, fmt.Errorf("unsupported dnat map key %v", mp["key"])
		}
		// An anonymous map (kube-proxy's rules) or a named one (minikit's
		// dnat-endpoints-PROTO-N maps, the chain's block of keys from the offset).
		elems, name, err := w.mapElems(mp["data"], "dnat")
		if err != nil {
			return nil, err
		}
		return ng.branches(o, elems, func(b ruleOut, n int64, e elem) (ruleOut, error) {
			var addr, port any = e.data, nil
			if c, ok := e.data.(map[string]any); ok {
				parts, _ := c["concat"].([]any)
				if len(parts) != 2 {
					return b, fmt.Errorf("dnat map element %v is not addr . port", e.data)
				}
				addr, port = parts[0], parts[1]
			}
			b, err := to(b, addr, port)
			if err != nil {
				return b, err
			}
			d, _ := exprText(e.data)
			b.note = fmt.Sprintf("   (numgen %d of %d: %s)", n-ng.offset, ng.mod, d)
			if name != "" {
				b.note = fmt.Sprintf("   (numgen %d of %d: element %d : %s)", n-ng.offset, ng.mod, n, d)
			}
			return b, nil
		})
	}
	o, err := to(o, arg["addr"], arg["port"])
	if err != nil {
		return nil, err
	}
	return []ruleOut{o}, nil
}

// numgenMatch is a match on a random number ("numgen random mod 3 0", one
// of minikit's per-endpoint rules): it forks into the branch where the
// number matches, which goes on with the rest of the rule, and the one
// where it does not, which misses the rule.
func (w *walker) numgenMatch(rest []any, arg map[string]any, ng numgenExpr, o ruleOut) ([]ruleOut, error) {
	op := str(arg["op"])
	if op != "==" && op != "!=" {
		return nil, fmt.Errorf("unsupported numgen match operator %q", op)
	}
	hits := 0
	for n := ng.offset; n < ng.offset+ng.mod; n++ {
		in, err := elemMatch(arg["right"], uint64(n))
		if err != nil {
			return nil, err
		}
		if in == (op == "==") {
			hits++
		}
	}
	var out []ruleOut
	if hits > 0 {
		b := o
		b.p = o.p * float64(hits) / float64(ng.mod)
		b.note = fmt.Sprintf("   (numgen random mod %d: %d in %d)", ng.mod, hits, ng.mod)
		taken, err := w.stmts(rest, b)
		if err != nil {
			return nil, err
		}
		out = append(out, taken...)
	}
	if hits < int(ng.mod) {
		m := o
		m.p = o.p * float64(int(ng.mod)-hits) / float64(ng.mod)
		m.matched, m.verdict = false, ""
		out = append(out, m)
	}
	return out, nil
}

type numgenExpr struct{ mod, offset int64 }

// branches splits o into the numgen's mod equally likely branches, each
// looking its number up in elems and applied by apply; the numbers with no
// element add up to one branch where the rule did not match (a lookup that
// finds nothing breaks the rule).
func (ng numgenExpr) branches(o ruleOut, elems []elem, apply func(b ruleOut, n int64, e elem) (ruleOut, error)) ([]ruleOut, error) {
	var out []ruleOut
	missed := 0.0
	for n := ng.offset; n < ng.offset+ng.mod; n++ {
		b := o
		b.p = o.p / float64(ng.mod)
		e, found, err := lookup(elems, uint64(n))
		if err != nil {
			return nil, err
		}
		if !found {
			missed += b.p
			continue
		}
		if b, err = apply(b, n, e); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if missed > 0 {
		m := o
		m.p, m.matched, m.verdict = missed, false, ""
		out = append(out, m)
	}
	return out, nil
}

func numgen(e any) (numgenExpr, bool) {
	m, ok := e.(map[string]any)
	if !ok {
		return numgenExpr{}, false
	}
	ng, ok := m["numgen"].(map[string]any)
	if !ok || ng["mode"] != "random" {
		return numgenExpr{}, false
	}
	mod, _ := ng["mod"].(int64)
	off, _ := ng["offset"].(int64)
	return numgenExpr{mod: mod, offset: off}, mod > 0
}

// anonMap reads an anonymous map {"set": [[key, data], ...]}.
func anonMap(d map[string]any) ([]elem, error) {
	raw, ok := d["set"].([]any)
	if !ok {
		return nil, fmt.Errorf("unsupported map %v", d)
	}
	var out []elem
	for _, x := range raw {
		e, err := parseElem(x, true)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// lookup finds the first element whose key holds v.
func lookup(elems []elem, v any) (elem, bool, error) {
	for _, e := range elems {
		ok, err := elemMatch(e.key, v)
		if err != nil {
			return elem{}, false, err
		}
		if ok {
			return e, true, nil
		}
	}
	return elem{}, false, nil
}

// concatVal is the value of a concatenation.
type concatVal []any

// flagsVal is a ct state or status: the bits that are set.
type flagsVal []string

// eval computes an expression's value for the packet: netip.Addr, uint64
// (ports, marks, numbers), string (protocol, fib address type),
// concatVal, flagsVal; errNoMatch when the expression's protocol
// dependency fails (tcp dport of a udp packet).
func (w *walker) eval(e any, st *state) (any, error) {
	m, ok := e.(map[string]any)
	if !ok {
		switch x := e.(type) {
		case int64:
			return uint64(x), nil
		}
		return nil, fmt.Errorf("unsupported expression %v", e)
	}
	kind, v, err := one(m)
	if err != nil {
		return nil, err
	}
	arg, _ := v.(map[string]any)
	switch kind {
	case "payload":
		proto, field := str(arg["protocol"]), str(arg["field"])
		switch proto {
		case "ip", "ip6":
			// An ip table's rules say ip, an ip6 table's ip6; the
			// packet is of the table's family.
			if (proto == "ip6") == w.pkt.Src.Is4() {
				return nil, fmt.Errorf("%s payload of an IPv%d packet", proto, map[bool]int{true: 4, false: 6}[w.pkt.Src.Is4()])
			}
			switch field {
			case "saddr":
				return w.pkt.Src, nil
			case "daddr":
				return st.dst.Addr(), nil
			}
		case "th", "tcp", "udp", "sctp":
			if proto != "th" && proto != w.pkt.Proto {
				return nil, errNoMatch
			}
			if field == "dport" {
				return uint64(st.dst.Port()), nil
			}
		}
		return nil, fmt.Errorf("unsupported payload %s %s (the first packet's source port is not part of the trace)", proto, field)
	case "meta":
		switch k := str(arg["key"]); k {
		case "l4proto":
			return w.pkt.Proto, nil
		case "mark":
			return uint64(st.mark), nil
		case "nfproto":
			if !w.pkt.Src.Is4() {
				return "ipv6", nil
			}
			return "ipv4", nil
		case "iifname":
			if w.pkt.In == "" {
				return nil, fmt.Errorf("rule matches the input interface, unknown for this packet")
			}
			return w.pkt.In, nil
		case "oifname":
			if w.node.Out == nil {
				return nil, fmt.Errorf("rule matches the output interface, unknown for this packet")
			}
			return w.node.Out(st.dst.Addr()), nil
		default:
			return nil, fmt.Errorf("unsupported meta %s", k)
		}
	case "ct":
		switch k := str(arg["key"]); k {
		case "state":
			// The first packet of a connection.
			return flagsVal{"new"}, nil
		case "status":
			if st.dnat {
				return flagsVal{"dnat"}, nil
			}
			return flagsVal{}, nil
		default:
			return nil, fmt.Errorf("unsupported ct %s", k)
		}
	case "fib":
		if str(arg["result"]) != "type" {
			return nil, fmt.Errorf("unsupported fib result %v", arg["result"])
		}
		flags := flagsText(arg["flags"])
		var a netip.Addr
		switch flags {
		case "saddr":
			a = w.pkt.Src
		case "daddr":
			a = st.dst.Addr()
		default:
			return nil, fmt.Errorf("unsupported fib %s", flags)
		}
		if w.node.IsLocal(a) {
			return "local", nil
		}
		return "unicast", nil
	case "concat":
		parts, _ := v.([]any)
		var out concatVal
		for _, p := range parts {
			x, err := w.eval(p, st)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	case "&", "|", "^":
		ops, _ := v.([]any)
		if len(ops) != 2 {
			return nil, fmt.Errorf("bad %s expression", kind)
		}
		a, err := w.eval(ops[0], st)
		if err != nil {
			return nil, err
		}
		b, err := w.eval(ops[1], st)
		if err != nil {
			return nil, err
		}
		x, ok1 := a.(uint64)
		y, ok2 := b.(uint64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s of non-numbers", kind)
		}
		switch kind {
		case "&":
			return x & y, nil
		case "|":
			return x | y, nil
		}
		return x ^ y, nil
	}
	return nil, fmt.Errorf("unsupported expression %q", kind)
}

var errNoMatch = fmt.Errorf("no match")

// match evaluates a match statement.
func (w *walker) match(arg map[string]any, st *state) (bool, error) {
	left, err := w.eval(arg["left"], st)
	if err == errNoMatch {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	op := str(arg["op"])
	right := arg["right"]
	var in bool
	if name, ok := right.(string); ok && strings.HasPrefix(name, "@") {
		s, ok := w.r.sets[name[1:]]
		if !ok {
			return false, fmt.Errorf("lookup in missing set %s", name)
		}
		_, in, err = lookup(s.elems, left)
	} else {
		in, err = elemMatch(right, left)
	}
	if err != nil {
		return false, err
	}
	switch op {
	case "==", "in":
		return in, nil
	case "!=":
		return !in, nil
	}
	return false, fmt.Errorf("unsupported match operator %q", op)
}

// elemMatch says whether v is in key: a scalar, prefix, range, anonymous
// set, concatenation or, for flags, any of the listed flags.
func elemMatch(key, v any) (bool, error) {
	if f, ok := v.(flagsVal); ok {
		var want []any
		switch k := key.(type) {
		case string:
			want = []any{k}
		case []any:
			want = k
		case map[string]any:
			if s, ok := k["set"].([]any); ok {
				want = s
			}
		}
		if want == nil {
			return false, fmt.Errorf("unsupported flags match %v", key)
		}
		for _, x := range want {
			for _, have := range f {
				if str(x) == have {
					return true, nil
				}
			}
		}
		return false, nil
	}
	switch k := key.(type) {
	case map[string]any:
		kind, inner, err := one(k)
		if err != nil {
			return false, err
		}
		switch kind {
		case "elem":
			m, _ := inner.(map[string]any)
			return elemMatch(m["val"], v)
		case "set":
			elems, ok := inner.([]any)
			if !ok {
				elems = []any{inner}
			}
			for _, e := range elems {
				ok, err := elemMatch(e, v)
				if err != nil || ok {
					return ok, err
				}
			}
			return false, nil
		case "concat":
			parts, _ := inner.([]any)
			cv, ok := v.(concatVal)
			if !ok || len(cv) != len(parts) {
				return false, fmt.Errorf("concatenation %v compared with %v", parts, v)
			}
			for i := range parts {
				ok, err := elemMatch(parts[i], cv[i])
				if err != nil || !ok {
					return false, err
				}
			}
			return true, nil
		case "prefix":
			m, _ := inner.(map[string]any)
			a, ok := v.(netip.Addr)
			if !ok {
				return false, fmt.Errorf("prefix compared with %v", v)
			}
			l, _ := m["len"].(int64)
			p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", str(m["addr"]), l))
			if err != nil {
				return false, err
			}
			return p.Contains(a), nil
		case "range":
			r, _ := inner.([]any)
			if len(r) != 2 {
				return false, fmt.Errorf("bad range %v", inner)
			}
			return inRange(r[0], r[1], v)
		}
		return false, fmt.Errorf("unsupported set element %q", kind)
	}
	return scalarEqual(key, v)
}

func inRange(lo, hi, v any) (bool, error) {
	switch x := v.(type) {
	case netip.Addr:
		a, err1 := netip.ParseAddr(str(lo))
		b, err2 := netip.ParseAddr(str(hi))
		if err1 != nil || err2 != nil {
			return false, fmt.Errorf("bad address range %v-%v", lo, hi)
		}
		return a.Compare(x) <= 0 && x.Compare(b) <= 0, nil
	case uint64:
		a, ok1 := lo.(int64)
		b, ok2 := hi.(int64)
		if !ok1 || !ok2 {
			return false, fmt.Errorf("bad range %v-%v", lo, hi)
		}
		return uint64(a) <= x && x <= uint64(b), nil
	}
	return false, fmt.Errorf("range compared with %v", v)
}

var protoNumbers = map[int64]string{1: "icmp", 6: "tcp", 17: "udp", 132: "sctp"}

func scalarEqual(key, v any) (bool, error) {
	switch x := v.(type) {
	case netip.Addr:
		a, err := netip.ParseAddr(str(key))
		if err != nil {
			return false, fmt.Errorf("address %v compared with %v", x, key)
		}
		return a == x, nil
	case uint64:
		switch k := key.(type) {
		case int64:
			return uint64(k) == x, nil
		case string:
			n, err := strconv.ParseUint(k, 0, 64)
			if err != nil {
				return false, fmt.Errorf("number %d compared with %q", x, k)
			}
			return n == x, nil
		}
	case string:
		switch k := key.(type) {
		case string:
			return k == x, nil
		case int64:
			if p, ok := protoNumbers[k]; ok {
				return p == x, nil
			}
			return false, nil
		}
	}
	return false, fmt.Errorf("cannot compare %v with %v", v, key)
}

// mapElems are the elements of a lookup's map: a named one ("@NAME", with its
// name) or an anonymous one written in the rule. what names the lookup in
// errors (vmap, dnat).
func (w *walker) mapElems(data any, what string) ([]elem, string, error) {
	switch d := data.(type) {
	case string:
		name := strings.TrimPrefix(d, "@")
		s, ok := w.r.sets[name]
		if !ok || !s.isMap {
			return nil, "", fmt.Errorf("%s lookup in missing map %s", what, d)
		}
		return s.elems, name, nil
	case map[string]any:
		elems, err := anonMap(d)
		return elems, "", err
	default:
		return nil, "", fmt.Errorf("unsupported %s map data %v", what, data)
	}
}
