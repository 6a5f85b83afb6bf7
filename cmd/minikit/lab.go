package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/lab"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addProxyModeFlag is --proxy-mode of `minikit server`, `minikit agent` and
// `minikit lab up`.
func addProxyModeFlag(cmd *cobra.Command, mode *string) {
	cmd.Flags().StringVar(mode, "proxy-mode", string(cluster.ProxyModeIPTables),
		"rules the service proxy writes: iptables (KUBE-* chains) or nftables (table ip kube-proxy); "+
			"starting in one mode removes the other's")
	cmd.RegisterFlagCompletionFunc("proxy-mode", cobra.FixedCompletions(
		[]string{string(cluster.ProxyModeIPTables), string(cluster.ProxyModeNFTables)}, cobra.ShellCompDirectiveNoFileComp))
}

// addPodNetworkFlag is --pod-network of `minikit server`, `minikit agent`
// and `minikit lab up`.
func addPodNetworkFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "pod-network", string(cluster.PodNetworkHostGW),
		"how pods reach other nodes' pods: host-gw (routes via the nodes, which must share one L2 segment) or "+
			"vxlan (flannel's VXLAN overlay through flannel.1, UDP 8472); starting in one mode removes the other's")
	cmd.RegisterFlagCompletionFunc("pod-network", cobra.FixedCompletions(
		[]string{string(cluster.PodNetworkHostGW), string(cluster.PodNetworkVXLAN)}, cobra.ShellCompDirectiveNoFileComp))
}

// addDNSFlags are the cluster DNS flags of `minikit server` and `minikit agent`.
func addDNSFlags(fl *pflag.FlagSet, o *cluster.DNSConfig) {
	fl.StringSliceVar(&o.Upstream, "dns-upstream", nil, "server: the coredns ConfigMap's upstreams for names outside the cluster, \"forward . IP...\" (default: forward . /etc/resolv.conf, the node's resolvers)")
	fl.StringVar(&o.Zone, "cluster-domain", "cluster.local", "the cluster DNS zone")
	fl.StringVar(&o.Pods, "dns-pod-records", "disabled", "server: the coredns ConfigMap's pod records a-b-c-d.NS.pod.ZONE (\"pods MODE\"): disabled, insecure or verified")
	fl.BoolVar(&o.Disabled, "disable-dns", false, "server: install no coredns add-on; every node: pods get no cluster DNS in their resolv.conf")
}

