package trace

import (
	"fmt"
	"strings"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// Live is what one real probe showed.
type Live struct {
	// Probe is "PROTO SRC:PORT -> DST:PORT", the source as the node sees it.
	Probe     string `json:"probe"`
	Connected bool   `json:"connected"`
	Reply     string `json:"reply,omitempty"`
	Error     string `json:"error,omitempty"`
	// Conntrack is the entry the probe created in the node's conntrack
	// table; nil when there is none (dropped or rejected before the entry
	// was confirmed).
	Conntrack *Flow `json:"conntrack,omitempty"`
	// Moved lists every counter in the node's rules that grew during the
	// probe (other traffic included), as deltas.
	Moved []iptsim.Counter `json:"moved"`
	// Trace lists, in nftables mode, every rule the kernel's nftrace saw
	// the probe's first packet match on the node, in order.
	Trace []TraceEvent `json:"trace,omitempty"`
	// Path is the index in Result.Paths of the path the kernel took, or -1.
	Path      int      `json:"path"`
	Reached   string   `json:"reached,omitempty"`
	Confirmed bool     `json:"confirmed"`
	Notes     []string `json:"notes,omitempty"`
}

// Flow is a conntrack entry: the original direction and the reply direction.
type Flow struct {
	Proto    string `json:"proto"`
	OrigSrc  string `json:"origSrc"`
	OrigDst  string `json:"origDst"`
	ReplySrc string `json:"replySrc"`
	ReplyDst string `json:"replyDst"`
	Mark     uint32 `json:"mark"`
}

// DNAT says the kernel rewrote the destination: replies come from elsewhere.
func (f *Flow) DNAT() bool { return f.ReplySrc != f.OrigDst }

// SNAT says the kernel rewrote the source: replies go to another address or
// port. The port counts: a node masquerading its own packet to a remote pod
// keeps its address, and MASQUERADE --random-fully (which minikit uses)
// always picks a new port.
func (f *Flow) SNAT() bool { return f.ReplyDst != f.OrigSrc }

// String shows the flow's original and reply directions.
func (f *Flow) String() string {
	s := fmt.Sprintf("%s %s -> %s, reply %s -> %s", f.Proto, f.OrigSrc, f.OrigDst, f.ReplySrc, f.ReplyDst)
	var nat []string
	if f.DNAT() {
		nat = append(nat, "DNAT to "+f.ReplySrc)
	}
	if f.SNAT() {
		nat = append(nat, "SNAT to "+f.ReplyDst)
	}
	if len(nat) > 0 {
		s += " (" + strings.Join(nat, ", ") + ")"
	}
	return s
}

// Confirm fills l.Path, l.Reached, l.Confirmed and l.Notes: which predicted
// path the kernel took, judged by the conntrack entry (where the probe was
// DNATed to, whether it was SNATed) or, when there is none, by the verdict,
// and whether every rule on that path counted the probe.
func Confirm(l *Live, paths []Path, moved []iptsim.Counter) {
	l.Moved = moved
	counted := map[string]bool{}
	for _, c := range moved {
		counted[fmt.Sprintf("%s/%s/%d", c.Table, c.Chain, c.Rule)] = true
	}
	confirm(l, paths, counted, "its counter did not move")
}

// confirm is Confirm given the rules the kernel is known to have matched
// (counted, "TABLE/CHAIN/RULE") and how to say one on the path was not.
func confirm(l *Live, paths []Path, counted map[string]bool, missing string) {
	l.Path, l.Confirmed = -1, false
	if l.Conntrack != nil {
		l.Reached = l.Conntrack.ReplySrc
		for i, p := range paths {
			if p.Verdict == "ACCEPT" && p.Dst == l.Reached {
				l.Path = i
				break
			}
		}
		if l.Path < 0 {
			l.Notes = append(l.Notes, "the kernel sent the probe to "+l.Reached+", which no predicted path reaches")
			return
		}
		if p := paths[l.Path]; p.Masquerade != l.Conntrack.SNAT() {
			l.Notes = append(l.Notes, fmt.Sprintf("predicted masquerade %v, conntrack shows SNAT %v", p.Masquerade, l.Conntrack.SNAT()))
			return
		}
	} else {
		for i, p := range paths {
			if p.Verdict != "ACCEPT" || p.rejectedFurther() != "" {
				l.Path = i
				break
			}
		}
		if l.Path < 0 {
			l.Notes = append(l.Notes, "the probe left no conntrack entry, but every predicted path accepts it")
			return
		}
		l.Reached = paths[l.Path].Verdict
		if n := paths[l.Path].rejectedFurther(); n != "" {
			l.Reached = "REJECT on " + n
		}
	}
	ok := true
	for _, s := range paths[l.Path].Steps {
		if s.Rule == 0 {
			continue
		}
		if !counted[fmt.Sprintf("%s/%s/%d", s.Table, s.Chain, s.Rule)] {
			ok = false
			l.Notes = append(l.Notes, fmt.Sprintf("%s %s #%d is on the predicted path but %s", s.Table, s.Chain, s.Rule, missing))
		}
	}
	l.Confirmed = ok
}
