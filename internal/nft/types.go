// Package nft is minikit's nftables layer for the proxy's nftables mode: a
// small object model of one nftables table (chains, rules, sets, maps and
// their elements, modelled on knftables' so that the renderer reads like
// kube-proxy's), transactions over it, and backends that apply a transaction
// atomically: Netlink (github.com/google/nftables: one netlink batch per
// transaction, no `nft` process), Exec (`nft -f -`, the way knftables and
// kube-proxy apply them; kept for measurement and as the oracle in tests) and
// Fake (in memory, for unit tests).
//
// Rules are nft syntax text, exactly as `nft -f` accepts them and as kube-proxy
// writes them. The Netlink backend compiles that text into expressions; it
// knows the statements kube-proxy's rules use, and any other text is an error
// (never silently dropped). It produces the expressions nft 1.0 produces for
// the same text (and the same userdata: comments, set byte orders), so `nft
// list table ip kube-proxy` prints the same table after either backend; the
// oracle test checks exactly that, in two network namespaces.
//
// Why google/nftables, and why our own batch. Measured in one run
// (BenchmarkBackends, kube-proxy-shaped tables of N services x 5 endpoints,
// 2 shared cores, kernel 6.18, nft 1.0.6), ms per transaction:
//
//	                          Exec (nft -f)   Netlink   ratio
//	1,000 services, full            987.4        32.0    30.9x
//	1,000 services, partial          23.2         1.6    14.2x
//	10,000 services, full         38693         454.7    85.1x
//	10,000 services, partial        136.4        22.5     6.1x
//
// nft -f parses the text and first fetches its cache of the whole table
// (10,000 chains and their sets) before every transaction; the Netlink
// backend compiles each distinct rule text once and sends the batch with one
// sendmsg and no reads. google/nftables supplies the expression encoding
// (github.com/google/nftables/expr) and the reads (ListChains, CountRules,
// ListElements); its Conn.Flush is not used for writes because it cannot
// carry table and chain comments and reads an ack per message, where the
// batch here asks for none (a successful batch is silent, failures come
// back with the sequence number of the failing operation, as nft does it).
//
// The kernel's own cost sets the floor: a one-service partial at 10,000
// services is ~20 ms in the kernel (each commit that adds a rule with a nat,
// lookup or verdict expression re-validates the whole table's chain graph),
// and rewriting 10,000 service chains that each hold an anonymous numgen
// map (kube-proxy's rules) costs the kernel 13-25 s in one batch whoever
// sends it (binding each anonymous set walks the whole transaction:
// quadratic; and creating and binding one walks the table's list of sets by
// name). The proxier therefore writes no set per service (one numgen rule
// per service chain, looking its endpoint up in a shared dnat-endpoints map
// of 512 keys, TypeofNumgenEndpoints) and writes chains nothing reaches yet in batches
// of 500 service ports ahead of the batch that makes them reachable
// (internal/kubeproxy/nft_proxier.go has the numbers). The Netlink full-sync figure above is a
// steady-state full sync: the backend remembers what it committed to each
// chain and leaves out chains that a transaction flushes and refills
// unchanged, trusting that memory only while nf_tables' generation counter
// shows no commit but its own (elide.go). A first full sync into an empty
// table (or after someone else changed nftables in the namespace) is sent
// whole: 13-16 s at 10,000 services; a full rewrite measured 25.2 s for
// Netlink against 32.1 s for nft -f at 10,000 services and 159 ms against
// 500 ms at 1,000 (an earlier run, before the elision). The machine is shared,
// so absolute numbers move between runs; the ratios are from one run each.
package nft

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is wrapped by errors about a missing table, chain, set or map.
var ErrNotFound = errors.New("not found")

// Family is the table's address family: a dual-stack node's proxy has a
// table in each.
type Family string

const (
	// IPv4Family is nft's "ip" family.
	IPv4Family Family = "ip"
	// IPv6Family is nft's "ip6" family: rules match ip6 saddr/daddr, sets
	// hold ipv6_addr, dnat and reject are IPv6's.
	IPv6Family Family = "ip6"
)

