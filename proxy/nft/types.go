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
// (never silently dropped).
package nft

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is wrapped by errors about a missing table, chain, set or map.
var ErrNotFound = errors.New("not found")

// Family is the table's address family. minikit's proxy is IPv4.
type Family string

const (
	IPv4Family Family = "ip"
)

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

func (tx *Transaction) Add(o any)    { tx.Ops = append(tx.Ops, op(OpAdd, o)) }
func (tx *Transaction) Flush(o any)  { tx.Ops = append(tx.Ops, op(OpFlush, o)) }
func (tx *Transaction) Delete(o any) { tx.Ops = append(tx.Ops, op(OpDelete, o)) }
func (tx *Transaction) Len() int     { return len(tx.Ops) }

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
	// ListElements returns the elements of a set or map.
	ListElements(ctx context.Context, set string) ([]*Element, error)
	// CountRules returns how many rules a chain holds (for the drift check;
	// an error wrapping ErrNotFound when the chain is missing).
	CountRules(ctx context.Context, chain string) (int, error)
	// DeleteTable removes the table if it exists.
	DeleteTable(ctx context.Context) error
}
