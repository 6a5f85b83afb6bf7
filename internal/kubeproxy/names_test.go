package kubeproxy

import (
	"fmt"
	"testing"
)

// Vectors from kube-proxy's golden output: chain names in the expected
// iptables-save text of TestOverallIPTablesRules (and others) in
// pkg/proxy/iptables/proxier_test.go, Kubernetes v1.37.2 (https://github.com/kubernetes/kubernetes/blob/v1.37.2/pkg/proxy/iptables/proxier_test.go).
func TestChainNamesMatchKubeProxy(t *testing.T) {
	tests := []struct{ spn, proto, ep, want string }{
		{"ns1/svc1:p80", "tcp", "", "KUBE-SVC-XPGD46QRK7WJZT7O"},
		{"ns1/svc1:p80", "tcp", "10.180.0.1:80", "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{"ns2/svc2:p80", "tcp", "", "KUBE-SVC-GNZBNJ2PO5MGZ6GT"},
		{"ns5/svc5:p80", "tcp", "", "KUBE-SVC-NUKIZ6OKUXPJNT4C"},
		{"ns5/svc5:p80", "tcp", "10.180.0.3:80", "KUBE-SEP-I77PXRDZVX7PMWMN"},
	}
	for _, tt := range tests {
		var got string
		if tt.ep == "" {
			got = prefixSVC + portProtoHash(tt.spn, tt.proto)
		} else {
			got = prefixSEP + endpointHash(tt.spn, tt.proto, tt.ep)
		}
		if got != tt.want {
			t.Errorf("%s %s %s: got %s, want %s", tt.spn, tt.proto, tt.ep, got, tt.want)
		}
	}
}

func TestServicePortName(t *testing.T) {
	if got := servicePortName("default", "hostnames", "default"); got != "default/hostnames:default" {
		t.Errorf("named port: %s", got)
	}
	if got := servicePortName("ns", "svc", ""); got != "ns/svc" {
		t.Errorf("unnamed port: %s", got)
	}
}

// TestComputeProbability pins kube-proxy's strings and their strict monotony.
func TestComputeProbability(t *testing.T) {
	for n, want := range map[int]string{1: "1.0000000000", 2: "0.5000000000", 3: "0.3333333333", 4: "0.2500000000", 1000: "0.0010000000", 100001: "0.0000099999"} {
		if got := probability(n); got != want {
			t.Errorf("probability(%d) = %s, want %s", n, got, want)
		}
	}
	prev := 1.0
	for n := 2; n <= 100000; n++ {
		var f float64
		if _, err := fmtSscan(probability(n), &f); err != nil {
			t.Fatal(err)
		}
		if f >= prev {
			t.Fatalf("probability(%d) = %s is not below probability(%d)", n, probability(n), n-1)
		}
		prev = f
	}
}

func TestMasqueradeMarkText(t *testing.T) {
	if masqMark != "0x00004000" {
		t.Errorf("mark = %s", masqMark)
	}
}

func fmtSscan(s string, f *float64) (int, error) { return fmt.Sscan(s, f) }

// The network policy enforcer's chains (package netpol) are KUBE-* too, but
// not the proxy's: full syncs keep them and Cleanup leaves them alone.
func TestOwnedChainLeavesNetworkPolicyChains(t *testing.T) {
	for name, want := range map[string]bool{
		"KUBE-SERVICES":                true,
		"KUBE-SVC-XPGD46QRK7WJZT7O":    true,
		"KUBE-FORWARD":                 true,
		"KUBE-NWPLCY-FORWARD":          false,
		"KUBE-NWPLCY-ABCDEFGHIJKLMNOP": false,
		"KUBE-POD-FW-ABCDEFGHIJKLMNOP": false,
		"MINIKIT-POSTROUTING":          false,
	} {
		if got := ownedChain(name); got != want {
			t.Errorf("ownedChain(%q) = %v, want %v", name, got, want)
		}
	}
}