// nfproto is the family's NFPROTO_ number (the nfgenmsg family).
func (f Family) nfproto() uint8 {
	if f == IPv6Family {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// addrType is the family's address type.
func (f Family) addrType() dtype {
	if f == IPv6Family {
		return typeIPv6
	}
	return typeIPv4
}

// checkFamily refuses a family the backends do not know.
func checkFamily(f Family) error {
	if f != IPv4Family && f != IPv6Family {
		return fmt.Errorf("family %q is not supported (ip or ip6)", f)
	}
	return nil
}

// Table is the one table a Backend manages.
type Table struct {
	Family  Family
	Name    string // "kube-proxy"
	Comment string
}

// Chain is a chain of the table. Hook != "" makes it a base chain.
type Chain struct {
	Name string
	// Type is "filter" or "nat"; Hook is "prerouting", "input", "forward",
	// "output" or "postrouting"; Priority is numeric (dstnat = -100,
	// filter = 0, srcnat = 100; kube-proxy's "dstnat - 10" is -110).
	Type     string
	Hook     string
	Priority int
	Comment  string
}

// Rule is one rule appended to a chain. Rule is nft syntax without the
// comment, e.g. `ip daddr . meta l4proto . th dport vmap @service-ips`.
type Rule struct {
	Chain   string
	Rule    string
	Comment string
}

// Set is a named set; Map is a named map (Type has a ": verdict" or
// ": ipv4_addr . inet_service" value part). Type is nft type syntax, e.g.
// "ipv4_addr . inet_proto . inet_service" or
// "ipv4_addr . inet_proto . inet_service : verdict".
type Set struct {
	Name    string
	Type    string
	Flags   []string      // "interval", "timeout", "dynamic"
	Timeout time.Duration // default element timeout (affinity sets), 0 = none
	Comment string
}

// Map is an nft map: Set's fields, with Type ending in " : <value type>"
// (for instance "ipv4_addr . inet_proto . inet_service : verdict").
type Map struct {
	Name    string
	Type    string
	Flags   []string
	Comment string
}

// Element is one element of a set or map (Set names either). Key has one
// string per concatenated field ("10.96.0.1", "tcp", "80"); Value is the
// map value as nft text ("goto service-ULMVA6XW-ns/svc/tcp/http", "drop") and
// empty for set elements.
type Element struct {
	Set     string
	Key     []string
	Value   string
	Comment string
}

// Op is one operation of a transaction.
type OpKind int

const (
	// OpAdd creates the object if missing (an existing one is kept as is;
	// for a Rule it appends; for an Element it adds or, for a map, fails on
	// a different value as nft does).
	OpAdd OpKind = iota
	// OpFlush empties a chain (its rules) or a set/map (its elements).
	OpFlush
	// OpDelete removes the object; deleting a missing object fails, so the
	// idiom for "ensure gone" is Add then Delete (as knftables).
	OpDelete
)

// Op is one step; exactly one of the object fields is set.
type Op struct {
	Kind    OpKind
	Table   *Table
	Chain   *Chain
	Rule    *Rule
	Set     *Set
	Map     *Map
	Element *Element
}

// Transaction is an ordered list of operations applied atomically: all or
// nothing.
type Transaction struct {
	Ops []Op
}

// Add appends "add o" (a *Table, *Chain, *Rule, *Set, *Map or *Element).
func (tx *Transaction) Add(o any) { tx.Ops = append(tx.Ops, op(OpAdd, o)) }

// Flush appends "flush o": empties a chain, set or map.
func (tx *Transaction) Flush(o any) { tx.Ops = append(tx.Ops, op(OpFlush, o)) }

// Delete appends "delete o".
func (tx *Transaction) Delete(o any) { tx.Ops = append(tx.Ops, op(OpDelete, o)) }

// Len is the number of operations.
func (tx *Transaction) Len() int { return len(tx.Ops) }

func op(k OpKind, o any) Op {
	switch v := o.(type) {
	case *Table:
		return Op{Kind: k, Table: v}
	case *Chain:
		return Op{Kind: k, Chain: v}
	case *Rule:
		return Op{Kind: k, Rule: v}
	case *Set:
		return Op{Kind: k, Set: v}
	case *Map:
		return Op{Kind: k, Map: v}
	case *Element:
		return Op{Kind: k, Element: v}
	}
	panic("nft: unknown object type")
}

// Interface is what the proxy needs from a backend. A backend is bound to
// one table (family and name) in the network namespace it was created in.
type Interface interface {
	// Run applies tx atomically (one netlink batch, one nft -f).
	Run(ctx context.Context, tx *Transaction) error
	// ListChains returns the names of the table's chains (no error and no
	// names when the table does not exist).
	ListChains(ctx context.Context) ([]string, error)
	// ListSets returns the names of the table's named sets and maps (no
	// error and no names when the table does not exist; anonymous sets are
	// not listed).
	ListSets(ctx context.Context) ([]string, error)
	// ListElements returns the elements of a set or map.
	ListElements(ctx context.Context, set string) ([]*Element, error)
	// CountRules returns how many rules a chain holds (for the drift check;
	// an error wrapping ErrNotFound when the chain is missing).
	CountRules(ctx context.Context, chain string) (int, error)
	// DeleteTable removes the table if it exists.
	DeleteTable(ctx context.Context) error
}
