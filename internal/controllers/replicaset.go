package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// The ReplicaSet controller keeps spec.replicas pods matching a
// ReplicaSet's selector, as Kubernetes' pkg/controller/replicaset does:
// pods it creates carry a controller ownerReference (blockOwnerDeletion)
// to it; pods that match its selector and have no controller are adopted;
// owned pods whose labels stop matching are released. The same code serves
// v1 ReplicationControllers (as Kubernetes' replication controller is the
// ReplicaSet controller behind an adapter): an RC is seen as a ReplicaSet
// with an equality selector.
//
// Pods a Deployment owns directly (made by minikit versions before
// Deployments owned ReplicaSets) are taken over by the ReplicaSet that
// Deployment owns whose selector they match: their ownerReference moves from
// the Deployment to the ReplicaSet, so an upgrade keeps them running.

const (
	replicaSetComponent = "replicaset-controller"
	rcComponent         = "replication-controller"
	// burstReplicas caps the pods created or deleted in one sync, as in
	// Kubernetes.
	burstReplicas = 500
)

var (
	replicaSetKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	rcKind         = corev1.SchemeGroupVersion.WithKind("ReplicationController")
)

type replicaSetController struct {
	c         *Controllers
	kind      schema.GroupVersionKind
	component string
	loop      *loop
	exp       *expectations
	fresh     *freshness
	// get and list read the cache, an RC converted to a ReplicaSet view.
	get  func(ns, name string) (*appsv1.ReplicaSet, error)
	list func(ns string) ([]*appsv1.ReplicaSet, error)
	// live reads the object from the API, past the cache.
	live func(ctx context.Context, ns, name string) (metav1.Object, error)
	// updateStatus writes st as the object's status.
	updateStatus func(ctx context.Context, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) (metav1.Object, error)
}

func newReplicaSetController(c *Controllers) *replicaSetController {
	r := &replicaSetController{c: c, kind: replicaSetKind, component: replicaSetComponent, exp: newExpectations(), fresh: newFreshness()}
	r.get = func(ns, name string) (*appsv1.ReplicaSet, error) { return c.replicaSets.ReplicaSets(ns).Get(name) }
	r.list = func(ns string) ([]*appsv1.ReplicaSet, error) {
		return c.replicaSets.ReplicaSets(ns).List(labels.Everything())
	}
	r.live = func(ctx context.Context, ns, name string) (metav1.Object, error) {
		return c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	}
	r.updateStatus = func(ctx context.Context, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) (metav1.Object, error) {
		upd := rs.DeepCopy()
		upd.Status = st
		return c.client.AppsV1().ReplicaSets(rs.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	}
	r.start("replicaset", c.factory.Apps().V1().ReplicaSets().Informer())
	return r
}

func newReplicationController(c *Controllers) *replicaSetController {
	r := &replicaSetController{c: c, kind: rcKind, component: rcComponent, exp: newExpectations(), fresh: newFreshness()}
	r.get = func(ns, name string) (*appsv1.ReplicaSet, error) {
		rc, err := c.rcs.ReplicationControllers(ns).Get(name)
		if err != nil {
			return nil, err
		}
		return rcAsReplicaSet(rc), nil
	}
	r.list = func(ns string) ([]*appsv1.ReplicaSet, error) {
		rcs, err := c.rcs.ReplicationControllers(ns).List(labels.Everything())
		out := make([]*appsv1.ReplicaSet, 0, len(rcs))
		for _, rc := range rcs {
			out = append(out, rcAsReplicaSet(rc))
		}
		return out, err
	}
	r.live = func(ctx context.Context, ns, name string) (metav1.Object, error) {
		return c.client.CoreV1().ReplicationControllers(ns).Get(ctx, name, metav1.GetOptions{})
	}
	r.updateStatus = func(ctx context.Context, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) (metav1.Object, error) {
		rc, err := c.rcs.ReplicationControllers(rs.Namespace).Get(rs.Name)
		if err != nil {
			return nil, err
		}
		upd := rc.DeepCopy()
		upd.Status.Replicas, upd.Status.FullyLabeledReplicas = st.Replicas, st.FullyLabeledReplicas
		upd.Status.ReadyReplicas, upd.Status.AvailableReplicas = st.ReadyReplicas, st.AvailableReplicas
		upd.Status.ObservedGeneration = st.ObservedGeneration
		return c.client.CoreV1().ReplicationControllers(rs.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	}
	r.start("replicationcontroller", c.factory.Core().V1().ReplicationControllers().Informer())
	return r
}

// rcAsReplicaSet is the ReplicaSet an RC behaves as.
func rcAsReplicaSet(rc *corev1.ReplicationController) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: *rc.ObjectMeta.DeepCopy(),
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        rc.Spec.Replicas,
			MinReadySeconds: rc.Spec.MinReadySeconds,
			Selector:        &metav1.LabelSelector{MatchLabels: rc.Spec.Selector},
		},
		Status: appsv1.ReplicaSetStatus{
			Replicas: rc.Status.Replicas, FullyLabeledReplicas: rc.Status.FullyLabeledReplicas,
			ReadyReplicas: rc.Status.ReadyReplicas, AvailableReplicas: rc.Status.AvailableReplicas,
			ObservedGeneration: rc.Status.ObservedGeneration,
		},
	}
	if rc.Spec.Template != nil {
		rs.Spec.Template = *rc.Spec.Template.DeepCopy()
	}
	return rs
}

