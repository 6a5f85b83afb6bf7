package controllers

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/davecgh/go-spew/spew"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/cache"
)

// The deployment controller owns Pods directly: minikit serves no
// ReplicaSets. Each pod template revision plays the part of a ReplicaSet:
// its pods carry the label pod-template-hash=<hash> and are named
// <deployment>-<hash>-<suffix>, exactly as the pods of the ReplicaSet
// <deployment>-<hash> would be, and the messages and condition reasons speak
// of that ReplicaSet so kubectl output reads as it does against Kubernetes.
// The revision of each template is kept on its pods in the annotation
// deployment.kubernetes.io/revision (Kubernetes keeps it on the ReplicaSet).

const (
	revisionAnnotation     = "deployment.kubernetes.io/revision"
	deletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
	deploymentComponent    = "deployment-controller"

	// Condition reasons, as in kubernetes pkg/controller/deployment/util.
	reasonNewRSCreated     = "NewReplicaSetCreated"
	reasonFoundNewRS       = "FoundNewReplicaSet"
	reasonRSUpdated        = "ReplicaSetUpdated"
	reasonNewRSAvailable   = "NewReplicaSetAvailable"
	reasonTimedOut         = "ProgressDeadlineExceeded"
	reasonPaused           = "DeploymentPaused"
	reasonResumed          = "DeploymentResumed"
	reasonMinimumAvailable = "MinimumReplicasAvailable"
	reasonMinimumUnavail   = "MinimumReplicasUnavailable"

	// expectationsTimeout bounds how long a deployment waits to see the pods
	// it created or deleted before trusting the cache again.
	expectationsTimeout = 2 * time.Minute
	// maxGeneratedNameBase is the longest generateName the API server keeps
	// in Kubernetes (63 minus the 5 random characters).
	maxGeneratedNameBase = 58
)

var deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

type deploymentController struct {
	c     *Controllers
	loop  *loop
	exp   *expectations
	fresh *freshness
}

func newDeploymentController(c *Controllers) *deploymentController {
	d := &deploymentController{c: c, exp: newExpectations(), fresh: newFreshness()}
	d.loop = c.newLoop("deployment", c.opts.Workers, d.sync)
	c.factory.Apps().V1().Deployments().Informer().AddEventHandler(handlers(
		func(obj any) { d.loop.add(keyOf(obj.(*appsv1.Deployment))) },
		func(_, cur any) { d.loop.add(keyOf(cur.(*appsv1.Deployment))) },
		func(obj any) {
			if dep, ok := obj.(*appsv1.Deployment); ok {
				d.exp.forget(keyOf(dep))
				d.fresh.forget(keyOf(dep))
			}
		},
	))
	c.podInf.AddEventHandler(handlers(d.addPod, d.updatePod, d.deletePod))
	return d
}

// ownerKey is the key of the Deployment controlling pod, or "".
func ownerKey(pod *corev1.Pod) string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != deploymentKind.Kind || !isAppsGroup(ref.APIVersion) {
		return ""
	}
	return pod.Namespace + "/" + ref.Name
}

func isAppsGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == appsv1.GroupName
}

func (d *deploymentController) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	key := ownerKey(pod)
	if key == "" {
		return
	}
	d.exp.creationObserved(key)
	if pod.DeletionTimestamp != nil {
		d.exp.deletionObserved(key, keyOf(pod))
	}
	d.loop.add(key)
}

func (d *deploymentController) updatePod(old, cur any) {
	o, p := old.(*corev1.Pod), cur.(*corev1.Pod)
	if o.ResourceVersion == p.ResourceVersion {
		return
	}
	key := ownerKey(p)
	if key != "" {
		if p.DeletionTimestamp != nil {
			d.exp.deletionObserved(key, keyOf(p))
		}
		d.loop.add(key)
	}
	if ok := ownerKey(o); ok != "" && ok != key {
		d.loop.add(ok)
	}
}

func (d *deploymentController) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if key := ownerKey(pod); key != "" {
		d.exp.deletionObserved(key, keyOf(pod))
		d.loop.add(key)
	}
}

