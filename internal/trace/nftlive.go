package trace

import (
	"bufio"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/nft/nftsim"
)

// A live probe in nftables mode has no counters to compare (kube-proxy's
// rules carry none), so it asks the kernel itself: a table of our own,
// ip minikit-trace, sets `meta nftrace set 1` at priority -300 (before every
// kube-proxy chain) on prerouting and output for the probe's addresses,
// protocol and port only, and `nft monitor` reports every rule of every
// table the marked packet matched, with its handle and verdict. The table is
// removed after the probe, also when the probe or the monitor fails.

const traceTable = "minikit-trace"

// TraceEvent is one rule (or base chain policy) the kernel's nftrace saw the
// probe's first packet match.
type TraceEvent struct {
	Table string `json:"table"`
	Chain string `json:"chain"`
	// Rule is the rule's 1-based position in Chain (0 for a policy, or a
	// rule of a table Run did not read); Handle is nft's handle.
	Rule    int    `json:"rule"`
	Handle  int    `json:"handle,omitempty"`
	Text    string `json:"text"`
	Verdict string `json:"verdict"`
}

// String is the event as one line of output.
func (e TraceEvent) String() string {
	switch {
	case e.Rule == 0 && e.Handle == 0:
		return fmt.Sprintf("%s %s: %s", e.Table, e.Chain, e.Text)
	case e.Rule == 0:
		// A table Run did not walk (iptables-nft's filter, where
		// network policy lives): nft's handle is all there is.
		return fmt.Sprintf("%s %s handle %d: %s (verdict %s)", e.Table, e.Chain, e.Handle, e.Text, e.Verdict)
	}
	return fmt.Sprintf("%s %s #%d: %s (verdict %s)", e.Table, e.Chain, e.Rule, e.Text, e.Verdict)
}

// nftProbeMatch is what our table marks: the probe's first packet as the
// traced node sees it.
type nftProbeMatch struct {
	Src   netip.Addr
	Dst   netip.AddrPort
	Proto string
}

// family is the probe's: our table is ip or ip6 minikit-trace, the
// family of the kube-proxy table the probe meets.
func (m nftProbeMatch) family() string { return familyOf(m.Dst.Addr()).nft() }

func (m nftProbeMatch) rule() string {
	ip := m.family()
	return fmt.Sprintf("%s saddr %s %s daddr %s meta l4proto %s th dport %d meta nftrace set 1", ip, m.Src, ip, m.Dst.Addr(), m.Proto, m.Dst.Port())
}

// staleScript removes a table of ours left over by a killed run (adding it
// first makes the deletion succeed whether or not there was one).
func (m nftProbeMatch) staleScript() string {
	t := m.family() + " " + traceTable
	return "add table " + t + "\ndelete table " + t + "\n"
}

// traceScript adds our table.
func (m nftProbeMatch) traceScript() string {
	t := m.family() + " " + traceTable
	return strings.Join([]string{
		"add table " + t + ` { comment "minikit trace --live: marks one probe for nftrace" ; }`,
		"add chain " + t + " prerouting { type filter hook prerouting priority -300 ; }",
		"add chain " + t + " output { type filter hook output priority -300 ; }",
		"add rule " + t + " prerouting " + m.rule(),
		"add rule " + t + " output " + m.rule(),
		"",
	}, "\n")
}

