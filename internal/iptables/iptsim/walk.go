// Package iptsim walks a packet through iptables rules given as
// iptables-save text, the way the kernel would for the first packet of a
// connection, and reports every possible outcome with its probability
// (statistic matches branch). Tests use it to say "this packet from here to
// that VIP reaches one of these endpoints, masqueraded or not" about the
// rules the proxy renders, without a kernel. It knows the matches and targets
// kube-proxy's rules use; a rule with anything else is an error, so a test
// never passes by ignoring a match.
//
// Each outcome also carries the Steps that led to it: every rule that matched,
// in order, with its table, chain, position, text, statistic probability, the
// packet mark after it and the DNAT or MASQUERADE it did, plus the ends of
// chains the packet fell off. `minikit trace` renders those steps from the
// rules actually in a node's kernel (iptables-save, with or without -c), so
// Parse reads iptables-save's normalised forms (--set-xmark, counters, recent
// options in any order) as well as the proxy's own restore text.
package iptsim

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/iptables"
)

// Rules is a parsed rule set: table -> chain -> rules.
type Rules struct {
	tables map[string]map[string][]savedRule
	// policies holds the built-in chains' policies as saved (ACCEPT, DROP)
	// and their counters.
	policies map[string]map[string]policy
	// order lists each table's chains in the order they were declared.
	order map[string][]string
}

// savedRule is one rule: its arguments after "-A CHAIN", its text as given,
// and its counters when the text came from iptables-save -c.
type savedRule struct {
	args           []string
	text           string
	packets, bytes uint64
}

type policy struct {
	verdict        string
	packets, bytes uint64
}

