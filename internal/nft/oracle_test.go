package nft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minikit/minikit/internal/netns"
)

// The oracle: the same transactions applied by Exec (nft -f) in one network
// namespace and by Netlink in another must leave tables that `nft list`
// prints identically.

var nsCounter atomic.Int32

// newNS creates a throwaway network namespace removed at cleanup.
func newNS(t testing.TB, what string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (network namespaces)")
	}
	name := fmt.Sprintf("mkt-nftlib-%s-%d-%d", what, os.Getpid(), nsCounter.Add(1))
	if err := netns.CreateNamed(name); err != nil {
		t.Fatalf("creating netns: %v", err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting netns %s: %v", name, err)
		}
	})
	return name
}

func inNS(t testing.TB, ns string, fn func() error) {
	t.Helper()
	if err := netns.DoPath(netns.NetNSPath(ns), fn); err != nil {
		t.Fatalf("in netns %s: %v", ns, err)
	}
}

// nftList returns `nft list table ip kube-proxy` in ns, normalised: the
// elements of sets and anonymous sets sorted (the kernel's hash sets list
// in an order that depends on a per-set random seed).
func nftList(t testing.TB, ns string) string {
	t.Helper()
	return nftListFamily(t, ns, IPv4Family)
}

func nftListFamily(t testing.TB, ns string, fam Family) string {
	t.Helper()
	var out []byte
	inNS(t, ns, func() error {
		var err error
		out, err = exec.Command("nft", "list", "table", string(fam), "kube-proxy").CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft list: %v: %s", err, out)
		}
		return nil
	})
	return normalizeList(string(out))
}

var (
	continuation = regexp.MustCompile(`,\n\s+`)
	braces       = regexp.MustCompile(`\{ ([^{}\n]*) \}`)
)

func normalizeList(s string) string {
	s = continuation.ReplaceAllString(s, ", ")
	return braces.ReplaceAllStringFunc(s, func(m string) string {
		items := strings.Split(m[2:len(m)-2], ", ")
		sort.Strings(items)
		return "{ " + strings.Join(items, ", ") + " }"
	})
}

type pair struct {
	fam          Family
	execNS, nlNS string
	exec         *Exec
	nl           *Netlink
}

func newPair(t testing.TB) *pair {
	t.Helper()
	return newPairFamily(t, IPv4Family)
}

func newPairFamily(t testing.TB, fam Family) *pair {
	t.Helper()
	p := &pair{fam: fam, execNS: newNS(t, "exec"), nlNS: newNS(t, "nl")}
	var err error
	if p.exec, err = NewExec(fam, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	inNS(t, p.nlNS, func() error {
		p.nl, err = NewNetlink(fam, "kube-proxy")
		return err
	})
	t.Cleanup(func() { p.nl.Close() })
	return p
}

func (p *pair) run(t testing.TB, what string, tx *Transaction) {
	t.Helper()
	ctx := context.Background()
	inNS(t, p.execNS, func() error { return p.exec.Run(ctx, tx) })
	if err := p.nl.Run(ctx, tx); err != nil {
		t.Fatalf("%s: netlink: %v", what, err)
	}
	want, got := nftListFamily(t, p.execNS, p.fam), nftListFamily(t, p.nlNS, p.fam)
	if want != got {
		t.Fatalf("%s: netlink table differs from nft -f's:\n%s", what, lineDiff(want, got))
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n  nft -f:  %s\n  netlink: %s\n", i+1, a, c)
		}
	}
	return b.String()
}

