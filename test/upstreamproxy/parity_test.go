package upstreamproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Intended differences between minikit's node and upstream kube-proxy's
// namespace. Each says why; everything else must be equal.
var intended = []Exclusion{
	{func(t, c string) bool {
		return strings.HasPrefix(c, "KUBE-NWPLCY-") || strings.HasPrefix(c, "KUBE-POD-FW-")
	},
		"minikit's network policy enforcer (package netpol, kube-router's chain names), on a real " +
			"cluster the network plugin's job: not kube-proxy's rules"},
}

// KubeProxy builds (or finds cached) upstream kube-proxy with
// scripts/build-upstream-proxy.sh.
func KubeProxy(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "build-upstream-proxy.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building upstream kube-proxy: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func svc(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	for _, m := range mutate {
		m(s)
	}
	return s
}

var (
	http8080 = []discovery.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}
	mixed    = []Endpoint{{IP: "10.244.0.5", Node: "node1"}, {IP: "10.244.7.5", Node: "node9"}, {IP: "10.244.7.6", Node: "node9"}}
	remote   = []Endpoint{{IP: "10.244.7.5", Node: "node9"}, {IP: "10.244.7.6", Node: "node9"}}
)

func ptr[T any](v T) *T { return &v }

func nodePort(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }
func etpLocal(s *corev1.Service) {
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}
func lb(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.LoadBalancerClass = ptr(LBClass)
}

