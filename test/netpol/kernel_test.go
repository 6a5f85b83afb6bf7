package netpol_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/test/testenv"

	"github.com/vishvananda/netlink"
)

// Names the enforcer owns (np-contract).
const (
	hookChain = "KUBE-NWPLCY-FORWARD"
	setPrefix = "KUBE-NP-"
)

func ownedChain(c string) bool {
	return strings.HasPrefix(c, "KUBE-NWPLCY-") || strings.HasPrefix(c, "KUBE-POD-FW-")
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// enforcerRules is what the enforcer keeps in a node's filter table: its chain
// declarations and rules and every FORWARD rule that jumps to its hook, in
// iptables-save order, without counters.
func enforcerRules(l *lab.Lab, host string) (string, error) {
	out, err := testenv.Run(l, host, "iptables-save", "-t", "filter")
	if err != nil {
		return "", fmt.Errorf("iptables-save on %s: %v: %s", host, err, out)
	}
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 1 && strings.HasPrefix(f[0], ":") && ownedChain(f[0][1:]):
			keep = append(keep, counters.ReplaceAllString(line, "[0:0]"))
		case len(f) >= 2 && f[0] == "-A" && ownedChain(f[1]):
			keep = append(keep, line)
		case len(f) >= 2 && f[0] == "-A" && f[1] == "FORWARD" && strings.Contains(line, "-j "+hookChain):
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n"), nil
}

// forwardJumps counts the FORWARD rules jumping to the hook chain, and says
// whether the first FORWARD rule is one.
func forwardJumps(l *lab.Lab, host string) (n int, first bool, err error) {
	out, err := testenv.Run(l, host, "iptables", "-S", "FORWARD")
	if err != nil {
		return 0, false, fmt.Errorf("iptables -S FORWARD on %s: %v: %s", host, err, out)
	}
	rules := 0
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "-A FORWARD") {
			continue
		}
		rules++
		if strings.Contains(line, "-j "+hookChain) {
			n++
			first = first || rules == 1
		}
	}
	return n, first, nil
}

// enforcerSets lists the enforcer's ipsets on a lab host with their members,
// sorted (no ipset binary is needed: netlink speaks ipset).
func enforcerSets(l *lab.Lab, host string) (string, error) {
	var sets []netlink.IPSetResult
	err := netns.DoPath(netns.NetNSPath(lab.NS(l.Name(), host)), func() error {
		var err error
		sets, err = netlink.IpsetListAll()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("listing the ipsets of %s: %w", host, err)
	}
	var lines []string
	for _, s := range sets {
		if !strings.HasPrefix(s.SetName, setPrefix) {
			continue
		}
		var members []string
		for _, e := range s.Entries {
			m := e.IP.String()
			if e.CIDR != 0 {
				m += fmt.Sprintf("/%d", e.CIDR)
			}
			if e.Port != nil {
				proto := 0
				if e.Protocol != nil {
					proto = int(*e.Protocol)
				}
				m += fmt.Sprintf(",%d:%d", proto, *e.Port)
			}
			members = append(members, m)
		}
		sort.Strings(members)
		lines = append(lines, s.SetName+" "+s.TypeName+" "+strings.Join(members, " "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// enforcerState is a node's enforcer rules and sets, comparable across restarts.
func enforcerState(t *testing.T, l *lab.Lab, host string) string {
	t.Helper()
	rules, err := enforcerRules(l, host)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := enforcerSets(l, host)
	if err != nil {
		t.Fatal(err)
	}
	return rules + "\n--- ipsets\n" + sets
}

// inSet says whether any of the enforcer's ipsets on host holds ip.
func inSet(l *lab.Lab, host, ip string) (bool, error) {
	sets, err := enforcerSets(l, host)
	if err != nil {
		return false, err
	}
	return strings.Contains(" "+strings.ReplaceAll(sets, "\n", " ")+" ", " "+ip+"/32 ") ||
		strings.Contains(" "+strings.ReplaceAll(sets, "\n", " ")+" ", " "+ip+" "), nil
}