func TestOracleEveryRuleShape(t *testing.T) {
	p := newPair(t)
	svcs := shapesServices()
	p.run(t, "first full sync", fullTx(svcs, true))
	p.run(t, "second full sync", fullTx(svcs, false))

	// Partial sync: one service's chain flushed and rewritten, elements
	// deleted and added, a stale chain flushed then deleted, an affinity
	// set deleted.
	tx := &Transaction{}
	s := svcs[1]
	svcChain := hashed("service-", s.portName())
	tx.Add(&Chain{Name: svcChain})
	tx.Flush(&Chain{Name: svcChain})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.1.5 . 8443 , 1 : 10.244.9.9 . 8443 }"})
	// minikit's own shape: one rule per endpoint, numgen picking among the rest.
	tx.Add(&Rule{Chain: svcChain, Rule: "numgen random mod 2 0 meta l4proto tcp dnat to 10.244.1.5:8443"})
	tx.Add(&Chain{Name: "endpoint-cascade"})
	tx.Add(&Rule{Chain: "endpoint-cascade", Rule: "meta l4proto tcp dnat to 10.244.9.9:8443"})
	tx.Add(&Rule{Chain: svcChain, Rule: "numgen random mod 3 0 goto endpoint-cascade"})
	// minikit's shape since: one shared typeof map of endpoints, each
	// service picking from its block of keys.
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		tx.Add(&Map{Name: "dnat-endpoints-" + proto, Type: TypeofNumgenEndpoints(proto), Comment: proto + " endpoints, by the numgen blocks of their services"})
	}
	tx.Add(&Element{Set: "dnat-endpoints-tcp", Key: []string{"0"}, Value: "10.244.1.5 . 8443"})
	tx.Add(&Element{Set: "dnat-endpoints-udp", Key: []string{"8"}, Value: "10.244.1.6 . 8443"})
	tx.Add(&Element{Set: "dnat-endpoints-udp", Key: []string{"9"}, Value: "10.244.9.9 . 53"})
	tx.Add(&Element{Set: "dnat-endpoints-sctp", Key: []string{"4"}, Value: "10.244.9.9 . 9999"})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto tcp dnat ip to numgen random mod 1 map @dnat-endpoints-tcp"})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto udp dnat ip to numgen random mod 2 offset 8 map @dnat-endpoints-udp"})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto sctp dnat ip to numgen random mod 1 offset 4 map @dnat-endpoints-sctp"})
	tx.Delete(&Element{Set: "hairpin-connections", Key: []string{"10.244.3.9", "10.244.3.9", "tcp", "8443"}})
	tx.Add(&Element{Set: "hairpin-connections", Key: []string{"10.244.9.9", "10.244.9.9", "tcp", "8443"}})
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.5.5"}})
	tx.Add(&Element{Set: "no-endpoint-services", Key: []string{"10.96.5.5", "udp", "5353"}, Value: "drop", Comment: "ns/new/udp/dns"})
	p.run(t, "partial sync", tx)

	tx = &Transaction{}
	tx.Delete(&Element{Set: "dnat-endpoints-udp", Key: []string{"9"}})
	tx.Add(&Element{Set: "dnat-endpoints-udp", Key: []string{"9"}, Value: "10.244.7.7 . 53"})
	p.run(t, "an endpoint replaced in dnat-endpoints-udp", tx)

	// Rules naming maps an earlier transaction made (nft -f reads their
	// typeof from the kernel and checks it against "meta l4proto").
	tx = &Transaction{}
	tx.Flush(&Chain{Name: svcChain})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto udp dnat ip to numgen random mod 2 offset 8 map @dnat-endpoints-udp"})
	tx.Add(&Rule{Chain: svcChain, Rule: "meta l4proto tcp dnat ip to numgen random mod 1 map @dnat-endpoints-tcp"})
	p.run(t, "rules naming the endpoint maps rewritten", tx)

	tx = &Transaction{}
	sticky := svcs[3]
	for _, ep := range sticky.endpoints {
		tx.Flush(&Chain{Name: hashed("endpoint-", sticky.portName()+"__"+strings.Replace(ep, ":", "/", 1))})
	}
	tx.Flush(&Chain{Name: hashed("service-", sticky.portName())})
	tx.Delete(&Element{Set: "service-ips", Key: []string{sticky.clusterIP, "tcp", "8080"}})
	p.run(t, "service removed (chains flushed)", tx)

	tx = &Transaction{}
	for _, ep := range sticky.endpoints {
		tx.Delete(&Chain{Name: hashed("endpoint-", sticky.portName()+"__"+strings.Replace(ep, ":", "/", 1))})
		tx.Delete(&Set{Name: hashed("affinity-", sticky.portName()+"__"+strings.Replace(ep, ":", "/", 1))})
	}
	tx.Delete(&Chain{Name: hashed("service-", sticky.portName())})
	tx.Flush(&Map{Name: "no-endpoint-nodeports"})
	p.run(t, "stale chains and sets deleted", tx)
}

