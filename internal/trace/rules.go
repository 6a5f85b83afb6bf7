package trace

import (
	"errors"
	"fmt"
	"strings"

	"github.com/minikit/minikit/internal/netns"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netpol"
)

// Mode is the proxy mode of the node whose network namespace is netns (""
// for this machine's own): nftables when the table ip kube-proxy is there
// (starting one mode removes the other's rules), else iptables.
func Mode(ns string) (string, error) {
	_, err := nftRules(ns, ipv4)
	switch {
	case err == nil:
		return ModeNFTables, nil
	case errors.Is(err, errNoNFTTable):
		return ModeIPTables, nil
	}
	return "", err
}

// ProxyRules returns the service proxy's rules in netns as their own tools
// print them, and the mode: `nft list table ip kube-proxy` in nftables mode;
// in iptables mode `iptables-save` of the nat and filter tables cut down to
// the KUBE-* chains and the rules that jump to them (what kube-proxy owns),
// still input iptables-restore accepts.
func ProxyRules(ns string) (mode, text string, err error) {
	if mode, err = Mode(ns); err != nil {
		return "", "", err
	}
	if mode == ModeNFTables {
		out, err := runNFT(ns, nil, "list", "table", ipv4.nft(), nftTable)
		if err != nil {
			return "", "", err
		}
		return mode, string(out), nil
	}
	path := ""
	if ns != "" {
		path = netns.NetNSPath(ns)
	}
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		save, err := iptables.SaveCounters(path, table)
		if err != nil {
			return "", "", fmt.Errorf("reading the %s table of %s: %w", table, nsName(ns), err)
		}
		b.WriteString(kubeChains(string(save)))
	}
	return mode, b.String(), nil
}

// proxyChain says a chain is the service proxy's: KUBE-*, except the
// network policy enforcer's (KUBE-NWPLCY-*, KUBE-POD-FW-*), which share the
// prefix as kube-router's do.
func proxyChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") && !strings.HasPrefix(name, netpol.PrefixPolicy) && !strings.HasPrefix(name, netpol.PrefixPod)
}

// kubeChains keeps, of iptables-save -c text, the table headers and
// COMMITs, the built-in chains' policies, the proxy's KUBE-* chains and
// their rules, and the rules of other chains that jump or go to one,
// without counters (as plain iptables-save prints them).
func kubeChains(save string) string {
	var b strings.Builder
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "[") {
			if end := strings.IndexByte(l, ']'); end > 0 {
				l = strings.TrimSpace(l[end+1:])
			}
		}
		keep := false
		switch {
		case l == "COMMIT", strings.HasPrefix(l, "*"):
			keep = true
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			keep = len(f) > 1 && (f[1] != "-" || proxyChain(f[0]))
			if keep && f[1] != "-" {
				// Built-in chains' counters say nothing about the proxy.
				l = ":" + f[0] + " " + f[1] + " [0:0]"
			}
		case strings.HasPrefix(l, "-A "):
			args := iptables.SplitRule(l)
			if len(args) > 1 && proxyChain(args[1]) {
				keep = true
			}
			for i := 0; i+1 < len(args); i++ {
				if (args[i] == "-j" || args[i] == "-g") && proxyChain(args[i+1]) {
					keep = true
				}
			}
		}
		if keep {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
