package kubelet

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// procOf is the last process started for a container whose command ends
// with suffix, and how many were started.
func (n *fakeNode) procOf(suffix string) (fakeProc, int) {
	var last fakeProc
	count := 0
	for _, p := range n.procs.started() {
		if strings.HasSuffix(strings.Join(p.argv, " "), suffix) {
			last, count = p, count+1
		}
	}
	return last, count
}

func initStatus(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

// Init containers run first, one at a time: a regular one to completion,
// a sidecar (restartPolicy Always) only until it started, then it keeps
// running beside the main containers and is restarted when it exits, even
// with exit code 0. The pod is Pending and not Initialized until then.
func TestInitContainersAndSidecars(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	always := corev1.ContainerRestartPolicyAlways
	p := testPod("web", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "busybox", Command: []string{"sh", "-c", "true"}},
		{Name: "proxy", Image: "busybox", Command: []string{"sleep", "2d"}, RestartPolicy: &always},
	}
	pod := n.createPod(p)

	got := n.waitPod(pod, "setup running alone", func(p *corev1.Pod) error {
		if initStatus(p, "setup").State.Running == nil {
			return fmt.Errorf("setup: %+v", initStatus(p, "setup").State)
		}
		return nil
	})
	if _, c := n.procOf("sleep 2d"); c != 0 {
		t.Errorf("the sidecar started before the init container before it finished")
	}
	if _, c := n.procOf("sleep 1d"); c != 0 {
		t.Errorf("the main container started during initialization")
	}
	if got.Status.Phase != corev1.PodPending || condition(got, corev1.PodInitialized).Status != corev1.ConditionFalse {
		t.Errorf("initializing pod: phase %s, Initialized %+v", got.Status.Phase, condition(got, corev1.PodInitialized))
	}
	if cs := containerStatus(got, "app"); cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
		t.Errorf("main container while initializing: %+v", cs.State)
	}

	setup, _ := n.procOf("sh -c true")
	n.procs.exitProc(setup.pid, 0)
	got = n.waitPod(pod, "running with the sidecar", running)
	if cs := initStatus(got, "setup"); cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" || !cs.Ready {
		t.Errorf("setup after it exited 0: %+v ready %v", cs.State, cs.Ready)
	}
	if cs := initStatus(got, "proxy"); cs.State.Running == nil || !cs.Ready {
		t.Errorf("sidecar: %+v ready %v", cs.State, cs.Ready)
	}
	if condition(got, corev1.PodInitialized).Status != corev1.ConditionTrue {
		t.Errorf("Initialized %+v", condition(got, corev1.PodInitialized))
	}

	proxy, _ := n.procOf("sleep 2d")
	n.procs.exitProc(proxy.pid, 0)
	n.stepUntil("sidecar restarted after exiting 0", func() error {
		if _, c := n.procOf("sleep 2d"); c != 2 {
			return fmt.Errorf("sidecar started %d times", c)
		}
		return nil
	})
	n.waitPod(pod, "restart counted", func(p *corev1.Pod) error {
		if initStatus(p, "proxy").RestartCount != 1 {
			return errors.New("restartCount not 1")
		}
		return nil
	})
	if _, c := n.procOf("sh -c true"); c != 1 {
		t.Errorf("the completed init container ran %d times, want once", c)
	}
	if _, c := n.procOf("sleep 1d"); c != 1 {
		t.Errorf("the main container started %d times, want once", c)
	}
}
