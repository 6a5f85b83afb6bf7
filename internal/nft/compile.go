package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file compiles rule text (nft syntax, the statements kube-proxy's
// nftables proxier writes) into netlink expressions, producing the same
// expressions nft 1.0 produces for the same text, so that `nft list` prints
// the rule back exactly as the Exec backend would have loaded it. What it
// does not know is an error naming the rule, never a silently dropped
// statement.
//
// Supported (kube-proxy v1.37.2 pkg/proxy/nftables/proxier.go):
//   - matches: ip saddr/daddr (ip6 saddr/daddr in an ip6 table), meta l4proto, th sport/dport, mark / meta mark
//     (with and/or/xor), ct state, ct status, fib saddr/daddr type, numgen
//     random mod N; concatenations of them with "."; == (implicit), !=;
//     right-hand sides: a value, an address prefix, @set, { a, b, ... }
//     (anonymous sets, intervals from prefixes)
//   - vmap @map, vmap { k : verdict, ... } (anonymous verdict maps)
//   - verdicts: jump, goto, drop, accept, return; reject; masquerade
//     [fully-random|random|persistent]
//   - mark set mark or|xor|and V, mark set V
//   - dnat to ADDR[:PORT]; dnat ip addr . port to <numgen> map { k : A . P, ... };
//     dnat ip to <numgen> map @map (a named map of ipv4_addr . inet_service,
//     minikit's dnat-endpoints), numgen random mod N [offset B]
//   - update|add @set { <selector> }
//
// A backend compiles for its table's family (compileFor): in an ip6 table
// the addresses are ip6's (16 bytes at offsets 8 and 24 of the IPv6
// header), "dnat ip6 ..." and "dnat to [A]:P" are IPv6 NAT, and a bare
// "reject" is ICMPv6 port unreachable, as nft compiles them there.

// nft datatypes (nftables include/datatype.h) and their sizes.
type dtype uint32

const (
	typeVerdict  dtype = 1
	typeInteger  dtype = 4
	typeIPv4     dtype = 7
	typeIPv6     dtype = 8
	typeMark     dtype = 19
	typeProto    dtype = 12
	typeService  dtype = 13
	typeCtState  dtype = 23
	typeCtStatus dtype = 25
	typeFibAddr  dtype = 44
)

// size is the value's length in bytes (before register padding).
func (t dtype) size() int {
	switch t {
	case typeIPv4:
		return 4
	case typeIPv6:
		return 16
	case typeProto:
		return 1
	case typeService:
		return 2
	}
	return 4
}

// bigEndian tells whether values are in network byte order (else host).
func (t dtype) bigEndian() bool {
	return t == typeIPv4 || t == typeIPv6 || t == typeService
}

// isAddr tells whether t is an address type.
func (t dtype) isAddr() bool { return t == typeIPv4 || t == typeIPv6 }

// ofType tells whether a is an address of type t.
func ofType(t dtype, a netip.Addr) bool {
	if t == typeIPv6 {
		return a.Is6() && !a.Is4In6() && a.Zone() == ""
	}
	return a.Is4()
}

func (t dtype) String() string {
	switch t {
	case typeIPv4:
		return "ipv4_addr"
	case typeIPv6:
		return "ipv6_addr"
	case typeProto:
		return "inet_proto"
	case typeService:
		return "inet_service"
	case typeMark:
		return "mark"
	case typeCtState:
		return "ct_state"
	case typeCtStatus:
		return "ct_status"
	case typeFibAddr:
		return "fib_addrtype"
	case typeVerdict:
		return "verdict"
	}
	return "integer"
}

func padded(n int) int { return (n + 3) &^ 3 }

var (
	protoNumbers = map[string]byte{"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "icmpv6": 58}
	ctStates     = map[string]uint32{"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64}
	ctStatuses   = map[string]uint32{"expected": 1, "seen-reply": 2, "assured": 4, "confirmed": 8, "snat": 16, "dnat": 32, "dying": 512}
	fibTypes     = map[string]uint32{"unspec": 0, "unicast": 1, "local": 2, "broadcast": 3, "anycast": 4, "multicast": 5, "blackhole": 6, "unreachable": 7, "prohibit": 8}
)

// encodeValue encodes one literal of type t (unpadded).
func encodeValue(t dtype, s string) ([]byte, error) {
	switch t {
	case typeIPv4, typeIPv6:
		a, err := netip.ParseAddr(s)
		if err != nil || !ofType(t, a) {
			return nil, fmt.Errorf("invalid %s address %q", familyWord(t), s)
		}
		return a.AsSlice(), nil
	case typeProto:
		if p, ok := protoNumbers[s]; ok {
			return []byte{p}, nil
		}
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil {
			return nil, fmt.Errorf("invalid protocol %q", s)
		}
		return []byte{byte(n)}, nil
	case typeService:
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("invalid port %q", s)
		}
		return binary.BigEndian.AppendUint16(nil, uint16(n)), nil
	case typeCtState, typeCtStatus, typeFibAddr:
		names := map[dtype]map[string]uint32{typeCtState: ctStates, typeCtStatus: ctStatuses, typeFibAddr: fibTypes}[t]
		var v uint32
		for _, part := range strings.Split(s, ",") {
			x, ok := names[part]
			if !ok {
				return nil, fmt.Errorf("invalid %s %q", t, part)
			}
			v |= x
		}
		return binary.NativeEndian.AppendUint32(nil, v), nil
	default:
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			return nil, fmt.Errorf("invalid %s value %q", t, s)
		}
		return binary.NativeEndian.AppendUint32(nil, uint32(n)), nil
	}
}

// encodeKey encodes a concatenation, each field padded to 4 bytes.
func encodeKey(types []dtype, fields []string) ([]byte, error) {
	if len(fields) != len(types) {
		return nil, fmt.Errorf("key %q has %d fields, want %d", strings.Join(fields, " . "), len(fields), len(types))
	}
	var out []byte
	for i, t := range types {
		v, err := encodeValue(t, fields[i])
		if err != nil {
			return nil, err
		}
		if len(types) > 1 {
			v = append(v, make([]byte, padded(len(v))-len(v))...)
		}
		out = append(out, v...)
	}
	return out, nil
}

// verdict is a verdict as map data or statement.
type verdict struct {
	code  int32
	chain string
}

func parseVerdict(toks []string) (verdict, int, error) {
	if len(toks) == 0 {
		return verdict{}, 0, fmt.Errorf("missing verdict")
	}
	switch toks[0] {
	case "drop":
		return verdict{code: 0}, 1, nil
	case "accept":
		return verdict{code: 1}, 1, nil
	case "return":
		return verdict{code: -5}, 1, nil
	case "continue":
		return verdict{code: -1}, 1, nil
	case "jump", "goto":
		if len(toks) < 2 || isPunct(toks[1]) {
			return verdict{}, 0, fmt.Errorf("%s without a chain", toks[0])
		}
		code := int32(-3)
		if toks[0] == "goto" {
			code = -4
		}
		return verdict{code: code, chain: toks[1]}, 2, nil
	}
	return verdict{}, 0, fmt.Errorf("invalid verdict %q", toks[0])
}

func (v verdict) expr() *expr.Verdict {
	kinds := map[int32]expr.VerdictKind{0: expr.VerdictDrop, 1: expr.VerdictAccept, -5: expr.VerdictReturn, -1: expr.VerdictContinue, -3: expr.VerdictJump, -4: expr.VerdictGoto}
	return &expr.Verdict{Kind: kinds[v.code], Chain: v.chain}
}

// rawElem is a set element as sent to the kernel.
type rawElem struct {
	key     []byte
	data    []byte
	verdict *verdict
	flags   uint32 // NFT_SET_ELEM_INTERVAL_END
	comment string
}

// anonSet is an anonymous set or map a rule brings with it.
type anonSet struct {
	name     string // "__set%d" or "__map%d"
	flags    uint32
	keyType  uint32
	keyLen   uint32
	dataType uint32
	dataLen  uint32
	udata    []byte
	elems    []rawElem
	lookups  []*expr.Lookup // patched with the batch's set id
}

// compiledRule is a rule ready to marshal.
type compiledRule struct {
	exprs []expr.Any
	anon  []*anonSet
	// marshaled is the NFTA_RULE_EXPRESSIONS payload, cached when the
	// rule has no anonymous sets (whose ids change per batch).
	marshaled []byte
}

type selKind int

const (
	selPayload selKind = iota
	selMeta
	selCt
	selFib
	selNumgen
)

// field is one selector of a (possibly concatenated) left-hand side.
type field struct {
	kind     selKind
	typ      dtype
	base     expr.PayloadBase
	offset   uint32
	length   uint32
	meta     expr.MetaKey
	ct       expr.CtKey
	fibFlag  string // saddr / daddr
	modulus  uint32
	ngOffset uint32
	// typeof identifies ip saddr / ip daddr for anonymous sets' userdata.
	ipField byte
}

func (f field) load(reg, length uint32) expr.Any {
	switch f.kind {
	case selPayload:
		if length == 0 {
			length = f.length
		}
		return &expr.Payload{DestRegister: reg, Base: f.base, Offset: f.offset, Len: length}
	case selMeta:
		return &expr.Meta{Key: f.meta, Register: reg}
	case selCt:
		return &expr.Ct{Key: f.ct, Register: reg}
	case selFib:
		return &expr.Fib{Register: reg, ResultADDRTYPE: true, FlagSADDR: f.fibFlag == "saddr", FlagDADDR: f.fibFlag == "daddr"}
	default:
		return &expr.Numgen{Register: reg, Modulus: f.modulus, Type: unix.NFT_NG_RANDOM, Offset: f.ngOffset}
	}
}

// familyWord names an address type's family in errors.
func familyWord(t dtype) string {
	if t == typeIPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// compiler holds the state of compiling one rule.
type compiler struct {
	fam  Family
	rule string
	toks []string
	pos  int
	out  compiledRule
}

func isPunct(t string) bool {
	switch t {
	case "{", "}", ",", ":", ".", "!=", "==":
		return true
	}
	return false
}

// tokenize splits rule text into words, with { } , as tokens of their own.
func tokenize(s string) ([]string, error) {
	if strings.ContainsAny(s, "\"';#\\") {
		return nil, fmt.Errorf("unsupported character in rule")
	}
	var toks []string
	for _, w := range strings.Fields(s) {
		start := 0
		for i := 0; i < len(w); i++ {
			switch w[i] {
			case '{', '}', ',':
				if i > start {
					toks = append(toks, w[start:i])
				}
				toks = append(toks, w[i:i+1])
				start = i + 1
			}
		}
		if start < len(w) {
			toks = append(toks, w[start:])
		}
	}
	// "@ name" (as some writers space it) is the same as "@name".
	out := toks[:0]
	for i := 0; i < len(toks); i++ {
		if toks[i] == "@" && i+1 < len(toks) {
			out = append(out, "@"+toks[i+1])
			i++
			continue
		}
		out = append(out, toks[i])
	}
	return out, nil
}

// Compile compiles one rule's text for an ip table; the error names the
// rule.
func Compile(rule string) (*compiledRule, error) { return compileFor(IPv4Family, rule) }

// compileFor compiles one rule's text for a table of family fam.
func compileFor(fam Family, rule string) (ret *compiledRule, err error) {
	toks, err := tokenize(rule)
	if err == nil && len(toks) == 0 {
		err = fmt.Errorf("empty rule")
	}
	if err != nil {
		return nil, fmt.Errorf("compiling rule %q: %w", rule, err)
	}
	c := &compiler{fam: fam, rule: rule, toks: toks}
	for c.pos < len(c.toks) {
		if err := c.statement(); err != nil {
			return nil, fmt.Errorf("compiling rule %q: %w", rule, err)
		}
	}
	return &c.out, nil
}

func (c *compiler) peek(n int) string {
	if c.pos+n < len(c.toks) {
		return c.toks[c.pos+n]
	}
	return ""
}

// prev is the token next returned last ("" past the end).
func (c *compiler) prev() string {
	if c.pos-1 < len(c.toks) && c.pos > 0 {
		return c.toks[c.pos-1]
	}
	return ""
}

func (c *compiler) next() string {
	t := c.peek(0)
	c.pos++
	return t
}

func (c *compiler) expect(words ...string) error {
	for _, w := range words {
		if got := c.next(); got != w {
			if got == "" {
				got = "end of rule"
			}
			return fmt.Errorf("expected %q, got %q", w, got)
		}
	}
	return nil
}

func (c *compiler) emit(e ...expr.Any) { c.out.exprs = append(c.out.exprs, e...) }

func (c *compiler) statement() error {
	switch t := c.peek(0); t {
	case "jump", "goto", "drop", "accept", "return", "continue":
		v, n, err := parseVerdict(c.toks[c.pos:])
		if err != nil {
			return err
		}
		c.pos += n
		c.emit(v.expr())
		return nil
	case "reject":
		c.pos++
		if c.peek(0) == "with" {
			return fmt.Errorf("unsupported: reject with")
		}
		// nft's default: port unreachable of the table's ICMP.
		code := uint8(3) // ICMP_PORT_UNREACH
		if c.fam == IPv6Family {
			code = 4 // ICMPV6_PORT_UNREACH
		}
		c.emit(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
		return nil
	case "masquerade":
		c.pos++
		m := &expr.Masq{}
		for {
			switch c.peek(0) {
			case "fully-random":
				m.FullyRandom = true
			case "random":
				m.Random = true
			case "persistent":
				m.Persistent = true
			case ",":
				if c.peek(1) != "random" && c.peek(1) != "fully-random" && c.peek(1) != "persistent" {
					return fmt.Errorf("unexpected \",\" after masquerade")
				}
			default:
				c.emit(m)
				return nil
			}
			c.pos++
		}
	case "dnat":
		return c.dnat()
	case "update", "add":
		return c.dynset()
	}
	return c.match()
}

// selector parses a concatenation of fields.
func (c *compiler) selector() ([]field, error) {
	var fields []field
	for {
		f, err := c.field()
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
		if c.peek(0) != "." {
			return fields, nil
		}
		c.pos++
	}
}

func (c *compiler) field() (field, error) {
	t := c.next()
	switch t {
	case "ip", "ip6":
		if Family(t) != c.fam {
			return field{}, fmt.Errorf("%s match in a table of family %s", t, c.fam)
		}
		// ipField is the header field's index in nft's protocol
		// templates (proto_ip, proto_ip6), as typeof records it.
		switch c.next() {
		case "saddr":
			if t == "ip6" {
				return field{kind: selPayload, typ: typeIPv6, base: expr.PayloadBaseNetworkHeader, offset: 8, length: 16, ipField: 8}, nil
			}
			return field{kind: selPayload, typ: typeIPv4, base: expr.PayloadBaseNetworkHeader, offset: 12, length: 4, ipField: 11}, nil
		case "daddr":
			if t == "ip6" {
				return field{kind: selPayload, typ: typeIPv6, base: expr.PayloadBaseNetworkHeader, offset: 24, length: 16, ipField: 9}, nil
			}
			return field{kind: selPayload, typ: typeIPv4, base: expr.PayloadBaseNetworkHeader, offset: 16, length: 4, ipField: 12}, nil
		}
		return field{}, fmt.Errorf("unsupported %s match %q", t, c.prev())
	case "th":
		switch c.next() {
		case "sport":
			return field{kind: selPayload, typ: typeService, base: expr.PayloadBaseTransportHeader, offset: 0, length: 2}, nil
		case "dport":
			return field{kind: selPayload, typ: typeService, base: expr.PayloadBaseTransportHeader, offset: 2, length: 2}, nil
		}
		return field{}, fmt.Errorf("unsupported th match %q", c.prev())
	case "meta":
		switch c.next() {
		case "l4proto":
			return field{kind: selMeta, typ: typeProto, meta: expr.MetaKeyL4PROTO}, nil
		case "mark":
			return field{kind: selMeta, typ: typeMark, meta: expr.MetaKeyMARK}, nil
		}
		return field{}, fmt.Errorf("unsupported meta key %q", c.prev())
	case "mark":
		return field{kind: selMeta, typ: typeMark, meta: expr.MetaKeyMARK}, nil
	case "ct":
		switch c.next() {
		case "state":
			return field{kind: selCt, typ: typeCtState, ct: expr.CtKeySTATE}, nil
		case "status":
			return field{kind: selCt, typ: typeCtStatus, ct: expr.CtKeySTATUS}, nil
		}
		return field{}, fmt.Errorf("unsupported ct key %q", c.prev())
	case "fib":
		f := field{kind: selFib, typ: typeFibAddr, fibFlag: c.next()}
		if f.fibFlag != "saddr" && f.fibFlag != "daddr" {
			return field{}, fmt.Errorf("unsupported fib input %q", f.fibFlag)
		}
		if err := c.expect("type"); err != nil {
			return field{}, err
		}
		return f, nil
	case "numgen":
		if err := c.expect("random", "mod"); err != nil {
			return field{}, err
		}
		n, err := strconv.ParseUint(c.next(), 10, 32)
		if err != nil || n == 0 {
			return field{}, fmt.Errorf("invalid numgen modulus %q", c.prev())
		}
		f := field{kind: selNumgen, typ: typeInteger, modulus: uint32(n)}
		if c.peek(0) == "offset" {
			c.pos++
			off, err := strconv.ParseUint(c.next(), 10, 32)
			if err != nil || off+n > 1<<32 {
				return field{}, fmt.Errorf("invalid numgen offset %q", c.prev())
			}
			f.ngOffset = uint32(off)
		}
		return f, nil
	case "":
		return field{}, fmt.Errorf("unexpected end of rule")
	}
	return field{}, fmt.Errorf("unsupported statement or match %q", t)
}

// loadFields loads a selector into registers as nft allocates them: each
// field in the 32-bit words after the previous one, named as nft names a
// register (netlink_put_register): a word that starts a 128-bit register
// by that register's number (NFT_REG_1 + word/4), any other as
// NFT_REG32_00 + word. (An IPv6 address fills a 128-bit register, so the
// field after it starts one.)
func (c *compiler) loadFields(fields []field) {
	words := uint32(0)
	for _, f := range fields {
		c.emit(f.load(wordRegister(words), 0))
		words += uint32(padded(f.typ.size()) / 4)
	}
}

func wordRegister(word uint32) uint32 {
	if word%4 == 0 {
		return unix.NFT_REG_1 + word/4
	}
	return unix.NFT_REG32_00 + word
}

func concatType(types []dtype) (typ uint32, length uint32) {
	for _, t := range types {
		typ = typ<<6 | uint32(t)
		if len(types) > 1 {
			length += uint32(padded(t.size()))
		} else {
			length += uint32(t.size())
		}
	}
	return typ, length
}

func fieldTypes(fields []field) []dtype {
	ts := make([]dtype, len(fields))
	for i, f := range fields {
		ts[i] = f.typ
	}
	return ts
}

// match parses "<selector> [op] <rhs>", "<selector> vmap ...",
// "<mark> and|or|xor V [op] V" and "mark set ...".
func (c *compiler) match() error {
	fields, err := c.selector()
	if err != nil {
		return err
	}
	f := fields[0]
	switch op := c.peek(0); {
	case op == "vmap":
		c.pos++
		return c.vmap(fields)
	case op == "set":
		c.pos++
		if len(fields) != 1 || f.typ != typeMark {
			return fmt.Errorf("only the mark can be set")
		}
		return c.markSet()
	case op == "and" || op == "or" || op == "xor":
		c.pos++
		if len(fields) != 1 || f.typ != typeMark {
			return fmt.Errorf("%s on %s is not supported", op, f.typ)
		}
		mask, xor, err := bitwiseOf(op, c.next())
		if err != nil {
			return err
		}
		c.emit(f.load(unix.NFT_REG_1, 0), &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: xor})
		cmpOp := expr.CmpOpEq
		if c.peek(0) == "!=" {
			cmpOp = expr.CmpOpNeq
			c.pos++
		} else if c.peek(0) == "==" {
			c.pos++
		}
		v, err := encodeValue(typeMark, c.next())
		if err != nil {
			return err
		}
		c.emit(&expr.Cmp{Op: cmpOp, Register: 1, Data: v})
		return nil
	}
	invert, explicit := false, false
	switch c.peek(0) {
	case "!=":
		invert, explicit = true, true
		c.pos++
	case "==":
		explicit = true
		c.pos++
	}
	rhs := c.peek(0)
	switch {
	case strings.HasPrefix(rhs, "@"):
		c.pos++
		c.loadFields(fields)
		c.emit(&expr.Lookup{SourceRegister: 1, SetName: rhs[1:], Invert: invert})
		return nil
	case rhs == "{":
		c.pos++
		items, err := c.braceList()
		if err != nil {
			return err
		}
		if len(items) == 1 && len(items[0]) == 1 {
			return c.relational(fields, invert, explicit, items[0][0])
		}
		return c.anonLookup(fields, invert, items)
	case rhs == "" || isPunct(rhs):
		return fmt.Errorf("missing value after %s", f.typ)
	}
	c.pos++
	if f.typ == typeCtState || f.typ == typeCtStatus {
		// flag lists: "ct state new,established"
		for c.peek(0) == "," && c.peek(1) != "" && !isPunct(c.peek(1)) {
			rhs += "," + c.peek(1)
			c.pos += 2
		}
	}
	return c.relational(fields, invert, explicit, rhs)
}

func bitwiseOf(op, value string) (mask, xor []byte, err error) {
	v64, err := strconv.ParseUint(value, 0, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid mark value %q", value)
	}
	v := uint32(v64)
	ne := binary.NativeEndian
	switch op {
	case "and":
		return ne.AppendUint32(nil, v), ne.AppendUint32(nil, 0), nil
	case "or":
		return ne.AppendUint32(nil, ^v), ne.AppendUint32(nil, v), nil
	default:
		return ne.AppendUint32(nil, 0xffffffff), ne.AppendUint32(nil, v), nil
	}
}

// markSet: "mark set V" or "mark set mark or|xor|and V".
func (c *compiler) markSet() error {
	switch c.peek(0) {
	case "mark", "meta":
		if c.next() == "meta" {
			if err := c.expect("mark"); err != nil {
				return err
			}
		}
		op := c.next()
		if op != "and" && op != "or" && op != "xor" {
			return fmt.Errorf("unsupported mark expression %q", op)
		}
		mask, xor, err := bitwiseOf(op, c.next())
		if err != nil {
			return err
		}
		c.emit(&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: xor})
	default:
		v, err := encodeValue(typeMark, c.next())
		if err != nil {
			return err
		}
		c.emit(&expr.Immediate{Register: 1, Data: v})
	}
	c.emit(&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
	return nil
}

// relational compares a single field with a literal.
func (c *compiler) relational(fields []field, invert, explicit bool, value string) error {
	if len(fields) != 1 {
		return fmt.Errorf("comparing a concatenation with a value is not supported")
	}
	f := fields[0]
	op := expr.CmpOpEq
	if invert {
		op = expr.CmpOpNeq
	}
	if f.typ.isAddr() && strings.Contains(value, "/") {
		p, err := netip.ParsePrefix(value)
		if err != nil || !ofType(f.typ, p.Addr()) {
			return fmt.Errorf("invalid %s prefix %q", familyWord(f.typ), value)
		}
		p = p.Masked()
		a := p.Addr().AsSlice()
		bits, size := p.Bits(), len(a)
		switch {
		case bits == size*8:
		case bits%8 == 0 && f.kind == selPayload && bits > 0:
			n := uint32(bits / 8)
			c.emit(f.load(1, n), &expr.Cmp{Op: op, Register: 1, Data: a[:n]})
			return nil
		default:
			m := make([]byte, size)
			for i := 0; i < bits; i++ {
				m[i/8] |= 0x80 >> (i % 8)
			}
			c.emit(f.load(1, 0), &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(size), Mask: m, Xor: make([]byte, size)},
				&expr.Cmp{Op: op, Register: 1, Data: a})
			return nil
		}
		value = p.Addr().String()
	}
	v, err := encodeValue(f.typ, value)
	if err != nil {
		return err
	}
	if (f.typ == typeCtState || f.typ == typeCtStatus) && !explicit {
		// A bare flag match: nft tests (value & flags) != 0.
		c.emit(f.load(1, 0), &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: v, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
		return nil
	}
	c.emit(f.load(1, 0), &expr.Cmp{Op: op, Register: 1, Data: v})
	return nil
}

// braceList parses "{ a . b : v , ... }" after the "{" into items, each a
// token list (without the commas).
func (c *compiler) braceList() ([][]string, error) {
	var items [][]string
	var cur []string
	for {
		t := c.next()
		switch t {
		case "":
			return nil, fmt.Errorf("missing }")
		case "}":
			if len(cur) > 0 {
				items = append(items, cur)
			}
			if len(items) == 0 {
				return nil, fmt.Errorf("empty { }")
			}
			return items, nil
		case ",":
			if len(cur) == 0 {
				return nil, fmt.Errorf("empty element in { }")
			}
			items = append(items, cur)
			cur = nil
		case "{":
			return nil, fmt.Errorf("nested { }")
		default:
			cur = append(cur, t)
		}
	}
}

// splitConcat splits "a . b . c" tokens into fields.
func splitConcat(toks []string) ([]string, error) {
	var out []string
	for i, t := range toks {
		if i%2 == 1 {
			if t != "." {
				return nil, fmt.Errorf("expected \".\" between fields, got %q", t)
			}
			continue
		}
		if isPunct(t) {
			return nil, fmt.Errorf("unexpected %q", t)
		}
		out = append(out, t)
	}
	if len(toks)%2 == 0 {
		return nil, fmt.Errorf("incomplete concatenation %q", strings.Join(toks, " "))
	}
	return out, nil
}

// userdata TLVs of sets (libnftnl udata.h).
func udataU32(b []byte, typ byte, v uint32) []byte {
	return binary.NativeEndian.AppendUint32(append(b, typ, 4), v)
}

const (
	byteorderInvalid = 0
	byteorderHost    = 1
	byteorderBig     = 2
)

func byteorderOf(types []dtype) uint32 {
	if len(types) > 1 {
		return byteorderInvalid
	}
	if types[0].bigEndian() {
		return byteorderBig
	}
	if types[0] == typeProto {
		return byteorderInvalid
	}
	return byteorderHost
}

// ipTypeofUdata is nft's "typeof" record of an ip saddr/daddr (or ip6
// saddr/daddr) key: a payload expression, the header's protocol
// description id (proto_ip 12, proto_ip6 13) and the field's index.
func ipTypeofUdata(t dtype, field byte) []byte {
	desc := byte(12)
	if t == typeIPv6 {
		desc = 13
	}
	return []byte{3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, desc, 0, 0, 0, 1, 4, field, 0, 0, 0}
}

// ipRange is an inclusive range of addresses of one family.
type ipRange struct{ lo, hi netip.Addr }

// intervalElems are an interval set's elements for ranges of addresses (of
// one family), as nft writes them: merged ranges, a leading interval end at the
// zero address unless a range starts there, and after each range an end
// element at the address after it (none after the family's last address).
func intervalElems(ranges []ipRange) []rawElem {
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].lo.Less(ranges[j].lo) })
	merged := ranges[:1]
	for _, r := range ranges[1:] {
		last := &merged[len(merged)-1]
		if next := last.hi.Next(); !next.IsValid() || !next.Less(r.lo) {
			if last.hi.Less(r.hi) {
				last.hi = r.hi
			}
			continue
		}
		merged = append(merged, r)
	}
	var out []rawElem
	zero := netip.IPv6Unspecified()
	if merged[0].lo.Is4() {
		zero = netip.IPv4Unspecified()
	}
	if merged[0].lo != zero {
		out = append(out, rawElem{key: zero.AsSlice(), flags: unix.NFT_SET_ELEM_INTERVAL_END})
	}
	for _, r := range merged {
		out = append(out, rawElem{key: r.lo.AsSlice()})
		if next := r.hi.Next(); next.IsValid() {
			out = append(out, rawElem{key: next.AsSlice(), flags: unix.NFT_SET_ELEM_INTERVAL_END})
		}
	}
	return out
}