// podGroups is a deployment's pods sorted by template revision and state.
type podGroups struct {
	hash string
	// active pods are neither terminating nor finished, and match the selector.
	newPods, oldPods []*corev1.Pod
	// terminating counts pods being deleted that are not finished.
	terminating int
	// oldRunning counts old pods, active or terminating, that are not finished:
	// the Recreate strategy waits for them to be gone.
	oldRunning int
	// live is every pod not being deleted, finished ones included: the
	// revision bookkeeping looks at all of them.
	live []*corev1.Pod
	// everHadNew is true when any pod of the current template exists.
	everHadNew bool
	// created counts the pods this sync created.
	created int
}

func (d *deploymentController) groupPods(dep *appsv1.Deployment, hash string) (*podGroups, error) {
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("parsing selector of deployment %q: %w", keyOf(dep), err)
	}
	objs, err := d.c.podInf.GetIndexer().ByIndex(byControllerUID, string(dep.UID))
	if err != nil {
		return nil, err
	}
	g := &podGroups{hash: hash}
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if pod.Namespace != dep.Namespace || ownerKey(pod) != keyOf(dep) || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		isNew := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash
		g.everHadNew = g.everHadNew || isNew
		finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		if !finished && !isNew {
			g.oldRunning++
		}
		switch {
		case pod.DeletionTimestamp != nil:
			if !finished {
				g.terminating++
			}
		case finished:
			g.live = append(g.live, pod)
		case isNew:
			g.live = append(g.live, pod)
			g.newPods = append(g.newPods, pod)
		default:
			g.live = append(g.live, pod)
			g.oldPods = append(g.oldPods, pod)
		}
	}
	return g, nil
}

func (g *podGroups) active() []*corev1.Pod {
	return append(slices.Clip(g.newPods), g.oldPods...)
}

func (d *deploymentController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	dep, err := d.c.deployments.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		d.exp.forget(key)
		return nil // the garbage collector removes its pods
	}
	if err != nil {
		return err
	}
	if d.fresh.stale(key, dep) {
		return errStale
	}
	if ok, wait := d.exp.satisfied(key, d.c.now()); !ok {
		d.loop.queue.AddAfter(key, wait)
		return nil
	}
	if dep.DeletionTimestamp != nil {
		return nil
	}
	dep = dep.DeepCopy()
	if dep.Spec.Replicas == nil {
		dep.Spec.Replicas = ptrTo[int32](1)
	}
	hash := computeHash(&dep.Spec.Template, dep.Status.CollisionCount)
	g, err := d.groupPods(dep, hash)
	if err != nil {
		return err
	}

	for _, pod := range g.live {
		if d.fresh.stale("pod/"+keyOf(pod), pod) {
			return errStale // a revision we wrote on a pod is not in the cache yet
		}
	}
	rev, relabel := revisionFor(dep, g)
	// The template went back to one whose pods still exist: they become the
	// newest revision, as Kubernetes renumbers the old ReplicaSet.
	for _, pod := range relabel {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, revisionAnnotation, strconv.FormatInt(rev, 10))
		res, err := d.c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("setting revision %d on pod %q: %w", rev, keyOf(pod), err)
		}
		d.fresh.wrote("pod/"+keyOf(res), res)
	}
	if want := strconv.FormatInt(rev, 10); dep.Annotations[revisionAnnotation] != want {
		upd := dep.DeepCopy()
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[revisionAnnotation] = want
		res, err := d.c.client.AppsV1().Deployments(ns).Update(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("setting revision of deployment %q: %w", key, err)
		}
		d.fresh.wrote(key, res)
		dep = res
	}

	if _, err := d.manage(ctx, dep, g, rev); err != nil {
		return err
	}
	createdNew := !g.everHadNew && g.created > 0

	now := d.c.now()
	status, requeue := calculateStatus(dep, g, createdNew, now)
	if requeue > 0 {
		d.loop.queue.AddAfter(key, requeue)
	}
	if apiequality.Semantic.DeepEqual(dep.Status, status) {
		return nil
	}
	upd := dep.DeepCopy()
	upd.Status = status
	res, err := d.c.client.AppsV1().Deployments(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of deployment %q: %w", key, err)
	}
	d.fresh.wrote(key, res)
	return nil
}

