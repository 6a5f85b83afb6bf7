package nft

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// exprNames summarises a compiled rule as its expression kinds, enough to
// pin the shape; the oracle test checks the bytes against nft itself.
func exprNames(c *compiledRule) string {
	var out []string
	for _, e := range c.exprs {
		name := strings.TrimPrefix(strings.ToLower(strings.TrimPrefix(typeName(e), "*expr.")), "")
		out = append(out, name)
	}
	return strings.Join(out, " ")
}

func typeName(e expr.Any) string {
	switch e.(type) {
	case *expr.Payload:
		return "payload"
	case *expr.Meta:
		return "meta"
	case *expr.Cmp:
		return "cmp"
	case *expr.Bitwise:
		return "bitwise"
	case *expr.Lookup:
		return "lookup"
	case *expr.Verdict:
		return "verdict"
	case *expr.Immediate:
		return "immediate"
	case *expr.NAT:
		return "nat"
	case *expr.Masq:
		return "masq"
	case *expr.Reject:
		return "reject"
	case *expr.Fib:
		return "fib"
	case *expr.Numgen:
		return "numgen"
	case *expr.Ct:
		return "ct"
	case *expr.Dynset:
		return "dynset"
	}
	return "?"
}

func TestCompileShapes(t *testing.T) {
	tests := []struct {
		rule  string
		exprs string
		anon  int
	}{
		{"ct state new jump service-endpoints-check", "ct bitwise cmp verdict", 0},
		{"jump services", "verdict", 0},
		{"mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random", "meta bitwise cmp meta bitwise meta masq", 0},
		{"ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random", "ct bitwise cmp payload payload meta payload lookup masq", 0},
		{"ip daddr @cluster-ips reject", "payload lookup reject", 0},
		{"ip daddr { 10.96.0.0/12 } drop", "payload bitwise cmp verdict", 0},
		{"ip daddr . meta l4proto . th dport vmap @no-endpoint-services", "payload meta payload lookup", 0},
		{"ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports", "payload lookup meta payload lookup", 0},
		{"fib daddr type local ip daddr != 127.0.0.1 meta l4proto . th dport vmap @service-nodeports", "fib cmp payload cmp meta payload lookup", 0},
		{"ip daddr @cluster-ips ip saddr != 10.244.0.0/16 mark set mark or 0x4000", "payload lookup payload cmp meta bitwise meta", 0},
		{"ip saddr 10.244.0.0/16 goto service-X", "payload cmp verdict", 0},
		{"fib saddr type local mark set mark or 0x4000", "fib cmp meta bitwise meta", 0},
		{"ip saddr != { 192.168.0.0/16 , 10.0.0.0/8 } drop", "payload lookup verdict", 1},
		{"ip saddr @affinity-X goto endpoint-X", "payload lookup verdict", 0},
		{"numgen random mod 2 vmap { 0 : goto a , 1 : goto b }", "numgen lookup", 1},
		{"meta l4proto tcp dnat to 10.180.0.1:80", "meta cmp immediate immediate nat", 0},
		{"numgen random mod 3 0 meta l4proto tcp dnat to 10.180.0.1:80", "numgen cmp meta cmp immediate immediate nat", 0},
		{"numgen random mod 2 0 goto endpoint-X", "numgen cmp verdict", 0},
		{"meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 80 }", "meta cmp numgen lookup nat", 1},
		{"update @affinity-X { ip saddr }", "payload dynset", 0},
		{"reject", "reject", 0},
		{"drop", "verdict", 0},
	}
	for _, tc := range tests {
		c, err := Compile(tc.rule)
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.rule, err)
			continue
		}
		if got := exprNames(c); got != tc.exprs {
			t.Errorf("Compile(%q) = %s, want %s", tc.rule, got, tc.exprs)
		}
		if len(c.anon) != tc.anon {
			t.Errorf("Compile(%q): %d anonymous sets, want %d", tc.rule, len(c.anon), tc.anon)
		}
	}
}

func TestCompileIntervalSet(t *testing.T) {
	c, err := Compile("ip saddr != { 10.0.0.0/8, 11.0.0.0/8, 203.0.113.7/32 } drop")
	if err != nil {
		t.Fatal(err)
	}
	s := c.anon[0]
	// 10.0.0.0/8 and 11.0.0.0/8 merge; nft's encoding starts with an
	// interval end at 0.0.0.0.
	want := []string{"0.0.0.0 end", "10.0.0.0", "12.0.0.0 end", "203.0.113.7", "203.0.113.8 end"}
	var got []string
	for _, e := range s.elems {
		x := decodeKey([]dtype{typeIPv4}, e.key)[0]
		if e.flags != 0 {
			x += " end"
		}
		got = append(got, x)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("interval elements %v, want %v", got, want)
	}
}