// anonLookup matches fields against an anonymous set; ipv4 prefixes make it
// an interval set, built as nft does (merged ranges, a leading interval end
// at 0, an end element after each range).
func (c *compiler) anonLookup(fields []field, invert bool, items [][]string) error {
	types := fieldTypes(fields)
	keyType, keyLen := concatType(types)
	s := &anonSet{name: "__set%d", flags: unix.NFT_SET_ANONYMOUS | unix.NFT_SET_CONSTANT, keyType: keyType, keyLen: keyLen}
	interval := false
	for _, it := range items {
		for _, t := range it {
			if strings.Contains(t, "/") || (types[0].isAddr() && strings.Contains(t, "-")) {
				interval = true
			}
		}
	}
	if interval {
		if len(fields) != 1 || !types[0].isAddr() {
			return fmt.Errorf("intervals are supported only in sets of ipv4_addr or ipv6_addr")
		}
		var ranges []ipRange
		for _, it := range items {
			if len(it) != 1 {
				return fmt.Errorf("invalid set element %q", strings.Join(it, " "))
			}
			r, err := parseIPRange(types[0], it[0])
			if err != nil {
				return err
			}
			ranges = append(ranges, r)
		}
		s.elems = intervalElems(ranges)
		s.flags |= unix.NFT_SET_INTERVAL
		s.udata = udataU32(udataU32(nil, 0, byteorderBig), 2, 1)
	} else {
		for _, it := range items {
			parts, err := splitConcat(it)
			if err != nil {
				return err
			}
			k, err := encodeKey(types, parts)
			if err != nil {
				return err
			}
			s.elems = append(s.elems, rawElem{key: k})
		}
		s.udata = udataU32(nil, 0, byteorderOf(types))
	}
	if len(fields) == 1 && fields[0].ipField != 0 {
		s.udata = append(s.udata, ipTypeofUdata(fields[0].typ, fields[0].ipField)...)
	}
	c.loadFields(fields)
	l := &expr.Lookup{SourceRegister: 1, SetName: s.name, Invert: invert}
	s.lookups = append(s.lookups, l)
	c.out.anon = append(c.out.anon, s)
	c.emit(l)
	return nil
}

