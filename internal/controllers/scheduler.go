package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// The scheduler binds pods that name the default scheduler to a node that
// is Ready, schedulable, matches the pod's nodeSelector and required node
// affinity, and has no NoSchedule/NoExecute taint the pod does not
// tolerate. Among those it picks the node running the fewest pods (ties by
// name): plain spreading, with none of Kubernetes' resource accounting.
// Binding is an update of spec.nodeName, which minikit's API allows once.
//
// It runs one worker, so each decision sees the previous ones; pods it has
// bound but the cache does not show bound yet are "assumed" on their node,
// as kube-scheduler does, until the informer catches up.

const schedulerComponent = corev1.DefaultSchedulerName

// Taints Kubernetes' node lifecycle controller puts on nodes that are not
// Ready; minikit derives them from the Ready condition instead.
const (
	taintNotReady      = "node.kubernetes.io/not-ready"
	taintUnreachable   = "node.kubernetes.io/unreachable"
	taintUnschedulable = "node.kubernetes.io/unschedulable"
)

type scheduler struct {
	c    *Controllers
	loop *loop

	mu      sync.Mutex
	assumed map[string]string // pod key -> node it was bound to
}

func newScheduler(c *Controllers) *scheduler {
	s := &scheduler{c: c, assumed: map[string]string{}}
	s.loop = c.newLoop("scheduler", 1, s.sync)
	c.podInf.AddEventHandler(handlers(
		func(obj any) { s.podChanged(obj.(*corev1.Pod)) },
		func(_, cur any) { s.podChanged(cur.(*corev1.Pod)) },
		func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				s.forget(keyOf(pod))
			}
		},
	))
	c.factory.Core().V1().Nodes().Informer().AddEventHandler(handlers(
		func(any) { s.requeuePending() },
		func(old, cur any) {
			if schedulingChanged(old.(*corev1.Node), cur.(*corev1.Node)) {
				s.requeuePending()
			}
		},
		func(any) {},
	))
	return s
}

func needsScheduling(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == corev1.DefaultSchedulerName || pod.Spec.SchedulerName == "") &&
		len(pod.Spec.SchedulingGates) == 0 &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func (s *scheduler) podChanged(pod *corev1.Pod) {
	if pod.Spec.NodeName != "" {
		s.forget(keyOf(pod))
		return
	}
	if needsScheduling(pod) {
		s.loop.add(keyOf(pod))
	}
}

func (s *scheduler) forget(key string) {
	s.mu.Lock()
	delete(s.assumed, key)
	s.mu.Unlock()
}

func (s *scheduler) requeuePending() {
	pods, err := s.c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		if needsScheduling(p) {
			s.loop.add(keyOf(p))
		}
	}
}

// schedulingChanged reports whether a node update can change a scheduling
// decision (heartbeats cannot).
func schedulingChanged(old, cur *corev1.Node) bool {
	return nodeReady(old) != nodeReady(cur) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!maps.Equal(old.Labels, cur.Labels) ||
		!apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
}

func nodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func nodeReady(n *corev1.Node) bool { return nodeReadyStatus(n) == corev1.ConditionTrue }

func (s *scheduler) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if !needsScheduling(pod) {
		return nil
	}
	s.mu.Lock()
	_, bound := s.assumed[key]
	s.mu.Unlock()
	if bound {
		return nil // bound by us; the cache has not caught up
	}
	nodes, err := s.c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	counts, err := s.podsPerNode()
	if err != nil {
		return err
	}
	var best *corev1.Node
	reasons := map[string]int{}
	for _, n := range nodes {
		if why := unfit(pod, n); why != "" {
			reasons[why]++
			continue
		}
		if best == nil || counts[n.Name] < counts[best.Name] {
			best = n
		}
	}
	if best == nil {
		return s.unschedulable(ctx, pod, fitError(len(nodes), reasons))
	}
	return s.bind(ctx, pod, best.Name)
}