func TestCompileRejectsUnknownText(t *testing.T) {
	for _, rule := range []string{
		"counter",
		"ip6 daddr ::1 drop",
		"tcp dport 80 accept",
		"log prefix \"x\"",
		"meta l4proto tcp dnat to 10.0.0.1:99999",
		"ip daddr 10.0.0.300 drop",
		"numgen random mod 2 vmap { 0 : goto a , 1 }",
		"ip saddr { 10.0.0.0/8",
		"jump",
		"ct state bogus accept",
		"mark set mark nand 4",
		"",
	} {
		_, err := Compile(rule)
		if err == nil {
			t.Errorf("Compile(%q) succeeded, want an error", rule)
			continue
		}
		if !strings.Contains(err.Error(), "compiling rule") || rule != "" && !strings.Contains(err.Error(), rule[:min(len(rule), 10)]) {
			t.Errorf("Compile(%q) error %q does not name the rule", rule, err)
		}
	}
}

func TestParseSetType(t *testing.T) {
	st, err := parseSetType("ipv4_addr . inet_proto . inet_service : verdict")
	if err != nil || !st.isMap || len(st.key) != 3 || st.data != nil {
		t.Fatalf("parseSetType: %+v, %v", st, err)
	}
	k, err := encodeKey(st.key, []string{"10.96.0.1", "tcp", "80"})
	if err != nil || len(k) != 12 || k[4] != 6 || k[8] != 0 || k[9] != 80 {
		t.Errorf("encodeKey = %v, %v", k, err)
	}
	if got := decodeKey(st.key, k); strings.Join(got, " . ") != "10.96.0.1 . tcp . 80" {
		t.Errorf("decodeKey = %v", got)
	}
	if _, err := parseSetType("ether_addr"); err == nil {
		t.Errorf("parseSetType(ether_addr) succeeded")
	}
}

// FuzzCompile: the compiler never panics, and what it accepts marshals.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"ct state new jump a", "ip daddr { 10.96.0.0/12 } drop",
		"meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 80 }",
		"numgen random mod 2 vmap { 0 : goto a , 1 : goto b }", "update @s { ip saddr }",
		"numgen random mod 3 0 meta l4proto udp dnat to 10.180.0.1:53", "numgen random mod 2 0 goto a",
		"mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random",
		"ip saddr != { 1.2.3.4-1.2.3.9, 0.0.0.0/0 } drop", "ct state new,established,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		c, err := Compile(rule)
		if err != nil {
			return
		}
		if _, err := marshalExprs(IPv4Family, c.exprs); err != nil {
			t.Errorf("compiled %q but cannot marshal: %v", rule, err)
		}
	})
}

func TestElide(t *testing.T) {
	m := &chainMemory{valid: true, rules: map[string][]ruleKey{
		"svc-a": {{"meta l4proto tcp dnat to 10.0.0.1:80", ""}},
		"svc-b": {{"ip saddr @aff-b goto ep-b", ""}},
		"svc-c": {{"meta l4proto tcp dnat to 10.0.0.3:80", ""}},
	}}
	tx := &Transaction{}
	for _, c := range []string{"svc-a", "svc-b", "svc-c"} {
		tx.Add(&Chain{Name: c})
		tx.Flush(&Chain{Name: c})
	}
	tx.Add(&Rule{Chain: "svc-a", Rule: "meta l4proto tcp dnat to 10.0.0.1:80"}) // unchanged
	tx.Add(&Rule{Chain: "svc-b", Rule: "ip saddr @aff-b goto ep-b"})            // unchanged, but its set is deleted below
	tx.Add(&Rule{Chain: "svc-c", Rule: "meta l4proto tcp dnat to 10.0.0.9:80"}) // changed
	tx.Delete(&Set{Name: "aff-b"})
	var kept []string
	for _, i := range m.elide(tx) {
		line, _ := renderOp(IPv4Family, "kube-proxy", &tx.Ops[i])
		kept = append(kept, line)
	}
	want := []string{
		"add chain ip kube-proxy svc-b", "flush chain ip kube-proxy svc-b",
		"add chain ip kube-proxy svc-c", "flush chain ip kube-proxy svc-c",
		"add rule ip kube-proxy svc-b ip saddr @aff-b goto ep-b",
		"add rule ip kube-proxy svc-c meta l4proto tcp dnat to 10.0.0.9:80",
		"delete set ip kube-proxy aff-b",
	}
	if strings.Join(kept, "\n") != strings.Join(want, "\n") {
		t.Errorf("elide kept:\n%s\nwant:\n%s", strings.Join(kept, "\n"), strings.Join(want, "\n"))
	}
}

