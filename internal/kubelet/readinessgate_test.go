package kubelet

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.PodCondition{}
}

// A pod with a readiness gate is Ready only while the gate's condition is
// True, as a client (a load balancer controller, the Blue Green spec) sets
// it through pods/status; its containers are ready all along, and the
// kubelet keeps the client's condition in the status it writes.
func TestReadinessGates(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	const gate = "k8s.io/blue-green"
	p := testPod("blue", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	pod := n.createPod(p)

	got := n.waitPod(pod, "containers ready, gate missing", func(p *corev1.Pod) error {
		if c := condition(p, corev1.ContainersReady); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("ContainersReady %q", c.Status)
		}
		return nil
	})
	if c := condition(got, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" ||
		!strings.Contains(c.Message, `corresponding condition of pod readiness gate "k8s.io/blue-green" does not exist`) {
		t.Fatalf("Ready condition without the gate's condition: %+v", c)
	}

	setGate := func(status corev1.ConditionStatus) {
		t.Helper()
		cur, err := n.getPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		conds := []corev1.PodCondition{{Type: gate, Status: status}}
		for _, c := range cur.Status.Conditions {
			if c.Type != gate {
				conds = append(conds, c)
			}
		}
		cur.Status.Conditions = conds
		if _, err := n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setGate(corev1.ConditionTrue)
	n.waitPod(pod, "ready with the gate True", func(p *corev1.Pod) error {
		if !ready(p) {
			return fmt.Errorf("not ready: %s", condition(p, corev1.PodReady).Message)
		}
		if c := condition(p, gate); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("the gate's condition is %+v, the kubelet dropped it", c)
		}
		return nil
	})
	setGate(corev1.ConditionFalse)
	got = n.waitPod(pod, "unready with the gate False", func(p *corev1.Pod) error {
		if ready(p) {
			return fmt.Errorf("still ready")
		}
		return nil
	})
	if c := condition(got, corev1.PodReady); !strings.Contains(c.Message, `the status of pod readiness gate "k8s.io/blue-green" is not "True", but False`) {
		t.Errorf("Ready condition with the gate False: %+v", c)
	}
}
