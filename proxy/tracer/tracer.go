// Package tracer walks a packet through iptables rules given as
// iptables-save text, the way the kernel would for the first packet of a
// connection, and reports every possible outcome with its probability
// (statistic matches branch). Tests use it to say "this packet from here to
// that VIP reaches one of these endpoints, masqueraded or not" about the
// rules the proxy renders, without a kernel. It knows the matches and targets
// kube-proxy's rules use; a rule with anything else is an error, so a test
// never passes by ignoring a match.
package tracer

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/minikit/minikit/iptables"
)

// Rules is a parsed rule set: table -> chain -> rules.
type Rules struct {
	tables map[string]map[string][][]string
}

// Parse reads iptables-save text (several tables may follow each other).
func Parse(save string) (*Rules, error) {
	r := &Rules{tables: map[string]map[string][][]string{}}
	var cur map[string][][]string
	for i, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l == "COMMIT":
		case l[0] == '*':
			cur = map[string][][]string{}
			r.tables[l[1:]] = cur
		case l[0] == ':':
			cur[strings.Fields(l[1:])[0]] = nil
		case strings.HasPrefix(l, "-A "):
			args := iptables.SplitRule(l)
			cur[args[1]] = append(cur[args[1]], args[2:])
		default:
			return nil, fmt.Errorf("line %d: cannot parse %q", i+1, l)
		}
	}
	return r, nil
}

// Packet is the first packet of a connection.
type Packet struct {
	Src   netip.Addr
	Dst   netip.AddrPort
	Proto string // tcp, udp, sctp
	// Local says the packet is sent by the node itself (nat OUTPUT), not
	// received from a pod or another host (nat PREROUTING).
	Local bool
	// Recent lists the xt_recent lists that already hold Src (session affinity).
	Recent []string
}

// Node is what the rules' address-type matches see.
type Node struct {
	Addrs []netip.Addr // the node's own addresses (addrtype LOCAL), besides 127/8
}

// Outcome is one way the packet can go.
type Outcome struct {
	Verdict     string         // ACCEPT, DROP or REJECT
	Dst         netip.AddrPort // after DNAT
	DNAT        bool
	Masquerade  bool
	Probability float64
	// Recent lists the xt_recent lists the packet's source was added to.
	Recent []string
}

func (o Outcome) String() string {
	s := fmt.Sprintf("%s %s p=%.4f", o.Verdict, o.Dst, o.Probability)
	if o.Masquerade {
		s += " masq"
	}
	return s
}

type state struct {
	mark   uint32
	dst    netip.AddrPort
	dnat   bool
	masq   bool
	prob   float64
	recent []string
}

// result of walking a chain: verdict "" means the chain returned.
type result struct {
	st      state
	verdict string
}

type walker struct {
	r    *Rules
	node Node
	pkt  Packet
}

// Trace returns every outcome of pkt, most probable first.
func (r *Rules) Trace(node Node, pkt Packet) ([]Outcome, error) {
	w := &walker{r: r, node: node, pkt: pkt}
	st := state{dst: pkt.Dst, prob: 1}
	first := "PREROUTING"
	if pkt.Local {
		first = "OUTPUT"
	}
	var out []Outcome
	nat, err := w.hook("nat", first, st)
	if err != nil {
		return nil, err
	}
	for _, n := range nat {
		if n.verdict != "ACCEPT" {
			out = append(out, outcome(n))
			continue
		}
		filterChain := "FORWARD"
		if pkt.Local {
			filterChain = "OUTPUT"
		} else if w.isLocal(n.st.dst.Addr()) {
			filterChain = "INPUT"
		}
		filt, err := w.hook("filter", filterChain, n.st)
		if err != nil {
			return nil, err
		}
		for _, f := range filt {
			if f.verdict != "ACCEPT" || filterChain == "INPUT" {
				out = append(out, outcome(f))
				continue
			}
			post, err := w.hook("nat", "POSTROUTING", f.st)
			if err != nil {
				return nil, err
			}
			for _, p := range post {
				out = append(out, outcome(p))
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Probability > out[j].Probability })
	return out, nil
}

func outcome(r result) Outcome {
	return Outcome{Verdict: r.verdict, Dst: r.st.dst, DNAT: r.st.dnat, Masquerade: r.st.masq, Probability: r.st.prob, Recent: r.st.recent}
}

// hook walks a built-in chain; falling off its end is its policy (ACCEPT).
// A DNAT or MASQUERADE verdict ends the nat chain and means ACCEPT.
func (w *walker) hook(table, chain string, st state) ([]result, error) {
	rs, err := w.chain(table, chain, st, 0)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		if rs[i].verdict == "" || rs[i].verdict == "NAT" {
			rs[i].verdict = "ACCEPT"
		}
	}
	return rs, nil
}

