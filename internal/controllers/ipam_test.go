package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (tc *testCluster) nodeCIDRs() map[string]string {
	tc.t.Helper()
	l, err := tc.client.CoreV1().Nodes().List(tc.ctx, metav1.ListOptions{})
	if err != nil {
		tc.t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range l.Items {
		if n.Spec.PodCIDR != "" && !slices.Equal(n.Spec.PodCIDRs, []string{n.Spec.PodCIDR}) {
			tc.t.Errorf("node %s: podCIDR %q podCIDRs %q", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
		}
		out[n.Name] = n.Spec.PodCIDR
	}
	return out
}

func (tc *testCluster) waitCIDRs(want map[string]string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "node pod CIDRs", func() error {
		got := tc.nodeCIDRs()
		if !maps.Equal(got, want) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

func TestNodeIPAMAllocatesAndSurvivesRestart(t *testing.T) {
	tc := newTestCluster(t)
	// Created before the controllers start, allocated in name order; the
	// hand-set range is honoured and skipped.
	tc.createNode("node-c", true, nil)
	tc.createNode("node-a", true, nil)
	tc.createNode("node-b", true, nil)
	tc.createNode("manual", true, nil, func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/24" })
	tc.createNode("outside", true, nil, func(n *corev1.Node) { n.Spec.PodCIDR = "192.168.0.0/24" })
	tc.startControllers(Config{})
	tc.waitCIDRs(map[string]string{
		"manual":  "10.244.1.0/24",
		"outside": "192.168.0.0/24",
		"node-a":  "10.244.0.0/24",
		"node-b":  "10.244.2.0/24",
		"node-c":  "10.244.3.0/24",
	})

	// Nodes joining a running cluster get the next free ranges.
	tc.createNode("node-d", true, nil)
	tc.createNode("node-e", true, nil)
	tc.waitCIDRs(map[string]string{
		"manual": "10.244.1.0/24", "outside": "192.168.0.0/24",
		"node-a": "10.244.0.0/24", "node-b": "10.244.2.0/24", "node-c": "10.244.3.0/24",
		"node-d": "10.244.4.0/24", "node-e": "10.244.5.0/24",
	})

	// Restart: existing ranges stay; a deleted node's range is reused.
	tc.stopControllers()
	if err := tc.client.CoreV1().Nodes().Delete(tc.ctx, "node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.createNode("node-f", true, nil)
	tc.startControllers(Config{})
	tc.waitCIDRs(map[string]string{
		"manual": "10.244.1.0/24", "outside": "192.168.0.0/24",
		"node-a": "10.244.0.0/24", "node-c": "10.244.3.0/24",
		"node-d": "10.244.4.0/24", "node-e": "10.244.5.0/24",
		"node-f": "10.244.2.0/24",
	})
}

func TestNodeIPAMOptions(t *testing.T) {
	tc := newTestCluster(t)
	tc.startControllers(Config{PodCIDR: netip.MustParsePrefix("10.100.0.0/24"), NodeCIDRMaskSize: 26})
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		tc.createNode(n, true, nil)
	}
	testutil.Eventually(t, waitTimeout, "four /26 ranges handed out", func() error {
		got := tc.nodeCIDRs()
		var cidrs []string
		for _, c := range got {
			if c != "" {
				cidrs = append(cidrs, c)
			}
		}
		slices.Sort(cidrs)
		if !slices.Equal(cidrs, []string{"10.100.0.0/26", "10.100.0.128/26", "10.100.0.192/26", "10.100.0.64/26"}) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
	testutil.Eventually(t, waitTimeout, "CIDRNotAvailable event for the fifth node", func() error {
		evs, err := tc.client.CoreV1().Events("default").List(tc.ctx, metav1.ListOptions{FieldSelector: "reason=CIDRNotAvailable"})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 0 {
			return errors.New("no CIDRNotAvailable event")
		}
		return nil
	})
}

func TestRunRejectsBadMask(t *testing.T) {
	tc := newTestCluster(t)
	c := New(tc.client, testutil.Logger(t), Config{PodCIDR: netip.MustParsePrefix("10.244.0.0/16"), NodeCIDRMaskSize: 8})
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("Run accepted a /8 node mask inside a /16")
	}
}

func TestFreeSubnet(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tt := range []struct {
		name    string
		cluster string
		mask    int
		used    []string
		want    string
	}{
		{"first", "10.244.0.0/16", 24, nil, "10.244.0.0/24"},
		{"gap", "10.244.0.0/16", 24, []string{"10.244.0.0/24", "10.244.2.0/24"}, "10.244.1.0/24"},
		{"wider range set by hand", "10.244.0.0/16", 24, []string{"10.244.0.0/22"}, "10.244.4.0/24"},
		{"carry across octets", "10.0.0.0/8", 24, []string{"10.0.0.0/17", "10.0.128.0/17"}, "10.1.0.0/24"},
		{"full", "10.0.0.0/30", 31, []string{"10.0.0.0/31", "10.0.0.2/31"}, "invalid Prefix"},
		{"ipv6", "fd00:10:244::/56", 64, []string{"fd00:10:244::/64"}, "fd00:10:244:1::/64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			used := map[netip.Prefix]string{}
			for _, u := range tt.used {
				used[p(u)] = "x"
			}
			got, _ := freeSubnet(p(tt.cluster), tt.mask, used)
			if got.String() != tt.want {
				t.Errorf("freeSubnet = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestNodeIPAMDualStack: with a secondary pod CIDR every node gets one range
// of each family, the primary's first in podCIDRs (podCIDR is the primary),
// as kube-controller-manager's range allocator with two --cluster-cidr
// values; a restart keeps them.
func TestNodeIPAMDualStack(t *testing.T) {
	tc := newTestCluster(t)
	cfg := Config{PodCIDR: netip.MustParsePrefix("10.244.0.0/16"), SecondaryPodCIDR: netip.MustParsePrefix("fd00:10:244::/56")}
	tc.createNode("node-a", true, nil)
	tc.createNode("node-b", true, nil)
	tc.startControllers(cfg)
	want := map[string][]string{
		"node-a": {"10.244.0.0/24", "fd00:10:244::/64"},
		"node-b": {"10.244.1.0/24", "fd00:10:244:1::/64"},
	}
	podCIDRs := func() map[string][]string {
		l, err := tc.client.CoreV1().Nodes().List(tc.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, n := range l.Items {
			if len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
				t.Errorf("node %s: podCIDR %q is not podCIDRs[0] of %q", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
			}
			out[n.Name] = n.Spec.PodCIDRs
		}
		return out
	}
	wait := func() {
		t.Helper()
		testutil.Eventually(t, waitTimeout, "dual-stack pod CIDRs", func() error {
			if got := podCIDRs(); !maps.EqualFunc(got, want, slices.Equal) {
				return fmt.Errorf("%v", got)
			}
			return nil
		})
	}
	wait()
	tc.stopControllers()
	tc.createNode("node-c", true, nil)
	tc.startControllers(cfg)
	want["node-c"] = []string{"10.244.2.0/24", "fd00:10:244:2::/64"}
	wait()
}

func TestRunRejectsPodCIDRsOfOneFamily(t *testing.T) {
	tc := newTestCluster(t)
	c := New(tc.client, testutil.Logger(t), Config{PodCIDR: netip.MustParsePrefix("10.244.0.0/16"), SecondaryPodCIDR: netip.MustParsePrefix("10.245.0.0/16")})
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("Run accepted two IPv4 pod CIDRs")
	}
}
