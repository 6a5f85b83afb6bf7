package kubelet

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe is a TCP probe every second that fails after failures failed runs.
func probe(failures int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
		PeriodSeconds: 1, FailureThreshold: failures}
}

// ready is the pod's Ready condition.
func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

var errRefused = errors.New("connection refused")

// The readiness probe decides the container's and the pod's readiness, both
// ways, and never restarts the container.
func TestReadinessProbe(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.Containers[0].ReadinessProbe = probe(1)
	n.prober.set("app", "readiness", errRefused)
	pod := n.createPod(p)
	n.stepUntil("readiness probed and failed", func() error {
		if n.prober.count("app", "readiness") == 0 {
			return errors.New("no readiness probe yet")
		}
		return nil
	})
	got := n.waitPod(pod, "pod running", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	if ready(got) || containerStatus(got, "app").Ready {
		t.Fatal("pod ready while its readiness probe fails")
	}

	n.prober.set("app", "readiness", nil)
	n.stepUntil("ready once the probe succeeds", func() error {
		if got, err := n.getPod(pod); err != nil || !ready(got) || !containerStatus(got, "app").Ready {
			return fmt.Errorf("not ready (%v)", err)
		}
		return nil
	})
	n.prober.set("app", "readiness", errRefused)
	n.stepUntil("unready once it fails", func() error {
		if got, err := n.getPod(pod); err != nil || ready(got) {
			return fmt.Errorf("still ready (%v)", err)
		}
		return nil
	})
	if got, _ := n.getPod(pod); containerStatus(got, "app").RestartCount != 0 || len(n.procs.started()) != 1 {
		t.Errorf("a failing readiness probe restarted the container")
	}
}

// failureThreshold liveness failures in a row kill the container (SIGKILL,
// exit 137) and it is restarted.
func TestLivenessProbeRestarts(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.Containers[0].LivenessProbe = probe(3)
	pod := n.createPod(p)
	n.waitPod(pod, "pod running", running)
	first := n.procs.alive()[0]

	n.prober.set("app", "liveness", errRefused)
	n.stepUntil("container restarted", func() error {
		got, err := n.getPod(pod)
		if err != nil {
			return err
		}
		if cs := containerStatus(got, "app"); cs.RestartCount != 1 || cs.State.Running == nil {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		return nil
	})
	if c := n.prober.count("app", "liveness"); c < 3 {
		t.Errorf("restarted after %d liveness probes, the threshold is 3 failures", c)
	}
	got, _ := n.getPod(pod)
	if term := containerStatus(got, "app").LastTerminationState.Terminated; term == nil || term.ExitCode != 137 || term.Reason != "Error" {
		t.Errorf("last state %+v, want terminated by SIGKILL (137, Error)", containerStatus(got, "app").LastTerminationState)
	}
	if !slices.Contains(n.procs.signalsSent(), fmt.Sprint(first, " ", syscall.SIGKILL)) {
		t.Errorf("signals %v: the first process was not killed", n.procs.signalsSent())
	}
}

// Readiness and liveness probes wait for the startup probe: until it
// succeeds they do not run (a failing liveness probe kills nothing) and the
// container is neither started nor ready.
func TestStartupProbeGates(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.Containers[0].StartupProbe = probe(30)
	p.Spec.Containers[0].ReadinessProbe = probe(1)
	p.Spec.Containers[0].LivenessProbe = probe(1)
	n.prober.set("app", "startup", errRefused)
	n.prober.set("app", "liveness", errRefused)
	pod := n.createPod(p)
	n.stepUntil("five startup probes", func() error {
		if c := n.prober.count("app", "startup"); c < 5 {
			return fmt.Errorf("%d startup probes", c)
		}
		return nil
	})
	if r, l := n.prober.count("app", "readiness"), n.prober.count("app", "liveness"); r != 0 || l != 0 {
		t.Fatalf("%d readiness and %d liveness probes before the startup probe succeeded", r, l)
	}
	got := n.waitPod(pod, "pod running", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	if cs := containerStatus(got, "app"); cs.Started == nil || *cs.Started || cs.Ready || ready(got) {
		t.Fatalf("before startup: started %v, ready %v, pod ready %v", cs.Started, cs.Ready, ready(got))
	}

	n.prober.set("app", "liveness", nil)
	n.prober.set("app", "startup", nil)
	n.stepUntil("started and ready", func() error {
		got, err := n.getPod(pod)
		if err != nil {
			return err
		}
		if cs := containerStatus(got, "app"); cs.Started == nil || !*cs.Started || !cs.Ready || !ready(got) {
			return fmt.Errorf("started %v, ready %v", cs.Started, cs.Ready)
		}
		return nil
	})
	if n.prober.count("app", "readiness") == 0 || len(n.procs.started()) != 1 {
		t.Errorf("%d readiness probes, %d processes: want probes and no restart", n.prober.count("app", "readiness"), len(n.procs.started()))
	}
}

// A startup probe that fails failureThreshold times kills the container,
// which is restarted.
func TestStartupProbeFailureRestarts(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.Containers[0].StartupProbe = probe(3)
	n.prober.set("app", "startup", errRefused)
	pod := n.createPod(p)
	n.stepUntil("container restarted", func() error {
		got, err := n.getPod(pod)
		if err != nil {
			return err
		}
		if cs := containerStatus(got, "app"); cs.RestartCount < 1 {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		return nil
	})
	if c := n.prober.count("app", "startup"); c < 3 {
		t.Errorf("restarted after %d startup probes, the threshold is 3 failures", c)
	}
}
