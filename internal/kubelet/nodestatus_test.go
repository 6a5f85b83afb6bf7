package kubelet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeConditionsKeepTransitionTime: a heartbeat moves every
// condition's lastHeartbeatTime; a condition whose status is unchanged keeps
// its lastTransitionTime, and one whose status changed (Unknown, set by the
// node lifecycle controller, back to True) gets a new one.
func TestNodeConditionsKeepTransitionTime(t *testing.T) {
	a := &Agent{cfg: Config{NodeName: "node1"}}
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}
	a.fillNode(n)
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastTransitionTime = long
		n.Status.Conditions[i].LastHeartbeatTime = long
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = corev1.ConditionUnknown
		}
	}
	a.fillNode(n)
	if len(n.Status.Conditions) != 4 {
		t.Fatalf("conditions = %v", n.Status.Conditions)
	}
	for _, c := range n.Status.Conditions {
		if !c.LastHeartbeatTime.After(long.Time) {
			t.Errorf("%s: lastHeartbeatTime %v not moved", c.Type, c.LastHeartbeatTime)
		}
		changed := c.Type == corev1.NodeReady
		if moved := !c.LastTransitionTime.Equal(&long); moved != changed {
			t.Errorf("%s: lastTransitionTime %v (was %v), status changed: %v", c.Type, c.LastTransitionTime, long, changed)
		}
	}
}
