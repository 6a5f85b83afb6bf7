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
	"time"

	"github.com/minikit/minikit/cluster"
	"github.com/minikit/minikit/lab"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newAgentCommand() *cobra.Command {
	var cfg cluster.AgentConfig
	var nodeIP, tokenFile, logLevel string
	cmd := &cobra.Command{
		Use:   "agent --server URL --token T",
		Short: "Join this machine to a minikit server as a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Logger, cfg.Version = newLogger(logLevel), version
			if nodeIP != "" {
				ip, err := netip.ParseAddr(nodeIP)
				if err != nil {
					return fmt.Errorf("parsing --node-ip: %w", err)
				}
				cfg.NodeIP = ip
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("reading --token-file: %w", err)
				}
				cfg.Token = strings.TrimSpace(string(b))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := cluster.StartAgent(cfg)
			if err != nil {
				return err
			}
			<-ctx.Done()
			a.Stop()
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.ServerURL, "server", "", "URL of the server's API (https://ADDRESS:6443)")
	fl.StringVar(&cfg.Token, "token", "", "the server's token (its DATA_DIR/token)")
	fl.StringVar(&tokenFile, "token-file", "", "read the token from this file")
	fl.StringVar(&cfg.CAFile, "ca-file", "", "the server's CA certificate (its DATA_DIR/tls/ca.crt)")
	fl.StringVar(&cfg.DataDir, "data-dir", cluster.DefaultDataDir, "directory for this node's state")
	fl.StringVar(&cfg.NodeName, "node-name", "", "name of this node (default: the hostname)")
	fl.StringVar(&nodeIP, "node-ip", "", "InternalIP of this node (default: the first non-loopback IPv4 address)")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	addDNSFlags(fl, &cfg.DNS)
	return cmd
}

// addDNSFlags are the cluster DNS flags of `minikit server` and `minikit agent`.
func addDNSFlags(fl *pflag.FlagSet, o *cluster.DNSOptions) {
	fl.StringSliceVar(&o.Upstream, "dns-upstream", nil, "resolvers for names outside the cluster (default: the node's /etc/resolv.conf)")
	fl.StringVar(&o.Zone, "cluster-domain", "cluster.local", "the cluster DNS zone")
	fl.StringVar(&o.Pods, "dns-pod-records", "disabled", "pod records a-b-c-d.NS.pod.ZONE: disabled, insecure or verified")
	fl.BoolVar(&o.Disabled, "disable-dns", false, "run no cluster DNS server on this node")
}

func newLabCommand() *cobra.Command {
	var cfg lab.Config
	root := &cobra.Command{Use: "lab", Short: "A cluster of network namespaces on this machine: nodes, a client and an external host"}
	addCommon := func(c *cobra.Command) {
		c.Flags().StringVar(&cfg.Name, "name", "lab", "lab name (prefix of its namespaces)")
		c.Flags().StringVar(&cfg.Dir, "dir", "", "lab directory (default /var/lib/minikit-lab/NAME)")
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Create a lab and wait until every node is Ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			cfg.Logger = newLogger("warn")
			l, err := lab.Up(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %q is up with %d nodes in %.1fs\n", l.Name(), cfg.Nodes, time.Since(start).Seconds())
			for _, h := range l.Hosts() {
				fmt.Fprintf(cmd.OutOrStdout(), "  %-9s %-15s netns %s\n", h, l.Addr(h), lab.NS(l.Name(), h))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kubeconfig: %s\n  export KUBECONFIG=%s\n", l.Kubeconfig(), l.Kubeconfig())
			return nil
		},
	}
	addCommon(up)
	up.Flags().IntVar(&cfg.Nodes, "nodes", 2, "number of nodes")
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab: its processes, pods, namespaces and directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, _ := os.Executable()
			return lab.DownByName(cfg.Name, cfg.Dir, exe, newLogger("warn"))
		},
	}
	addCommon(down)
	status := &cobra.Command{
		Use:   "status",
		Short: "Show a lab's hosts and nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := lab.Load(cfg.Name, cfg.Dir)
			if err != nil {
				return err
			}
			return lab.PrintStatus(cmd.Context(), cmd.OutOrStdout(), st)
		},
	}
	addCommon(status)
	execCmd := &cobra.Command{
		Use:   "exec HOST -- COMMAND [ARGS...]",
		Short: "Run a command on a lab host (node1..., client, external)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := exec.Command("nsenter", append([]string{"--net=/run/netns/" + lab.NS(cfg.Name, args[0]), "--"}, args[1:]...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if st, err := lab.Load(cfg.Name, cfg.Dir); err == nil {
				c.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(st.Dir, "kubeconfig"))
			}
			err := c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		},
	}
	addCommon(execCmd)
	var remove bool
	stop := &cobra.Command{
		Use:   "stop HOST",
		Short: "Stop a lab node's minikit (its pods keep running); --remove also takes the node out of the cluster",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, _ := os.Executable()
			l, err := lab.Open(cfg.Name, cfg.Dir, exe, newLogger("warn"))
			if err != nil {
				return err
			}
			if remove {
				return l.RemoveNode(cmd.Context(), args[0])
			}
			return l.Stop(args[0], syscall.SIGTERM)
		},
	}
	addCommon(stop)
	stop.Flags().BoolVar(&remove, "remove", false, "also remove the node's pods and its Node object")
	startCmd := &cobra.Command{
		Use:   "start HOST",
		Short: "Start a stopped lab node's minikit again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, _ := os.Executable()
			l, err := lab.Open(cfg.Name, cfg.Dir, exe, newLogger("warn"))
			if err != nil {
				return err
			}
			return l.Start(args[0])
		},
	}
	addCommon(startCmd)
	root.AddCommand(up, down, status, execCmd, stop, startCmd)
	return root
}

func newLabHelperCommands() []*cobra.Command {
	var listen, netns, to, address string
	fwd := &cobra.Command{
		Use: "__lab-forward", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return lab.Forward(ctx, listen, netns, to, newLogger("info"))
		},
	}
	fwd.Flags().StringVar(&listen, "listen", "", "")
	fwd.Flags().StringVar(&netns, "netns", "", "")
	fwd.Flags().StringVar(&to, "to", "", "")
	ext := &cobra.Command{
		Use: "__lab-external", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := netip.ParseAddr(address)
			if err != nil {
				return err
			}
			return lab.RunExternal(ctx, a, newLogger("info"))
		},
	}
	ext.Flags().StringVar(&address, "address", "", "")
	return []*cobra.Command{fwd, ext}
}
