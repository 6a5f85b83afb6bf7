package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/nft"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

// Each proxier of a dual-stack node masquerades what reaches a ClusterIP
// from outside the pod network of its family (kube-proxy's DetectLocalByCIDR
// with --cluster-cidr of both families): the IPv6 proxier's KUBE-SVC chain
// marks sources outside the IPv6 pod range, as the IPv4 one does with the
// IPv4 range; without an IPv6 range it has no such rule.
func TestIPTablesProxyClusterCIDRPerFamily(t *testing.T) {
	cidr4, cidr6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.20",
			ClusterIPs: []string{"10.96.0.20", "fd00:10:96::20"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	slice := func(family discovery.AddressType, ip string) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + strings.ToLower(string(family)),
			Labels: map[string]string{discovery.LabelServiceName: "web"}}, AddressType: family,
			Endpoints: []discovery.Endpoint{{Addresses: []string{ip}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:     []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}}
	}
	for _, tc := range []struct {
		name  string
		cidr6 netip.Prefix
		masq6 string // the end of the IPv6 KUBE-SVC chain's masquerade rule, "" for none
	}{
		{name: "IPv6 pod range", cidr6: cidr6, masq6: "! -s " + cidr6.String() + " -j KUBE-MARK-MASQ"},
		{name: "no IPv6 pod range"},
		{name: "an IPv4 range is not the IPv6 one", cidr6: cidr4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt4, ipt6 := iptablestest.NewFake(), iptablestest.NewFake()
			cfg := kubeproxy.Config{NodeName: "node1", NodeIP: netip.MustParseAddr("192.168.56.10"), ClusterCIDR: cidr4,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			p, err := newIPTablesProxy(cfg, ipt4, ipt6, netip.MustParseAddr("fd00:56::10"), tc.cidr6, cfg.Logger)
			if err != nil {
				t.Fatal(err)
			}
			p.OnServiceUpdate(svc)
			p.OnEndpointSliceUpdate(slice(discovery.AddressTypeIPv4, "10.244.1.5"))
			p.OnEndpointSliceUpdate(slice(discovery.AddressTypeIPv6, "fd00:10:244:1::5"))
			p.SetInitialized()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { p.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })

			// svcChain is the KUBE-SVC chain of the service in ipt, once
			// it jumps to the endpoint.
			svcChain := func(ipt *iptablestest.Fake, ep string) ([]string, error) {
				b, err := ipt.Save("nat")
				if err != nil {
					return nil, err
				}
				var rules []string
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "-A KUBE-SVC-") {
						rules = append(rules, l)
					}
				}
				if !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, ep) }) {
					return nil, fmt.Errorf("no KUBE-SVC chain to %s in\n%s", ep, b)
				}
				return rules, nil
			}
			var svc4, svc6 []string
			testutil.Eventually(t, 10*time.Second, "both proxiers write the service's KUBE-SVC chain", func() error {
				var err error
				if svc4, err = svcChain(ipt4, "10.244.1.5:8080"); err != nil {
					return err
				}
				svc6, err = svcChain(ipt6, "[fd00:10:244:1::5]:8080")
				return err
			})
			masq := func(rules []string) []string {
				var out []string
				for _, r := range rules {
					if strings.HasSuffix(r, "-j KUBE-MARK-MASQ") {
						out = append(out, r)
					}
				}
				return out
			}
			want4 := `-A KUBE-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 10.96.0.20 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`
			if got := masq(svc4); !slices.Equal(got, []string{want4}) {
				t.Errorf("IPv4 KUBE-SVC masquerade rules %q, want %q", got, want4)
			}
			var want6 []string
			if tc.masq6 != "" {
				want6 = []string{`-A KUBE-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d fd00:10:96::20 --dport 80 ` + tc.masq6}
			}
			if got := masq(svc6); !slices.Equal(got, want6) {
				t.Errorf("IPv6 KUBE-SVC masquerade rules %q, want %q", got, want6)
			}
		})
	}
}
