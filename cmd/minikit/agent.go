package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/minikit/minikit/internal/cluster"

	"github.com/spf13/cobra"
)

func newAgentCommand() *cobra.Command {
	var cfg cluster.AgentConfig
	var nodeIP, tokenFile, logLevel, proxyMode, podNetwork string
	cmd := &cobra.Command{
		Use:   "agent --server URL --token T",
		Short: "Join this machine to a minikit server as a node",
		Example: `  sudo minikit agent --server https://192.168.56.10:6443 --token-file token --ca-file ca.crt
  sudo minikit agent --server https://192.168.56.10:6443 --token "$(cat token)" --ca-file ca.crt --node-ip 192.168.56.11`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Logger, cfg.Version = newLogger(logLevel), version
			mode, err := cluster.ParseProxyMode(proxyMode)
			if err != nil {
				return fmt.Errorf("parsing --proxy-mode: %w", err)
			}
			cfg.ProxyMode = mode
			if cfg.PodNetwork, err = cluster.ParsePodNetwork(podNetwork); err != nil {
				return fmt.Errorf("parsing --pod-network: %w", err)
			}
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
	addProxyModeFlag(cmd, &proxyMode)
	addPodNetworkFlag(cmd, &podNetwork)
	return cmd
}
