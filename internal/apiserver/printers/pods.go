package printers

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var podColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
	column("Status", "The aggregate status of the containers in this pod."),
	column("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
	ageColumn,
	wideColumn("IP", corev1.PodStatus{}.SwaggerDoc()["podIP"]),
	wideColumn("Node", corev1.PodSpec{}.SwaggerDoc()["nodeName"]),
	wideColumn("Nominated Node", corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"]),
	wideColumn("Readiness Gates", corev1.PodSpec{}.SwaggerDoc()["readinessGates"]),
}

// nodeLostReason is the pod status reason the node lifecycle controller sets
// when the pod's node stopped reporting; such pods show as Unknown.
const nodeLostReason = "NodeLost"

func podCells(pod *corev1.Pod, now time.Time) []interface{} {
	s := summarizePod(pod)

	restarts := strconv.Itoa(s.restarts)
	if s.restarts != 0 && !s.lastRestart.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", s.restarts, age(s.lastRestart, now))
	}

	ip := pod.Status.PodIP
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}

	return []interface{}{
		pod.Name,
		fmt.Sprintf("%d/%d", s.ready, s.total),
		s.status,
		restarts,
		age(pod.CreationTimestamp, now),
		orNone(ip),
		orNone(pod.Spec.NodeName),
		orNone(pod.Status.NominatedNodeName),
		readinessGates(pod),
	}
}

// podSummary is the READY, STATUS and RESTARTS of a pod as kubectl shows them.
type podSummary struct {
	ready, total int
	status       string
	restarts     int
	lastRestart  metav1.Time // latest finish of a restarted container
}

// summarizePod follows kubectl's reading of a pod: the phase (or status
// reason) unless an init container is still running or failed ("Init:..."),
// else the reason of the first container that is waiting or terminated, and
// "Terminating" once deletion started. Restarts count only the containers
// that matter for the current stage: every init container while
// initializing, afterwards the regular and sidecar containers.
func summarizePod(pod *corev1.Pod) podSummary {
	s := podSummary{total: len(pod.Spec.Containers), status: string(pod.Status.Phase)}
	if pod.Status.Reason != "" {
		s.status = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			s.status = corev1.PodReasonSchedulingGated
		}
	}

	// Sidecars (init containers with restartPolicy Always) keep running
	// next to the regular containers and count towards READY.
	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			s.total++
		}
	}

	var sidecarRestarts int
	var lastSidecarRestart metav1.Time
	initializing := false
	for i, st := range pod.Status.InitContainerStatuses {
		s.restarts += int(st.RestartCount)
		s.lastRestart = later(s.lastRestart, st)
		if sidecars[st.Name] {
			sidecarRestarts += int(st.RestartCount)
			lastSidecarRestart = later(lastSidecarRestart, st)
		}

		if st.State.Terminated != nil && st.State.Terminated.ExitCode == 0 {
			continue
		}
		if sidecars[st.Name] && st.Started != nil && *st.Started {
			if st.Ready {
				s.ready++
			}
			continue
		}
		// The first init container that has not finished decides the status.
		initializing = true
		switch {
		case st.State.Terminated != nil:
			s.status = "Init:" + terminatedReason(st.State.Terminated)
		case st.State.Waiting != nil && st.State.Waiting.Reason != "" && st.State.Waiting.Reason != "PodInitializing":
			s.status = "Init:" + st.State.Waiting.Reason
		default:
			s.status = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		break
	}

	if !initializing || podConditionTrue(pod, corev1.PodInitialized) {
		s.restarts = sidecarRestarts
		s.lastRestart = lastSidecarRestart
		running := false
		// Backwards, so the first container's reason is the one that sticks.
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			st := pod.Status.ContainerStatuses[i]
			s.restarts += int(st.RestartCount)
			s.lastRestart = later(s.lastRestart, st)
			switch {
			case st.State.Waiting != nil && st.State.Waiting.Reason != "":
				s.status = st.State.Waiting.Reason
			case st.State.Terminated != nil:
				s.status = terminatedReason(st.State.Terminated)
			case st.Ready && st.State.Running != nil:
				running = true
				s.ready++
			}
		}
		// One container completed while another still runs: the pod is not done.
		if s.status == "Completed" && running {
			if podConditionTrue(pod, corev1.PodReady) {
				s.status = "Running"
			} else {
				s.status = "NotReady"
			}
		}
	}

	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == nodeLostReason:
			s.status = "Unknown"
		case pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			s.status = "Terminating"
		}
	}
	return s
}

// terminatedReason names a terminated container's end: its reason, else the
// signal that killed it, else its exit code.
func terminatedReason(t *corev1.ContainerStateTerminated) string {
	switch {
	case t.Reason != "":
		return t.Reason
	case t.Signal != 0:
		return fmt.Sprintf("Signal:%d", t.Signal)
	default:
		return fmt.Sprintf("ExitCode:%d", t.ExitCode)
	}
}

// later returns the later of t and the time st's previous run finished.
func later(t metav1.Time, st corev1.ContainerStatus) metav1.Time {
	if last := st.LastTerminationState.Terminated; last != nil && t.Before(&last.FinishedAt) {
		return last.FinishedAt
	}
	return t
}

func podConditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readinessGates is "true/total" over the pod's readiness gates.
func readinessGates(pod *corev1.Pod) string {
	if len(pod.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	met := 0
	for _, g := range pod.Spec.ReadinessGates {
		if podConditionTrue(pod, g.ConditionType) {
			met++
		}
	}
	return fmt.Sprintf("%d/%d", met, len(pod.Spec.ReadinessGates))
}

func podConditions(obj runtime.Object) []metav1.TableRowCondition {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodSucceeded), Message: "The pod has completed successfully."}}
	case corev1.PodFailed:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodFailed), Message: "The pod failed."}}
	}
	return nil
}
