package cluster

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// recordingProxy records the node addresses it is given.
type recordingProxy struct {
	serviceProxy
	ips []netip.Addr
}

func (r *recordingProxy) SetNodeIP(ip netip.Addr) { r.ips = append(r.ips, ip) }
func (r *recordingProxy) SetNode(*corev1.Node)    {}

// The proxy gets the node's first InternalIP of each family (a dual-stack
// node's proxiers take one each), and nothing for another node.
func TestNodeAddressPerFamily(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node1"},
		{Type: corev1.NodeInternalIP, Address: "192.168.56.10"},
		{Type: corev1.NodeInternalIP, Address: "fd00:56::10"},
		{Type: corev1.NodeInternalIP, Address: "192.168.57.10"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.10"},
	}}}
	p := &recordingProxy{}
	nodeAddress(n, "node2", p)
	if len(p.ips) != 0 {
		t.Fatalf("addresses of another node: %v", p.ips)
	}
	nodeAddress(n, "node1", p)
	want := []netip.Addr{netip.MustParseAddr("192.168.56.10"), netip.MustParseAddr("fd00:56::10")}
	if !slices.Equal(p.ips, want) {
		t.Errorf("SetNodeIP calls %v, want %v", p.ips, want)
	}
}
