package printers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod builds a pod named name, created d ago, with containers "app" and more.
func pod(name string, d time.Duration, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: objectMeta(name, d)}
	for _, c := range append([]string{"app"}, containers...) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "nginx"})
	}
	return p
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Ready: true, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Hour)}},
	}
}

func waiting(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func terminated(name, reason string, exitCode, signal int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: exitCode, Signal: signal},
	}}
}

// restarted marks st as restarted n times, the last run having ended d ago
// (a zero d leaves the finish time unset).
func restarted(st corev1.ContainerStatus, n int32, d time.Duration) corev1.ContainerStatus {
	st.RestartCount = n
	last := &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}
	if d != 0 {
		last.FinishedAt = ago(d)
	}
	st.LastTerminationState.Terminated = last
	return st
}

func condition(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s}
}

func TestPodCells(t *testing.T) {
	// Each case edits a fresh pod; scheduled pods run on node-1 with an IP.
	scheduled := func(p *corev1.Pod, phase corev1.PodPhase, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p.Spec.NodeName = "node-1"
		p.Status.Phase = phase
		p.Status.PodIP = "10.244.1.5"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}}
		p.Status.ContainerStatuses = statuses
		return p
	}
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = ptr(ago(5 * time.Second))
		return p
	}

	cases := []rowCase{
		{"running",
			scheduled(pod("web-0", 5*time.Minute), corev1.PodRunning, running("app")),
			[]interface{}{"web-0", "1/1", "Running", "0", "5m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"pending unscheduled",
			&corev1.Pod{ObjectMeta: objectMeta("web-1", 10*time.Second), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			[]interface{}{"web-1", "0/1", "Pending", "0", "10s", "<none>", "<none>", "<none>", "<none>"}},
		{"pending nominated",
			func() *corev1.Pod {
				p := pod("web-2", 3*time.Second)
				p.Status.Phase = corev1.PodPending
				p.Status.NominatedNodeName = "node-2"
				return p
			}(),
			[]interface{}{"web-2", "0/1", "Pending", "0", "3s", "<none>", "<none>", "node-2", "<none>"}},
		{"container creating",
			func() *corev1.Pod {
				p := scheduled(pod("web-3", 20*time.Second), corev1.PodPending, waiting("app", "ContainerCreating"))
				p.Status.PodIP, p.Status.PodIPs = "", nil
				return p
			}(),
			[]interface{}{"web-3", "0/1", "ContainerCreating", "0", "20s", "<none>", "node-1", "<none>", "<none>"}},
		{"terminating",
			deleting(scheduled(pod("web-4", 2*time.Hour), corev1.PodRunning, running("app"))),
			[]interface{}{"web-4", "1/1", "Terminating", "0", "120m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"crash loop with restarts",
			scheduled(pod("crash", 10*time.Minute), corev1.PodRunning, restarted(waiting("app", "CrashLoopBackOff"), 4, 30*time.Second)),
			[]interface{}{"crash", "0/1", "CrashLoopBackOff", "4 (30s ago)", "10m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"restarts without finish time",
			scheduled(pod("flaky", 3*24*time.Hour), corev1.PodRunning, restarted(running("app"), 2, 0)),
			[]interface{}{"flaky", "1/1", "Running", "2", "3d", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"restarts summed, latest finish wins",
			scheduled(pod("two", time.Hour, "sidecar"), corev1.PodRunning,
				restarted(running("app"), 1, 50*time.Minute), restarted(running("sidecar"), 2, 7*time.Minute)),
			[]interface{}{"two", "2/2", "Running", "3 (7m ago)", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"one of two ready",
			scheduled(pod("half", time.Minute, "metrics"), corev1.PodRunning, running("app"), waiting("metrics", "ImagePullBackOff")),
			[]interface{}{"half", "1/2", "ImagePullBackOff", "0", "60s", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"first container's reason wins",
			scheduled(pod("both", time.Minute, "metrics"), corev1.PodPending, waiting("app", "ErrImagePull"), waiting("metrics", "ContainerCreating")),
			[]interface{}{"both", "0/2", "ErrImagePull", "0", "60s", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"completed",
			scheduled(pod("job", time.Hour), corev1.PodSucceeded, terminated("app", "Completed", 0, 0)),
			[]interface{}{"job", "0/1", "Completed", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"completed deleting stays completed",
			deleting(scheduled(pod("job", time.Hour), corev1.PodSucceeded, terminated("app", "Completed", 0, 0))),
			[]interface{}{"job", "0/1", "Completed", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"error",
			scheduled(pod("job", time.Hour), corev1.PodFailed, terminated("app", "Error", 1, 0)),
			[]interface{}{"job", "0/1", "Error", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"exit code without reason",
			scheduled(pod("job", time.Hour), corev1.PodFailed, terminated("app", "", 3, 0)),
			[]interface{}{"job", "0/1", "ExitCode:3", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"killed by signal",
			scheduled(pod("job", time.Hour), corev1.PodFailed, terminated("app", "", 137, 9)),
			[]interface{}{"job", "0/1", "Signal:9", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"one completed, one still running, pod ready",
			func() *corev1.Pod {
				p := scheduled(pod("mixed", time.Hour, "worker"), corev1.PodRunning, terminated("app", "Completed", 0, 0), running("worker"))
				p.Status.Conditions = []corev1.PodCondition{condition(corev1.PodReady, corev1.ConditionTrue)}
				return p
			}(),
			[]interface{}{"mixed", "1/2", "Running", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"one completed, one still running, pod not ready",
			scheduled(pod("mixed", time.Hour, "worker"), corev1.PodRunning, terminated("app", "Completed", 0, 0), running("worker")),
			[]interface{}{"mixed", "1/2", "NotReady", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"evicted",
			func() *corev1.Pod {
				p := pod("evicted", 26*time.Hour)
				p.Spec.NodeName = "node-1"
				p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
				return p
			}(),
			[]interface{}{"evicted", "0/1", "Evicted", "0", "26h", "<none>", "node-1", "<none>", "<none>"}},
		{"node lost",
			func() *corev1.Pod {
				p := deleting(scheduled(pod("lost", time.Hour), corev1.PodRunning, running("app")))
				p.Status.Reason = "NodeLost"
				return p
			}(),
			[]interface{}{"lost", "1/1", "Unknown", "0", "60m", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"scheduling gated",
			func() *corev1.Pod {
				p := pod("gated", time.Minute)
				p.Status.Phase = corev1.PodPending
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated"}}
				return p
			}(),
			[]interface{}{"gated", "0/1", "SchedulingGated", "0", "60s", "<none>", "<none>", "<none>", "<none>"}},
		{"readiness gates",
			func() *corev1.Pod {
				p := scheduled(pod("gates", time.Minute), corev1.PodRunning, running("app"))
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}, {ConditionType: "example.com/warm"}}
				p.Status.Conditions = []corev1.PodCondition{
					condition("example.com/lb-ready", corev1.ConditionTrue),
					condition("example.com/warm", corev1.ConditionFalse),
				}
				return p
			}(),
			[]interface{}{"gates", "1/1", "Running", "0", "60s", "10.244.1.5", "node-1", "<none>", "1/2"}},
		{"dual stack shows the first IP",
			func() *corev1.Pod {
				p := scheduled(pod("dual", time.Minute), corev1.PodRunning, running("app"))
				p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}
				return p
			}(),
			[]interface{}{"dual", "1/1", "Running", "0", "60s", "10.244.1.5", "node-1", "<none>", "<none>"}},
		{"no creation time",
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
			[]interface{}{"new", "0/0", "", "0", "<unknown>", "<none>", "<none>", "<none>", "<none>"}},
	}
	checkRows(t, "pods", cases)
}

func TestPodInitCells(t *testing.T) {
	// initPod has init containers "init-a" and "init-b" before "app".
	initPod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := pod("init", time.Minute)
		p.Spec.NodeName = "node-1"
		p.Spec.InitContainers = []corev1.Container{{Name: "init-a"}, {Name: "init-b"}}
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = statuses
		p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("app", "PodInitializing")}
		return p
	}
	row := func(ready, status, restarts string) []interface{} {
		return []interface{}{"init", ready, status, restarts, "60s", "<none>", "node-1", "<none>", "<none>"}
	}
	sidecar := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.InitContainers[0].RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		return p
	}

	cases := []rowCase{
		{"first init running",
			initPod(corev1.ContainerStatus{Name: "init-a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, waiting("init-b", "PodInitializing")),
			row("0/1", "Init:0/2", "0")},
		{"second init running",
			initPod(terminated("init-a", "Completed", 0, 0), corev1.ContainerStatus{Name: "init-b", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}),
			row("0/1", "Init:1/2", "0")},
		{"init crash loop counts init restarts",
			initPod(restarted(waiting("init-a", "CrashLoopBackOff"), 3, 40*time.Second), waiting("init-b", "PodInitializing")),
			row("0/1", "Init:CrashLoopBackOff", "3 (40s ago)")},
		{"init failed",
			initPod(terminated("init-a", "Error", 1, 0), waiting("init-b", "PodInitializing")),
			row("0/1", "Init:Error", "0")},
		{"init exit code",
			initPod(terminated("init-a", "", 2, 0), waiting("init-b", "PodInitializing")),
			row("0/1", "Init:ExitCode:2", "0")},
		{"init signal",
			initPod(terminated("init-a", "", 143, 15), waiting("init-b", "PodInitializing")),
			row("0/1", "Init:Signal:15", "0")},
		{"init exit 0 with signal counts as done",
			initPod(terminated("init-a", "", 0, 15), waiting("init-b", "PodInitializing")),
			row("0/1", "Init:1/2", "0")},
		{"inits done",
			func() *corev1.Pod {
				p := initPod(terminated("init-a", "Completed", 0, 0), terminated("init-b", "Completed", 0, 0))
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{running("app")}
				return p
			}(),
			row("1/1", "Running", "0")},
		{"sidecar started counts towards ready",
			func() *corev1.Pod {
				p := sidecar(initPod(restarted(running("init-a"), 1, 5*time.Minute), terminated("init-b", "Completed", 0, 0)))
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{running("app")}
				return p
			}(),
			row("2/2", "Running", "1 (5m ago)")},
		{"sidecar started, next init running",
			sidecar(initPod(running("init-a"), corev1.ContainerStatus{Name: "init-b", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})),
			row("1/2", "Init:1/2", "0")},
		{"initialized pod counts its containers",
			func() *corev1.Pod {
				// Init statuses can lag the Initialized condition. kubectl
				// then keeps the Init status but counts READY and RESTARTS
				// from the containers.
				p := initPod(waiting("init-a", "PodInitializing"))
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{condition(corev1.PodInitialized, corev1.ConditionTrue)}
				p.Status.ContainerStatuses = []corev1.ContainerStatus{restarted(running("app"), 2, time.Minute)}
				return p
			}(),
			row("1/1", "Init:0/2", "2 (60s ago)")},
	}
	checkRows(t, "pods", cases)
}
