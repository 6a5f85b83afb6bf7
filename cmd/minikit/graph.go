package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// newLabGraphCommand is `minikit lab graph`.
func newLabGraphCommand() *cobra.Command {
	var name, dir, output, from, namespace, traceNode string
	var path int
	var stable bool
	cmd := &cobra.Command{
		Use:   "graph [--trace FROM TO]",
		Short: "Draw a lab's network as it is in the kernel: SVG, Graphviz dot, Mermaid or JSON",
		Long: `Draw a lab's network as it is: every namespace of the lab (the underlay
bridge's, the nodes', the client's and external host's, every pod's) read
from its kernel with netlink — links, veth peers, bridges, addresses, main
table routes — with the nodes, pods, Services, Ingresses, Gateways and
their routes (HTTPRoute, GRPCRoute, TLSRoute) from the API. A cluster without
the Gateway API's CRDs (--gateway-api=false) simply has no Gateways.
Nothing is drawn from what minikit meant to create: an interface deleted by
hand is missing from the picture.

-o svg (the default) is laid out by minikit itself (no Graphviz needed);
-o dot and -o mermaid are for documents; -o json is the model for scripts.

--trace FROM TO draws the path of ` + "`minikit trace FROM TO`" + ` over the picture:
the hops highlighted and numbered, DNAT, mark and MASQUERADE at the node
whose rules were read, and a DROP or REJECT where the packet ends. --path N
picks another of the trace's paths (0 is the most probable). With -o json
the graph then has a "hops" list: each hop's element (a host, interface or
link id of the graph), its kind, its label and, where the packet ends, its
verdict.

--stable names pods by their owner and ordinal and leaves out MAC
addresses, interface indexes and veth hash names, so that the pictures in
the documentation do not change when a lab is made again.`,
		Example: `  sudo minikit lab graph > lab.svg
  sudo minikit lab graph --name np -o json | jq '.hosts[] | {id, address}'
  sudo minikit lab graph -o mermaid
  sudo minikit lab graph -o dot | dot -Tpng > lab.png
  sudo minikit lab graph --trace client node1:30007 > nodeport.svg
  sudo minikit lab graph -n networkpolicy --trace pod/frontend svc/db:6379 --path 1 -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if from != "" {
				if len(args) != 1 {
					return fmt.Errorf("--trace FROM TO takes TO as the one argument, got %d arguments", len(args))
				}
				return nil
			}
			return cobra.NoArgs(cmd, args)
		},
		PreRunE: func(cmd *cobra.Command, args []string) error {
			return checkOutput(output, "svg", "dot", "mermaid", "json")
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := pickLab(name, dir)
			if err != nil {
				return err
			}
			st, err := loadLab(name, dir)
			if err != nil {
				return err
			}
			client, gw, err := labClient(st)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			g, err := topology.NewCollector(st, client, gw).Collect(ctx)
			if err != nil {
				return err
			}
			var hops []topology.Hop
			if from != "" {
				res, err := trace.Run(ctx, client, trace.Config{From: from, To: args[0], Lab: st.Name, Namespace: namespace, Node: traceNode, Gateway: gw})
				if err != nil {
					return err
				}
				if path < 0 || path >= len(res.Paths) {
					return fmt.Errorf("--path %d: the trace from %s to %s has %d paths (0 to %d)", path, from, args[0], len(res.Paths), len(res.Paths)-1)
				}
				hops = topology.PathOf(g, res, path)
				if len(hops) == 0 {
					return fmt.Errorf("the trace from %s to %s starts at no host of lab %q", from, args[0], st.Name)
				}
			}
			if stable {
				g, hops = topology.Stable(g, hops)
			}
			w := cmd.OutOrStdout()
			switch output {
			case "json":
				if from != "" {
					return printStructured(w, "json", struct {
						*topology.Graph
						Hops []topology.Hop `json:"hops"`
					}{g, hops})
				}
				return topology.WriteJSON(w, g)
			case "dot":
				return topology.WriteDot(w, g, hops)
			case "mermaid":
				return topology.WriteMermaid(w, g, hops)
			default:
				return topology.WriteSVG(w, g, hops)
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&name, "name", "", "lab name (default: the only lab, else \"lab\")")
	fl.StringVar(&dir, "dir", "", "lab directory (default: where the lab registry says the lab is)")
	fl.StringVarP(&output, "output", "o", "svg", "svg, dot, mermaid or json")
	fl.StringVar(&from, "trace", "", "draw the path of `minikit trace FROM TO` (TO is the argument)")
	fl.IntVar(&path, "path", 0, "with --trace: which of the trace's paths to draw (0: the most probable)")
	fl.StringVarP(&namespace, "namespace", "n", "default", "with --trace: namespace of FROM's pod and TO's Service")
	fl.StringVar(&traceNode, "node", "", "with --trace: node whose rules to read (default: the node that receives the first packet)")
	fl.BoolVar(&stable, "stable", false, "pods by owner and ordinal, no MACs, indexes or veth hash names (pictures for docs)")
	cmd.RegisterFlagCompletionFunc("name", completeLabNames)
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"svg", "dot", "mermaid", "json"}, noFiles))
	cmd.MarkFlagDirname("dir")
	return cmd
}

// loadLab reads a lab's state; a lab that does not exist is an error that
// names the labs that do.
func loadLab(name, dir string) (lab.State, error) {
	st, err := lab.Load(name, dir)
	if errors.Is(err, fs.ErrNotExist) {
		if _, ok := lab.Lookup(name); !ok || dir == "" {
			return st, topology.LabNotFound(name)
		}
	}
	return st, err
}

// labClient is a client of the lab's API through its loopback forwarder.
func labClient(st lab.State) (kubernetes.Interface, gwclient.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(st.Dir, "kubeconfig"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the kubeconfig of lab %q: %w", st.Name, err)
	}
	rc.QPS, rc.Burst = 100, 200
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	gw, err := gwclient.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return c, gw, nil
}