// parseIPRange parses an address, prefix or "A-B" range of type t.
func parseIPRange(t dtype, s string) (ipRange, error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(lo)
		b, err2 := netip.ParseAddr(hi)
		if err1 != nil || err2 != nil || !ofType(t, a) || !ofType(t, b) || b.Less(a) {
			return ipRange{}, fmt.Errorf("invalid address range %q", s)
		}
		return ipRange{a, b}, nil
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || !ofType(t, a) {
			return ipRange{}, fmt.Errorf("invalid %s address %q", familyWord(t), s)
		}
		return ipRange{a, a}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !ofType(t, p.Addr()) {
		return ipRange{}, fmt.Errorf("invalid %s prefix %q", familyWord(t), s)
	}
	p = p.Masked()
	return ipRange{p.Addr(), lastAddr(p)}, nil
}

// lastAddr is a prefix's last address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// vmap: "<selector> vmap @map" or "<selector> vmap { k : verdict, ... }".
func (c *compiler) vmap(fields []field) error {
	rhs := c.next()
	if strings.HasPrefix(rhs, "@") {
		c.loadFields(fields)
		c.emit(&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: rhs[1:]})
		return nil
	}
	if rhs != "{" {
		return fmt.Errorf("vmap needs @map or { ... }, got %q", rhs)
	}
	items, err := c.braceList()
	if err != nil {
		return err
	}
	types := fieldTypes(fields)
	keyType, keyLen := concatType(types)
	s := &anonSet{name: "__map%d", flags: unix.NFT_SET_ANONYMOUS | unix.NFT_SET_CONSTANT | unix.NFT_SET_MAP,
		keyType: keyType, keyLen: keyLen, dataType: unix.NFT_DATA_VERDICT}
	for _, it := range items {
		colon := indexOf(it, ":")
		if colon < 0 {
			return fmt.Errorf("vmap element %q has no \":\"", strings.Join(it, " "))
		}
		parts, err := splitConcat(it[:colon])
		if err != nil {
			return err
		}
		k, err := encodeKey(types, parts)
		if err != nil {
			return err
		}
		v, n, err := parseVerdict(it[colon+1:])
		if err != nil {
			return err
		}
		if colon+1+n != len(it) {
			return fmt.Errorf("unexpected %q in vmap element", strings.Join(it[colon+1+n:], " "))
		}
		s.elems = append(s.elems, rawElem{key: k, verdict: &v})
	}
	bo := byteorderOf(types)
	if fields[0].kind == selNumgen {
		bo = byteorderHost
	}
	s.udata = udataU32(udataU32(nil, 0, bo), 1, byteorderInvalid)
	s.udata = append(s.udata, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0) // data typeof: verdict
	s.udata = udataU32(s.udata, 6, 0)
	c.loadFields(fields)
	l := &expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: s.name}
	s.lookups = append(s.lookups, l)
	c.out.anon = append(c.out.anon, s)
	c.emit(l)
	return nil
}