// Parse reads iptables-save text (several tables may follow each other),
// with or without counters (iptables-save -c), with iptables.ParseSave.
func Parse(save string) (*Rules, error) {
	tables, err := iptables.ParseSave(save)
	if err != nil {
		return nil, err
	}
	r := &Rules{tables: map[string]map[string][]savedRule{}, policies: map[string]map[string]policy{}, order: map[string][]string{}}
	for name, t := range tables {
		chains := map[string][]savedRule{}
		r.tables[name] = chains
		r.policies[name] = map[string]policy{}
		for _, c := range t.Chains {
			r.order[name] = append(r.order[name], c.Name)
			chains[c.Name] = nil
			for _, rule := range c.Rules {
				chains[c.Name] = append(chains[c.Name], savedRule{args: rule.Args[2:], text: rule.Text, packets: rule.Packets, bytes: rule.Bytes})
			}
			if c.Policy != "" && c.Policy != "-" {
				r.policies[name][c.Name] = policy{verdict: c.Policy, packets: c.Packets, bytes: c.Bytes}
			}
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
	// In is the interface the packet arrives on, for -i matches ("" when
	// unknown: a rule with -i is then an error).
	In string
}

// Node is what the rules' address-type matches see.
type Node struct {
	Addrs []netip.Addr // the node's own addresses (addrtype LOCAL), besides 127/8
	// Out gives the interface the node routes dst out of, for -o matches
	// (nil when unknown: a rule with -o is then an error).
	Out func(dst netip.Addr) string
	// Sets are the node's ipsets by name, for -m set matches (the network
	// policy enforcer's peer sets); a rule naming a set not here is an error.
	Sets map[string]IPSet
}

// IPSet is one ipset's members: CIDRs ("10.244.1.5/32", "10.0.0.0/8") for
// hash:net and hash:ip, address,protocol:port pairs ("10.244.1.5,tcp:8080")
// for hash:ip,port.
type IPSet struct {
	Type    string
	Entries []string
}

// contains reports whether the set holds addr (and, for hash:ip,port, the
// protocol and port).
func (s IPSet) contains(addr netip.Addr, proto string, port uint16) bool {
	pair := addr.String() + "," + proto + ":" + strconv.Itoa(int(port))
	for _, e := range s.Entries {
		if strings.Contains(e, ",") {
			if e == pair {
				return true
			}
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil && p.Contains(addr) {
			return true
		}
		if a, err := netip.ParseAddr(e); err == nil && a == addr {
			return true
		}
	}
	return false
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
	// Mark is the packet mark when the packet leaves the rules.
	Mark uint32
	// Steps is the path through the rules, in order.
	Steps []Step
	// Local says the packet was delivered to the node itself (filter INPUT)
	// rather than forwarded or sent out.
	Local bool
}

// String is the outcome in one line: verdict, destination, probability and
// whether it is masqueraded ("ACCEPT 10.244.1.5:80 p=0.5000 masq").
func (o Outcome) String() string {
	s := fmt.Sprintf("%s %s p=%.4f", o.Verdict, o.Dst, o.Probability)
	if o.Masquerade {
		s += " masq"
	}
	return s
}

// Step is one rule the packet matched, or the end of a chain it fell off.
type Step struct {
	Table string
	Chain string
	// Rule is the 1-based position of the rule in Chain; 0 means the packet
	// fell off the end of the chain (the policy of a built-in chain, a return
	// to the caller for any other).
	Rule int
	// Text is the rule as parsed ("-A CHAIN ..."); for Rule 0, "policy X" or
	// "end of chain".
	Text string
	// Target is the rule's target (a chain, ACCEPT, DNAT, MARK, ...); for
	// Rule 0 the policy of a built-in chain or RETURN.
	Target string
	// Comment is the rule's --comment, if any.
	Comment string
	// Probability is the chance this rule matched given the packet reached
	// it: its statistic --probability, or 1.
	Probability float64
	// Branch is the probability of the path up to and including this step.
	Branch float64
	// Mark is the packet mark after the step; MarkChanged says this step set it.
	Mark        uint32
	MarkChanged bool
	// DNAT is the new destination when this step rewrote it.
	DNAT netip.AddrPort
	// Masquerade says this step is the MASQUERADE (SNAT to the outgoing
	// interface's address).
	Masquerade bool
	// Recent lists the xt_recent lists this rule added the source to.
	Recent []string
	// Verdict is set on the step that ended the walk in its table: ACCEPT,
	// DROP or REJECT (a DNAT or MASQUERADE accepts).
	Verdict string
}

type state struct {
	mark   uint32
	dst    netip.AddrPort
	dnat   bool
	masq   bool
	prob   float64
	recent []string
	steps  []Step
}

// step appends s to the path, never sharing the backing array with a sibling
// branch.
func (st *state) step(s Step) {
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
			out = append(out, outcome(n, false))
			continue
		}
		filterChain := "FORWARD"
		if pkt.Local {
			filterChain = "OUTPUT"
		} else if w.node.IsLocal(n.st.dst.Addr()) {
			filterChain = "INPUT"
		}
		filt, err := w.hook("filter", filterChain, n.st)
		if err != nil {
			return nil, err
		}
		for _, f := range filt {
			if f.verdict != "ACCEPT" || filterChain == "INPUT" {
				out = append(out, outcome(f, filterChain == "INPUT"))
				continue
			}
			post, err := w.hook("nat", "POSTROUTING", f.st)
			if err != nil {
				return nil, err
			}
			for _, p := range post {
				out = append(out, outcome(p, false))
			}
		}
	}
	SortOutcomes(out)
	return out, nil
}

// Forward walks only the filter FORWARD chain, for a packet that another
// node already NATed and routed here (dst is its destination now): what the
// node that delivers it to its pod decides, network policy included.
func (r *Rules) Forward(node Node, pkt Packet) ([]Outcome, error) {
	w := &walker{r: r, node: node, pkt: pkt}
	res, err := w.hook("filter", "FORWARD", state{dst: pkt.Dst, prob: 1})
	if err != nil {
		return nil, err
	}
	var out []Outcome
	for _, f := range res {
		out = append(out, outcome(f, false))
	}
	SortOutcomes(out)
	return out, nil
}

// SortOutcomes orders outcomes most probable first and, among equally
// probable ones, in the order the kernel's rules give them (the order the
// walk met them: the KUBE-SEP rules' order, the numgen map's elements). The
// probabilities are products of the rules' --probability values, which
// kube-proxy prints with ten decimals, so paths of one Service differ in
// their last bits (0.2 against 0.19999999999); they compare equal when they
// agree to one part in a million, so that floating-point noise never decides
// which path comes first. The same rules give the same order every time.
func SortOutcomes(out []Outcome) {
	key := func(p float64) float64 { return math.Round(p * 1e6) }
	sort.SliceStable(out, func(i, j int) bool { return key(out[i].Probability) > key(out[j].Probability) })
}

func outcome(r result, local bool) Outcome {
	return Outcome{Verdict: r.verdict, Dst: r.st.dst, DNAT: r.st.dnat, Masquerade: r.st.masq, Probability: r.st.prob,
		Recent: r.st.recent, Mark: r.st.mark, Steps: r.st.steps, Local: local && r.verdict == "ACCEPT"}
}

// hook walks a built-in chain; falling off its end is its policy (ACCEPT
// unless the saved rules say otherwise). A DNAT or MASQUERADE verdict ends
// the nat chain and means ACCEPT.
func (w *walker) hook(table, chain string, st state) ([]result, error) {
	rs, err := w.chain(table, chain, st, 0)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		if rs[i].verdict == "NAT" {
			rs[i].verdict = "ACCEPT"
		}
		if rs[i].verdict == "" {
			// The last step is the fall-off-the-end step chain() recorded.
			pol := w.r.policy(table, chain)
			rs[i].verdict = pol
			if n := len(rs[i].st.steps); n > 0 {
				rs[i].st.steps[n-1].Verdict = pol
			}
		}
	}
	return rs, nil
}