// revisionFor decides the deployment's revision from its pods' revisions
// (see the package comment of this file), and which pods of the current
// template must be renumbered. It is a pure function of the current state,
// so it converges after a restart at any point.
func revisionFor(dep *appsv1.Deployment, g *podGroups) (int64, []*corev1.Pod) {
	cur, _ := strconv.ParseInt(dep.Annotations[revisionAnnotation], 10, 64)
	var maxNew, maxOther int64
	curInUse := false
	var newPods []*corev1.Pod
	for _, pod := range g.live {
		r := podRevision(pod)
		if pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == g.hash {
			maxNew = max(maxNew, r)
			newPods = append(newPods, pod)
		} else {
			maxOther = max(maxOther, r)
		}
		curInUse = curInUse || (r == cur && r > 0)
	}
	switch {
	case maxNew > 0 && maxNew > maxOther && maxNew >= cur:
		return maxNew, nil
	case maxNew > 0:
		rev := max(maxOther, cur) + 1
		return rev, newPods
	case cur > 0 && !curInUse:
		// Nothing contradicts the recorded revision belonging to this template.
		return cur, nil
	case len(newPods) > 0:
		// Pods of this template without a revision (made by hand): adopt it.
		return max(maxOther, cur) + 1, newPods
	default:
		return max(maxOther, cur) + 1, nil
	}
}

func podRevision(pod *corev1.Pod) int64 {
	r, _ := strconv.ParseInt(pod.Annotations[revisionAnnotation], 10, 64)
	return r
}

// manage creates and deletes pods towards the strategy's next step. It
// reports whether it changed anything.
func (d *deploymentController) manage(ctx context.Context, dep *appsv1.Deployment, g *podGroups, rev int64) (bool, error) {
	replicas := int(*dep.Spec.Replicas)
	if dep.Spec.Paused && len(g.oldPods) > 0 {
		// A paused rollout neither starts nor continues; without ReplicaSets
		// there is no old template to scale, so nothing is done.
		return false, nil
	}
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		if len(g.oldPods) > 0 {
			return true, d.deletePods(ctx, dep, g.oldPods, len(g.oldPods), g)
		}
		if g.oldRunning > 0 {
			return false, nil // wait for the old pods to be gone
		}
		return d.scaleNew(ctx, dep, g, replicas, rev)
	}
	if len(g.oldPods) == 0 {
		return d.scaleNew(ctx, dep, g, replicas, rev)
	}

	// A rolling update step, as Kubernetes' rolloutRolling: first scale the
	// new template up within maxSurge, then the old ones down within
	// maxUnavailable.
	surge, unavailable := resolveFenceposts(dep.Spec.Strategy.RollingUpdate, replicas)
	newCount, total := len(g.newPods), len(g.newPods)+len(g.oldPods)
	if newCount > replicas {
		return d.scaleNew(ctx, dep, g, replicas, rev)
	}
	if room := replicas + surge - total; room > 0 && newCount < replicas {
		return d.scaleNew(ctx, dep, g, newCount+min(room, replicas-newCount), rev)
	}
	now := d.c.now()
	minAvailable := replicas - unavailable
	available, newAvailable := 0, 0
	for _, p := range g.newPods {
		if isPodAvailable(p, dep.Spec.MinReadySeconds, now) {
			available++
			newAvailable++
		}
	}
	var unhealthyOld, healthyOld []*corev1.Pod
	for _, p := range g.oldPods {
		if isPodAvailable(p, dep.Spec.MinReadySeconds, now) {
			available++
			healthyOld = append(healthyOld, p)
		} else {
			unhealthyOld = append(unhealthyOld, p)
		}
	}
	maxScaledDown := total - minAvailable - (newCount - newAvailable)
	if maxScaledDown <= 0 {
		return false, nil
	}
	// Unhealthy old pods go first: removing them cannot lower availability.
	sortOldForDeletion(unhealthyOld, g.active(), now)
	victims := unhealthyOld[:min(maxScaledDown, len(unhealthyOld))]
	remaining := append(slices.Clip(unhealthyOld[len(victims):]), healthyOld...)
	if extra := available - minAvailable; extra > 0 {
		sortOldForDeletion(remaining, g.active(), now)
		victims = append(victims, remaining[:min(extra, len(remaining))]...)
	}
	if len(victims) == 0 {
		return false, nil
	}
	return true, d.deletePods(ctx, dep, victims, len(victims), g)
}