func indexOf(toks []string, t string) int {
	for i, x := range toks {
		if x == t {
			return i
		}
	}
	return -1
}

// dnat: "dnat to A[:P]", "dnat ip addr . port to <numgen> map { ... }" or
// "dnat ip to <numgen> map @map" (what nft prints for both forms of a map
// whose data is ipv4_addr . inet_service; the named map's type says so);
// in an ip6 table "dnat to [A]:P" and "dnat ip6 ...".
func (c *compiler) dnat() error {
	c.pos++
	addrType := c.fam.addrType()
	natFamily := uint32(c.fam.nfproto())
	if c.peek(0) == "to" {
		c.pos++
		target := c.next()
		addr, port, hasPort := target, "", false
		if addrType == typeIPv6 {
			// [A]:P or a bare A.
			if strings.HasPrefix(target, "[") {
				end := strings.Index(target, "]")
				if end < 0 {
					return fmt.Errorf("dnat to %q: missing ]", target)
				}
				addr, port = target[1:end], strings.TrimPrefix(target[end+1:], ":")
				hasPort = len(target) > end+1
				if hasPort && !strings.HasPrefix(target[end+1:], ":") {
					return fmt.Errorf("dnat to %q: expected \":\" after ]", target)
				}
			}
		} else if i := strings.LastIndex(target, ":"); i >= 0 {
			addr, port, hasPort = target[:i], target[i+1:], true
		}
		a, err := encodeValue(addrType, addr)
		if err != nil {
			return fmt.Errorf("dnat to %q: %w", target, err)
		}
		c.emit(&expr.Immediate{Register: 1, Data: a})
		nat := &expr.NAT{Type: expr.NATTypeDestNAT, Family: natFamily, RegAddrMin: 1}
		if hasPort {
			p, err := encodeValue(typeService, port)
			if err != nil {
				return fmt.Errorf("dnat to %q: %w", target, err)
			}
			c.emit(&expr.Immediate{Register: 2, Data: p})
			nat.RegProtoMin, nat.Specified = 2, true
		}
		c.emit(nat)
		return nil
	}
	if err := c.expect(string(c.fam)); err != nil {
		return fmt.Errorf("dnat: %w", err)
	}
	// The port follows the address in the registers.
	portReg := wordRegister(uint32(addrType.size() / 4))
	if c.peek(0) == "addr" {
		if err := c.expect("addr", ".", "port"); err != nil {
			return fmt.Errorf("dnat: %w", err)
		}
	}
	if err := c.expect("to"); err != nil {
		return fmt.Errorf("dnat: %w", err)
	}
	fields, err := c.selector()
	if err != nil {
		return err
	}
	if len(fields) != 1 {
		return fmt.Errorf("dnat map key must be a single field")
	}
	if err := c.expect("map"); err != nil {
		return fmt.Errorf("dnat: %w", err)
	}
	if name := c.peek(0); strings.HasPrefix(name, "@") && len(name) > 1 {
		c.pos++
		c.loadFields(fields)
		c.emit(&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: name[1:]},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: natFamily, RegAddrMin: 1, RegProtoMin: portReg})
		return nil
	}
	if err := c.expect("{"); err != nil {
		return fmt.Errorf("dnat: %w", err)
	}
	items, err := c.braceList()
	if err != nil {
		return err
	}
	types := fieldTypes(fields)
	keyType, keyLen := concatType(types)
	dataTypes := []dtype{addrType, typeService}
	dataType, dataLen := concatType(dataTypes)
	s := &anonSet{name: "__map%d", flags: unix.NFT_SET_ANONYMOUS | unix.NFT_SET_CONSTANT | unix.NFT_SET_MAP,
		keyType: keyType, keyLen: keyLen, dataType: dataType, dataLen: dataLen}
	for _, it := range items {
		colon := indexOf(it, ":")
		if colon < 0 {
			return fmt.Errorf("map element %q has no \":\"", strings.Join(it, " "))
		}
		kparts, err := splitConcat(it[:colon])
		if err != nil {
			return err
		}
		k, err := encodeKey(types, kparts)
		if err != nil {
			return err
		}
		vparts, err := splitConcat(it[colon+1:])
		if err != nil {
			return err
		}
		d, err := encodeKey(dataTypes, vparts)
		if err != nil {
			return err
		}
		s.elems = append(s.elems, rawElem{key: k, data: d})
	}
	bo := byteorderOf(types)
	if fields[0].kind == selNumgen {
		bo = byteorderHost
	}
	s.udata = udataU32(udataU32(udataU32(nil, 0, bo), 1, byteorderInvalid), 6, 0)
	c.loadFields(fields)
	l := &expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: s.name}
	s.lookups = append(s.lookups, l)
	c.out.anon = append(c.out.anon, s)
	c.emit(l, &expr.NAT{Type: expr.NATTypeDestNAT, Family: natFamily, RegAddrMin: 1, RegProtoMin: portReg})
	return nil
}

// dynset: "update @set { selector }" / "add @set { selector }".
func (c *compiler) dynset() error {
	op := uint32(unix.NFT_DYNSET_OP_UPDATE)
	if c.next() == "add" {
		op = unix.NFT_DYNSET_OP_ADD
	}
	set := c.next()
	if !strings.HasPrefix(set, "@") || len(set) < 2 {
		return fmt.Errorf("expected @set, got %q", set)
	}
	if err := c.expect("{"); err != nil {
		return err
	}
	fields, err := c.selector()
	if err != nil {
		return err
	}
	if err := c.expect("}"); err != nil {
		return err
	}
	c.loadFields(fields)
	c.emit(&expr.Dynset{SrcRegKey: 1, SetName: set[1:], Operation: op})
	return nil
}