// TestCompileIPv6 pins what differs in an ip6 table: ip6 addresses are 16
// bytes at offsets 8 and 24, a field after one starts a 128-bit register,
// NAT and reject are IPv6's, and ip matches are refused.
func TestCompileIPv6(t *testing.T) {
	c, err := compileFor(IPv6Family, "ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random")
	if err != nil {
		t.Fatal(err)
	}
	var regs []string
	for _, e := range c.exprs {
		switch x := e.(type) {
		case *expr.Payload:
			regs = append(regs, fmt.Sprintf("payload %d+%d>%d", x.Offset, x.Len, x.DestRegister))
		case *expr.Meta:
			regs = append(regs, fmt.Sprintf("meta>%d", x.Register))
		}
	}
	// nft: ip6 saddr => reg 1, ip6 daddr => reg 2, l4proto => reg 3,
	// th dport => reg 17 (NFT_REG32_09).
	if got, want := strings.Join(regs, " "), "payload 8+16>1 payload 24+16>2 meta>3 payload 2+2>17"; got != want {
		t.Errorf("hairpin registers %q, want %q", got, want)
	}

	c, err = compileFor(IPv6Family, "meta l4proto tcp dnat ip6 to numgen random mod 2 offset 3 map @dnat-endpoints-tcp")
	if err != nil {
		t.Fatal(err)
	}
	nat := c.exprs[len(c.exprs)-1].(*expr.NAT)
	if nat.Family != unix.NFPROTO_IPV6 || nat.RegAddrMin != 1 || nat.RegProtoMin != 2 {
		t.Errorf("dnat ip6 map: %+v, want family ip6, addr reg 1, port reg 2", nat)
	}
	c, err = compileFor(IPv6Family, "meta l4proto tcp dnat to [fd00::2]:80")
	if err != nil {
		t.Fatal(err)
	}
	imm := c.exprs[2].(*expr.Immediate)
	if a, _ := netip.AddrFromSlice(imm.Data); a != netip.MustParseAddr("fd00::2") {
		t.Errorf("dnat to [fd00::2]:80 loads %x", imm.Data)
	}
	if nat := c.exprs[4].(*expr.NAT); nat.Family != unix.NFPROTO_IPV6 || !nat.Specified {
		t.Errorf("dnat to [fd00::2]:80: %+v", nat)
	}
	c, err = compileFor(IPv6Family, "reject")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.exprs[0].(*expr.Reject); r.Code != 4 {
		t.Errorf("reject in ip6: code %d, want 4 (port unreachable)", r.Code)
	}
	c, err = compileFor(IPv6Family, "ip6 saddr fd00:10::/33 drop")
	if err != nil {
		t.Fatal(err)
	}
	if b := c.exprs[1].(*expr.Bitwise); b.Len != 16 || fmt.Sprintf("%x", b.Mask) != "ffffffff800000000000000000000000" {
		t.Errorf("ip6 /33 mask: len %d mask %x", b.Len, b.Mask)
	}

	c, err = compileFor(IPv6Family, "ip6 saddr != { fd00::/8 , 2001:db8::1 , ffff::/16 } drop")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range c.anon[0].elems {
		x := decodeKey([]dtype{typeIPv6}, e.key)[0]
		if e.flags != 0 {
			x += " end"
		}
		got = append(got, x)
	}
	// The last range reaches the family's last address: no end after it.
	want := "::,end 2001:db8::1 2001:db8::2,end fd00:: fe00::,end ffff::"
	if g := strings.ReplaceAll(strings.Join(got, " "), " end", ",end"); g != want {
		t.Errorf("ip6 interval elements %q, want %q", g, want)
	}

	for _, rule := range []string{"ip daddr @cluster-ips reject", "meta l4proto tcp dnat to 10.0.0.1:80", "ip6 daddr 10.0.0.1 drop", "dnat ip to numgen random mod 1 map @m"} {
		if _, err := compileFor(IPv6Family, rule); err == nil {
			t.Errorf("compiling %q for ip6 succeeded, want an error", rule)
		}
	}
	if _, err := Compile("ip6 daddr fd00::1 drop"); err == nil {
		t.Errorf("compiling an ip6 match for ip succeeded, want an error")
	}
}
