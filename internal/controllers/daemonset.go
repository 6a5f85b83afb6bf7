package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// The DaemonSet controller keeps one pod of each DaemonSet on every node
// that should run it, as Kubernetes' does: the node matches the template's
// nodeSelector and required node affinity, and the pod tolerates the
// node's NoSchedule and NoExecute taints (those minikit derives from a node
// that is not Ready included, as the scheduler does). Like Kubernetes, it
// adds the daemon tolerations to every pod (not-ready and unreachable
// NoExecute; unschedulable and the pressure conditions NoSchedule), so a
// cordoned node keeps its daemons. A running pod stays on a node that gained
// a NoSchedule taint; only an untolerated NoExecute taint or a node that no
// longer matches removes it.
//
// Pods are bound by the controller, with spec.nodeName set at creation (the
// scheduler only takes pods without a nodeName), the way DaemonSets worked
// before they went through the scheduler. Nodes joining, leaving or changing
// labels, taints or readiness requeue every DaemonSet.
//
// Each template revision is a hash of the template, in the pods' label
// controller-revision-hash (no ControllerRevision objects are kept).
// RollingUpdate replaces old pods node by node within maxUnavailable (the API
// refuses maxSurge: pods are not surged); OnDelete only uses the new template
// for pods it creates after someone deleted the old ones. Failed daemon pods
// are deleted and replaced.

const daemonSetComponent = "daemonset-controller"

var daemonSetKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Labels Kubernetes puts on daemon pods.
const (
	podTemplateGenerationLabel = "pod-template-generation"
)

type daemonSetController struct {
	c     *Controllers
	loop  *loop
	sets  appslisters.DaemonSetLister
	exp   *expectations
	fresh *freshness
}

func newDaemonSetController(c *Controllers) *daemonSetController {
	d := &daemonSetController{c: c, exp: newExpectations(), fresh: newFreshness()}
	d.loop = c.newLoop("daemonset", c.opts.Workers, d.sync)
	d.sets = c.factory.Apps().V1().DaemonSets().Lister()
	c.watchPodOwners(c.factory.Apps().V1().DaemonSets().Informer(), daemonSetKind, d.loop, d.exp, d.fresh)
	c.factory.Core().V1().Nodes().Informer().AddEventHandler(handlers(
		func(any) { d.requeueAll() },
		func(old, cur any) {
			if schedulingChanged(old.(*corev1.Node), cur.(*corev1.Node)) {
				d.requeueAll()
			}
		},
		func(any) { d.requeueAll() },
	))
	return d
}

func (d *daemonSetController) requeueAll() {
	sets, _ := d.sets.List(labels.Everything())
	for _, ds := range sets {
		d.loop.add(keyOf(ds))
	}
}

