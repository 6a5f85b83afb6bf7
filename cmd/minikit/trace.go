package main

import (
	"time"

	"github.com/minikit/minikit/internal/trace"

	"github.com/spf13/cobra"
)

// newTraceCommand is `minikit trace FROM TO`.
func newTraceCommand() *cobra.Command {
	var o trace.Config
	var kubeconfig, output string
	cmd := &cobra.Command{
		Use:   "trace FROM TO",
		Short: "Show the path a packet takes through a node's proxy rules (iptables or nftables)",
		Long: `Trace the first packet of a connection from FROM to TO through the rules
actually in the kernel of the node that receives it, read inside the node's
network namespace in the node's proxy mode: iptables-save in iptables mode,
nft -j list table ip kube-proxy in nftables mode (where that table exists). It
prints every rule that matches, the probability of each endpoint, the DNAT,
the 0x4000 mark and the masquerade, the route out and the pod reached, or the
DROP/REJECT and why. Both modes print the same way; in nftables mode a rule is
"kube-proxy CHAIN #N: RULE" and a map lookup names the element it found.

The paths come most probable first (probabilities equal to one part in a
million are equal) and, among equal ones, in the order the kernel's rules give
them: the KUBE-SEP rules' order in iptables mode, the numgen map's elements in
nftables mode. The same rules give the same order in every output (tree, json,
yaml, dot) and in minikit ui, every time.

FROM: pod/NAME (or NAME), node/NAME, client or external (the lab's hosts), or an IP.
TO:   svc/NAME[:PORT] (the cluster IP), or ADDRESS:PORT where ADDRESS is a
      cluster IP, external IP, LoadBalancer IP, node IP or node name (NodePort).

A TO that is a Gateway's address and one of its listeners' ports (the Gateway
API, GatewayClass minikit) is traced through the kernel's rules for the
Gateway's LoadBalancer Service, which DNAT it to a node's data port; then a
gateway section names the Gateway and listener, the node announcing the
address, the nodes whose Gateway data plane (a user-space proxy, not a kernel
rule) the paths end at, and the routes attached to the listener with their
rules, backends and the backends' ready pods. Which route, rule and backend
take a request is decided per request (Host, path, headers; the TLS server
name for TLS passthrough) and by weight: the trace lists the candidates.

In a dual-stack cluster a trace follows one family, TO's: an IPv6 address
([fd00:10:96::a]:80) or --ip-family ipv6 (svc/NAME then means the Service's
IPv6 cluster IP, a node name its IPv6 InternalIP) reads the IPv6 proxier's
rules, ip6tables-save or nft list table ip6 kube-proxy, and FROM sends from
its IPv6 address.

With --live, one real connection (or UDP datagram) is sent from FROM's network
namespace and the conntrack entry it created, and in iptables mode the counters
that moved, are compared with the prediction. In nftables mode the kernel
traces the probe itself: a temporary table ip minikit-trace (removed again
afterwards) sets nftrace for the probe's addresses and port only, and nft
monitor reports every rule the probe matched, which must be the predicted path.`,
		Example: `  sudo minikit trace client node2:30080
  sudo minikit trace pod/client svc/web:http -o json --live
  sudo minikit trace -n networkpolicy pod/frontend svc/db:6379 -o yaml
  sudo minikit trace node1 svc/web -o dot | dot -Tsvg > trace.svg
  sudo minikit trace --lab nft client node1:30080 --live   # a lab up with --proxy-mode nftables
  sudo minikit trace --ip-family ipv6 pod/client svc/web --live   # a lab up with --ip-family dual`,
		Args: cobra.ExactArgs(2),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			return checkOutput(output, "tree", "json", "yaml", "dot")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.From, o.To = args[0], args[1]
			client, gw, ns, t, err := kubeClientsFor(kubeconfig, o.Lab, o.Namespace)
			if err != nil {
				return err
			}
			o.Namespace, o.Gateway = ns, gw
			if o.Lab == "" {
				// The lab the kubeconfig belongs to (its context minikit-NAME,
				// or its server URL); "" for a cluster that is no lab.
				o.Lab = t.lab
			}
			res, err := trace.Run(cmd.Context(), client, o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch output {
			case "json":
				return res.JSON(w)
			case "yaml":
				return printStructured(w, output, res)
			case "dot":
				res.Dot(w)
			default:
				res.Tree(w)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: KUBECONFIG, then the lab the user's current context minikit-NAME names, the only lab, the local server)")
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "namespace of FROM's pod and TO's Service")
	fl.StringVar(&o.Proto, "proto", "", "tcp or udp (default: the Service port's protocol, else tcp)")
	fl.StringVar(&o.Node, "node", "", "node whose rules to read (default: the node that receives the first packet)")
	fl.StringVar(&o.Lab, "lab", "", "lab whose network namespaces are the nodes (LAB-NODE) and whose API to ask (default: the kubeconfig's lab, else the only lab); other nodes are read from this machine's own namespace if they are this machine")
	fl.StringVar(&o.Family, "ip-family", "", "in a dual-stack cluster, the address family to trace: ipv4 or ipv6 (which cluster IP svc/NAME means, which address of a node or of FROM; default: the family of TO's address, else the primary)")
	fl.BoolVar(&o.Live, "live", false, "send one real probe from FROM and confirm the path with conntrack and the kernel's counters (iptables) or its nftrace (nftables)")
	fl.DurationVar(&o.Timeout, "timeout", 3*time.Second, "how long the live probe waits")
	fl.StringVarP(&output, "output", "o", "tree", "tree, json, yaml or dot")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"tree", "json", "yaml", "dot"}, noFiles))
	cmd.RegisterFlagCompletionFunc("lab", completeLabNames)
	cmd.RegisterFlagCompletionFunc("proto", cobra.FixedCompletions([]string{"tcp", "udp"}, noFiles))
	cmd.RegisterFlagCompletionFunc("ip-family", cobra.FixedCompletions([]string{"ipv4", "ipv6"}, noFiles))
	cmd.ValidArgsFunction = completeTrace(&kubeconfig, &o.Lab, &o.Namespace)
	return cmd
}
