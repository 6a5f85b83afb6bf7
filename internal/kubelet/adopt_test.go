package kubelet

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// An adopted container keeps the readiness the pod last reported, so an agent
// restart does not take serving pods out of their endpoints; without a
// readiness probe it is ready at once. It counts as started either way.
func TestInitAdopted(t *testing.T) {
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
	for _, tc := range []struct {
		name        string
		readiness   *corev1.Probe
		statusReady bool
		wantReady   bool
	}{
		{"no readiness probe", nil, false, true},
		{"readiness probe, was ready", probe, true, true},
		{"readiness probe, was not ready", probe, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &container{name: "c", running: true, adopted: true}
			spec := corev1.Container{Name: "c", ReadinessProbe: tc.readiness}
			pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: tc.statusReady}}}}
			c.initAdopted(pod, spec)
			if c.ready != tc.wantReady || !c.started || c.adopted {
				t.Fatalf("ready %v started %v adopted %v; want ready %v, started, no longer adopted", c.ready, c.started, c.adopted, tc.wantReady)
			}
			// Only the first sync after adoption initialises; later ones leave the
			// probes in charge.
			c.ready = !tc.wantReady
			c.initAdopted(pod, spec)
			if c.ready == tc.wantReady {
				t.Fatal("a second initAdopted changed readiness")
			}
		})
	}
}

// A preStop sleep hook takes its time, but never past the grace period's end.
func TestRunHookSleep(t *testing.T) {
	c := &container{name: "c"}
	h := &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.runHook(ctx, h, corev1.Container{Name: "c"}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() == nil {
			t.Fatal("the 30s sleep hook returned before the deadline")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sleep hook outlived its deadline")
	}
}