// scaleNew brings the pods of the current template to target.
func (d *deploymentController) scaleNew(ctx context.Context, dep *appsv1.Deployment, g *podGroups, target int, rev int64) (bool, error) {
	have := len(g.newPods)
	switch {
	case have < target:
		return true, d.createPods(ctx, dep, g, target-have, rev)
	case have > target:
		pods := slices.Clone(g.newPods)
		sortForDeletion(pods, g.active(), d.c.now())
		return true, d.deletePods(ctx, dep, pods, have-target, g)
	}
	return false, nil
}

func rsName(dep *appsv1.Deployment, hash string) string { return dep.Name + "-" + hash }

func (d *deploymentController) createPods(ctx context.Context, dep *appsv1.Deployment, g *podGroups, n int, rev int64) error {
	key := keyOf(dep)
	template := newPodFromTemplate(dep, g.hash, rev)
	d.exp.expect(key, n, nil, d.c.now())
	created, err := slowStart(n, func() error {
		_, err := d.c.client.CoreV1().Pods(dep.Namespace).Create(ctx, template.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			d.exp.creationObserved(key)
		}
		return err
	})
	for range n - created - failedCount(err) {
		d.exp.creationObserved(key) // never attempted
	}
	from := len(g.newPods)
	g.created += created
	if created > 0 {
		d.c.recordEvent(ctx, deploymentComponent, dep, deploymentKind.Kind, deploymentKind.GroupVersion().String(), corev1.EventTypeNormal,
			"ScalingReplicaSet", fmt.Sprintf("Scaled up replica set %s from %d to %d", rsName(dep, g.hash), from, from+created))
	}
	if err != nil {
		return fmt.Errorf("creating pods for deployment %q: %w", key, err)
	}
	return nil
}

// failedCount is how many attempts a slowStart error stands for.
func failedCount(err error) int {
	if err == nil {
		return 0
	}
	if b, ok := err.(batchError); ok {
		return b.failed
	}
	return 1
}

type batchError struct {
	err    error
	failed int
}

func (b batchError) Error() string { return b.err.Error() }
func (b batchError) Unwrap() error { return b.err }

// slowStart runs fn n times in batches of 1, 2, 4, ... and stops after the
// first batch with a failure, as Kubernetes' ReplicaSet controller does, so
// a quota or validation error costs one request rather than n. It returns
// the number of successes.
func slowStart(n int, fn func() error) (int, error) {
	done := 0
	for batch := min(n, 1); batch > 0; batch = min(2*batch, n-done) {
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		failed := len(errs)
		done += batch - failed
		if failed > 0 {
			return done, batchError{err: <-errs, failed: failed}
		}
	}
	return done, nil
}

// deletePods deletes the first n of pods (already in deletion order).
func (d *deploymentController) deletePods(ctx context.Context, dep *appsv1.Deployment, pods []*corev1.Pod, n int, g *podGroups) error {
	pods = pods[:n]
	key := keyOf(dep)
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = keyOf(p)
	}
	d.exp.expect(key, 0, keys, d.c.now())
	var firstErr error
	byHash := map[string]int{}
	deleted := map[types.UID]bool{}
	for _, p := range pods {
		uid := p.UID
		err := d.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil {
			d.exp.deletionObserved(key, keyOf(p))
			if !apierrors.IsNotFound(err) && firstErr == nil {
				firstErr = fmt.Errorf("deleting pod %q of deployment %q: %w", keyOf(p), key, err)
			}
			continue
		}
		byHash[p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]]++
		deleted[p.UID] = true
	}
	counts := map[string]int{}
	for _, p := range g.active() {
		counts[p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]]++
	}
	// The status written after this sync counts the pods as gone, as
	// Kubernetes' does from the ReplicaSets' new sizes.
	wasDeleted := func(p *corev1.Pod) bool { return deleted[p.UID] }
	g.newPods = slices.DeleteFunc(g.newPods, wasDeleted)
	g.oldPods = slices.DeleteFunc(g.oldPods, wasDeleted)
	hashes := make([]string, 0, len(byHash))
	for h := range byHash {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	for _, h := range hashes {
		from := counts[h]
		d.c.recordEvent(ctx, deploymentComponent, dep, deploymentKind.Kind, deploymentKind.GroupVersion().String(), corev1.EventTypeNormal,
			"ScalingReplicaSet", fmt.Sprintf("Scaled down replica set %s from %d to %d", rsName(dep, h), from, from-byHash[h]))
	}
	return firstErr
}