// podsPerNode counts the pods on each node that have not terminated,
// including those this scheduler has bound but the cache shows unbound.
func (s *scheduler) podsPerNode() (map[string]int, error) {
	pods, err := s.c.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	unbound := map[string]bool{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			unbound[keyOf(p)] = true
			continue
		}
		counts[p.Spec.NodeName]++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, node := range s.assumed {
		if unbound[key] {
			counts[node]++
		}
	}
	return counts, nil
}

// unfit returns why pod cannot run on n, in kube-scheduler's words, or "".
// The checks run in the order of kube-scheduler's filter plugins.
func unfit(pod *corev1.Pod, n *corev1.Node) string {
	if n.Spec.Unschedulable && !tolerates(pod, corev1.Taint{Key: taintUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return "node(s) were unschedulable"
	}
	taints := slices.Clone(n.Spec.Taints)
	switch nodeReadyStatus(n) {
	case corev1.ConditionFalse:
		taints = append(taints, corev1.Taint{Key: taintNotReady, Effect: corev1.TaintEffectNoSchedule})
	case corev1.ConditionUnknown:
		taints = append(taints, corev1.Taint{Key: taintUnreachable, Effect: corev1.TaintEffectNoSchedule})
	}
	for _, t := range taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerates(pod, t) {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n); err != nil || !ok {
		return "node(s) didn't match Pod's node affinity/selector"
	}
	return ""
}

func tolerates(pod *corev1.Pod, t corev1.Taint) bool {
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].ToleratesTaint(logr.Discard(), &t, false) {
			return true
		}
	}
	return false
}

// fitError is kube-scheduler's FitError message.
func fitError(numNodes int, reasons map[string]int) string {
	if numNodes == 0 {
		return "no nodes available to schedule pods"
	}
	var parts []string
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	slices.Sort(parts)
	return fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.",
		numNodes, strings.Join(parts, ", "), numNodes, numNodes)
}

// unschedulable records why pod waits, once per distinct reason, and waits
// for a node change to try again.
func (s *scheduler) unschedulable(ctx context.Context, pod *corev1.Pod, msg string) error {
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse &&
		c.Reason == corev1.PodReasonUnschedulable && c.Message == msg {
		return nil
	}
	upd := pod.DeepCopy()
	setPodCondition(upd, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: msg, LastTransitionTime: metav1.NewTime(s.c.now()),
	})
	if _, err := s.c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("recording that pod %q is unschedulable: %w", keyOf(pod), err)
	}
	s.loop.log.Info("pod unschedulable", "pod", keyOf(pod), "reason", msg)
	s.c.recordEvent(ctx, schedulerComponent, pod, "Pod", "v1", corev1.EventTypeWarning, "FailedScheduling", msg)
	return nil
}

func (s *scheduler) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	upd := pod.DeepCopy()
	upd.Spec.NodeName = node
	bound, err := s.c.client.CoreV1().Pods(pod.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("binding pod %q to node %q: %w", keyOf(pod), node, err)
	}
	s.mu.Lock()
	s.assumed[keyOf(pod)] = node
	s.mu.Unlock()
	s.loop.log.Debug("bound pod", "pod", keyOf(pod), "node", node)
	s.c.recordEvent(ctx, schedulerComponent, bound, "Pod", "v1", corev1.EventTypeNormal, "Scheduled",
		fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node))

	// The binding subresource of Kubernetes sets PodScheduled=True; an update
	// of the spec cannot, so the status follows. The node agent may write the
	// status at the same time: retry on conflict with the current pod.
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if c := podCondition(bound, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionTrue {
			return nil
		}
		upd := bound.DeepCopy()
		setPodCondition(upd, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(s.c.now())})
		_, err := s.c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if cur, gerr := s.c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
				bound = cur
			}
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		s.loop.log.Warn("setting PodScheduled", "pod", keyOf(pod), "err", err)
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// setPodCondition replaces the condition of c's type, keeping the transition
// time when the status does not change.
func setPodCondition(pod *corev1.Pod, c corev1.PodCondition) {
	if cur := podCondition(pod, c.Type); cur != nil {
		if cur.Status == c.Status {
			c.LastTransitionTime = cur.LastTransitionTime
		}
		*cur = c
		return
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}
