package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
)

// The StatefulSet controller gives each replica a stable identity, as
// Kubernetes' does: pod NAME-N for ordinal N (from spec.ordinals.start),
// with hostname NAME-N and subdomain spec.serviceName, so the endpoints
// controller publishes the hostname and cluster DNS answers
// NAME-N.SERVICE.NAMESPACE.svc.cluster.local for a headless Service of that
// name. A deleted or failed pod is replaced under the same name once the old
// one is gone.
//
// OrderedReady creates ordinals in order, each once the one before it is
// Running and Ready, and removes surplus ordinals from the highest, one at a
// time, while every other pod is healthy. Parallel creates and removes them
// all at once.
//
// Each template revision is NAME-HASH (a hash of the template; no
// ControllerRevision objects are kept), in the pods' label
// controller-revision-hash and in status.currentRevision and
// status.updateRevision. RollingUpdate replaces pods whose revision is not
// the update revision from the highest ordinal down to the partition, one at
// a time, each once the pods are healthy; once every pod is updated and
// ready the update revision becomes the current one. OnDelete leaves pods
// alone; replacements of deleted pods use the current template. Without
// stored revisions, a pod below the partition that is deleted comes back
// with the current template rather than its old one.

const statefulSetComponent = "statefulset-controller"

var statefulSetKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

type statefulSetController struct {
	c     *Controllers
	loop  *loop
	sets  appslisters.StatefulSetLister
	exp   *expectations
	fresh *freshness
}

func newStatefulSetController(c *Controllers) *statefulSetController {
	s := &statefulSetController{c: c, exp: newExpectations(), fresh: newFreshness()}
	s.loop = c.newLoop("statefulset", c.opts.Workers, s.sync)
	s.sets = c.factory.Apps().V1().StatefulSets().Lister()
	c.watchPodOwners(c.factory.Apps().V1().StatefulSets().Informer(), statefulSetKind, s.loop, s.exp, s.fresh)
	return s
}

// newStatefulPod is set's pod for ordinal i at revision rev.
func newStatefulPod(set *appsv1.StatefulSet, i int, rev string) *corev1.Pod {
	name := set.Name + "-" + strconv.Itoa(i)
	pod := podFromTemplate(&set.Spec.Template, set, statefulSetKind, map[string]string{
		appsv1.ControllerRevisionHashLabelKey: rev,
		appsv1.StatefulSetPodNameLabel:        name,
		appsv1.PodIndexLabel:                  strconv.Itoa(i),
	})
	pod.Name = name
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = set.Spec.ServiceName
	return pod
}

func podRevisionOf(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }

func (s *statefulSetController) sync(ctx context.Context, key string) error {
	set, ok, err := startPodOwnerSync(key, func(ns, name string) (*appsv1.StatefulSet, error) { return s.sets.StatefulSets(ns).Get(name) }, s.fresh, s.exp, s.loop.queue.AddAfter, s.c.now())
	if !ok {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil
	}
	owned, err := s.c.ownedPods(set, sel)
	if err != nil {
		return err
	}
	replicas := 1
	if set.Spec.Replicas != nil {
		replicas = int(*set.Spec.Replicas)
	}
	start := 0
	if set.Spec.Ordinals != nil {
		start = int(set.Spec.Ordinals.Start)
	}
	updateRev := set.Name + "-" + templateHash(&set.Spec.Template)
	currentRev := set.Status.CurrentRevision
	if currentRev == "" {
		currentRev = updateRev
	}

	// Pods by ordinal: those in [start, start+replicas) are wanted, the others
	// are condemned.
	byOrdinal := map[int]*corev1.Pod{}
	var condemned []*corev1.Pod
	for _, p := range owned {
		i := ordinalOf(set.Name, p.Name)
		switch {
		case i < 0:
			continue
		case i >= start && i < start+replicas:
			byOrdinal[i] = p
		default:
			condemned = append(condemned, p)
		}
	}
	slices.SortFunc(condemned, func(a, b *corev1.Pod) int { return ordinalOf(set.Name, b.Name) - ordinalOf(set.Name, a.Name) })
	ordered := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement

	err = s.manage(ctx, set, byOrdinal, condemned, start, replicas, updateRev, ordered)
	if serr := s.writeStatus(ctx, set, owned, currentRev, updateRev, replicas); serr != nil && err == nil {
		err = serr
	}
	return err
}