// newPodFromTemplate is the pod a ReplicaSet <deployment>-<hash> would create.
func newPodFromTemplate(dep *appsv1.Deployment, hash string, rev int64) *corev1.Pod {
	t := dep.Spec.Template.DeepCopy()
	lbls := map[string]string{}
	for k, v := range t.Labels {
		lbls[k] = v
	}
	lbls[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	ann := map[string]string{}
	for k, v := range t.Annotations {
		ann[k] = v
	}
	ann[revisionAnnotation] = strconv.FormatInt(rev, 10)
	prefix := rsName(dep, hash) + "-"
	if len(prefix) > maxGeneratedNameBase {
		prefix = prefix[:maxGeneratedNameBase]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Namespace:       dep.Namespace,
			Labels:          lbls,
			Annotations:     ann,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, deploymentKind)},
		},
		Spec: t.Spec,
	}
}

// computeHash is Kubernetes' controller.ComputeHash: fnv32a over the
// spew-printed template (and the collision count), safely encoded.
func computeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	printer := spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}
	printer.Fprintf(h, "%#v", *template)
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// resolveFenceposts turns maxSurge and maxUnavailable into pod counts:
// surge rounds up, unavailability down, and both zero means one unavailable.
func resolveFenceposts(ru *appsv1.RollingUpdateDeployment, replicas int) (surge, unavailable int) {
	zero := intstr.FromInt32(0)
	ms, mu := &zero, &zero
	if ru != nil {
		if ru.MaxSurge != nil {
			ms = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			mu = ru.MaxUnavailable
		}
	}
	surge, _ = intstr.GetScaledValueFromIntOrPercent(ms, replicas, true)
	unavailable, _ = intstr.GetScaledValueFromIntOrPercent(mu, replicas, false)
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable
}

// maxUnavailable is deploymentutil.MaxUnavailable.
func maxUnavailable(dep *appsv1.Deployment) int {
	replicas := int(*dep.Spec.Replicas)
	if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || replicas == 0 {
		return 0
	}
	_, u := resolveFenceposts(dep.Spec.Strategy.RollingUpdate, replicas)
	return min(u, replicas)
}

