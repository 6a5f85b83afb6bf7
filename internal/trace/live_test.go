package trace

import (
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptsim"
)

// counters returns the counters every step of path i would move.
func counters(p Path) []iptsim.Counter {
	var cs []iptsim.Counter
	for _, s := range p.Steps {
		if s.Rule > 0 {
			cs = append(cs, iptsim.Counter{Table: s.Table, Chain: s.Chain, Rule: s.Rule, Text: s.Text, Packets: 1})
		}
	}
	return cs
}

func TestConfirm(t *testing.T) {
	hp := hairpin(t).Paths
	self, other := 0, 1
	if hp[0].Dst != "10.244.1.2:8080" {
		self, other = 1, 0
	}
	drop := localDrop(t).Paths
	cases := []struct {
		name    string
		paths   []Path
		flow    *Flow
		moved   []iptsim.Counter
		path    int
		ok      bool
		note    string
		reached string
	}{
		{name: "hairpin: DNAT to itself, SNAT to the bridge", paths: hp,
			flow:  &Flow{Proto: "tcp", OrigSrc: "10.244.1.2:40000", OrigDst: "10.111.22.24:80", ReplySrc: "10.244.1.2:8080", ReplyDst: "10.244.1.1:61000"},
			moved: counters(hp[self]), path: self, ok: true, reached: "10.244.1.2:8080"},
		{name: "cross-node: DNAT, source kept", paths: hp,
			flow:  &Flow{Proto: "tcp", OrigSrc: "10.244.1.2:40000", OrigDst: "10.111.22.24:80", ReplySrc: "10.244.0.2:8080", ReplyDst: "10.244.1.2:40000"},
			moved: counters(hp[other]), path: other, ok: true, reached: "10.244.0.2:8080"},
		{name: "kernel masqueraded where no SNAT was predicted", paths: hp,
			flow:  &Flow{Proto: "tcp", OrigSrc: "10.244.1.2:40000", OrigDst: "10.111.22.24:80", ReplySrc: "10.244.0.2:8080", ReplyDst: "192.168.56.11:5000"},
			moved: counters(hp[other]), path: other, note: "predicted masquerade false, conntrack shows SNAT true"},
		{name: "an endpoint no path reaches", paths: hp,
			flow: &Flow{Proto: "tcp", OrigSrc: "10.244.1.2:40000", OrigDst: "10.111.22.24:80", ReplySrc: "10.244.9.9:8080", ReplyDst: "10.244.1.2:40000"},
			path: -1, note: "which no predicted path reaches"},
		{name: "a counter on the path did not move", paths: hp,
			flow:  &Flow{Proto: "tcp", OrigSrc: "10.244.1.2:40000", OrigDst: "10.111.22.24:80", ReplySrc: "10.244.0.2:8080", ReplyDst: "10.244.1.2:40000"},
			moved: counters(hp[other])[1:], path: other, note: "nat PREROUTING #1 is on the predicted path but its counter did not move"},
		{name: "Local drop: no conntrack entry, DROP counted", paths: drop, moved: counters(drop[0]), path: 0, ok: true, reached: "DROP"},
		{name: "no conntrack entry but only accepting paths", paths: hp, path: -1, note: "every predicted path accepts it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &Live{Conntrack: c.flow}
			Confirm(l, c.paths, c.moved)
			if l.Path != c.path || l.Confirmed != c.ok || (c.reached != "" && l.Reached != c.reached) {
				t.Errorf("path %d confirmed %v reached %q, want %d %v %q; notes %v", l.Path, l.Confirmed, l.Reached, c.path, c.ok, c.reached, l.Notes)
			}
			if c.note != "" && !strings.Contains(strings.Join(l.Notes, "\n"), c.note) {
				t.Errorf("notes %q lack %q", l.Notes, c.note)
			}
			if len(l.Moved) != len(c.moved) {
				t.Errorf("moved %d counters, want %d", len(l.Moved), len(c.moved))
			}
		})
	}
}

func TestFlowNAT(t *testing.T) {
	f := &Flow{Proto: "tcp", OrigSrc: "192.168.56.100:5000", OrigDst: "192.168.56.11:30080", ReplySrc: "10.244.0.3:8080", ReplyDst: "192.168.56.11:7000"}
	if !f.DNAT() || !f.SNAT() {
		t.Errorf("%s: DNAT %v SNAT %v", f, f.DNAT(), f.SNAT())
	}
	if want := "(DNAT to 10.244.0.3:8080, SNAT to 192.168.56.11:7000)"; !strings.HasSuffix(f.String(), want) {
		t.Errorf("%s lacks %s", f, want)
	}
	f = &Flow{Proto: "udp", OrigSrc: "10.244.0.3:5000", OrigDst: "10.96.0.10:53", ReplySrc: "10.96.0.10:53", ReplyDst: "10.244.0.3:5000"}
	if f.DNAT() || f.SNAT() {
		t.Errorf("%s: no NAT expected", f)
	}
}
