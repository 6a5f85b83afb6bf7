package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/trace"

	"github.com/spf13/cobra"
)

// newProxyCommand is `minikit proxy`: looking at the service proxy's
// kernel state on a node.
func newProxyCommand() *cobra.Command {
	proxy := &cobra.Command{
		Use:   "proxy",
		Short: "Look at the service proxy's rules on a node",
		Example: `  sudo minikit proxy rules node1
  sudo minikit proxy rules --lab np`,
	}
	var labName, noDir string
	rules := &cobra.Command{
		Use:   "rules [NODE]",
		Short: "Print a node's service proxy rules as the kernel has them (iptables-save or nft)",
		Long: `Print the service proxy's rules in a node's network namespace, read from the
kernel (never the rules minikit meant to write), in the tool's own syntax:

  iptables mode: iptables-save of the nat and filter tables, cut down to the
                 KUBE-* chains and the rules that jump to them;
  nftables mode: nft list table ip kube-proxy.

The mode is the node's own: nftables where the table ip kube-proxy exists.
Each node's rules start with a comment line naming the node, its namespace
and the mode, so the output can still be fed to iptables-restore or nft -f.

NODE is a node of the lab (--lab, else the only lab); without NODE, every node
of the lab in turn. On a machine that is itself a node (no lab), the rules of
this machine's own namespace.`,
		Example: `  sudo minikit proxy rules node1
  sudo minikit proxy rules --lab np node2 | grep service-ips
  sudo minikit proxy rules                      # every node of the only lab`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			targets, err := proxyRuleTargets(labName, node)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for i, t := range targets {
				mode, text, err := trace.ProxyRules(t.netns)
				if err != nil {
					return fmt.Errorf("reading the proxy rules of node %s: %w", t.node, err)
				}
				if i > 0 {
					fmt.Fprintln(w)
				}
				ns := t.netns
				if ns == "" {
					ns = "the root namespace"
				}
				fmt.Fprintf(w, "# node %s (%s): proxy mode %s\n%s", t.node, ns, mode, text)
			}
			return nil
		},
	}
	rules.Flags().StringVar(&labName, "lab", "", "lab whose network namespaces are the nodes (LAB-NODE) (default: the only lab)")
	rules.RegisterFlagCompletionFunc("lab", completeLabNames)
	rules.ValidArgsFunction = completeLabHost(&labName, &noDir, true)
	proxy.AddCommand(rules)
	return proxy
}

type proxyRuleTarget struct{ node, netns string }

// proxyRuleTargets finds the namespaces of the nodes whose rules to print:
// NODE (or every node) of the lab, or this machine when there is no lab.
func proxyRuleTargets(labName, node string) ([]proxyRuleTarget, error) {
	if labName == "" && len(lab.Registered()) == 0 {
		host, _ := os.Hostname()
		if node != "" && node != host {
			return nil, fmt.Errorf("node %s: there is no lab on this machine, and this machine is %s; run minikit proxy rules on that node", node, host)
		}
		return []proxyRuleTarget{{node: host}}, nil
	}
	name, err := pickLab(labName, "")
	if err != nil {
		return nil, fmt.Errorf("%s (the flag is --lab here)", err)
	}
	if node != "" {
		if node == lab.Client || node == lab.External {
			return nil, fmt.Errorf("%s is a lab host that runs no proxy; NODE is one of the lab's nodes", node)
		}
		ns := lab.NS(name, node)
		if !netns.ExistsNamed(ns) {
			return nil, fmt.Errorf("lab %q has no node %s (no network namespace %s)", name, node, ns)
		}
		return []proxyRuleTarget{{node: node, netns: ns}}, nil
	}
	var out []proxyRuleTarget
	for _, h := range labHosts(name, "") {
		if h == lab.Client || h == lab.External {
			continue
		}
		if ns := lab.NS(name, h); netns.ExistsNamed(ns) {
			out = append(out, proxyRuleTarget{node: h, netns: ns})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lab %q has no running node (no network namespace %s)", name, strings.TrimSuffix(lab.NS(name, "node1"), "1")+"N")
	}
	return out, nil
}