func hasProgressDeadline(dep *appsv1.Deployment) bool {
	return dep.Spec.ProgressDeadlineSeconds != nil && *dep.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// calculateStatus is the deployment controller's calculateStatus and
// syncRolloutStatus. It returns when to look again (0: not needed) for
// minReadySeconds and the progress deadline.
func calculateStatus(dep *appsv1.Deployment, g *podGroups, createdNew bool, now time.Time) (appsv1.DeploymentStatus, time.Duration) {
	replicas := int(*dep.Spec.Replicas)
	active := g.active()
	ready, available := 0, 0
	var requeue time.Duration
	for _, p := range active {
		if !isPodReady(p) {
			continue
		}
		ready++
		if wait := availableIn(p, dep.Spec.MinReadySeconds, now); wait <= 0 {
			available++
		} else if requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	st := *dep.Status.DeepCopy()
	st.ObservedGeneration = dep.Generation
	st.Replicas = int32(len(active))
	st.UpdatedReplicas = int32(len(g.newPods))
	st.ReadyReplicas = int32(ready)
	st.AvailableReplicas = int32(available)
	st.UnavailableReplicas = int32(max(0, max(len(active), replicas)-available))
	st.TerminatingReplicas = ptrTo(int32(g.terminating))

	if available >= replicas-maxUnavailable(dep) {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinimumAvailable, "Deployment has minimum availability.", now))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinimumUnavail, "Deployment does not have minimum availability.", now))
	}

	rs := rsName(dep, g.hash)
	if !hasProgressDeadline(dep) {
		removeCondition(&st, appsv1.DeploymentProgressing)
		return st, requeue
	}
	// A paused deployment reports it and estimates no progress (Kubernetes'
	// checkPausedConditions).
	paused := getCondition(st, appsv1.DeploymentProgressing)
	pausedCond := paused != nil && paused.Reason == reasonPaused
	switch {
	case dep.Spec.Paused:
		if !pausedCond {
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, "Deployment is paused", now))
		}
		return st, requeue
	case pausedCond:
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonResumed, "Deployment is resumed", now))
	}
	if createdNew {
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSCreated, fmt.Sprintf("Created new replica set %q", rs), now))
	} else if getCondition(st, appsv1.DeploymentProgressing) == nil && len(g.newPods) > 0 {
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonFoundNewRS, fmt.Sprintf("Found new replica set %q", rs), now))
	}
	cur := getCondition(dep.Status, appsv1.DeploymentProgressing)
	complete := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == reasonNewRSAvailable
	if !complete {
		switch {
		case deploymentComplete(dep, &st):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs), now))
		case deploymentProgressing(dep, &st):
			c := newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonRSUpdated, fmt.Sprintf("ReplicaSet %q is progressing.", rs), now)
			if prev := getCondition(st, appsv1.DeploymentProgressing); prev != nil {
				if prev.Status == corev1.ConditionTrue {
					c.LastTransitionTime = prev.LastTransitionTime
				}
				removeCondition(&st, appsv1.DeploymentProgressing)
			}
			setCondition(&st, c)
		case deploymentTimedOut(dep, &st, now):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut, fmt.Sprintf("ReplicaSet %q has timed out progressing.", rs), now))
		}
	}
	// Look again when the rollout would time out (requeueStuckDeployment).
	if c := getCondition(st, appsv1.DeploymentProgressing); c != nil && !deploymentComplete(dep, &st) && c.Reason != reasonTimedOut {
		after := c.LastUpdateTime.Add(time.Duration(*dep.Spec.ProgressDeadlineSeconds)*time.Second).Sub(now) + time.Second
		if after < time.Second {
			after = time.Second
		}
		if requeue == 0 || after < requeue {
			requeue = after
		}
	}
	return st, requeue
}

func deploymentComplete(dep *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	r := *dep.Spec.Replicas
	return st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r && st.ObservedGeneration >= dep.Generation
}

func deploymentProgressing(dep *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	old := dep.Status
	return st.UpdatedReplicas > old.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		st.ReadyReplicas > old.ReadyReplicas ||
		st.AvailableReplicas > old.AvailableReplicas
}

func deploymentTimedOut(dep *appsv1.Deployment, st *appsv1.DeploymentStatus, now time.Time) bool {
	c := getCondition(*st, appsv1.DeploymentProgressing)
	if c == nil || c.Reason == reasonNewRSAvailable {
		return false
	}
	if c.Reason == reasonTimedOut {
		return true
	}
	return c.LastUpdateTime.Add(time.Duration(*dep.Spec.ProgressDeadlineSeconds) * time.Second).Before(now)
}

func newCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) appsv1.DeploymentCondition {
	ts := metav1.NewTime(now)
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg, LastUpdateTime: ts, LastTransitionTime: ts}
}

func getCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition is deploymentutil.SetDeploymentCondition: a condition with
// the same status and reason is left alone; the same status keeps its
// transition time.
func setCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := getCondition(*st, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(st, c.Type)
	st.Conditions = append(st.Conditions, c)
}

func removeCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == t })
}

func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	return podCondition(pod, corev1.PodReady)
}

func isPodReady(pod *corev1.Pod) bool {
	c := podReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// availableIn is how long until a ready pod counts as available
// (minReadySeconds after it became ready); <= 0 means it is.
func availableIn(pod *corev1.Pod, minReadySeconds int32, now time.Time) time.Duration {
	c := podReadyCondition(pod)
	if minReadySeconds == 0 || c == nil || c.LastTransitionTime.IsZero() {
		return 0
	}
	return c.LastTransitionTime.Add(time.Duration(minReadySeconds) * time.Second).Sub(now)
}

func isPodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return isPodReady(pod) && availableIn(pod, minReadySeconds, now) <= 0
}