func newLabCommand() *cobra.Command {
	var cfg lab.Config
	var output string
	var wait bool
	merge := true
	root := &cobra.Command{Use: "lab", Short: "A cluster of network namespaces on this machine: nodes, a client and an external host",
		Long: `A cluster of network namespaces on this machine: nodes, a client and an external host.

Every lab is recorded by name in ` + lab.RegistryDir + `/NAME.json with its directory,
so that the other lab commands find it by --name whatever --dir it was made with;
with one lab they find it without --name. ` + "`minikit lab list`" + ` shows them.`,
		Example: `  sudo minikit lab up --nodes 3
  minikit lab list
  minikit lab status
  sudo minikit lab exec client -- curl -s http://192.168.56.11:30007/
  sudo minikit lab down`}
	addName := func(c *cobra.Command) {
		c.Flags().StringVar(&cfg.Name, "name", "", "lab name (default: the only lab, else \"lab\")")
		c.Flags().StringVar(&cfg.Dir, "dir", "", "lab directory (default: where the lab registry says the lab is, else /var/lib/minikit-lab/NAME)")
		c.RegisterFlagCompletionFunc("name", completeLabNames)
		c.MarkFlagDirname("dir")
	}
	addOutput := func(c *cobra.Command) {
		c.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: text)")
		c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	}
	checkLabOutput := func() error { return checkOutput(output, "", "json", "yaml") }
	up := &cobra.Command{
		Use:   "up",
		Short: "Create a lab and wait until every node is Ready",
		Long: `Create a lab and wait until every node is Ready.

Run with sudo, the lab's kubeconfig belongs to the user who ran sudo (mode 0600:
the token is theirs alone), and its cluster, user and context, all named
minikit-NAME, are merged into that user's ~/.kube/config, which is created if
missing (--kubeconfig names another file), and minikit-NAME becomes the
current context, as kind does with kind-NAME: kubectl then works from the
user's shell without sudo or KUBECONFIG.
lab down removes them again and makes the previous context current again.
--kubeconfig-merge=false leaves ~/.kube/config alone.`,
		Example: `  sudo minikit lab up
  sudo minikit lab up --name np --nodes 3
  sudo minikit lab up --proxy-mode nftables
  sudo minikit lab up --pod-network vxlan --topology routed
  sudo minikit lab up --nodes 4 --servers 3
  sudo minikit lab up --datastore etcd
  sudo minikit lab up --kubeconfig-merge=false -o json
  sudo minikit lab up --wait -o json > lab.json`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error { return checkLabOutput() },
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkIPFamily(cfg.IPFamily); err != nil {
				return err
			}
			if err := preflight(cmd); err != nil {
				return err
			}
			if cfg.Name == "" {
				cfg.Name = "lab"
			}
			start := time.Now()
			cfg.Logger = newLogger("warn")
			owner, err := lab.InvokingUser()
			if err != nil {
				return err
			}
			if owner.UID != os.Geteuid() || merge {
				cfg.Owner = owner
			}
			cfg.MergeKubeconfig = merge
			l, err := lab.Up(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if wait {
				if err := l.WaitServices(cmd.Context()); err != nil {
					return fmt.Errorf("lab %q is up, but not ready for pods: %w (minikit lab logs --name %s --dir DIR collects its logs)", l.Name(), err, l.Name())
				}
			}
			w := cmd.OutOrStdout()
			info := l.Info(cmd.Context())
			if output != "" {
				return printStructured(w, output, info)
			}
			fmt.Fprintf(w, "lab %q is up with %d nodes in %.1fs\n", l.Name(), cfg.Nodes, time.Since(start).Seconds())
			lab.PrintInfo(w, info)
			switch {
			case l.UserKubeconfig() != "":
				fmt.Fprintf(w, "kubectl now uses context %s (kubectl config use-context to switch back)\n", lab.ContextName(l.Name()))
			case l.KubeconfigReachable():
				fmt.Fprintf(w, "  export KUBECONFIG=%s\n", l.Kubeconfig())
			}
			if !l.KubeconfigReachable() {
				fmt.Fprintf(w, "note: %s cannot enter the directories above %s; use minikit lab kubeconfig --name %s > FILE\n", owner.Name, l.Kubeconfig(), l.Name())
			}
			return nil
		},
	}
	up.Flags().StringVar(&cfg.Name, "name", "lab", "lab name (prefix of its namespaces)")
	up.Flags().StringVar(&cfg.Dir, "dir", "", "lab directory (default /var/lib/minikit-lab/NAME)")
	up.Flags().IntVar(&cfg.Nodes, "nodes", 2, "number of nodes")
	up.Flags().IntVar(&cfg.Zones, "zones", 0, "availability zones the nodes spread over, round-robin (node labels topology.kubernetes.io/zone=zone-1, zone-2, …); default 3, or one per node in a smaller lab")
	up.Flags().BoolVar(&cfg.ControlPlaneTaint, "control-plane-taint", false, "taint the control-plane nodes node-role.kubernetes.io/control-plane:NoSchedule, as kubeadm does, so pods run on the other nodes (default: every node runs pods, as on k3s)")
	up.Flags().StringVar(&cfg.Datastore, "datastore", "bolt", "the server's store: bolt, or etcd (an external etcd the lab runs on its external host, with client certificates)")
	up.Flags().IntVar(&cfg.Servers, "servers", 1, "how many nodes run `minikit server`: 1 (bbolt), or 3, 5, 7 for an HA control plane on an etcd embedded in them")
	up.Flags().BoolVar(&merge, "kubeconfig-merge", true, "add the context minikit-NAME to the invoking user's ~/.kube/config and make it current")
	up.Flags().StringVar(&cfg.UserKubeconfig, "kubeconfig", "", "the kubeconfig to merge the context into (default: the invoking user's ~/.kube/config)")
	up.Flags().BoolVar(&wait, "wait", false, "also wait until, from every node, the cluster DNS Service answers (the proxies' rules and the DNS servers are ready): what a CI job needs before kubectl apply")
	addProxyModeFlag(up, &cfg.ProxyMode)
	addPodNetworkFlag(up, &cfg.PodNetwork)
	up.Flags().StringVar(&cfg.Topology, "topology", "flat", "flat (every host on one segment) or routed (node2 and up on a second subnet behind a router; needs --pod-network vxlan)")
	up.Flags().StringVar(&cfg.IPFamily, "ip-family", lab.IPFamilyIPv4, "the cluster's IP family: ipv4, dual (IPv4 primary with IPv6 beside it) or ipv6 (IPv6 single-stack)")
	addOutput(up)
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab: its processes, pods, namespaces, directory and kubeconfig context",
		Long: `Remove a lab: its processes, pods, namespaces, directory and kubeconfig context.

Afterwards it checks that nothing of the lab is left (processes, network
namespaces, pod namespaces, mounts, directory) and fails, naming what is,
if anything is; the lab then stays registered, and down can be run again.`,
		Example: `  sudo minikit lab down
  sudo minikit lab down --name np`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := pickLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			exe, _ := os.Executable()
			err = lab.DownByName(name, cfg.Dir, exe, newLogger("warn"))
			if errors.Is(err, lab.ErrNoLab) {
				fmt.Fprintf(cmd.ErrOrStderr(), "%v: nothing to remove\n", err)
				return nil
			}
			return err
		},
	}
	addName(down)
	status := &cobra.Command{
		Use:   "status",
		Short: "Show a lab's hosts, addresses and processes",
		Example: `  minikit lab status
  minikit lab status --name np -o yaml`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error { return checkLabOutput() },
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := pickAndLoadLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			info := st.Info(cmd.Context(), true)
			if output != "" {
				return printStructured(cmd.OutOrStdout(), output, info)
			}
			lab.PrintInfo(cmd.OutOrStdout(), info)
			return nil
		},
	}
	addName(status)
	addOutput(status)
	list := &cobra.Command{
		Use:   "list",
		Short: "List the labs on this machine",
		Example: `  minikit lab list
  minikit lab list -o json | jq -r '.[].name'`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, args []string) error { return checkLabOutput() },
		RunE: func(cmd *cobra.Command, args []string) error {
			infos := []lab.Info{}
			for _, e := range lab.Registered() {
				st, err := lab.Load(e.Name, e.Dir)
				if err != nil {
					st = lab.State{Name: e.Name, Dir: e.Dir}
				}
				infos = append(infos, st.Info(cmd.Context(), false))
			}
			w := cmd.OutOrStdout()
			if output != "" {
				return printStructured(w, output, infos)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tNODES\tRUNNING\tAPI\tDIR\tKUBECONFIG")
			for _, in := range infos {
				fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%s\t%s\n", in.Name, in.Nodes, in.Running && len(in.Hosts) > 0, in.APIServer, in.Dir, in.Kubeconfig)
			}
			return tw.Flush()
		},
	}
	addOutput(list)
	kubeconfig := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print a lab's kubeconfig (context minikit-NAME)",
		Example: `  minikit lab kubeconfig > lab.kubeconfig
  sudo minikit lab kubeconfig --name np > np.kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := pickAndLoadLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(filepath.Join(st.Dir, "kubeconfig"))
			if err != nil {
				return fmt.Errorf("reading the kubeconfig of lab %q: %w", st.Name, err)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	addName(kubeconfig)
	execCmd := &cobra.Command{
		Use:   "exec HOST -- COMMAND [ARGS...]",
		Short: "Run a command on a lab host (node1..., client, external)",
		Example: `  sudo minikit lab exec node1 -- iptables-save -t nat
  sudo minikit lab exec client -- curl -s http://192.168.56.11:30007/
  sudo minikit lab exec --name np node2 -- ip route`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := pickLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			c := exec.Command("nsenter", append([]string{"--net=/run/netns/" + lab.NS(name, args[0]), "--"}, args[1:]...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if st, err := lab.Load(name, cfg.Dir); err == nil {
				c.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(st.Dir, "kubeconfig"))
			}
			err = c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		},
	}
	addName(execCmd)
	execCmd.ValidArgsFunction = completeLabHost(&cfg.Name, &cfg.Dir, false)
	var remove bool
	var podNetwork string
	stop := &cobra.Command{
		Use:   "stop HOST",
		Short: "Stop a lab node's minikit (its pods keep running); --remove also takes the node out of the cluster",
		Example: `  sudo minikit lab stop node2
  sudo minikit lab stop node2 --remove`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := openLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			if remove {
				return l.RemoveNode(cmd.Context(), args[0])
			}
			return l.Stop(args[0], syscall.SIGTERM)
		},
	}
	addName(stop)
	stop.ValidArgsFunction = completeLabHost(&cfg.Name, &cfg.Dir, true)
	stop.Flags().BoolVar(&remove, "remove", false, "also remove the node's pods and its Node object")
	startCmd := &cobra.Command{
		Use:   "start HOST",
		Short: "Start a stopped lab node's minikit again",
		Example: `  sudo minikit lab start node2
  sudo minikit lab start --name np node2
  sudo minikit lab start node2 --pod-network vxlan   # after lab stop node2: switch its pod network`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := openLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			if podNetwork != "" {
				if err := l.SetPodNetwork(args[0], podNetwork); err != nil {
					return err
				}
			}
			return l.Start(args[0])
		},
	}
	startCmd.Flags().StringVar(&podNetwork, "pod-network", "", "restart the node with this pod network (host-gw or vxlan); default: the one it ran with")
	addName(startCmd)
	startCmd.ValidArgsFunction = completeLabHost(&cfg.Name, &cfg.Dir, true)
	logs := &cobra.Command{
		Use:   "logs OUT_DIR",
		Short: "Copy every log of a lab (each host's, each etcd member's) into a directory",
		Long: `Copy every log of a lab into OUT_DIR, made if missing: each host's
minikit process (node1.log, node2.log, client.log, external.log, forwarder.log...)
and each embedded etcd member's (NODE-etcd.log). It reads only the lab's
directory, so it also works after the lab's processes died; run it before
lab down, which removes them. CI jobs keep the directory as an artifact.`,
		Example: `  sudo minikit lab logs lab-logs
  sudo minikit lab logs --name ci "$CI_PROJECT_DIR/lab-logs"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := pickAndLoadLab(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			wrote, err := lab.CollectLogs(st.Dir, args[0])
			for _, f := range wrote {
				fmt.Fprintln(cmd.OutOrStdout(), f)
			}
			return err
		},
	}
	addName(logs)
	root.AddCommand(up, down, status, list, kubeconfig, execCmd, stop, startCmd, logs)
	root.AddCommand(newLabGraphCommand())
	return root
}

// pickLab is the lab a command means: --name; else, with --dir, the lab in
// that directory; else the only registered lab; else "lab".
func pickLab(name, dir string) (string, error) {
	if name != "" {
		return name, nil
	}
	if dir != "" {
		st, err := lab.Load("", dir)
		if err != nil {
			return "", err
		}
		return st.Name, nil
	}
	labs := lab.Registered()
	switch len(labs) {
	case 0:
		return "lab", nil
	case 1:
		return labs[0].Name, nil
	}
	var names []string
	for _, e := range labs {
		if e.Name == "lab" {
			return "lab", nil
		}
		names = append(names, e.Name)
	}
	return "", fmt.Errorf("%d labs on this machine (%s): choose one with --name", len(labs), strings.Join(names, ", "))
}

// newLabHelperCommands are the hidden processes a lab runs: the API
// forwarder, the external host's services and the external etcd.
func newLabHelperCommands() []*cobra.Command {
	var listen, netns, to, address, etcdDir string
	helper := func(use string, run func(ctx context.Context) error) *cobra.Command {
		return &cobra.Command{
			Use: use, Hidden: true, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return run(ctx)
			},
		}
	}
	addr := func() (netip.Addr, error) { return netip.ParseAddr(address) }
	fwd := helper("__lab-forward", func(ctx context.Context) error {
		return lab.Forward(ctx, listen, netns, to, newLogger("info"))
	})
	fwd.Flags().StringVar(&listen, "listen", "", "")
	fwd.Flags().StringVar(&netns, "netns", "", "")
	fwd.Flags().StringVar(&to, "to", "", "")
	ext := helper("__lab-external", func(ctx context.Context) error {
		a, err := addr()
		if err != nil {
			return err
		}
		return lab.RunExternal(ctx, a, newLogger("info"))
	})
	ext.Flags().StringVar(&address, "address", "", "")
	etcd := helper("__lab-etcd", func(ctx context.Context) error {
		a, err := addr()
		if err != nil {
			return err
		}
		return lab.RunEtcd(ctx, etcdDir, a, newLogger("info"))
	})
	etcd.Flags().StringVar(&etcdDir, "dir", "", "")
	etcd.Flags().StringVar(&address, "address", "", "")
	return []*cobra.Command{fwd, ext, etcd}
}

// openLab opens the lab named (or the only one) to act on one of its hosts.
func openLab(name, dir string) (*lab.Lab, error) {
	name, err := pickLab(name, dir)
	if err != nil {
		return nil, err
	}
	exe, _ := os.Executable()
	return lab.Open(name, dir, exe, newLogger("warn"))
}

// pickAndLoadLab reads the state of the lab named (or the only one).
func pickAndLoadLab(name, dir string) (lab.State, error) {
	name, err := pickLab(name, dir)
	if err != nil {
		return lab.State{}, err
	}
	return lab.Load(name, dir)
}

// checkIPFamily refuses an --ip-family lab up does not know, naming the
// flag.
func checkIPFamily(f string) error {
	switch f {
	case "", lab.IPFamilyIPv4, lab.IPFamilyDual, lab.IPFamilyIPv6:
		return nil
	}
	return fmt.Errorf("unknown --ip-family %q: want ipv4, ipv6 or dual", f)
}
