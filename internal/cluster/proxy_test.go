package cluster

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/nft"
)

func TestParseProxyMode(t *testing.T) {
	for in, want := range map[string]ProxyMode{"": ProxyModeIPTables, "iptables": ProxyModeIPTables, "nftables": ProxyModeNFTables} {
		if got, err := ParseProxyMode(in); err != nil || got != want {
			t.Errorf("ParseProxyMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseProxyMode("ipvs"); err == nil || !strings.Contains(err.Error(), "want iptables or nftables") {
		t.Errorf("ParseProxyMode(ipvs): %v", err)
	}
}

// In nftables mode /metrics has the process metrics and the proxy's sync
// duration histograms; /rules is the proxier's.
func TestProxyDebugHandlerMetrics(t *testing.T) {
	p, err := kubeproxy.NewNFT(kubeproxy.NFTConfig{Config: kubeproxy.Config{NodeName: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}, nft.NewFake())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(proxyDebugHandler(p, ProxyModeNFTables))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "kubeproxy_sync_proxy_rules_duration_seconds_count 0", "kubeproxy_sync_full_proxy_rules_duration_seconds_bucket"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
	if resp, err := srv.Client().Get(srv.URL + "/healthz"); err != nil || resp.StatusCode != 503 {
		t.Errorf("/healthz before a sync: %v %v", resp.StatusCode, err)
	}
	// kube-proxy's metrics port names its mode (the e2e "should check
	// kube-proxy urls" spec asks it).
	resp, err = srv.Client().Get(srv.URL + "/proxyMode")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "nftables" {
		t.Errorf("/proxyMode = %d %q, want 200 \"nftables\"", resp.StatusCode, b)
	}
}