// nftTraceProbe runs probe while the kernel of netns traces the packets m
// matches, and returns the trace lines of the first such packet.
func nftTraceProbe(netns string, m nftProbeMatch, probe func(), wait time.Duration) (lines []string, err error) {
	nftFamily := m.family()
	// Before the monitor starts: the only table deletion it reports is
	// then the one that ends the probe.
	if _, err := runNFT(netns, []byte(m.staleScript()), "-f", "-"); err != nil {
		return nil, fmt.Errorf("removing a stale table %s %s: %w", nftFamily, traceTable, err)
	}
	mon := nftCommand(netns, "-a", "monitor")
	out, err := mon.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := mon.Start(); err != nil {
		return nil, fmt.Errorf("starting nft monitor in %s: %w", nsName(netns), err)
	}
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	installed := false
	defer func() {
		if installed {
			if _, derr := runNFT(netns, nil, "delete", "table", nftFamily, traceTable); derr != nil && err == nil {
				err = fmt.Errorf("removing table %s %s: %w", nftFamily, traceTable, derr)
			}
		}
		mon.Process.Kill()
		mon.Wait()
		for range ch {
		}
	}()
	// The monitor is ready once it reports our own table being added; a
	// subscription that came too late misses it, so a chain is added again
	// until one is reported.
	if _, err := runNFT(netns, []byte(m.traceScript()), "-f", "-"); err != nil {
		return nil, fmt.Errorf("adding table %s %s: %w", nftFamily, traceTable, err)
	}
	installed = true
	ready := false
	deadline := time.Now().Add(wait)
	for attempt := 0; !ready; attempt++ {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nft monitor in %s did not report our table within %s", nsName(netns), wait)
		}
		want := "add table " + nftFamily + " " + traceTable
		if attempt > 0 {
			name := fmt.Sprintf("ready-%d", attempt)
			if _, err := runNFT(netns, nil, "add", "chain", nftFamily, traceTable, name); err != nil {
				return nil, err
			}
			want = "add chain " + nftFamily + " " + traceTable + " " + name
		}
		ready, err = waitLine(ch, func(l string) bool { return strings.HasPrefix(l, want) }, 500*time.Millisecond, nil)
		if err != nil {
			return nil, err
		}
	}
	probe()
	if _, err := runNFT(netns, nil, "delete", "table", nftFamily, traceTable); err != nil {
		return nil, fmt.Errorf("removing table %s %s: %w", nftFamily, traceTable, err)
	}
	installed = false
	// Trace events of the probe come before the table's deletion is
	// reported: the kernel queues both on the monitor's socket in order.
	var all []string
	done, err := waitLine(ch, func(l string) bool { return strings.HasPrefix(l, "delete table "+nftFamily+" "+traceTable) }, wait, &all)
	if err != nil {
		return nil, err
	}
	if !done {
		return nil, fmt.Errorf("nft monitor in %s did not report our table's removal within %s", nsName(netns), wait)
	}
	return firstPacket(all), nil
}

var (
	ipID     = regexp.MustCompile(` ip id (\d+) `)
	tcpFlags = regexp.MustCompile(` tcp flags == (\S+)`)
)

// packetKey names the packet a trace header line shows: its IP ID for IPv4.
// IPv6 has no IP ID and the probe's packets share their flow label, so an
// IPv6 header line is the first packet's when it is the TCP SYN (flags ==
// syn and nothing else) or the probe's one UDP datagram; every other IPv6
// packet gets the key "later".
func packetKey(l string) string {
	if m := ipID.FindStringSubmatch(l); m != nil {
		return m[1]
	}
	if !strings.Contains(l, " ip6 saddr ") {
		return ""
	}
	if m := tcpFlags.FindStringSubmatch(l); m != nil {
		if m[1] == "syn" {
			return "ip6 first"
		}
		return "ip6 later"
	}
	if strings.Contains(l, " udp ") {
		return "ip6 first"
	}
	return "ip6 later"
}

// firstPacket keeps the trace lines of the first traced packet. nft prints
// a packet's headers whenever it enters a base chain, under a trace id that
// hashes the packet buffer's address: a later packet of the probe may reuse
// the id, and the same packet may change it (the bridge's netfilter copies
// a DNATed frame). What stays is the packet's key (packetKey: the IP ID of
// IPv4, the SYN of IPv6): an event belongs to the first packet when the
// header line last printed under its trace id carried the first header
// line's key.
func firstPacket(all []string) []string {
	var lines []string
	first := ""
	current := map[string]string{} // trace id -> key of its last header line
	for _, l := range all {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "trace" || f[1] != "id" {
			continue
		}
		if k := packetKey(l); k != "" && strings.Contains(l, " packet: ") {
			current[f[2]] = k
			if first == "" {
				first = k
			}
		}
		if first != "" && current[f[2]] == first {
			lines = append(lines, l)
		}
	}
	return lines
}

// waitLine reads lines until one satisfies ok (true), the channel closes
// (an error) or d passes (false); every line read is appended to keep.
func waitLine(ch <-chan string, ok func(string) bool, d time.Duration, keep *[]string) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case l, open := <-ch:
			if !open {
				return false, fmt.Errorf("nft monitor exited")
			}
			if keep != nil {
				*keep = append(*keep, l)
			}
			if ok(l) {
				return true, nil
			}
		case <-t.C:
			return false, nil
		}
	}
}