func (r *replicaSetController) start(name string, inf cache.SharedIndexInformer) {
	r.loop = r.c.newLoop(name, r.c.opts.Workers, r.sync)
	inf.AddEventHandler(handlers(
		func(obj any) { r.loop.add(keyOf(obj.(metav1.Object))) },
		func(_, cur any) { r.loop.add(keyOf(cur.(metav1.Object))) },
		func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				r.exp.forget(keyOf(m))
				r.fresh.forget(keyOf(m))
			}
		},
	))
	r.c.podInf.AddEventHandler(handlers(r.addPod, r.updatePod, r.deletePod))
}

// ownerKey is the key of the object of this controller's kind that
// controls pod, or "".
func (r *replicaSetController) ownerKey(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != r.kind.Kind {
		return ""
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != r.kind.Group {
		return ""
	}
	return pod.Namespace + "/" + ref.Name
}

// enqueueAdopters queues the objects that may adopt pod: those whose
// selector matches it, when it has no controller or a Deployment controls it.
func (r *replicaSetController) enqueueAdopters(pod *corev1.Pod) {
	if ref := metav1.GetControllerOf(pod); ref != nil && (r.kind != replicaSetKind || ref.Kind != deploymentKind.Kind) {
		return
	}
	list, _ := r.list(pod.Namespace)
	for _, rs := range list {
		if sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector); err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			r.loop.add(keyOf(rs))
		}
	}
}

func (r *replicaSetController) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	key := r.ownerKey(pod)
	if key == "" {
		r.enqueueAdopters(pod)
		return
	}
	r.exp.creationObserved(key)
	if pod.DeletionTimestamp != nil {
		r.exp.deletionObserved(key, keyOf(pod))
	}
	r.loop.add(key)
}

func (r *replicaSetController) updatePod(old, cur any) {
	o, p := old.(*corev1.Pod), cur.(*corev1.Pod)
	if o.ResourceVersion == p.ResourceVersion {
		return
	}
	key := r.ownerKey(p)
	if key == "" {
		r.enqueueAdopters(p)
	} else {
		if p.DeletionTimestamp != nil {
			r.exp.deletionObserved(key, keyOf(p))
		}
		r.loop.add(key)
	}
	if ok := r.ownerKey(o); ok != "" && ok != key {
		r.loop.add(ok)
	}
}

func (r *replicaSetController) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if key := r.ownerKey(pod); key != "" {
		r.exp.deletionObserved(key, keyOf(pod))
		r.loop.add(key)
	}
}

func (r *replicaSetController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	rs, err := r.get(ns, name)
	if apierrors.IsNotFound(err) {
		r.exp.forget(key)
		return nil // the garbage collector removes its pods
	}
	if err != nil {
		return err
	}
	if r.fresh.stale(key, rs) {
		return errStale
	}
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil // validation refuses these; nothing safe to do
	}
	pods, err := r.claimPods(ctx, rs, sel)
	if err != nil {
		return err
	}
	var terminating int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			terminating++
		}
	}
	active := slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return !isPodActive(p) })
	needsSync, wait := r.exp.satisfied(key, r.c.now())
	if needsSync && rs.DeletionTimestamp == nil {
		if active, err = r.manage(ctx, rs, active); err != nil {
			return err
		}
	} else if !needsSync {
		r.loop.queue.AddAfter(key, wait)
	}
	st, requeue := replicaSetStatus(rs, active, r.c.now())
	if r.kind == replicaSetKind {
		st.TerminatingReplicas = &terminating
	}
	if requeue > 0 {
		r.loop.queue.AddAfter(key, requeue)
	}
	if apiequality.Semantic.DeepEqual(rs.Status, st) {
		return nil
	}
	res, err := r.updateStatus(ctx, rs, st)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating status of %s %q: %w", r.kind.Kind, key, err)
	}
	r.fresh.wrote(key, res)
	return nil
}

func isPodActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// claimPods is Kubernetes' PodControllerRefManager.ClaimPods: it returns the
// pods rs controls after adopting orphans (and, for the upgrade, pods its own
// controller owns directly) that match and releasing owned pods that do not.
func (r *replicaSetController) claimPods(ctx context.Context, rs *appsv1.ReplicaSet, sel labels.Selector) ([]*corev1.Pod, error) {
	all, err := r.c.pods.Pods(rs.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	parent := metav1.GetControllerOf(rs)
	var owned []*corev1.Pod
	var canAdopt *bool // asked once, before the first adoption
	for _, p := range all {
		ref := metav1.GetControllerOf(p)
		matches := sel.Matches(labels.Set(p.Labels))
		switch {
		case ref != nil && ref.UID == rs.UID:
			if matches {
				owned = append(owned, p)
			} else if p.DeletionTimestamp == nil {
				if err := r.setOwner(ctx, p, rs, false); err != nil {
					return nil, err
				}
			}
		case !matches || !isPodActive(p) || rs.DeletionTimestamp != nil:
		case ref == nil || (parent != nil && r.kind == replicaSetKind && ref.UID == parent.UID):
			if canAdopt == nil {
				ok, err := r.canAdopt(ctx, rs)
				if err != nil {
					return nil, err
				}
				canAdopt = &ok
			}
			if !*canAdopt {
				continue
			}
			if err := r.setOwner(ctx, p, rs, true); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			owned = append(owned, p)
		}
	}
	return owned, nil
}

// canAdopt reads rs past the cache, as Kubernetes' RecheckDeletionTimestamp:
// a ReplicaSet deleted with propagationPolicy Orphan has released its pods,
// and one still in the cache must not adopt them back.
func (r *replicaSetController) canAdopt(ctx context.Context, rs *appsv1.ReplicaSet) (bool, error) {
	cur, err := r.live(ctx, rs.Namespace, rs.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s %q before adopting: %w", r.kind.Kind, keyOf(rs), err)
	}
	return cur.GetUID() == rs.UID && cur.GetDeletionTimestamp() == nil, nil
}

// setOwner adopts pod (drops any controller reference and adds rs's) or
// releases it (drops rs's reference). A conflict retries the whole sync.
func (r *replicaSetController) setOwner(ctx context.Context, pod *corev1.Pod, rs *appsv1.ReplicaSet, adopt bool) error {
	upd := pod.DeepCopy()
	upd.OwnerReferences = slices.DeleteFunc(upd.OwnerReferences, func(ref metav1.OwnerReference) bool {
		return ref.UID == rs.UID || (adopt && ref.Controller != nil && *ref.Controller)
	})
	if adopt {
		upd.OwnerReferences = append(upd.OwnerReferences, *metav1.NewControllerRef(rs, r.kind))
	}
	_, err := r.c.client.CoreV1().Pods(pod.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	verb := "adopting"
	if !adopt {
		verb = "releasing"
	}
	if err != nil {
		return fmt.Errorf("%s pod %q for %s %q: %w", verb, keyOf(pod), r.kind.Kind, keyOf(rs), err)
	}
	r.loop.log.Debug(verb+" pod", "pod", keyOf(pod), "owner", keyOf(rs))
	return nil
}

// manage creates or deletes pods towards spec.replicas (Kubernetes'
// manageReplicas) and returns the active pods after it.
func (r *replicaSetController) manage(ctx context.Context, rs *appsv1.ReplicaSet, active []*corev1.Pod) ([]*corev1.Pod, error) {
	key := keyOf(rs)
	want := 1
	if rs.Spec.Replicas != nil {
		want = int(*rs.Spec.Replicas)
	}
	diff := len(active) - want
	switch {
	case diff < 0:
		n := min(-diff, burstReplicas)
		tmpl := r.newPod(rs)
		r.exp.expect(key, n, nil, r.c.now())
		created, err := slowStart(n, func() error {
			_, err := r.c.client.CoreV1().Pods(rs.Namespace).Create(ctx, tmpl.DeepCopy(), metav1.CreateOptions{})
			if err != nil {
				r.exp.creationObserved(key)
			}
			return err
		})
		for range n - created - failedCount(err) {
			r.exp.creationObserved(key) // never attempted
		}
		if created > 0 {
			r.event(ctx, rs, corev1.EventTypeNormal, "SuccessfulCreate", fmt.Sprintf("Created %d pods", created))
		}
		if err != nil {
			r.event(ctx, rs, corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("Error creating: %v", err))
			return active, fmt.Errorf("creating pods for %s %q: %w", r.kind.Kind, key, err)
		}
	case diff > 0:
		n := min(diff, burstReplicas)
		victims := slices.Clone(active)
		sortForDeletion(victims, r.relatedPods(rs, active), r.c.now())
		victims = victims[:n]
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = keyOf(p)
		}
		r.exp.expect(key, 0, keys, r.c.now())
		deleted := map[string]bool{}
		var firstErr error
		for _, p := range victims {
			uid := p.UID
			err := r.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil {
				r.exp.deletionObserved(key, keyOf(p))
				if !apierrors.IsNotFound(err) && firstErr == nil {
					firstErr = fmt.Errorf("deleting pod %q of %s %q: %w", keyOf(p), r.kind.Kind, key, err)
				}
				continue
			}
			deleted[keyOf(p)] = true
		}
		if len(deleted) > 0 {
			r.event(ctx, rs, corev1.EventTypeNormal, "SuccessfulDelete", fmt.Sprintf("Deleted %d pods", len(deleted)))
		}
		active = slices.DeleteFunc(active, func(p *corev1.Pod) bool { return deleted[keyOf(p)] })
		return active, firstErr
	}
	return active, nil
}

// relatedPods are the pods whose spread over nodes ranks deletions: those of
// every ReplicaSet of the same Deployment (Kubernetes' getPodsToDelete).
func (r *replicaSetController) relatedPods(rs *appsv1.ReplicaSet, own []*corev1.Pod) []*corev1.Pod {
	parent := metav1.GetControllerOf(rs)
	if parent == nil || r.kind != replicaSetKind {
		return own
	}
	siblings, _ := r.list(rs.Namespace)
	var related []*corev1.Pod
	for _, s := range siblings {
		if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != parent.UID {
			continue
		}
		objs, _ := r.c.podInf.GetIndexer().ByIndex(byControllerUID, string(s.UID))
		for _, o := range objs {
			if p := o.(*corev1.Pod); isPodActive(p) {
				related = append(related, p)
			}
		}
	}
	return related
}

func (r *replicaSetController) event(ctx context.Context, rs *appsv1.ReplicaSet, typ, reason, msg string) {
	r.c.recordEvent(ctx, r.component, rs, r.kind.Kind, r.kind.GroupVersion().String(), typ, reason, msg)
}

// newPod is the pod rs creates (Kubernetes' GetPodFromTemplate).
func (r *replicaSetController) newPod(rs *appsv1.ReplicaSet) *corev1.Pod {
	t := rs.Spec.Template.DeepCopy()
	prefix := rs.Name + "-"
	if len(prefix) > maxGeneratedNameBase {
		prefix = prefix[:maxGeneratedNameBase]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Namespace:       rs.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, r.kind)},
		},
		Spec: t.Spec,
	}
}

// replicaSetStatus is Kubernetes' calculateStatus for a ReplicaSet; it
// returns when to look again for pods becoming available after
// minReadySeconds.
func replicaSetStatus(rs *appsv1.ReplicaSet, active []*corev1.Pod, now time.Time) (appsv1.ReplicaSetStatus, time.Duration) {
	st := *rs.Status.DeepCopy()
	tmpl := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	var fully, ready, available int32
	var requeue time.Duration
	for _, p := range active {
		if tmpl.Matches(labels.Set(p.Labels)) {
			fully++
		}
		if !isPodReady(p) {
			continue
		}
		ready++
		if wait := availableIn(p, rs.Spec.MinReadySeconds, now); wait <= 0 {
			available++
		} else if requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	st.Replicas = int32(len(active))
	st.FullyLabeledReplicas = fully
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.ObservedGeneration = rs.Generation
	return st, requeue
}