// sortOldForDeletion orders old pods oldest revision first (Kubernetes
// scales the oldest ReplicaSet down first), then by deletion rank.
func sortOldForDeletion(pods, related []*corev1.Pod, now time.Time) {
	sortForDeletion(pods, related, now)
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		ra, rb := podRevision(a), podRevision(b)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
}

var phaseOrdinal = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// sortForDeletion orders pods the way Kubernetes' ActivePodsWithRanks does,
// those to delete first: unscheduled < scheduled; Pending < Unknown <
// Running; not ready < ready; lower pod-deletion-cost first; more pods of
// the same deployment on the node first; ready for less time first; more
// container restarts first; newer first. Names break the remaining ties.
func sortForDeletion(pods, related []*corev1.Pod, now time.Time) {
	onNode := map[string]int{}
	for _, p := range related {
		onNode[p.Spec.NodeName]++
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
			return boolFirst(a.Spec.NodeName == "")
		}
		if pa, pb := phaseOrdinal[a.Status.Phase], phaseOrdinal[b.Status.Phase]; pa != pb {
			return pa - pb
		}
		if ra, rb := isPodReady(a), isPodReady(b); ra != rb {
			return boolFirst(!ra)
		}
		if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
			return cmpInt(ca, cb)
		}
		if na, nb := onNode[a.Spec.NodeName], onNode[b.Spec.NodeName]; na != nb {
			return nb - na
		}
		if isPodReady(a) && isPodReady(b) {
			ta, tb := podReadyCondition(a).LastTransitionTime, podReadyCondition(b).LastTransitionTime
			if !ta.Equal(&tb) {
				return laterFirst(ta, tb)
			}
		}
		if ra, rb := maxRestarts(a), maxRestarts(b); ra != rb {
			return cmpInt(rb, ra)
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return laterFirst(a.CreationTimestamp, b.CreationTimestamp)
		}
		switch {
		case a.Name > b.Name:
			return -1
		case a.Name < b.Name:
			return 1
		}
		return 0
	})
}

func boolFirst(aFirst bool) int {
	if aFirst {
		return -1
	}
	return 1
}

func cmpInt[T int | int32 | int64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// laterFirst orders zero times first, then later times before earlier ones.
func laterFirst(a, b metav1.Time) int {
	switch {
	case a.IsZero():
		return -1
	case b.IsZero():
		return 1
	case a.After(b.Time):
		return -1
	}
	return 1
}

func deletionCost(pod *corev1.Pod) int64 {
	v, err := strconv.ParseInt(pod.Annotations[deletionCostAnnotation], 10, 32)
	if err != nil {
		return 0
	}
	return v
}

func maxRestarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n = max(n, cs.RestartCount)
	}
	return n
}

func ptrTo[T any](v T) *T { return &v }

// expectations track pods a deployment has created or deleted and not yet
// seen in the cache (Kubernetes' ControllerExpectations): until they are
// seen, the cache would make the deployment create or delete them again.
type expectations struct {
	mu sync.Mutex
	m  map[string]*expectation
}

type expectation struct {
	adds int
	dels map[string]bool
	at   time.Time
}

func newExpectations() *expectations { return &expectations{m: map[string]*expectation{}} }

func (e *expectations) expect(key string, adds int, dels []string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	if x == nil {
		x = &expectation{dels: map[string]bool{}}
		e.m[key] = x
	}
	x.adds += adds
	for _, d := range dels {
		x.dels[d] = true
	}
	x.at = now
}

func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil && x.adds > 0 {
		x.adds--
	}
}

func (e *expectations) deletionObserved(key, pod string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		delete(x.dels, pod)
	}
}

// satisfied reports whether key may act, and otherwise how long until its
// expectations expire.
func (e *expectations) satisfied(key string, now time.Time) (bool, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	if x == nil || (x.adds <= 0 && len(x.dels) == 0) {
		delete(e.m, key)
		return true, 0
	}
	if left := x.at.Add(expectationsTimeout).Sub(now); left > 0 {
		return false, left
	}
	delete(e.m, key)
	return true, 0
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	delete(e.m, key)
	e.mu.Unlock()
}
