package netpol

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/minikit/minikit/internal/iptables"
)

// jumpArgs is the jump from FORWARD into the hook chain.
var jumpArgs = []string{"-m", "comment", "--comment", hookComment, "-j", ChainHook}

// JumpRule is the FORWARD jump as iptables-save prints it.
func JumpRule() string { return "-A FORWARD " + iptables.JoinRule(jumpArgs) }

// jumpFix says what a sync does to the FORWARD jump: delete the given number
// of copies of it, then (insert) put one at the top.
type jumpFix struct {
	delete int
	insert bool
}

// restoreInput renders one iptables-restore --noflush input: every chain of
// the state (declaring a chain flushes it), the stale chains of ours
// (declared, so the input works whether or not they still exist, then
// deleted), and the FORWARD jump's repair. Chains are declared in descending
// name order, which iptables-nft's sorted chain list inserts in O(1) (see
// proxy.sortByTarget).
func restoreInput(st *State, stale []string, fix jumpFix) []byte {
	chains := slices.Clone(st.Chains)
	slices.SortFunc(chains, func(a, b Chain) int { return cmp.Compare(b.Name, a.Name) })
	stale = slices.Clone(stale)
	slices.SortFunc(stale, func(a, b string) int { return cmp.Compare(b, a) })
	n := 64
	for _, c := range chains {
		n += len(c.Name) + 10
		for _, r := range c.Rules {
			n += len(r) + 1
		}
	}
	b := bytes.NewBuffer(make([]byte, 0, n))
	b.WriteString("*filter\n")
	for _, c := range chains {
		b.WriteString(":" + c.Name + " - [0:0]\n")
	}
	for _, s := range stale {
		b.WriteString(":" + s + " - [0:0]\n")
	}
	for _, c := range chains {
		for _, r := range c.Rules {
			b.WriteString(r)
			b.WriteByte('\n')
		}
	}
	for range fix.delete {
		b.WriteString("-D FORWARD " + iptables.JoinRule(jumpArgs) + "\n")
	}
	if fix.insert {
		b.WriteString("-I FORWARD 1 " + iptables.JoinRule(jumpArgs) + "\n")
	}
	for _, s := range stale {
		b.WriteString("-X " + s + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// RuleText renders the state as restore input with the FORWARD jump as a
// comment: what golden tests compare and a debug endpoint would show.
func RuleText(st *State) []byte {
	var b bytes.Buffer
	b.WriteString("# " + JumpRule() + "\n")
	b.Write(restoreInput(st, nil, jumpFix{}))
	return b.Bytes()
}

// SetText renders the sets as `ipset save`-like lines, for golden tests.
func SetText(st *State) []byte {
	var b bytes.Buffer
	for _, s := range st.Sets {
		b.WriteString("create " + s.Name + " " + s.Type)
		if s.Family != "" {
			b.WriteString(" family " + s.Family)
		}
		b.WriteString(" # " + s.Owner + "\n")
		for _, e := range s.Entries {
			b.WriteString("add " + s.Name + " " + e + "\n")
		}
	}
	return b.Bytes()
}