var (
	traceRule   = regexp.MustCompile(`^rule (.*) # handle (\d+) \(verdict (.*)\)$`)
	traceUnkown = regexp.MustCompile(`^unknown rule handle (\d+) \(verdict (.*)\)$`)
)

// parseTrace turns `nft -a monitor` trace lines into events; rules of
// table ip kube-proxy get their position from rs. Our own table's events
// are left out.
func parseTrace(lines []string, rs *nftsim.Ruleset) []TraceEvent {
	var out []TraceEvent
	for _, l := range lines {
		// trace id ID FAMILY TABLE CHAIN REST
		f := strings.SplitN(l, " ", 7)
		if len(f) < 7 || f[0] != "trace" || f[1] != "id" {
			continue
		}
		table, chain, rest := f[4], f[5], strings.TrimSpace(f[6])
		if table == traceTable {
			continue
		}
		e := TraceEvent{Table: table, Chain: chain}
		switch {
		case strings.HasPrefix(rest, "packet:"):
			continue
		case strings.HasPrefix(rest, "policy "):
			e.Verdict = strings.Fields(rest)[1]
			e.Text = "policy " + e.Verdict
		case traceRule.MatchString(rest):
			m := traceRule.FindStringSubmatch(rest)
			e.Text, e.Verdict = strings.TrimSpace(m[1]), m[3]
			e.Handle, _ = strconv.Atoi(m[2])
		case traceUnkown.MatchString(rest):
			m := traceUnkown.FindStringSubmatch(rest)
			e.Handle, _ = strconv.Atoi(m[1])
			e.Text, e.Verdict = "rule handle "+m[1], m[2]
		default:
			e.Text = rest
		}
		if table == nftTable && e.Handle != 0 && rs != nil {
			e.Rule, _ = rs.Position(chain, e.Handle)
		}
		out = append(out, e)
	}
	return out
}

// ConfirmTrace is Confirm for nftables mode: the rules the kernel's trace
// saw the probe match stand in for the counters that moved, and the trace
// must not show a kube-proxy rule the predicted path lacks either.
func ConfirmTrace(l *Live, paths []Path, events []TraceEvent) {
	seen := map[string]bool{}
	for _, e := range events {
		if e.Table == nftTable && e.Rule > 0 {
			seen[fmt.Sprintf("%s/%s/%d", e.Table, e.Chain, e.Rule)] = true
		}
	}
	l.Trace = events
	// The trace names kube-proxy's rules by position; minikit's own
	// iptables rules on the path are confirmed by their counters
	// (confirmPolicy), so only kube-proxy's steps are checked here.
	own := make([]Path, len(paths))
	for i, p := range paths {
		own[i] = p
		own[i].Steps = nil
		for _, s := range p.Steps {
			if s.Table == nftTable {
				own[i].Steps = append(own[i].Steps, s)
			}
		}
	}
	confirm(l, own, seen, "the kernel's trace does not show it")
	paths = own
	if l.Path < 0 {
		return
	}
	onPath := map[string]bool{}
	for _, s := range paths[l.Path].Steps {
		onPath[fmt.Sprintf("%s/%s/%d", s.Table, s.Chain, s.Rule)] = true
	}
	for _, e := range events {
		if e.Table == nftTable && e.Rule > 0 && !onPath[fmt.Sprintf("%s/%s/%d", e.Table, e.Chain, e.Rule)] {
			l.Confirmed = false
			l.Notes = append(l.Notes, fmt.Sprintf("the kernel's trace shows %s %s #%d (%s), which the predicted path does not take", e.Table, e.Chain, e.Rule, e.Text))
		}
	}
}

// nftLive is the probe of live in nftables mode.
func (r *run) nftLive(res *Result, ns string) (probeResult, []TraceEvent, error) {
	var pr probeResult
	m := nftProbeMatch{Src: res.From.IP, Dst: res.To.Addr, Proto: res.Proto}
	lines, err := nftTraceProbe(res.Netns, m, func() { pr = probe(ns, res.Proto, res.To.Addr, r.o.Timeout) }, 5*time.Second)
	if err != nil {
		if pr.conn != nil {
			pr.conn.Close()
		}
		return pr, nil, err
	}
	return pr, parseTrace(lines, r.nftRuleset), nil
}
