package iptables

import (
	"fmt"
	"strconv"
	"strings"
)

// The one reader of iptables-save text. The runner reads the kernel's tables
// with it (to keep the chains it does not own across a restore), and iptsim
// walks packets through what it returns, with the counters of
// iptables-save -c, for `minikit trace`.

// SavedTable is one table of iptables-save text.
type SavedTable struct {
	Name string
	// Chains are in the order they first appear: declared, or named by a
	// rule without a declaration.
	Chains []*SavedChain
	byName map[string]*SavedChain
}

// Chain returns the named chain, or nil.
func (t *SavedTable) Chain(name string) *SavedChain { return t.byName[name] }

// SavedChain is one chain of a SavedTable.
type SavedChain struct {
	Name string
	// Declared says a ":NAME POLICY [packets:bytes]" line named the chain,
	// as iptables-save writes for every chain; iptables-restore would reject
	// a rule for an undeclared one.
	Declared bool
	// Policy is as written: ACCEPT or DROP for a built-in chain, "-" for a
	// user chain, "" when not declared or not given.
	Policy string
	// Packets and Bytes are the policy's counters, zero when not given.
	Packets, Bytes uint64
	Rules          []SavedRule
}

// SavedRule is one "-A CHAIN ..." line.
type SavedRule struct {
	// Text is the line without its counters.
	Text string
	// Args is Text split as iptables-restore splits it: "-A", the chain,
	// then the rule's arguments.
	Args []string
	// Packets and Bytes are the counters of iptables-save -c ("[p:b] -A ...").
	Packets, Bytes uint64
}

// ParseSave reads iptables-save text: several tables may follow each other,
// with or without counters. Comments, blank lines and COMMIT are skipped; a
// table that appears twice is the last one. err reports the first line that
// is none of those forms, but the tables hold every line that was read, so a
// caller that prefers what it can get over nothing may use them.
func ParseSave(save string) (map[string]*SavedTable, error) {
	tables := map[string]*SavedTable{}
	var cur *SavedTable
	var first error
	fail := func(format string, args ...any) {
		if first == nil {
			first = fmt.Errorf(format, args...)
		}
	}
	for i, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		var pk, by uint64
		if strings.HasPrefix(l, "[") {
			end := strings.IndexByte(l, ']')
			if end < 0 {
				fail("line %d: cannot parse counters in %q", i+1, l)
				continue
			}
			var err error
			if pk, by, err = parseCounters(l[:end+1]); err != nil {
				fail("line %d: %w", i+1, err)
				continue
			}
			l = strings.TrimSpace(l[end+1:])
		}
		switch {
		case l == "" || l[0] == '#' || l == "COMMIT":
		case l[0] == '*':
			cur = &SavedTable{Name: l[1:], byName: map[string]*SavedChain{}}
			tables[cur.Name] = cur
		case l[0] == ':':
			f := strings.Fields(l[1:])
			switch {
			case cur == nil:
				fail("line %d: chain outside a table: %q", i+1, l)
				continue
			case len(f) == 0:
				fail("line %d: cannot parse %q", i+1, l)
				continue
			}
			c := cur.chain(f[0])
			// A chain declared again starts over, as iptables-restore
			// flushes it.
			*c = SavedChain{Name: f[0], Declared: true}
			if len(f) > 1 {
				c.Policy = f[1]
			}
			if len(f) > 2 {
				c.Packets, c.Bytes, _ = parseCounters(f[2])
			}
		case strings.HasPrefix(l, "-A "):
			if cur == nil {
				fail("line %d: rule outside a table: %q", i+1, l)
				continue
			}
			args := SplitRule(l)
			if len(args) < 2 {
				fail("line %d: cannot parse %q", i+1, l)
				continue
			}
			c := cur.chain(args[1])
			c.Rules = append(c.Rules, SavedRule{Text: l, Args: args, Packets: pk, Bytes: by})
		default:
			fail("line %d: cannot parse %q", i+1, l)
		}
	}
	return tables, first
}

func (t *SavedTable) chain(name string) *SavedChain {
	c := t.byName[name]
	if c == nil {
		c = &SavedChain{Name: name}
		t.byName[name] = c
		t.Chains = append(t.Chains, c)
	}
	return c
}

// parseCounters reads "[packets:bytes]".
func parseCounters(s string) (packets, bytes uint64, err error) {
	p, b, ok := strings.Cut(strings.Trim(s, "[]"), ":")
	if ok {
		packets, err = strconv.ParseUint(p, 10, 64)
		if err == nil {
			bytes, err = strconv.ParseUint(b, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("cannot parse counters %q", s)
	}
	return packets, bytes, nil
}
