package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/minikit/minikit/internal/cluster"

	"github.com/spf13/cobra"
)

// agentFlags are the flags of `minikit agent` that are parsed into its
// cluster.AgentConfig rather than bound to it.
type agentFlags struct {
	nodeIP, tokenFile, logLevel, proxyMode, podNetwork string
	serviceCIDR, clusterCIDR                           string
}

// config completes cfg from the flags; every error names its flag.
func (f agentFlags) config(cfg cluster.AgentConfig) (cluster.AgentConfig, error) {
	cfg.Logger, cfg.Version = newLogger(f.logLevel), version
	var err error
	if cfg.ProxyMode, err = cluster.ParseProxyMode(f.proxyMode); err != nil {
		return cfg, fmt.Errorf("parsing --proxy-mode: %w", err)
	}
	if cfg.PodNetwork, err = cluster.ParsePodNetwork(f.podNetwork); err != nil {
		return cfg, fmt.Errorf("parsing --pod-network: %w", err)
	}
	if f.nodeIP != "" {
		if cfg.NodeIP, cfg.SecondaryNodeIP, err = parseNodeIPs(f.nodeIP); err != nil {
			return cfg, fmt.Errorf("parsing --node-ip: %w", err)
		}
	}
	if f.serviceCIDR != "" {
		if cfg.ServiceCIDR, _, err = parseDualStackCIDRs(f.serviceCIDR); err != nil {
			return cfg, fmt.Errorf("parsing --service-cidr: %w", err)
		}
	}
	if f.clusterCIDR != "" {
		if cfg.ClusterCIDR, cfg.SecondaryClusterCIDR, err = parseDualStackCIDRs(f.clusterCIDR); err != nil {
			return cfg, fmt.Errorf("parsing --cluster-cidr: %w", err)
		}
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return cfg, fmt.Errorf("reading --token-file: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	return cfg, nil
}

func newAgentCommand() *cobra.Command {
	var cfg cluster.AgentConfig
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent --server URL --token T",
		Short: "Join this machine to a minikit server as a node",
		Example: `  sudo minikit agent --server https://192.168.56.10:6443 --token-file token --ca-file ca.crt
  sudo minikit agent --server https://192.168.56.10:6443 --token "$(cat token)" --ca-file ca.crt --node-ip 192.168.56.11`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(cfg)
			if err != nil {
				return err
			}
			if err := preflight(cmd); err != nil {
				return err
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
	fl.StringVar(&f.tokenFile, "token-file", "", "read the token from this file")
	fl.StringVar(&cfg.CAFile, "ca-file", "", "the server's CA certificate (its DATA_DIR/tls/ca.crt)")
	fl.StringVar(&cfg.DataDir, "data-dir", cluster.DefaultDataDir, "directory for this node's state")
	fl.StringVar(&cfg.NodeName, "node-name", "", "name of this node (default: the hostname)")
	fl.StringVar(&f.nodeIP, "node-ip", "", "InternalIP of this node (default: the first non-loopback IPv4 address; the first global IPv6 one when --cluster-cidr is IPv6 alone); two comma-separated, of different families, on a dual-stack node")
	fl.StringVar(&f.serviceCIDR, "service-cidr", "10.96.0.0/12", "the server's --service-cidr (its first range gives the cluster DNS address pods use)")
	fl.StringVar(&f.clusterCIDR, "cluster-cidr", "10.244.0.0/16", "the server's --cluster-cidr (the service proxy tells pod traffic by it, one range per family)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	addDNSFlags(fl, &cfg.DNS)
	addProxyModeFlag(cmd, &f.proxyMode)
	addPodNetworkFlag(cmd, &f.podNetwork)
	return cmd
}