// manage makes the next changes towards the wanted pods; with OrderedReady
// it stops at the first pod it has to wait for.
func (s *statefulSetController) manage(ctx context.Context, set *appsv1.StatefulSet, byOrdinal map[int]*corev1.Pod,
	condemned []*corev1.Pod, start, replicas int, updateRev string, ordered bool) error {
	// Finished pods are deleted to be replaced.
	for i := start; i < start+replicas; i++ {
		if p := byOrdinal[i]; p != nil && p.DeletionTimestamp == nil && podFinishedPhase(p) {
			if err := s.deletePod(ctx, set, p); err != nil {
				return err
			}
			if ordered {
				return nil
			}
		}
	}
	// Create the missing ordinals in order.
	for i := start; i < start+replicas; i++ {
		p := byOrdinal[i]
		if p == nil {
			if err := s.createPod(ctx, set, i, updateRev); err != nil {
				return err
			}
			if ordered {
				return nil
			}
			continue
		}
		if ordered && (p.DeletionTimestamp != nil || !podRunningAndReady(p)) {
			return nil // wait for this one before the next
		}
	}
	healthy := func() bool {
		for i := start; i < start+replicas; i++ {
			p := byOrdinal[i]
			if p == nil || p.DeletionTimestamp != nil || !podRunningAndReady(p) {
				return false
			}
		}
		return true
	}
	// Scale down from the highest ordinal.
	for _, p := range condemned {
		if p.DeletionTimestamp != nil {
			if ordered {
				return nil
			}
			continue
		}
		if ordered && !healthy() {
			return nil
		}
		if err := s.deletePod(ctx, set, p); err != nil {
			return err
		}
		if ordered {
			return nil
		}
	}
	if len(condemned) > 0 && ordered {
		return nil
	}
	if set.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return nil
	}
	partition := 0
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	// Replace one old pod at a time, the highest ordinal first, once the
	// others are healthy.
	for i := start + replicas - 1; i >= start+partition && i >= start; i-- {
		p := byOrdinal[i]
		if p == nil || p.DeletionTimestamp != nil {
			return nil
		}
		if podRevisionOf(p) != updateRev {
			if !healthy() {
				return nil
			}
			return s.deletePod(ctx, set, p)
		}
		if !podRunningAndReady(p) {
			return nil
		}
	}
	return nil
}

func (s *statefulSetController) createPod(ctx context.Context, set *appsv1.StatefulSet, i int, rev string) error {
	key := keyOf(set)
	pod := newStatefulPod(set, i, rev)
	s.exp.expect(key, 1, nil, s.c.now())
	_, err := s.c.client.CoreV1().Pods(set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		s.exp.creationObserved(key)
		if apierrors.IsAlreadyExists(err) {
			// The old pod of this name is still going, or not ours.
			s.loop.queue.AddAfter(key, time.Second)
			return nil
		}
		s.c.recordEvent(ctx, statefulSetComponent, set, statefulSetKind.Kind, statefulSetKind.GroupVersion().String(), corev1.EventTypeWarning, "FailedCreate",
			fmt.Sprintf("create Pod %s in StatefulSet %s failed error: %v", pod.Name, set.Name, err))
		return fmt.Errorf("creating pod %q of statefulset %q: %w", pod.Name, key, err)
	}
	s.c.recordEvent(ctx, statefulSetComponent, set, statefulSetKind.Kind, statefulSetKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulCreate",
		fmt.Sprintf("create Pod %s in StatefulSet %s successful", pod.Name, set.Name))
	return nil
}

func (s *statefulSetController) deletePod(ctx context.Context, set *appsv1.StatefulSet, p *corev1.Pod) error {
	key := keyOf(set)
	s.exp.expect(key, 0, []string{keyOf(p)}, s.c.now())
	uid := p.UID
	err := s.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		s.exp.deletionObserved(key, keyOf(p))
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("deleting pod %q of statefulset %q: %w", p.Name, key, err)
	}
	s.c.recordEvent(ctx, statefulSetComponent, set, statefulSetKind.Kind, statefulSetKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulDelete",
		fmt.Sprintf("delete Pod %s in StatefulSet %s successful", p.Name, set.Name))
	return nil
}

func (s *statefulSetController) writeStatus(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, currentRev, updateRev string, replicas int) error {
	now := s.c.now()
	st := appsv1.StatefulSetStatus{
		ObservedGeneration: set.Generation, CurrentRevision: currentRev, UpdateRevision: updateRev,
		CollisionCount: set.Status.CollisionCount, Conditions: set.Status.Conditions,
	}
	var requeue time.Duration
	for _, p := range pods {
		if ordinalOf(set.Name, p.Name) < 0 || p.DeletionTimestamp != nil {
			continue
		}
		st.Replicas++
		if podRunningAndReady(p) {
			st.ReadyReplicas++
			avail, left := podAvailableSince(p, set.Spec.MinReadySeconds, now)
			if avail {
				st.AvailableReplicas++
			} else if left > 0 && (requeue == 0 || left < requeue) {
				requeue = left
			}
		}
		if podRevisionOf(p) == currentRev {
			st.CurrentReplicas++
		}
		if podRevisionOf(p) == updateRev {
			st.UpdatedReplicas++
		}
	}
	// A finished rolling update: the update revision becomes the current one.
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		int(st.UpdatedReplicas) == replicas && int(st.ReadyReplicas) == replicas && int(st.Replicas) == replicas {
		st.CurrentRevision = updateRev
		st.CurrentReplicas = st.UpdatedReplicas
	}
	if requeue > 0 {
		s.loop.queue.AddAfter(keyOf(set), requeue)
	}
	if apiequality.Semantic.DeepEqual(set.Status, st) {
		return nil
	}
	upd := set.DeepCopy()
	upd.Status = st
	res, err := s.c.client.AppsV1().StatefulSets(set.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of statefulset %q: %w", keyOf(set), err)
	}
	s.fresh.wrote(keyOf(set), res)
	return nil
}
