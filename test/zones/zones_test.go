// Package zones_test checks topology-aware hints in a multi-zone lab whose
// control plane is tainted as kubeadm taints it (lab up
// --control-plane-taint), and what the endpointslice controller does when
// the control-plane node runs an endpoint of its own.
package zones_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

// hints maps each endpoint of Service "hints" by its node to "ZONE for
// HINTED-ZONES" ("none" without hints).
func hints(c kubernetes.Interface) (map[string]string, error) {
	sl, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=hints"})
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, s := range sl.Items {
		for _, e := range s.Endpoints {
			if e.NodeName == nil || e.Zone == nil {
				return nil, fmt.Errorf("endpoint %v without node or zone", e.Addresses)
			}
			h := "none"
			if e.Hints != nil {
				h = ""
				for _, z := range e.Hints.ForZones {
					h += z.Name
				}
			}
			got[*e.NodeName] = *e.Zone + " for " + h
		}
	}
	return got, nil
}

// waitHints waits until hints says want.
func waitHints(t *testing.T, c kubernetes.Interface, what string, want map[string]string) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, what, func() error {
		got, err := hints(c)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("endpoints %v, want %v", got, want)
		}
		return nil
	})
}

func TestTopologyHintsControlPlaneTaint(t *testing.T) {
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 3, ControlPlaneTaint: true})
	c := testenv.Client(t, l)
	n1, err := c.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n1.Spec.Taints) != 1 || n1.Spec.Taints[0].Key != "node-role.kubernetes.io/control-plane" || n1.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("node1's taints: %+v, want node-role.kubernetes.io/control-plane:NoSchedule", n1.Spec.Taints)
	}

	labels := map[string]string{"app": "hints"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "hints"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "hostname", Image: "registry.k8s.io/serve_hostname"}}}}}}
	if _, err := c.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hints", Annotations: map[string]string{corev1.AnnotationTopologyMode: "Auto"}},
		Spec: corev1.ServiceSpec{Selector: labels, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The DaemonSet leaves out the tainted node1; each other node's endpoint
	// is hinted for its own zone.
	waitHints(t, c, "own-zone hints on node2 and node3",
		map[string]string{"node2": "zone-2 for zone-2", "node3": "zone-3 for zone-3"})

	// Untainted, node1 runs an endpoint in zone-1, whose CPU the controller
	// does not count (a control-plane node): the other two zones cannot each
	// get their minimum of the three endpoints, so every hint goes.
	n1, err = c.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Spec.Taints = nil
	if _, err := c.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHints(t, c, "no hints with an endpoint on the control plane",
		map[string]string{"node1": "zone-1 for none", "node2": "zone-2 for none", "node3": "zone-3 for none"})
}