// Shapes are the Services of the comparison, one per rule shape kube-proxy
// writes (the proxy package's golden shapes).
func Shapes() []Shape {
	return []Shape{
		{Svc: svc("clusterip"), Ports: http8080,
			Endpoints: append(append([]Endpoint{}, mixed...), Endpoint{IP: "10.244.7.9", Node: "node9", NotReady: true})},
		{Svc: svc("nodeport", nodePort), Ports: http8080, Endpoints: mixed},
		{Svc: svc("nodeport-local", nodePort, etpLocal), Ports: http8080, Endpoints: mixed},
		{Svc: svc("nodeport-local-none-here", nodePort, etpLocal), Ports: http8080, Endpoints: remote},
		{Svc: svc("externalip", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.168.56.150"} }), Ports: http8080, Endpoints: mixed},
		{Svc: svc("lb-ranges-affinity", lb, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25", "192.168.56.0/24"}
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}), Ports: http8080, Endpoints: mixed, LBIngress: []string{"192.168.56.240"}},
		{Svc: svc("lb-local", lb, etpLocal, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.168.56.151"} }),
			Ports: http8080, Endpoints: mixed, LBIngress: []string{"192.168.56.241"}},
		{Svc: svc("lb-local-none-here", lb, etpLocal), Ports: http8080, Endpoints: remote, LBIngress: []string{"192.168.56.242"}},
		{Svc: svc("internal-local", func(s *corev1.Service) {
			p := corev1.ServiceInternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = &p
		}),
			Ports: http8080, Endpoints: mixed},
		{Svc: svc("internal-local-none-here", func(s *corev1.Service) {
			p := corev1.ServiceInternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = &p
		}),
			Ports: http8080, Endpoints: remote},
		{Svc: svc("no-endpoints", nodePort, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.168.56.152"} })},
		{Svc: svc("dns", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53}}
		}), Ports: []discovery.EndpointPort{{Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(53))}, {Name: ptr("dns-tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(53))}},
			Endpoints: []Endpoint{{IP: "10.244.0.2", Node: "node1"}}},
		{Svc: svc("terminating-fallback"), Ports: http8080, Endpoints: []Endpoint{{IP: "10.244.0.7", Node: "node1", NotReady: true, Terminating: true}}},
		{Svc: svc("unnamed-port", func(s *corev1.Service) { s.Spec.Ports[0].Name = "" }),
			Ports: []discovery.EndpointPort{{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}, Endpoints: []Endpoint{{IP: "10.244.0.8", Node: "node1"}}},
	}
}

// TestRulesEqualUpstream: upstream kube-proxy v1.37.2 (iptables mode, default
// flags) standing in for node1 in a namespace of its own, and minikit's proxy
// on node1, given the same Services and EndpointSlices, write the same KUBE-*
// chains, rule for rule, but for the intended differences listed above.
func TestRulesEqualUpstream(t *testing.T) {
	testenv.RequireRoot(t)
	bin := KubeProxy(t)
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	ctx := context.Background()
	b := make([]byte, 3)
	rand.Read(b)
	peer, err := StartPeer(PeerConfig{
		Binary: bin, NS: "mkt-parity-up-" + hex.EncodeToString(b), MirrorNS: lab.NS(l.Name(), "node1"),
		Kubeconfig: l.Kubeconfig(), Hostname: "node1", ClusterCIDR: lab.ClusterCIDR,
		Args: []string{"--proxy-mode", "iptables"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("=== kube-proxy log (last 6 KiB)\n%s", tail(peer.Log(), 6<<10))
		}
		if err := peer.Stop(); err != nil {
			t.Error(err)
		}
	})

	start := time.Now()
	for _, s := range Shapes() {
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	nodeSave := func() (Save, Save, error) {
		if err := peer.Running(); err != nil {
			return nil, nil, err
		}
		ms, err := testenv.Run(l, "node1", "iptables-save")
		if err != nil {
			return nil, nil, fmt.Errorf("iptables-save on node1: %v: %s", err, ms)
		}
		us, err := peer.Save()
		if err != nil {
			return nil, nil, err
		}
		m, err := ParseSave(ms)
		if err != nil {
			return nil, nil, err
		}
		u, err := ParseSave(us)
		return m, u, err
	}
	synced := func(s Save) error {
		text := strings.Join(s["nat"]["KUBE-SERVICES"], "\n") + strings.Join(s["filter"]["KUBE-SERVICES"], "\n") +
			strings.Join(s["filter"]["KUBE-EXTERNAL-SERVICES"], "\n")
		for _, sh := range Shapes() {
			if !strings.Contains(text, "default/"+sh.Svc.Name) {
				return fmt.Errorf("no rules for default/%s yet", sh.Svc.Name)
			}
		}
		return nil
	}
	tables := []string{"filter", "nat", "mangle"}
	var diffs []ChainDiff
	var m, u Save
	deadline := time.Now().Add(90 * time.Second)
	for {
		m, u, err = nodeSave()
		if err == nil {
			if err = synced(m); err == nil {
				if err = synced(u); err == nil {
					if diffs = Compare(m, u, tables, intended); len(diffs) == 0 {
						break
					}
					err = fmt.Errorf("%d chains differ", len(diffs))
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil && len(diffs) == 0 {
		t.Fatalf("rules not synced after 90 s: %v", err)
	}
	for _, d := range diffs {
		t.Errorf("chain differs from upstream kube-proxy's: %s", d)
	}
	chains, svcChains := 0, 0
	for _, tb := range tables {
		for c := range u[tb] {
			if strings.HasPrefix(c, "KUBE-") {
				chains++
			}
			if strings.HasPrefix(c, "KUBE-SVC-") && m[tb][c] != nil {
				svcChains++
			}
		}
	}
	// 14 shapes, 15 service ports; the ones with cluster endpoints have a KUBE-SVC chain.
	if svcChains < 10 {
		t.Errorf("only %d KUBE-SVC-* chains on both sides: the comparison compared too little", svcChains)
	}
	t.Logf("compared %d KUBE-* chains of upstream kube-proxy v1.37.2 with minikit's, %d differ; converged %v after the objects were created",
		chains, len(diffs), time.Since(start).Round(100*time.Millisecond))

	t.Run("metrics under kube-proxy's names on both sides, nfacct counters and network programming latency", func(t *testing.T) {
		// An EndpointSlice change stamped as the EndpointSlice controller does.
		sh := Shapes()[0]
		sh.Endpoints = sh.Endpoints[1:]
		sl := sh.Slice(sh.Svc.Name + "-1")
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
		cur, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, sl.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl.ResourceVersion = cur.ResourceVersion
		if _, err := c.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		names := []string{"kubeproxy_iptables_ct_state_invalid_dropped_packets_total", "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
			"kubeproxy_sync_proxy_rules_duration_seconds_count", "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
			"kubeproxy_sync_partial_proxy_rules_duration_seconds_count", `kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 1`}
		testutil.Eventually(t, 30*time.Second, "both proxies export every metric", func() error {
			um, err := peer.Metrics(ctx)
			if err != nil {
				return err
			}
			mm, err := GetInNetns(ctx, lab.NS(l.Name(), "node1"), "http://127.0.0.1:10249/metrics")
			if err != nil {
				return err
			}
			for _, name := range names {
				if !strings.Contains(um, "\n"+name) {
					return fmt.Errorf("upstream's /metrics lacks %s", name)
				}
				if !strings.Contains(mm, "\n"+name) {
					return fmt.Errorf("minikit's /metrics lacks %s", name)
				}
			}
			return nil
		})
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
