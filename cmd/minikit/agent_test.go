package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/cluster"
)

func TestAgentFlags(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := agentFlags{nodeIP: "192.168.56.11", tokenFile: tokenFile, proxyMode: "nftables", podNetwork: "vxlan"}.config(cluster.AgentConfig{NodeName: "node2"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeIP.String() != "192.168.56.11" || cfg.Token != "s3cret" || cfg.ProxyMode != cluster.ProxyModeNFTables ||
		cfg.PodNetwork != cluster.PodNetworkVXLAN || cfg.NodeName != "node2" || cfg.Logger == nil {
		t.Errorf("config %+v", cfg)
	}
	if cfg, err := (agentFlags{}).config(cluster.AgentConfig{Token: "t"}); err != nil || cfg.Token != "t" ||
		cfg.ProxyMode != cluster.ProxyModeIPTables || cfg.PodNetwork != cluster.PodNetworkHostGW || cfg.NodeIP.IsValid() {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

// Every bad flag of `minikit agent` is refused, naming the flag, before the
// agent touches anything.
func TestAgentCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxy-mode", "ipvs"}, "parsing --proxy-mode"},
		{[]string{"--pod-network", "udp"}, "parsing --pod-network"},
		{[]string{"--node-ip", "node2"}, "parsing --node-ip"},
		{[]string{"--token-file", "/nonexistent/token"}, "reading --token-file"},
		{[]string{"--token", "t"}, "--server must be an https:// URL"},
		{[]string{"--server", "http://192.168.56.10:6443", "--token", "t"}, "--server must be an https:// URL"},
		{[]string{"--server", "https://192.168.56.10:6443"}, "a token is required to join"},
	} {
		cmd := newAgentCommand()
		cmd.SetArgs(append(tc.args, "--data-dir", t.TempDir()))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("agent %s: got %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
