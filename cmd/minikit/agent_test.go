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
	cfg, err = agentFlags{nodeIP: "fd00:56::11", serviceCIDR: "fd00:10:96::/112", clusterCIDR: "fd00:10:244::/56"}.config(cluster.AgentConfig{})
	if err != nil || cfg.NodeIP.String() != "fd00:56::11" || cfg.ServiceCIDR.String() != "fd00:10:96::/112" ||
		cfg.ClusterCIDR.String() != "fd00:10:244::/56" || cfg.SecondaryClusterCIDR.IsValid() {
		t.Errorf("IPv6 single-stack: %+v, %v", cfg, err)
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
		{[]string{"--cluster-cidr", "10.244.0.0/16,10.245.0.0/16"}, "parsing --cluster-cidr"},
		{[]string{"--service-cidr", "fd00::/300"}, "parsing --service-cidr"},
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

func TestParseNodeIPs(t *testing.T) {
	for _, tc := range []struct{ in, p, s, err string }{
		{"192.168.56.10", "192.168.56.10", "invalid IP", ""},
		{"192.168.56.10,fd00:56::10", "192.168.56.10", "fd00:56::10", ""},
		{"fd00:56::10,192.168.56.10", "fd00:56::10", "192.168.56.10", ""},
		{"192.168.56.10,192.168.56.11", "", "", `"192.168.56.10,192.168.56.11": the two addresses must be of different IP families`},
		{"a,b,c", "", "", `"a,b,c": at most two addresses, one of each IP family`},
	} {
		p, s, err := parseNodeIPs(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("parseNodeIPs(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.p || s.String() != tc.s {
			t.Errorf("parseNodeIPs(%q) = %s, %s, %v", tc.in, p, s, err)
		}
	}
}

func TestParseDualStackCIDRs(t *testing.T) {
	p, s, err := parseDualStackCIDRs("10.96.0.0/12,fd00:10:96::/112")
	if err != nil || p.String() != "10.96.0.0/12" || s.String() != "fd00:10:96::/112" {
		t.Errorf("got %s %s %v", p, s, err)
	}
	if _, _, err := parseDualStackCIDRs("10.96.0.0/12,10.100.0.0/16"); err == nil || !strings.Contains(err.Error(), "different IP families") {
		t.Errorf("two IPv4 CIDRs: %v", err)
	}
}

// TestLabIPFamily: lab up takes the three families and refuses any other
// before touching anything, naming the flag.
func TestLabIPFamily(t *testing.T) {
	for _, f := range []string{"", "ipv4", "dual", "ipv6"} {
		if err := checkIPFamily(f); err != nil {
			t.Errorf("%q refused: %v", f, err)
		}
	}
	if err := checkIPFamily("ipv5"); err == nil || err.Error() != `unknown --ip-family "ipv5": want ipv4, ipv6 or dual` {
		t.Errorf("ipv5: %v", err)
	}
}