func (r *Rules) policy(table, chain string) string {
	if p, ok := r.policies[table][chain]; ok && p.verdict != "" {
		return p.verdict
	}
	return "ACCEPT"
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
func (w *walker) rules(table, chain string, rules []savedRule, i int, st state, depth int) ([]result, error) {
	for ; i < len(rules); i++ {
		p, target, targs, set, err := w.match(rules[i].args, &st)
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
		st.recent = append(st.recent[:len(st.recent):len(st.recent)], set...)
		hit, err := w.target(table, chain, rules, i, target, targs, set, p, st, depth)
		if err != nil {
			return nil, err
		}
		// The rule's own branch before the rest of the chain: outcomes come
		// in the rules' order (SortOutcomes keeps it among equals).
		return append(hit, out...), nil
	}
	end := Step{Table: table, Chain: chain, Text: "end of chain", Target: "RETURN", Probability: 1}
	if iptables.IsBuiltin(table, chain) {
		end.Target = w.r.policy(table, chain)
		end.Text = "policy " + end.Target
	}
	st.step(end)
	return []result{{st: st}}, nil
}

func (w *walker) target(table, chain string, rules []savedRule, i int, target string, args, set []string, p float64, st state, depth int) ([]result, error) {
	s := Step{Table: table, Chain: chain, Rule: i + 1, Text: rules[i].text, Target: target,
		Comment: flag(rules[i].args, "--comment"), Probability: p, Recent: set}
	switch target {
	case "":
		s.Text += "   (no target: continue)"
		st.step(s)
		return w.rules(table, chain, rules, i+1, st, depth)
	case "ACCEPT", "DROP", "REJECT":
		s.Verdict = target
		st.step(s)
		return []result{{st: st, verdict: target}}, nil
	case "RETURN":
		st.step(s)
		return []result{{st: st}}, nil
	case "MARK":
		m, err := mark(st.mark, args)
		if err != nil {
			return nil, fmt.Errorf("%s/%s rule %d: %w", table, chain, i+1, err)
		}
		st.mark = m
		s.MarkChanged = true
		st.step(s)
		return w.rules(table, chain, rules, i+1, st, depth)
	case "DNAT":
		ap, err := netip.ParseAddrPort(flag(args, "--to-destination"))
		if err != nil {
			return nil, fmt.Errorf("%s/%s rule %d: DNAT: %w", table, chain, i+1, err)
		}
		st.dst, st.dnat = ap, true
		s.DNAT, s.Verdict = ap, "ACCEPT"
		st.step(s)
		return []result{{st: st, verdict: "NAT"}}, nil
	case "MASQUERADE", "SNAT":
		// Both rewrite the source; MASQUERADE to the outgoing interface's
		// address, SNAT to --to-source.
		st.masq = true
		s.Masquerade, s.Verdict = true, "ACCEPT"
		st.step(s)
		return []result{{st: st, verdict: "NAT"}}, nil
	case "LOG", "NFLOG":
		st.step(s)
		return w.rules(table, chain, rules, i+1, st, depth)
	}
	if _, ok := w.r.tables[table][target]; !ok {
		return nil, fmt.Errorf("%s/%s rule %d: unknown target or missing chain %q", table, chain, i+1, target)
	}
	st.step(s)
	sub, err := w.chain(table, target, st, depth+1)
	if err != nil {
		return nil, err
	}
	var out []result
	for _, r := range sub {
		if r.verdict != "" {
			out = append(out, r)
			continue
		}
		rest, err := w.rules(table, chain, rules, i+1, r.st, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	return out, nil
}

// mark applies a MARK target's arguments, in any of the forms iptables
// accepts or iptables-save prints (--or-mark X is saved as --set-xmark X/X,
// --xor-mark X as --set-xmark X/0x0).
func mark(cur uint32, args []string) (uint32, error) {
	parse := func(s string) (val, mask uint32, hasMask bool, err error) {
		v, m, ok := strings.Cut(s, "/")
		x, err := strconv.ParseUint(v, 0, 32)
		if err != nil {
			return 0, 0, false, fmt.Errorf("MARK value %q: %w", s, err)
		}
		if !ok {
			return uint32(x), 0xffffffff, false, nil
		}
		y, err := strconv.ParseUint(m, 0, 32)
		if err != nil {
			return 0, 0, false, fmt.Errorf("MARK mask %q: %w", s, err)
		}
		return uint32(x), uint32(y), true, nil
	}
	for i := 0; i+1 < len(args); i++ {
		v, m, _, err := parse(args[i+1])
		switch args[i] {
		case "--or-mark":
			return cur | v, err
		case "--xor-mark":
			return cur ^ v, err
		case "--and-mark":
			return cur & v, err
		case "--set-xmark":
			return (cur &^ m) ^ v, err
		case "--set-mark":
			return (cur &^ m) | v, err
		}
	}
	return 0, fmt.Errorf("unsupported MARK %v", args)
}

// flag is the value that follows the option name in args, or "".
func flag(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// IsLocal says whether a is one of the node's addresses (the kernel's
// addrtype LOCAL): a loopback address or one of Addrs.
func (n Node) IsLocal(a netip.Addr) bool {
	return a.IsLoopback() || slices.Contains(n.Addrs, a)
}

// inPorts matches a port or an iptables port range "lo:hi".
func inPorts(spec string, port uint16) (bool, error) {
	lo, hi, isRange := strings.Cut(spec, ":")
	l, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return false, fmt.Errorf("bad port %q", spec)
	}
	h := l
	if isRange {
		if h, err = strconv.ParseUint(hi, 10, 16); err != nil {
			return false, fmt.Errorf("bad port range %q", spec)
		}
	}
	return uint64(port) >= l && uint64(port) <= h, nil
}

// ifaceMatch is iptables' interface match: a trailing "+" is a prefix.
func ifaceMatch(pat, dev string) bool {
	if strings.HasSuffix(pat, "+") {
		return strings.HasPrefix(dev, strings.TrimSuffix(pat, "+"))
	}
	return pat == dev
}

// inNet matches -s and -d: an address (a host of its family) or a CIDR of
// either family; an address of the other family never matches (an
// ip6tables rule only ever sees IPv6 packets).
func inNet(spec string, a netip.Addr) (bool, error) {
	if !strings.Contains(spec, "/") {
		ip, err := netip.ParseAddr(spec)
		if err != nil {
			return false, err
		}
		return ip == a, nil
	}
	p, err := netip.ParsePrefix(spec)
	if err != nil {
		return false, err
	}
	return p.Contains(a), nil
}

// sameProto matches -p: the protocol's name as iptables or ip6tables prints
// it, or its number. ICMP (icmp, ipv6-icmp, icmpv6, 1, 58) never matches the
// traced packet, which is always TCP, UDP or SCTP.
func sameProto(spec, proto string) bool {
	num := map[string]string{"6": "tcp", "17": "udp", "132": "sctp"}
	if n, ok := num[spec]; ok {
		spec = n
	}
	return spec == proto
}

// match evaluates a rule's matches against the packet. It returns the
// probability that the rule matches (0, 1, or a statistic's p), the target,
// the target's arguments and the xt_recent lists a match adds the source to.
func (w *walker) match(args []string, st *state) (float64, string, []string, []string, error) {
	p := 1.0
	neg := false
	// xt_recent options come in any order (iptables-save prints --rcheck
	// before --name), so the list name is read up front; a rule carries at
	// most one recent match.
	recentName := flag(args, "--name")
	if recentName == "" {
		recentName = "DEFAULT"
	}
	var set []string
	var unknown error
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
			if p == 0 {
				set = nil
			} else if unknown != nil {
				return 0, "", nil, nil, unknown
			}
			return p, next(), args[i+1:], set, nil
		case "-m":
			switch m := next(); m {
			case "comment", "tcp", "udp", "sctp", "addrtype", "mark", "conntrack", "state", "statistic", "recent", "multiport", "set", "nfacct",
				"icmp", "icmp6":
			default:
				return 0, "", nil, nil, fmt.Errorf("unsupported match -m %s", m)
			}
		case "--comment":
			next()
		case "--nfacct-name":
			// Accounting only: the match always succeeds and counts the
			// packet into the named object (kube-proxy's localhost NodePort
			// and INVALID drop counters).
			next()
		case "--match-set":
			name, dirs := next(), next()
			set, ok := w.node.Sets[name]
			if !ok {
				return 0, "", nil, nil, fmt.Errorf("rule matches ipset %s, which the node does not have", name)
			}
			var in bool
			switch dirs {
			case "src":
				in = set.contains(w.pkt.Src, w.pkt.Proto, 0)
			case "dst":
				in = set.contains(st.dst.Addr(), w.pkt.Proto, 0)
			case "dst,dst":
				in = set.contains(st.dst.Addr(), w.pkt.Proto, st.dst.Port())
			default:
				return 0, "", nil, nil, fmt.Errorf("unsupported ipset match direction %q", dirs)
			}
			if fail(in) {
				p = 0
			}
		case "-p", "--protocol":
			if fail(sameProto(next(), w.pkt.Proto)) {
				p = 0
			}
		case "--icmp-type", "--icmpv6-type":
			// The traced packet is the first of a TCP, UDP or SCTP
			// connection, never an ICMP message (ip6tables' neighbour
			// discovery rules pass it by).
			next()
			if fail(false) {
				p = 0
			}
		case "-s":
			ok, err := inNet(next(), w.pkt.Src)
			if err != nil {
				return 0, "", nil, nil, err
			}
			if fail(ok) {
				p = 0
			}
		case "-d":
			ok, err := inNet(next(), st.dst.Addr())
			if err != nil {
				return 0, "", nil, nil, err
			}
			if fail(ok) {
				p = 0
			}
		case "--dport", "--destination-port":
			ok, err := inPorts(next(), st.dst.Port())
			if err != nil {
				return 0, "", nil, nil, err
			}
			if fail(ok) {
				p = 0
			}
		case "--sport", "--source-port":
			// The first packet's source port is not part of the trace.
			return 0, "", nil, nil, fmt.Errorf("unsupported match on the source port (%s)", a)
		case "--dports", "--destination-ports", "--ports":
			// multiport; --ports matches either port, and the source port is
			// unknown, so only a destination match is decided.
			ok := false
			for _, r := range strings.Split(next(), ",") {
				in, err := inPorts(strings.ReplaceAll(r, "-", ":"), st.dst.Port())
				if err != nil {
					return 0, "", nil, nil, err
				}
				ok = ok || in
			}
			if a == "--ports" && !ok {
				return 0, "", nil, nil, fmt.Errorf("unsupported multiport --ports that may match the source port")
			}
			if fail(ok) {
				p = 0
			}
		case "-i", "--in-interface", "-o", "--out-interface":
			pat := next()
			var dev string
			if a == "-i" || a == "--in-interface" {
				dev = w.pkt.In
			} else if w.node.Out != nil {
				dev = w.node.Out(st.dst.Addr())
			}
			if dev == "" {
				// Only an error if the rest of the rule matches.
				unknown = fmt.Errorf("rule matches an interface (%s %s) that is unknown for this packet", a, pat)
				neg = false
				continue
			}
			if fail(ifaceMatch(pat, dev)) {
				p = 0
			}
		case "--src-type", "--dst-type":
			if next() != "LOCAL" {
				return 0, "", nil, nil, fmt.Errorf("unsupported address type %s", args[i])
			}
			addr := w.pkt.Src
			if a == "--dst-type" {
				addr = st.dst.Addr()
			}
			if fail(w.node.IsLocal(addr)) {
				p = 0
			}
		case "--mark":
			v, m, _ := strings.Cut(next(), "/")
			val, _ := strconv.ParseUint(v, 0, 32)
			mask := uint64(0xffffffff)
			if m != "" {
				mask, _ = strconv.ParseUint(m, 0, 32)
			}
			if fail(uint64(st.mark)&mask == val) {
				p = 0
			}
		case "--ctstate", "--state":
			// The first packet of a connection is NEW, and DNAT once nat
			// rewrote its destination.
			in := false
			for _, s := range strings.Split(next(), ",") {
				in = in || s == "NEW" || (s == "DNAT" && a == "--ctstate" && st.dnat)
			}
			if fail(in) {
				p = 0
			}
		case "--mode":
			if next() != "random" {
				return 0, "", nil, nil, fmt.Errorf("unsupported statistic mode")
			}
		case "--probability":
			f, err := strconv.ParseFloat(next(), 64)
			if err != nil {
				return 0, "", nil, nil, err
			}
			p *= f
		case "--name":
			next()
		case "--rcheck":
			in := false
			for _, r := range w.pkt.Recent {
				in = in || r == recentName
			}
			if fail(in) {
				p = 0
			}
		case "--seconds", "--mask":
			next()
		case "--reap", "--rsource":
		case "--set":
			set = append(set, recentName)
		default:
			return 0, "", nil, nil, fmt.Errorf("unsupported argument %q", a)
		}
	}
	if p == 0 {
		set = nil
	} else if unknown != nil {
		return 0, "", nil, nil, unknown
	}
	return p, "", nil, set, nil
}
