package lab

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// With ControlPlaneTaint, the control-plane nodes get kubeadm's NoSchedule
// taint once, beside the taints they have; the other nodes get none, and
// without it no node does.
func TestTaintControlPlane(t *testing.T) {
	ctx := context.Background()
	other := corev1.Taint{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	nodes := func() (*fake.Clientset, []corev1.Node) {
		c := fake.NewClientset(
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{other}}},
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2"}})
		l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c, l.Items
	}
	taints := func(c *fake.Clientset, name string) []corev1.Taint {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Taints
	}

	c, items := nodes()
	l := &Lab{state: State{ControlPlaneTaint: true}}
	if err := l.taintControlPlane(ctx, c, items); err != nil {
		t.Fatal(err)
	}
	_, again := nodes()
	again[0].Spec.Taints = taints(c, "node1")
	if err := l.taintControlPlane(ctx, c, again); err != nil {
		t.Fatal(err)
	}
	if got := taints(c, "node1"); len(got) != 2 || got[0] != other || !got[1].MatchTaint(&controlPlaneTaint) {
		t.Errorf("node1's taints: %+v, want %s and %s once", got, other.ToString(), controlPlaneTaint.ToString())
	}
	if got := taints(c, "node2"); len(got) != 0 {
		t.Errorf("node2 (no control plane) has taints %+v", got)
	}

	c, items = nodes()
	if err := (&Lab{}).taintControlPlane(ctx, c, items); err != nil {
		t.Fatal(err)
	}
	if got := taints(c, "node1"); len(got) != 1 {
		t.Errorf("without ControlPlaneTaint, node1's taints are %+v", got)
	}
}