// daemonTolerations are the tolerations Kubernetes adds to every daemon pod.
func daemonTolerations(hostNetwork bool) []corev1.Toleration {
	t := []corev1.Toleration{
		{Key: taintNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: taintUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/disk-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/memory-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/pid-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: taintUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if hostNetwork {
		t = append(t, corev1.Toleration{Key: "node.kubernetes.io/network-unavailable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return t
}

// newDaemonPod is ds's pod for node, without its name.
func newDaemonPod(ds *appsv1.DaemonSet, hash, node string) *corev1.Pod {
	pod := podFromTemplate(&ds.Spec.Template, ds, daemonSetKind, map[string]string{
		appsv1.DefaultDaemonSetUniqueLabelKey: hash,
		podTemplateGenerationLabel:            strconv.FormatInt(ds.Generation, 10),
	})
	for _, t := range daemonTolerations(pod.Spec.HostNetwork) {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	pod.GenerateName = podNamePrefix(ds.Name)
	pod.Spec.NodeName = node
	return pod
}

// shouldRun reports whether a new daemon pod may start on node, and whether
// one already there may keep running.
func shouldRun(pod *corev1.Pod, node *corev1.Node) (run, keep bool) {
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return false, false
	}
	run = unfit(pod, node) == ""
	keep = true
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && !tolerates(pod, t) {
			keep = false
		}
	}
	return run, keep
}

// nodePods is what one node has of a DaemonSet.
type nodePods struct {
	node   *corev1.Node
	run    bool // a new pod may start here
	keep   bool // an existing pod may stay
	active []*corev1.Pod
	failed []*corev1.Pod
	// deleting counts pods being deleted.
	deleting int
}

func (d *daemonSetController) sync(ctx context.Context, key string) error {
	ds, ok, err := startPodOwnerSync(key, func(ns, name string) (*appsv1.DaemonSet, error) { return d.sets.DaemonSets(ns).Get(name) }, d.fresh, d.exp, d.loop.queue.AddAfter, d.c.now())
	if !ok {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil
	}
	nodes, err := d.c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	pods, err := d.c.ownedPods(ds, sel)
	if err != nil {
		return err
	}
	hash := templateHash(&ds.Spec.Template)
	proto := newDaemonPod(ds, hash, "")
	byNode := map[string]*nodePods{}
	for _, n := range nodes {
		np := &nodePods{node: n}
		np.run, np.keep = shouldRun(proto, n)
		byNode[n.Name] = np
	}
	var orphans []*corev1.Pod // on no node, or a node that is gone
	for _, p := range pods {
		np := byNode[p.Spec.NodeName]
		switch {
		case np == nil:
			if p.DeletionTimestamp == nil {
				orphans = append(orphans, p)
			}
		case p.DeletionTimestamp != nil:
			np.deleting++
		case p.Status.Phase == corev1.PodFailed:
			np.failed = append(np.failed, p)
		case p.Status.Phase == corev1.PodSucceeded:
			np.failed = append(np.failed, p) // a daemon that exits is restarted too
		default:
			np.active = append(np.active, p)
		}
	}

	now := d.c.now()
	var create []string
	deletes := orphans
	for _, n := range nodes {
		np := byNode[n.Name]
		deletes = append(deletes, np.failed...)
		switch {
		case !np.keep || (!np.run && len(np.active) == 0):
			deletes = append(deletes, np.active...)
			np.active = nil
		case len(np.active) == 0 && np.run:
			create = append(create, n.Name)
		case len(np.active) > 1:
			// Keep the oldest.
			slices.SortFunc(np.active, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
			deletes = append(deletes, np.active[1:]...)
			np.active = np.active[:1]
		}
	}
	deletes = append(deletes, d.rollingVictims(ds, hash, nodes, byNode, now)...)

	var firstErr error
	if len(deletes) > 0 {
		if err := d.deletePods(ctx, ds, deletes); err != nil {
			firstErr = err
		}
	}
	if len(create) > 0 {
		if err := d.createPods(ctx, ds, hash, create); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if err := d.writeStatus(ctx, ds, hash, nodes, byNode, now); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// rollingVictims picks the old-template pods a RollingUpdate deletes now:
// every unavailable one, and available ones while fewer than maxUnavailable
// nodes are without an available pod.
func (d *daemonSetController) rollingVictims(ds *appsv1.DaemonSet, hash string, nodes []*corev1.Node, byNode map[string]*nodePods, now time.Time) []*corev1.Pod {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return nil
	}
	desired := 0
	for _, n := range nodes {
		if byNode[n.Name].run {
			desired++
		}
	}
	maxUnavailable := 1
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, desired, true)
		if err == nil {
			maxUnavailable = v
		}
		if maxUnavailable == 0 {
			maxUnavailable = 1 // as Kubernetes does when maxSurge is 0 too
		}
	}
	unavailable := 0
	var oldAvailable, victims []*corev1.Pod
	for _, n := range nodes {
		np := byNode[n.Name]
		if !np.run && len(np.active) == 0 {
			continue
		}
		if len(np.active) == 0 {
			unavailable++
			continue
		}
		p := np.active[0]
		avail, _ := podAvailableSince(p, ds.Spec.MinReadySeconds, now)
		isOld := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != hash
		switch {
		case !avail:
			unavailable++
			if isOld {
				victims = append(victims, p)
			}
		case isOld:
			oldAvailable = append(oldAvailable, p)
		}
	}
	for _, p := range oldAvailable {
		if unavailable >= maxUnavailable {
			break
		}
		victims = append(victims, p)
		unavailable++
	}
	return victims
}

func (d *daemonSetController) createPods(ctx context.Context, ds *appsv1.DaemonSet, hash string, nodes []string) error {
	key := keyOf(ds)
	d.exp.expect(key, len(nodes), nil, d.c.now())
	for i, n := range nodes {
		res, err := d.c.client.CoreV1().Pods(ds.Namespace).Create(ctx, newDaemonPod(ds, hash, n), metav1.CreateOptions{})
		if err != nil {
			for range len(nodes) - i {
				d.exp.creationObserved(key)
			}
			d.c.recordEvent(ctx, daemonSetComponent, ds, daemonSetKind.Kind, daemonSetKind.GroupVersion().String(), corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("Error creating: %v", err))
			return fmt.Errorf("creating pod of daemonset %q on node %q: %w", key, n, err)
		}
		d.c.recordEvent(ctx, daemonSetComponent, ds, daemonSetKind.Kind, daemonSetKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+res.Name)
	}
	return nil
}

func (d *daemonSetController) deletePods(ctx context.Context, ds *appsv1.DaemonSet, pods []*corev1.Pod) error {
	key := keyOf(ds)
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = keyOf(p)
	}
	d.exp.expect(key, 0, keys, d.c.now())
	var firstErr error
	for _, p := range pods {
		uid := p.UID
		err := d.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil {
			d.exp.deletionObserved(key, keyOf(p))
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && firstErr == nil {
				firstErr = fmt.Errorf("deleting pod %q of daemonset %q: %w", keyOf(p), key, err)
			}
			continue
		}
		d.c.recordEvent(ctx, daemonSetComponent, ds, daemonSetKind.Kind, daemonSetKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
	}
	return firstErr
}

func (d *daemonSetController) writeStatus(ctx context.Context, ds *appsv1.DaemonSet, hash string, nodes []*corev1.Node, byNode map[string]*nodePods, now time.Time) error {
	st := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, CollisionCount: ds.Status.CollisionCount, Conditions: ds.Status.Conditions}
	var requeue time.Duration
	for _, n := range nodes {
		np := byNode[n.Name]
		has := len(np.active) > 0
		if np.run {
			st.DesiredNumberScheduled++
			if has {
				st.CurrentNumberScheduled++
			}
		} else if has {
			st.NumberMisscheduled++
		}
		if !has || !np.run {
			continue
		}
		p := np.active[0]
		if isPodReady(p) {
			st.NumberReady++
		}
		avail, left := podAvailableSince(p, ds.Spec.MinReadySeconds, now)
		if avail {
			st.NumberAvailable++
		} else if left > 0 && (requeue == 0 || left < requeue) {
			requeue = left
		}
		if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	if requeue > 0 {
		d.loop.queue.AddAfter(keyOf(ds), requeue)
	}
	if apiequality.Semantic.DeepEqual(ds.Status, st) {
		return nil
	}
	upd := ds.DeepCopy()
	upd.Status = st
	res, err := d.c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of daemonset %q: %w", keyOf(ds), err)
	}
	d.fresh.wrote(keyOf(ds), res)
	return nil
}