// TestOracleExtraShapes covers statements upstream writes in other
// configurations (masqueradeAll, nodePortAddresses matching all, interval
// sets, ...).
func TestOracleExtraShapes(t *testing.T) {
	p := newPair(t)
	tx := &Transaction{}
	tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy", Comment: "rules for kube-proxy"})
	for _, c := range []*Chain{
		{Name: "filter-input", Type: "filter", Hook: "input", Priority: 0},
		{Name: "nat-output", Type: "nat", Hook: "output", Priority: -100},
		{Name: "a", Comment: "plain chain"}, {Name: "b"},
	} {
		tx.Add(c)
	}
	tx.Add(&Set{Name: "cluster-ips", Type: "ipv4_addr"})
	tx.Add(&Set{Name: "ranges", Type: "ipv4_addr", Flags: []string{"interval"}, Comment: "interval set"})
	tx.Add(&Map{Name: "service-nodeports", Type: "inet_proto . inet_service : verdict"})
	tx.Add(&Map{Name: "dnat-targets", Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"})
	rules := []string{
		"ip daddr @cluster-ips mark set mark or 0x4000",
		"fib daddr type local ip daddr != 127.0.0.1 meta l4proto . th dport vmap @service-nodeports",
		"ip daddr 127.0.0.1 meta l4proto . th dport vmap @service-nodeports",
		"ct state new,established jump b",
		"ct state == new accept",
		"mark and 0x4000 == 0 return",
		"mark set 0x10",
		"meta mark set meta mark xor 0x4000",
		"ip saddr 10.0.0.0/12 drop",
		"ip saddr != 10.244.0.0/16 ip daddr 10.96.0.1 accept",
		"ip saddr { 10.0.0.0/8, 172.16.0.0/12, 192.168.1.1 } accept",
		"ip saddr != { 10.0.0.0/8 , 11.0.0.0/8 } drop",
		"ip daddr { 10.96.0.1, 10.96.0.2 } reject",
		"th dport { 80, 443 } accept",
		"meta l4proto { tcp, udp } th dport 53 accept",
		"ip daddr @ranges masquerade",
		"masquerade random,persistent",
		"numgen random mod 1 vmap { 0 : goto b }",
		"numgen random mod 3 vmap { 0 : jump a , 1 : drop , 2 : accept }",
		"meta l4proto udp dnat to 10.244.0.2",
		"update @cluster-ips { ip daddr }",
		"ip saddr . ip daddr . meta l4proto . th dport @cluster-ips accept",
	}
	for i, r := range rules {
		if strings.Contains(r, ". ip daddr . meta") {
			// concatenated lookup needs a set of that type
			tx.Add(&Set{Name: "hp", Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service"})
			r = strings.Replace(r, "@cluster-ips", "@hp", 1)
		}
		if strings.HasPrefix(r, "update") {
			tx.Add(&Set{Name: "aff", Type: "ipv4_addr", Flags: []string{"dynamic", "timeout"}, Timeout: 3600e9})
			r = strings.Replace(r, "@cluster-ips", "@aff", 1)
		}
		chain := "a"
		if strings.HasPrefix(r, "meta l4proto udp dnat") {
			chain = "nat-output"
		}
		tx.Add(&Rule{Chain: chain, Rule: r, Comment: fmt.Sprintf("rule %d", i)})
	}
	tx.Add(&Element{Set: "ranges", Key: []string{"10.1.0.0/16"}})
	tx.Add(&Element{Set: "ranges", Key: []string{"10.3.0.0/16"}})
	tx.Add(&Element{Set: "dnat-targets", Key: []string{"10.96.0.1", "tcp", "80"}, Value: "10.244.0.1 . 8080"})
	tx.Add(&Element{Set: "service-nodeports", Key: []string{"tcp", "30080"}, Value: "jump b", Comment: "ns/svc/tcp/http"})
	tx.Add(&Rule{Chain: "filter-input", Rule: "ct state new jump b"})
	p.run(t, "extra shapes", tx)
	if os.Getenv("NFT_SHOW") != "" {
		t.Log(nftList(t, p.nlNS))
	}
}

// TestOracleRepairsOutsideChanges: a rule added behind the backends' back
// (by `nft` itself) is gone after the next full sync in both namespaces;
// the Netlink backend must not trust its memory of the chain then.
func TestOracleRepairsOutsideChanges(t *testing.T) {
	p := newPair(t)
	svcs := shapesServices()
	p.run(t, "first full sync", fullTx(svcs, true))
	chain := hashed("service-", svcs[0].portName())
	for _, ns := range []string{p.execNS, p.nlNS} {
		inNS(t, ns, func() error {
			out, err := exec.Command("nft", "add", "rule", "ip", "kube-proxy", chain, "drop").CombinedOutput()
			if err != nil {
				return fmt.Errorf("nft add rule: %v: %s", err, out)
			}
			return nil
		})
	}
	p.run(t, "full sync after an outside change", fullTx(svcs, false))
	if got := nftList(t, p.nlNS); strings.Contains(got, "\t\tdrop\n") {
		t.Errorf("the outside rule survived the full sync:\n%s", got)
	}
	n, err := p.nl.CountRules(context.Background(), chain)
	if err != nil || n != 1 {
		t.Errorf("CountRules(%s) = %d, %v; want 1", chain, n, err)
	}
}

// TestNetlinkFailureIsAtomicAndNamed: a transaction whose last operation
// fails changes nothing, and the error names the operation.
func TestNetlinkFailureIsAtomicAndNamed(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	p.run(t, "full sync", fullTx(shapesServices(), true))
	before := nftList(t, p.nlNS)
	tx := &Transaction{}
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"10.96.9.9"}})
	tx.Flush(&Chain{Name: "services"})
	tx.Delete(&Chain{Name: "no-such-chain"})
	err := p.nl.Run(ctx, tx)
	if err == nil || !strings.Contains(err.Error(), `operation 2 (delete chain ip kube-proxy no-such-chain)`) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Run error = %v; want one naming operation 2 and wrapping ErrNotFound", err)
	}
	if after := nftList(t, p.nlNS); after != before {
		t.Fatalf("failed transaction changed the table:\n%s", lineDiff(before, after))
	}
	// Unknown rule text fails before anything is sent.
	tx = &Transaction{}
	tx.Add(&Rule{Chain: "services", Rule: "tcp dport 22 counter accept"})
	if err := p.nl.Run(ctx, tx); err == nil || !strings.Contains(err.Error(), `"tcp dport 22 counter accept"`) {
		t.Fatalf("Run with unknown rule text: %v", err)
	}
	// Reads.
	chains, err := p.nl.ListChains(ctx)
	if err != nil || !slices.Contains(chains, "services") {
		t.Errorf("ListChains = %v, %v", chains, err)
	}
	els, err := p.nl.ListElements(ctx, "no-endpoint-services")
	if err != nil || len(els) != 1 || strings.Join(els[0].Key, " . ") != "10.96.1.3 . tcp . 80" || els[0].Value != "goto reject-chain" || els[0].Comment != "web/empty/tcp/http" {
		t.Errorf("ListElements(no-endpoint-services) = %+v, %v", els, err)
	}
	var execEls []*Element
	inNS(t, p.execNS, func() (err error) { execEls, err = p.exec.ListElements(ctx, "no-endpoint-services"); return })
	if len(execEls) != 1 || len(els) != 1 || strings.Join(execEls[0].Key, " . ") != strings.Join(els[0].Key, " . ") ||
		execEls[0].Value != els[0].Value || execEls[0].Comment != els[0].Comment {
		t.Errorf("Exec.ListElements = %+v", execEls)
	}
	// A backend started later (as after a restart) learns set types from
	// the kernel.
	var nl2 *Netlink
	inNS(t, p.nlNS, func() (err error) { nl2, err = NewNetlink(IPv4Family, "kube-proxy"); return })
	defer nl2.Close()
	tx = &Transaction{}
	tx.Add(&Element{Set: "no-endpoint-services", Key: []string{"10.96.1.7", "udp", "53"}, Value: "drop"})
	if err := nl2.Run(ctx, tx); err != nil {
		t.Fatalf("second backend: %v", err)
	}
	if els, err := nl2.ListElements(ctx, "no-endpoint-services"); err != nil || len(els) != 2 {
		t.Errorf("second backend ListElements = %v, %v", els, err)
	}
	if n, err := p.nl.CountRules(ctx, "services"); err != nil || n != 3 {
		t.Errorf("CountRules(services) = %d, %v; want 3", n, err)
	}
	if _, err := p.nl.CountRules(ctx, "no-such-chain"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CountRules(no-such-chain) error %v, want ErrNotFound", err)
	}
	if err := p.nl.DeleteTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.nl.DeleteTable(ctx); err != nil {
		t.Fatalf("DeleteTable of a missing table: %v", err)
	}
	if chains, err := p.nl.ListChains(ctx); err != nil || len(chains) != 0 {
		t.Errorf("ListChains after DeleteTable = %v, %v", chains, err)
	}
}

