package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// hintsOf renders the service's endpoints' hints one a line:
// "pod zone=Z zones=[...] nodes=[...]".
func (tc *testCluster) hintsOf(svc string) []string {
	_, items := tc.slicesOf(svc)
	var out []string
	for _, s := range items {
		for _, e := range s.Endpoints {
			zone := "-"
			if e.Zone != nil {
				zone = *e.Zone
			}
			var zones, nodes []string
			if e.Hints != nil {
				for _, z := range e.Hints.ForZones {
					zones = append(zones, z.Name)
				}
				for _, n := range e.Hints.ForNodes {
					nodes = append(nodes, n.Name)
				}
			}
			out = append(out, fmt.Sprintf("%s zone=%s zones=%v nodes=%v", e.TargetRef.Name, zone, zones, nodes))
		}
	}
	slices.Sort(out)
	return out
}

func (tc *testCluster) waitHints(svc string, want ...string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "hints of "+svc, func() error {
		if got := tc.hintsOf(svc); !slices.Equal(got, want) {
			return fmt.Errorf("\ngot  %q\nwant %q", got, want)
		}
		return nil
	})
}

// Hints as the endpointslice controller writes them, over three nodes in
// three zones with equal CPU, one ready pod on each and one unready:
// trafficDistribution PreferClose hints each ready endpoint for its zone,
// PreferSameNode for its zone and node, topology-mode Auto allots the
// endpoints to zones by CPU (here each to its own), and none removes them.
// Unready endpoints never get hints.
func TestEndpointSliceHints(t *testing.T) {
	tc := newTestCluster(t)
	cpu := func(n *corev1.Node) {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	}
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		tc.createNode(fmt.Sprintf("node-%d", i+1), true, map[string]string{zoneLabel: zone}, cpu)
	}
	tc.startControllers(Config{})
	svc := tc.createService(testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376))))
	for i := 1; i <= 3; i++ {
		tc.endpointPod(fmt.Sprintf("web-%d", i), fmt.Sprintf("10.244.%d.10", i), true, func(p *corev1.Pod) {
			p.Spec.NodeName = fmt.Sprintf("node-%d", i)
		})
	}
	tc.endpointPod("web-x", "10.244.1.11", false)
	none := []string{
		"web-1 zone=zone-a zones=[] nodes=[]",
		"web-2 zone=zone-b zones=[] nodes=[]",
		"web-3 zone=zone-c zones=[] nodes=[]",
		"web-x zone=zone-a zones=[] nodes=[]",
	}
	tc.waitHints("web", none...)

	setService := func(mutate func(*corev1.Service)) {
		t.Helper()
		cur, err := tc.client.CoreV1().Services("default").Get(tc.ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(cur)
		if _, err := tc.client.CoreV1().Services("default").Update(tc.ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		mutate func(*corev1.Service)
		want   []string
	}{
		{"PreferClose", func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
		}, []string{
			"web-1 zone=zone-a zones=[zone-a] nodes=[]",
			"web-2 zone=zone-b zones=[zone-b] nodes=[]",
			"web-3 zone=zone-c zones=[zone-c] nodes=[]",
			"web-x zone=zone-a zones=[] nodes=[]",
		}},
		{"PreferSameNode", func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferSameNode)
		}, []string{
			"web-1 zone=zone-a zones=[zone-a] nodes=[node-1]",
			"web-2 zone=zone-b zones=[zone-b] nodes=[node-2]",
			"web-3 zone=zone-c zones=[zone-c] nodes=[node-3]",
			"web-x zone=zone-a zones=[] nodes=[]",
		}},
		{"none", func(s *corev1.Service) { s.Spec.TrafficDistribution = nil }, none},
		{"topology-mode Auto", func(s *corev1.Service) {
			s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
		}, []string{
			"web-1 zone=zone-a zones=[zone-a] nodes=[]",
			"web-2 zone=zone-b zones=[zone-b] nodes=[]",
			"web-3 zone=zone-c zones=[zone-c] nodes=[]",
			"web-x zone=zone-a zones=[] nodes=[]",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			setService(c.mutate)
			tc.waitHints("web", c.want...)
		})
	}
	// With too few endpoints for the zones, Auto gives up on hints.
	if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-3", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	tc.waitHints("web", strings.Split("web-1 zone=zone-a zones=[] nodes=[]|web-2 zone=zone-b zones=[] nodes=[]|web-x zone=zone-a zones=[] nodes=[]", "|")...)
}