func (w *walker) chain(table, name string, st state, depth int) ([]result, error) {
	if depth > 50 {
		return nil, fmt.Errorf("jump loop at %s/%s", table, name)
	}
	t := w.r.tables[table]
	rules, ok := t[name]
	if !ok && !iptables.IsBuiltin(table, name) {
		return nil, fmt.Errorf("jump to missing chain %s/%s", table, name)
	}
	return w.rules(table, name, rules, 0, st, depth)
}

// rules walks rules[i:] from state st.
func (w *walker) rules(table, chain string, rules [][]string, i int, st state, depth int) ([]result, error) {
	for ; i < len(rules); i++ {
		p, target, targs, err := w.match(rules[i], &st)
		if err != nil {
			return nil, fmt.Errorf("%s/%s rule %d: %w", table, chain, i+1, err)
		}
		if p == 0 {
			continue
		}
		var out []result
		if p < 1 {
			// The statistic match fails with 1-p: the rest of the chain.
			miss := st
			miss.prob *= 1 - p
			rest, err := w.rules(table, chain, rules, i+1, miss, depth)
			if err != nil {
				return nil, err
			}
			out = rest
			st.prob *= p
		}
		hit, err := w.target(table, chain, rules, i, target, targs, st, depth)
		if err != nil {
			return nil, err
		}
		return append(out, hit...), nil
	}
	return []result{{st: st}}, nil
}