// TestOracleDumps replays Fake dumps (what the renderer's golden files
// hold) through both backends: the Fake of the rule-shape corpus, and any
// files named by NFT_ORACLE_DUMPS (a glob, e.g. ../testdata/nft/*.nft).
func TestOracleDumps(t *testing.T) {
	f := NewFake()
	if err := f.Run(context.Background(), fullTx(shapesServices(), true)); err != nil {
		t.Fatal(err)
	}
	dumps := map[string]string{"shapes corpus": f.Dump()}
	if glob := os.Getenv("NFT_ORACLE_DUMPS"); glob != "" {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("NFT_ORACLE_DUMPS=%q matches no files (%v)", glob, err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			dumps[file] = string(b)
		}
	}
	for name, text := range dumps {
		t.Run(filepath.Base(name), func(t *testing.T) {
			tx, err := ParseDump(text)
			if err != nil {
				t.Fatalf("parsing dump: %v", err)
			}
			// The parsed transaction dumps back to the same text.
			g := NewFake()
			if err := g.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
			if text == f.Dump() && g.Dump() != text {
				t.Fatalf("ParseDump round trip:\n%s", lineDiff(text, g.Dump()))
			}
			newPair(t).run(t, name, tx)
		})
	}
}

// TestListingsMatchExec: ListSets and ListElements of the Netlink backend
// (the one that wrote the table, one started later, and one reading a table
// nft -f wrote) return what Exec's parse of `nft list` returns, for every
// set and map: concatenated keys field by field, verdicts, data values,
// intervals and comments.
func TestListingsMatchExec(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	tx := fullTx(shapesServices(), true)
	tx.Add(&Element{Set: "no-endpoint-services", Key: []string{"10.96.5.5", "udp", "5353"}, Value: "drop", Comment: "ns/new/udp/dns"})
	tx.Add(&Element{Set: "no-endpoint-nodeports", Key: []string{"udp", "30053"}, Value: "drop"})
	tx.Add(&Element{Set: "service-nodeports", Key: []string{"sctp", "30999"}, Value: "jump reject-chain", Comment: "a jump"})
	tx.Add(&Map{Name: "dnat-targets", Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service", Comment: "data map"})
	tx.Add(&Element{Set: "dnat-targets", Key: []string{"10.96.0.1", "tcp", "80"}, Value: "10.244.0.1 . 8080"})
	tx.Add(&Element{Set: "dnat-targets", Key: []string{"192.168.56.240", "udp", "65535"}, Value: "10.244.255.254 . 1"})
	tx.Add(&Set{Name: "ranges", Type: "ipv4_addr", Flags: []string{"interval"}})
	tx.Add(&Element{Set: "ranges", Key: []string{"10.1.0.0/16"}, Comment: "a prefix"})
	tx.Add(&Element{Set: "ranges", Key: []string{"10.3.0.7"}})
	tx.Add(&Element{Set: "ranges", Key: []string{"10.4.0.1-10.4.0.9"}})
	p.run(t, "full sync", tx)

	var execSets []string
	inNS(t, p.execNS, func() (err error) { execSets, err = p.exec.ListSets(ctx); return })
	sort.Strings(execSets)
	for _, want := range []string{"service-ips", "firewall-ips", "no-endpoint-services", "no-endpoint-nodeports", "service-nodeports", "cluster-ips", "hairpin-connections", "dnat-targets", "ranges"} {
		if !slices.Contains(execSets, want) {
			t.Fatalf("Exec.ListSets = %v, missing %s", execSets, want)
		}
	}
	if !slices.ContainsFunc(execSets, func(s string) bool { return strings.HasPrefix(s, "affinity-") }) {
		t.Fatalf("Exec.ListSets = %v, no affinity set", execSets)
	}
	var laterNL, execNL *Netlink
	inNS(t, p.nlNS, func() (err error) { laterNL, err = NewNetlink(IPv4Family, "kube-proxy"); return })
	defer laterNL.Close()
	inNS(t, p.execNS, func() (err error) { execNL, err = NewNetlink(IPv4Family, "kube-proxy"); return })
	defer execNL.Close()
	text := func(els []*Element) []string {
		var out []string
		for _, e := range els {
			out = append(out, fmt.Sprintf("%s: %s | %q | %q", e.Set, strings.Join(e.Key, " . "), e.Value, e.Comment))
		}
		sort.Strings(out)
		return out
	}
	for name, nl := range map[string]*Netlink{"writer": p.nl, "later": laterNL, "reading nft -f's table": execNL} {
		sets, err := nl.ListSets(ctx)
		sort.Strings(sets)
		if err != nil || !slices.Equal(sets, execSets) {
			t.Fatalf("%s: ListSets = %v, %v; Exec lists %v", name, sets, err, execSets)
		}
		for _, set := range sets {
			var want []*Element
			inNS(t, p.execNS, func() (err error) { want, err = p.exec.ListElements(ctx, set); return })
			got, err := nl.ListElements(ctx, set)
			if err != nil {
				t.Fatalf("%s: ListElements(%s): %v", name, set, err)
			}
			if w, g := text(want), text(got); !slices.Equal(w, g) {
				t.Errorf("%s: ListElements(%s):\n got  %q\n want %q", name, set, g, w)
			}
		}
	}
	// The maps with concatenated keys hold what was written.
	els, _ := p.nl.ListElements(ctx, "service-nodeports")
	if g := text(els); !slices.Contains(g, `service-nodeports: sctp . 30999 | "jump reject-chain" | "a jump"`) {
		t.Errorf("service-nodeports lists %q", g)
	}
	if err := p.nl.DeleteTable(ctx); err != nil {
		t.Fatal(err)
	}
	if sets, err := p.nl.ListSets(ctx); err != nil || len(sets) != 0 {
		t.Errorf("ListSets without the table = %v, %v", sets, err)
	}
	var none []string
	inNS(t, p.execNS, func() error { return p.exec.DeleteTable(ctx) })
	inNS(t, p.execNS, func() (err error) { none, err = p.exec.ListSets(ctx); return })
	if len(none) != 0 {
		t.Errorf("Exec.ListSets without the table = %v", none)
	}
}

// TestNetlinkFlushOfUnrememberedChain: a chain the backend wrote without
// flushing it first (so it never learnt its rules) and flushes in a later
// transaction, with a set its rules used deleted, is flushed: the elision
// of unchanged chains must not take "not remembered" for "empty".
func TestNetlinkFlushOfUnrememberedChain(t *testing.T) {
	p := newPair(t)
	tx := &Transaction{}
	tx.Add(&Table{Family: IPv4Family, Name: "kube-proxy"})
	tx.Add(&Chain{Name: "c"})
	tx.Add(&Chain{Name: "e"})
	tx.Add(&Set{Name: "A", Type: "ipv4_addr", Flags: []string{"dynamic", "timeout"}, Timeout: 60e9})
	tx.Add(&Rule{Chain: "c", Rule: "ip saddr @A goto e"})
	tx.Add(&Rule{Chain: "e", Rule: "update @A { ip saddr }"})
	p.run(t, "chains written without a flush", tx)
	tx = &Transaction{}
	tx.Flush(&Chain{Name: "c"})
	tx.Flush(&Chain{Name: "e"})
	tx.Delete(&Set{Name: "A"})
	p.run(t, "chains flushed, their set deleted", tx)
	if got := nftList(t, p.nlNS); strings.Contains(got, "@A") || strings.Contains(got, "set A") {
		t.Fatalf("the flush was left out:\n%s", got)
	}
}

// TestOracleIPv6 builds a kube-proxy-shaped `ip6 kube-proxy` table (what
// a dual-stack node's IPv6 proxier writes) with both backends: the kernel
// takes the Netlink backend's batch and nft lists the same table as after
// nft -f, and the Netlink backend lists the elements nft -f wrote as Exec
// lists them.
func TestOracleIPv6(t *testing.T) {
	p := newPairFamily(t, IPv6Family)
	tx := &Transaction{}
	tx.Add(&Table{Family: IPv6Family, Name: "kube-proxy", Comment: "rules for kube-proxy"})
	for _, c := range []*Chain{
		{Name: "filter-input", Type: "filter", Hook: "input", Priority: 0},
		{Name: "nat-prerouting", Type: "nat", Hook: "prerouting", Priority: -100},
		{Name: "nat-postrouting", Type: "nat", Hook: "postrouting", Priority: 100},
		{Name: "services"}, {Name: "masquerading"}, {Name: "reject-chain"}, {Name: "cluster-ips-check"},
		{Name: "svc"}, {Name: "ep"}, {Name: "fw"},
	} {
		tx.Add(c)
	}
	tx.Add(&Set{Name: "cluster-ips", Type: "ipv6_addr", Comment: "Active ClusterIPs"})
	tx.Add(&Set{Name: "nodeport-ips", Type: "ipv6_addr"})
	tx.Add(&Set{Name: "ranges", Type: "ipv6_addr", Flags: []string{"interval"}})
	tx.Add(&Set{Name: "hairpin-connections", Type: "ipv6_addr . ipv6_addr . inet_proto . inet_service"})
	tx.Add(&Set{Name: "affinity-x", Type: "ipv6_addr", Flags: []string{"dynamic", "timeout"}, Timeout: 10800e9})
	tx.Add(&Map{Name: "service-ips", Type: "ipv6_addr . inet_proto . inet_service : verdict"})
	tx.Add(&Map{Name: "service-nodeports", Type: "inet_proto . inet_service : verdict"})
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		tx.Add(&Map{Name: "dnat-endpoints-" + proto, Type: TypeofNumgenEndpoints6(proto)})
	}
	rules := []struct{ chain, rule string }{
		{"filter-input", "ct state new jump cluster-ips-check"},
		{"nat-prerouting", "jump services"},
		{"nat-postrouting", "jump masquerading"},
		{"services", "ip6 daddr @cluster-ips ip6 saddr != fd00:10:244::/56 mark set mark or 0x4000"},
		{"services", "ip6 daddr . meta l4proto . th dport vmap @service-ips"},
		{"services", "ip6 daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"},
		{"masquerading", "ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"},
		{"masquerading", "mark and 0x4000 == 0 return"},
		{"masquerading", "masquerade fully-random"},
		{"reject-chain", "reject"},
		{"cluster-ips-check", "ip6 daddr @cluster-ips reject"},
		{"cluster-ips-check", "ip6 daddr { fd00:10:96::/112 } drop"},
		{"fw", "ip6 saddr != { 2001:db8::/64 , fd00:1::5 , fd00:1::6 } drop"},
		{"fw", "ip6 saddr fd00::/7 drop"},
		{"fw", "ip6 saddr 2001:db8::/33 drop"},
		{"fw", "ip6 daddr fd00:10:96::1 accept"},
		{"fw", "ip6 daddr @ranges accept"},
		{"svc", "fib saddr type local mark set mark or 0x4000"},
		{"svc", "ip6 saddr @affinity-x goto ep"},
		{"svc", "numgen random mod 2 0 goto ep"},
		{"svc", "meta l4proto tcp dnat ip6 to numgen random mod 2 map @dnat-endpoints-tcp"},
		{"svc", "meta l4proto udp dnat ip6 to numgen random mod 1 offset 4 map @dnat-endpoints-udp"},
		{"svc", "meta l4proto sctp dnat ip6 to numgen random mod 1 map @dnat-endpoints-sctp"},
		{"svc", "meta l4proto tcp dnat ip6 addr . port to numgen random mod 2 map { 0 : fd00:10:244:1::5 . 8080 , 1 : fd00:10:244:2::5 . 8080 }"},
		{"ep", "update @affinity-x { ip6 saddr }"},
		{"ep", "meta l4proto tcp dnat to [fd00:10:244:1::5]:8080"},
		{"ep", "meta l4proto udp dnat to fd00:10:244:1::5"},
	}
	for i, r := range rules {
		tx.Add(&Rule{Chain: r.chain, Rule: r.rule, Comment: fmt.Sprintf("rule %d", i)})
	}
	tx.Add(&Element{Set: "cluster-ips", Key: []string{"fd00:10:96::a"}})
	tx.Add(&Element{Set: "nodeport-ips", Key: []string{"fd00:172:18::2"}})
	tx.Add(&Element{Set: "ranges", Key: []string{"2001:db8:1::/48"}, Comment: "a range"})
	tx.Add(&Element{Set: "ranges", Key: []string{"2001:db8:3::1"}})
	tx.Add(&Element{Set: "hairpin-connections", Key: []string{"fd00:10:244:1::5", "fd00:10:244:1::5", "tcp", "8080"}})
	tx.Add(&Element{Set: "service-ips", Key: []string{"fd00:10:96::a", "tcp", "80"}, Value: "goto svc", Comment: "ns/svc/tcp/http"})
	tx.Add(&Element{Set: "service-nodeports", Key: []string{"tcp", "30080"}, Value: "goto svc"})
	tx.Add(&Element{Set: "dnat-endpoints-tcp", Key: []string{"0"}, Value: "fd00:10:244:1::5 . 8080"})
	tx.Add(&Element{Set: "dnat-endpoints-tcp", Key: []string{"1"}, Value: "fd00:10:244:2::5 . 8080"})
	tx.Add(&Element{Set: "dnat-endpoints-udp", Key: []string{"4"}, Value: "fd00:10:244:1::5 . 53"})
	p.run(t, "ip6 table", tx)

	// A partial sync: an endpoint replaced, an element deleted.
	tx = &Transaction{}
	tx.Delete(&Element{Set: "dnat-endpoints-tcp", Key: []string{"1"}})
	tx.Add(&Element{Set: "dnat-endpoints-tcp", Key: []string{"1"}, Value: "fd00:10:244:3::7 . 8080"})
	tx.Delete(&Element{Set: "ranges", Key: []string{"2001:db8:3::1"}})
	p.run(t, "ip6 partial", tx)

	// The Netlink backend reads what either backend wrote.
	ctx := context.Background()
	for _, set := range []string{"cluster-ips", "ranges", "hairpin-connections", "service-ips", "dnat-endpoints-tcp"} {
		var fromExec []*Element
		inNS(t, p.execNS, func() (err error) { fromExec, err = p.exec.ListElements(ctx, set); return })
		fromNL, err := p.nl.ListElements(ctx, set)
		if err != nil {
			t.Fatalf("listing %s: %v", set, err)
		}
		if a, b := elemStrings(fromExec), elemStrings(fromNL); a != b {
			t.Errorf("elements of %s: exec lists\n%s\nnetlink lists\n%s", set, a, b)
		}
	}
	chains, err := p.nl.ListChains(ctx)
	if err != nil || len(chains) != 10 {
		t.Errorf("ListChains of the ip6 table = %v, %v; want its 10 chains", chains, err)
	}
}

func elemStrings(els []*Element) string {
	var out []string
	for _, e := range els {
		out = append(out, keyString(e.Key)+" : "+e.Value+" # "+e.Comment)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
