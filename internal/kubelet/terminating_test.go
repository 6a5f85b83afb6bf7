package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A deleted pod whose container outlives SIGTERM (a server draining for its
// grace period, as netexec --delay-shutdown does) keeps running its
// readiness probe, and the status says when it turns unready: the
// endpointslice controller marks the endpoint serving=false from it. The
// container is not killed before its grace period ends.
func TestTerminatingPodReportsReadiness(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.Containers[0].ReadinessProbe = probe(1)
	pod := n.createPod(p)
	n.stepUntil("ready", func() error {
		if got, err := n.getPod(pod); err != nil || !ready(got) {
			return fmt.Errorf("not ready (%v)", err)
		}
		return nil
	})
	procs := n.procs.started()
	if len(procs) != 1 {
		t.Fatalf("%d processes, want 1", len(procs))
	}
	pid := procs[0].pid
	n.procs.mu.Lock()
	n.procs.proc(pid).ignoreTERM = true
	n.procs.mu.Unlock()

	// What the API server does on a graceful delete.
	cur, err := n.getPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds = &now, ptr(int64(300))
	if _, err := n.client.CoreV1().Pods(pod.Namespace).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitPod(pod, "SIGTERM sent", func(*corev1.Pod) error {
		if !slices.Contains(n.procs.signalsSent(), fmt.Sprint(pid, " terminated")) {
			return fmt.Errorf("signals %v", n.procs.signalsSent())
		}
		return nil
	})
	n.prober.set("app", "readiness", errRefused)
	n.stepUntil("unready while terminating", func() error {
		got, err := n.getPod(pod)
		if err != nil {
			return err
		}
		if ready(got) {
			return errors.New("still ready")
		}
		if containerStatus(got, "app").State.Running == nil {
			return fmt.Errorf("container not running: %+v", containerStatus(got, "app").State)
		}
		return nil
	})
	if slices.Contains(n.procs.signalsSent(), fmt.Sprint(pid, " killed")) {
		t.Errorf("SIGKILL before the grace period ended: %v", n.procs.signalsSent())
	}
}