func (w *walker) target(table, chain string, rules [][]string, i int, target string, args []string, st state, depth int) ([]result, error) {
	switch target {
	case "":
		return w.rules(table, chain, rules, i+1, st, depth)
	case "ACCEPT", "DROP", "REJECT":
		return []result{{st: st, verdict: target}}, nil
	case "RETURN":
		return []result{{st: st}}, nil
	case "MARK":
		v, _ := strconv.ParseUint(strings.TrimPrefix(flag(args, "--or-mark", "--xor-mark"), "0x"), 16, 32)
		if has(args, "--or-mark") {
			st.mark |= uint32(v)
		} else if has(args, "--xor-mark") {
			st.mark ^= uint32(v)
		} else {
			return nil, fmt.Errorf("unsupported MARK %v", args)
		}
		return w.rules(table, chain, rules, i+1, st, depth)
	case "DNAT":
		ap, err := netip.ParseAddrPort(flag(args, "--to-destination"))
		if err != nil {
			return nil, fmt.Errorf("DNAT: %w", err)
		}
		st.dst, st.dnat = ap, true
		return []result{{st: st, verdict: "NAT"}}, nil
	case "MASQUERADE":
		st.masq = true
		return []result{{st: st, verdict: "NAT"}}, nil
	}
	if _, ok := w.r.tables[table][target]; !ok {
		return nil, fmt.Errorf("unknown target or missing chain %q", target)
	}
	sub, err := w.chain(table, target, st, depth+1)
	if err != nil {
		return nil, err
	}
	var out []result
	for _, s := range sub {
		if s.verdict != "" {
			out = append(out, s)
			continue
		}
		rest, err := w.rules(table, chain, rules, i+1, s.st, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	return out, nil
}

func has(args []string, f string) bool {
	for _, a := range args {
		if a == f {
			return true
		}
	}
	return false
}

func flag(args []string, names ...string) string {
	for i := 0; i+1 < len(args); i++ {
		for _, n := range names {
			if args[i] == n {
				return args[i+1]
			}
		}
	}
	return ""
}

func (w *walker) isLocal(a netip.Addr) bool {
	if netip.MustParsePrefix("127.0.0.0/8").Contains(a) {
		return true
	}
	for _, l := range w.node.Addrs {
		if l == a {
			return true
		}
	}
	return false
}

func inNet(spec string, a netip.Addr) (bool, error) {
	if !strings.Contains(spec, "/") {
		spec += "/32"
	}
	p, err := netip.ParsePrefix(spec)
	if err != nil {
		return false, err
	}
	return p.Contains(a), nil
}

// match evaluates a rule's matches against the packet. It returns the
// probability that the rule matches (0, 1, or a statistic's p), the target and
// the target's arguments. Side effects of matches (recent --set) go into st.
func (w *walker) match(args []string, st *state) (float64, string, []string, error) {
	p := 1.0
	neg := false
	var recentName string
	var set []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		fail := func(ok bool) bool { r := ok == neg; neg = false; return r }
		switch a {
		case "!":
			neg = true
		case "-j", "-g":
			if p > 0 {
				st.recent = append(st.recent, set...)
			}
			return p, next(), args[i+1:], nil
		case "-m":
			switch m := next(); m {
			case "comment", "tcp", "udp", "sctp", "addrtype", "mark", "conntrack", "statistic", "recent":
			default:
				return 0, "", nil, fmt.Errorf("unsupported match -m %s", m)
			}
		case "--comment":
			next()
		case "-p":
			if fail(next() == w.pkt.Proto) {
				p = 0
			}
		case "-s":
			ok, err := inNet(next(), w.pkt.Src)
			if err != nil {
				return 0, "", nil, err
			}
			if fail(ok) {
				p = 0
			}
		case "-d":
			ok, err := inNet(next(), st.dst.Addr())
			if err != nil {
				return 0, "", nil, err
			}
			if fail(ok) {
				p = 0
			}
		case "--dport":
			if fail(next() == strconv.Itoa(int(st.dst.Port()))) {
				p = 0
			}
		case "--src-type", "--dst-type":
			if next() != "LOCAL" {
				return 0, "", nil, fmt.Errorf("unsupported address type %s", args[i])
			}
			addr := w.pkt.Src
			if a == "--dst-type" {
				addr = st.dst.Addr()
			}
			if fail(w.isLocal(addr)) {
				p = 0
			}
		case "--mark":
			v, m, _ := strings.Cut(next(), "/")
			val, _ := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
			mask := uint64(0xffffffff)
			if m != "" {
				mask, _ = strconv.ParseUint(strings.TrimPrefix(m, "0x"), 16, 32)
			}
			if fail(uint64(st.mark)&mask == val) {
				p = 0
			}
		case "--ctstate":
			// The first packet of a connection is NEW.
			if fail(strings.Contains(next(), "NEW")) {
				p = 0
			}
		case "--mode":
			if next() != "random" {
				return 0, "", nil, fmt.Errorf("unsupported statistic mode")
			}
		case "--probability":
			f, err := strconv.ParseFloat(next(), 64)
			if err != nil {
				return 0, "", nil, err
			}
			p *= f
		case "--name":
			recentName = next()
		case "--rcheck":
			in := false
			for _, r := range w.pkt.Recent {
				in = in || r == recentName
			}
			if !in {
				p = 0
			}
		case "--seconds":
			next()
		case "--reap":
		case "--set":
			set = append(set, recentName)
		default:
			return 0, "", nil, fmt.Errorf("unsupported argument %q", a)
		}
	}
	if p > 0 {
		st.recent = append(st.recent, set...)
	}
	return p, "", nil, nil
}
