package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func mtime(t time.Time) metav1.Time { return metav1.NewTime(t.UTC().Truncate(time.Second)) }

// computeStatus derives the pod's status from its containers, as the kubelet does.
func (w *podWorker) computeStatus(pod *corev1.Pod) corev1.PodStatus {
	st := corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort}
	if w.a.cfg.NodeIP.IsValid() {
		st.HostIP = w.a.cfg.NodeIP.String()
		st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
		if ip := w.a.cfg.SecondaryNodeIP; ip.IsValid() {
			st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip.String()})
		}
	}
	if w.state != nil {
		t := mtime(w.state.StartTime)
		st.StartTime = &t
		if w.sandboxOK && w.state.IP != "" {
			st.PodIP = w.state.IP
			for _, ip := range w.a.podIPs(w.state.IP) {
				st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
			}
		}
	}
	initDone := len(pod.Spec.InitContainers) == 0
	for _, spec := range pod.Spec.Containers {
		initDone = initDone || w.containers[spec.Name] != nil
	}
	allReady, running, terminated, failed, initFailed := true, 0, 0, 0, false
	var notReady []string
	for _, spec := range pod.Spec.InitContainers {
		sidecar := isSidecar(spec)
		cs, state := w.containerStatusOf(pod, spec, sidecar, !initDone)
		switch {
		case sidecar:
			if !cs.Ready {
				allReady = false
				notReady = append(notReady, cs.Name)
			}
		case state == stateTerminated && cs.State.Terminated.ExitCode == 0:
			cs.Ready = true
		case state == stateTerminated:
			initFailed = true
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	for _, spec := range pod.Spec.Containers {
		cs, state := w.containerStatusOf(pod, spec, false, !initDone)
		switch state {
		case stateRunning:
			running++
		case stateTerminated:
			terminated++
			if cs.State.Terminated.ExitCode != 0 {
				failed++
			}
		}
		if !cs.Ready {
			allReady = false
			notReady = append(notReady, cs.Name)
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	n := len(pod.Spec.Containers)
	switch {
	case initFailed:
		st.Phase = corev1.PodFailed
	case !initDone:
		st.Phase = corev1.PodPending
	case terminated == n && failed == 0:
		st.Phase = corev1.PodSucceeded
	case terminated == n:
		st.Phase = corev1.PodFailed
	case running > 0 || terminated > 0:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	if w.evicted() {
		// The eviction manager's killPod status: Failed, whatever the
		// containers' exit codes say.
		st.Phase, st.Reason, st.Message = corev1.PodFailed, evictedReason, w.state.Evicted
	}
	if st.Phase != corev1.PodRunning {
		allReady = false
	}
	now := metav1.Now()
	readyStatus := corev1.ConditionFalse
	if allReady {
		readyStatus = corev1.ConditionTrue
	}
	sandboxStatus := corev1.ConditionFalse
	if w.sandboxOK {
		sandboxStatus = corev1.ConditionTrue
	}
	initStatus := corev1.ConditionTrue
	if !initDone {
		initStatus = corev1.ConditionFalse
	}
	podReady, gateReason, gateMsg := readyStatus, "", ""
	if allReady {
		if gateMsg = readinessGatesUnready(pod); gateMsg != "" {
			podReady, gateReason = corev1.ConditionFalse, "ReadinessGatesNotReady"
		}
	}
	conds := []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: sandboxStatus},
		{Type: corev1.PodInitialized, Status: initStatus},
		{Type: corev1.ContainersReady, Status: readyStatus},
		{Type: corev1.PodReady, Status: podReady, Reason: gateReason, Message: gateMsg},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}
	for i := range conds {
		if conds[i].Status == corev1.ConditionFalse && conds[i].Reason == "" && (conds[i].Type == corev1.PodReady || conds[i].Type == corev1.ContainersReady) {
			conds[i].Reason = "ContainersNotReady"
			conds[i].Message = "containers with unready status: [" + strings.Join(notReady, " ") + "]"
			if st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed {
				conds[i].Reason = "PodCompleted"
				conds[i].Message = ""
			}
		}
		conds[i].LastTransitionTime = now
		for _, old := range pod.Status.Conditions {
			if old.Type == conds[i].Type && old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	// Conditions the kubelet does not own (readiness gates' conditions, set
	// by controllers through pods/status) are kept as they are, as the
	// kubelet's status manager merges them.
	for _, c := range pod.Status.Conditions {
		if !kubeletCondition(c.Type) {
			conds = append(conds, c)
		}
	}
	if !initDone {
		var pending []string
		for _, cs := range st.InitContainerStatuses {
			if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
				if !(cs.Started != nil && *cs.Started && cs.State.Running != nil) {
					pending = append(pending, cs.Name)
				}
			}
		}
		conds[1].Reason, conds[1].Message = "ContainersNotInitialized", "containers with incomplete status: ["+strings.Join(pending, " ")+"]"
	}
	st.Conditions = conds
	if !w.sandboxOK && w.sandboxMsg != "" && !w.evicted() {
		st.Message = w.sandboxMsg
	}
	return st
}

// Where a container's status puts it.
const (
	stateWaiting = iota
	stateRunning
	stateTerminated
)

// containerStatusOf is one container's status. A sidecar is restarted
// whatever its exit code; a regular init container that exited 0 stays
// terminated. initializing says the pod's init containers are not done
// (a main container not created yet waits with PodInitializing).
func (w *podWorker) containerStatusOf(pod *corev1.Pod, spec corev1.Container, sidecar, initializing bool) (corev1.ContainerStatus, int) {
	cs := corev1.ContainerStatus{Name: spec.Name, Image: spec.Image, ImageID: "minikit://" + spec.Image}
	c := w.containers[spec.Name]
	if c == nil {
		reason := "ContainerCreating"
		if initializing {
			reason = "PodInitializing"
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		if sidecar || slices.ContainsFunc(pod.Spec.InitContainers, func(i corev1.Container) bool { return i.Name == spec.Name }) {
			cs.Started = ptr(false)
		}
		return cs, stateWaiting
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cs.RestartCount = c.restartCount
	if c.lastTerm != nil {
		cs.LastTerminationState.Terminated = c.lastTerm.DeepCopy()
	}
	stays := func(code int32) bool {
		if sidecar {
			return false
		}
		if slices.ContainsFunc(pod.Spec.InitContainers, func(i corev1.Container) bool { return i.Name == spec.Name }) {
			return code == 0 || pod.Spec.RestartPolicy == corev1.RestartPolicyNever
		}
		return !shouldRestart(pod.Spec.RestartPolicy, code)
	}
	state := stateWaiting
	switch {
	case c.running:
		state = stateRunning
		cs.ContainerID = containerID(w.uid, c.name, c.procStart)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: mtime(c.startedAt)}
		cs.Ready, cs.Started = c.ready && c.started, ptr(c.started)
		cs.LastTerminationState.Terminated = c.lastTermBefore()
	case c.lastTerm != nil && (c.stopping || stays(c.lastTerm.ExitCode)):
		state = stateTerminated
		cs.State.Terminated = c.lastTerm.DeepCopy()
		cs.LastTerminationState = corev1.ContainerState{}
		cs.Started = ptr(false)
		cs.ContainerID = cs.State.Terminated.ContainerID
	default:
		reason, msg := c.waitReason, c.waitMessage
		if reason == "" {
			reason = "ContainerCreating"
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		cs.Started = ptr(false)
	}
	return cs, state
}

// kubeletCondition reports whether the kubelet writes condition t itself
// (pkg/kubelet/types.PodConditionsByKubelet, with PodReadyToStartContainers).
func kubeletCondition(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReadyToStartContainers:
		return true
	}
	return false
}

// readinessGatesUnready is why the pod's readiness gates keep it unready
// (status.GeneratePodReadyCondition): the message for the first gate whose
// condition is missing or not True, "" when every gate is True.
func readinessGatesUnready(pod *corev1.Pod) string {
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		var cond *corev1.PodCondition
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == g.ConditionType {
				cond = &pod.Status.Conditions[i]
				break
			}
		}
		switch {
		case cond == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case cond.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v.", g.ConditionType, cond.Status))
		}
	}
	return strings.Join(msgs, ", ")
}

// lastTermBefore is the termination shown as lastState while a container runs again.
func (c *container) lastTermBefore() *corev1.ContainerStateTerminated {
	if c.lastTerm == nil {
		return nil
	}
	return c.lastTerm.DeepCopy()
}

func ptr[T any](v T) *T { return &v }

// adoptAndClean runs once at start: sandboxes recorded in the data dir whose pod no
// longer exists (deleted while the agent was down) are torn down, processes killed.
func (a *Agent) adoptAndClean(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(a.cfg.DataDir, "pods"))
	if err != nil {
		return err
	}
	live := map[types.UID]bool{}
	pods, err := a.pods.List(everything())
	if err != nil {
		return err
	}
	for _, p := range pods {
		live[p.UID] = true
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		if live[uid] {
			continue
		}
		w := newPodWorker(a, "", "", uid)
		w.loadState()
		if w.state != nil {
			w.namespace, w.name = w.state.Namespace, w.state.Name
		}
		a.log.Info("removing sandbox of a pod deleted while the agent was away", "uid", uid, "pod", w.namespace+"/"+w.name)
		w.terminate(2 * time.Second)
		if err := w.cleanup(); err != nil {
			a.log.Error("removing stale sandbox", "uid", uid, "err", err)
		}
	}
	// IPs owned by pods that no longer exist and have no state are released. Pod
	// workers run meanwhile: a pod created since the snapshot above has a worker,
	// registered before it allocates or creates anything, and is not debris.
	for owner := range a.ipam.Owners() {
		if !live[types.UID(owner)] && !a.hasWorker(types.UID(owner)) {
			if _, err := os.Stat(filepath.Join(a.cfg.DataDir, "pods", owner)); os.IsNotExist(err) {
				a.ipam.Release(owner)
			}
		}
	}
	// Namespaces with this node's prefix that no pod of ours claims are debris.
	names, _ := a.net.Sandboxes(a.prefix)
	claimed := map[string]bool{}
	for _, p := range pods {
		claimed[a.sandboxName(p.UID)] = true
	}
	a.mu.Lock()
	for uid := range a.workers {
		claimed[a.sandboxName(uid)] = true
	}
	a.mu.Unlock()
	for _, n := range names {
		if !claimed[n] {
			a.net.DeletePodNamespaces(n)
			a.net.TeardownPod(n)
		}
	}
	return nil
}

// hasWorker reports whether a pod worker owns uid.
func (a *Agent) hasWorker(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.workers[uid]
	return ok
}

func statusJSON(s corev1.PodStatus) string {
	s = *s.DeepCopy()
	for i := range s.Conditions {
		s.Conditions[i].LastProbeTime = metav1.Time{}
		s.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	b, _ := json.Marshal(s)
	return string(b)
}
