package controllers

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/cache"
)

// The deployment controller owns ReplicaSets, as Kubernetes' does
// (pkg/controller/deployment): one ReplicaSet <deployment>-<hash> per pod
// template revision, labelled pod-template-hash=<hash> and annotated with
// deployment.kubernetes.io/revision, desired-replicas and max-replicas. A
// rollout scales ReplicaSets (RollingUpdate within maxSurge and
// maxUnavailable, or Recreate); the ReplicaSet controller makes the pods.
// Old ReplicaSets scaled to zero stay as revision history, up to
// revisionHistoryLimit, so that `kubectl rollout undo` can read them.
//
// Earlier minikit versions had the Deployment own its pods directly, named
// and labelled as its ReplicaSets' pods would be. On its first sync the
// controller creates the ReplicaSet of each template hash those pods carry,
// sized to them, and the ReplicaSet controller takes them over.

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
	fresh *freshness
}

const (
	desiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	maxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
	revisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	lastAppliedAnnotation     = "kubectl.kubernetes.io/last-applied-configuration"
	rollbackToAnnotation      = "deprecated.deployment.rollback.to"
)

// skipCopyAnnotation lists the Deployment annotations a ReplicaSet does not
// inherit (deploymentutil.skipCopyAnnotation).
var skipCopyAnnotation = map[string]bool{
	lastAppliedAnnotation: true, revisionAnnotation: true, revisionHistoryAnnotation: true,
	desiredReplicasAnnotation: true, maxReplicasAnnotation: true, rollbackToAnnotation: true,
}

func newDeploymentController(c *Controllers) *deploymentController {
	d := &deploymentController{c: c, fresh: newFreshness()}
	d.loop = c.newLoop("deployment", c.opts.Workers, d.sync)
	c.factory.Apps().V1().Deployments().Informer().AddEventHandler(handlers(
		func(obj any) { d.loop.add(keyOf(obj.(*appsv1.Deployment))) },
		func(_, cur any) { d.loop.add(keyOf(cur.(*appsv1.Deployment))) },
		func(obj any) {
			if dep, ok := obj.(*appsv1.Deployment); ok {
				d.fresh.forget(keyOf(dep))
			}
		},
	))
	c.factory.Apps().V1().ReplicaSets().Informer().AddEventHandler(handlers(
		d.replicaSetChanged,
		func(old, cur any) { d.replicaSetChanged(old); d.replicaSetChanged(cur) },
		d.replicaSetChanged,
	))
	// A Recreate rollout waits for the old pods to be gone; pods still owned
	// by a Deployment directly (made before the upgrade) wake it too.
	c.podInf.AddEventHandler(handlers(
		func(obj any) { d.podChanged(obj.(*corev1.Pod), false) },
		func(_, _ any) {},
		func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				d.podChanged(p, true)
			}
		},
	))
	return d
}

func isAppsGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == appsv1.GroupName
}

// deploymentOf is the key of the Deployment controlling obj, or "".
func deploymentOf(obj metav1.Object) string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != deploymentKind.Kind || !isAppsGroup(ref.APIVersion) {
		return ""
	}
	return obj.GetNamespace() + "/" + ref.Name
}

func (d *deploymentController) replicaSetChanged(obj any) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return
	}
	if key := deploymentOf(rs); key != "" {
		d.loop.add(key)
		return
	}
	if metav1.GetControllerOf(rs) != nil {
		return
	}
	// An orphan: the deployments whose selector matches may adopt it.
	deps, _ := d.c.deployments.Deployments(rs.Namespace).List(labels.Everything())
	for _, dep := range deps {
		if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err == nil && !sel.Empty() && sel.Matches(labels.Set(rs.Labels)) {
			d.loop.add(keyOf(dep))
		}
	}
}

func (d *deploymentController) podChanged(pod *corev1.Pod, deleted bool) {
	if key := deploymentOf(pod); key != "" {
		d.loop.add(key)
		return
	}
	ref := metav1.GetControllerOf(pod)
	if !deleted {
		return
	}
	if ref == nil || ref.Kind != replicaSetKind.Kind {
		return
	}
	if rs, err := d.c.replicaSets.ReplicaSets(pod.Namespace).Get(ref.Name); err == nil {
		if key := deploymentOf(rs); key != "" {
			d.loop.add(key)
		}
	}
}

// rollout is one sync's view of a deployment and its ReplicaSets. The
// ReplicaSets are copies: scaling one updates it in place.
type rollout struct {
	dep     *appsv1.Deployment
	hash    string
	all     []*appsv1.ReplicaSet
	newRS   *appsv1.ReplicaSet
	old     []*appsv1.ReplicaSet
	created bool // newRS was created by this sync
}

func (d *deploymentController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	dep, err := d.c.deployments.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // the garbage collector removes its ReplicaSets
	}
	if err != nil {
		return err
	}
	if d.fresh.stale(key, dep) {
		return errStale
	}
	if dep.DeletionTimestamp != nil {
		return nil
	}
	dep = dep.DeepCopy()
	if dep.Spec.Replicas == nil {
		dep.Spec.Replicas = ptrTo[int32](1)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil // validation refuses these
	}
	r := &rollout{dep: dep, hash: computeHash(&dep.Spec.Template, dep.Status.CollisionCount)}
	newKey := "rs/" + ns + "/" + rsName(dep, r.hash)
	cached, err := d.c.replicaSets.ReplicaSets(ns).Get(rsName(dep, r.hash))
	if err != nil {
		cached = nil
	}
	if d.fresh.stale(newKey, cached) {
		return errStale // a ReplicaSet we created is not in the cache yet
	}
	if r.all, err = d.claimReplicaSets(ctx, dep, sel); err != nil {
		return err
	}
	for _, rs := range r.all {
		if d.fresh.stale("rs/"+keyOf(rs), rs) {
			return errStale // a scale we wrote is not in the cache yet
		}
	}
	if r.all, err = d.migratePods(ctx, dep, r.all); err != nil {
		return err
	}
	if dep.Spec.Paused {
		err = d.syncPaused(ctx, r)
	} else {
		err = d.rollout(ctx, r)
	}
	if err != nil {
		return err
	}
	st, requeue := calculateStatus(r, d.c.now())
	if requeue > 0 {
		d.loop.queue.AddAfter(key, requeue)
	}
	if apiequality.Semantic.DeepEqual(r.dep.Status, st) {
		return nil
	}
	upd := r.dep.DeepCopy()
	upd.Status = st
	res, err := d.c.client.AppsV1().Deployments(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of deployment %q: %w", key, err)
	}
	d.fresh.wrote(key, res)
	return nil
}

// stillLive reads dep past the cache (Kubernetes' RecheckDeletionTimestamp)
// before it adopts a ReplicaSet or one is made for it: a
// deployment deleted a moment ago (with propagationPolicy Orphan, its old
// ReplicaSet and pods let go) may still be in the cache, and a ReplicaSet
// created for it would adopt those pods, then be collected with them as
// soon as the garbage collector sees its owner gone. Adoption then skips the
// orphan; creation returns errStale, and the deletion reaching the cache ends
// the syncs.
func (d *deploymentController) stillLive(ctx context.Context, dep *appsv1.Deployment) (bool, error) {
	cur, err := d.c.client.AppsV1().Deployments(dep.Namespace).Get(ctx, dep.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking deployment %q past the cache: %w", keyOf(dep), err)
	}
	return cur.UID == dep.UID && cur.DeletionTimestamp == nil, nil
}

// claimReplicaSets returns copies of the ReplicaSets dep controls, after
// adopting orphans its selector matches and releasing owned ones it no
// longer matches (ReplicaSetControllerRefManager.ClaimReplicaSets).
func (d *deploymentController) claimReplicaSets(ctx context.Context, dep *appsv1.Deployment, sel labels.Selector) ([]*appsv1.ReplicaSet, error) {
	list, err := d.c.replicaSets.ReplicaSets(dep.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ReplicaSet
	var canAdopt *bool
	for _, rs := range list {
		ref := metav1.GetControllerOf(rs)
		matches := sel.Matches(labels.Set(rs.Labels))
		var upd *appsv1.ReplicaSet
		switch {
		case ref != nil && ref.UID == dep.UID && matches:
			owned = append(owned, rs.DeepCopy())
			continue
		case ref != nil && ref.UID == dep.UID && rs.DeletionTimestamp == nil:
			upd = rs.DeepCopy()
			upd.OwnerReferences = slices.DeleteFunc(upd.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == dep.UID })
		case ref == nil && matches && rs.DeletionTimestamp == nil:
			// Recheck the deployment past the cache before adopting (one
			// deleted with propagationPolicy Orphan let its sets go).
			if canAdopt == nil {
				ok, err := d.stillLive(ctx, dep)
				if err != nil {
					return nil, err
				}
				canAdopt = &ok
			}
			if !*canAdopt {
				continue
			}
			upd = rs.DeepCopy()
			upd.OwnerReferences = append(upd.OwnerReferences, *metav1.NewControllerRef(dep, deploymentKind))
		default:
			continue
		}
		res, err := d.c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("claiming replica set %q for deployment %q: %w", keyOf(rs), keyOf(dep), err)
		}
		d.fresh.wrote("rs/"+keyOf(res), res)
		if matches {
			owned = append(owned, res)
		}
	}
	return owned, nil
}

// migratePods creates, for pods dep controls directly (made before
// Deployments owned ReplicaSets), the ReplicaSet of their template hash,
// sized to them; the ReplicaSet controller then adopts them.
func (d *deploymentController) migratePods(ctx context.Context, dep *appsv1.Deployment, all []*appsv1.ReplicaSet) ([]*appsv1.ReplicaSet, error) {
	objs, err := d.c.podInf.GetIndexer().ByIndex(byControllerUID, string(dep.UID))
	if err != nil || len(objs) == 0 {
		return all, err
	}
	byHash := map[string][]*corev1.Pod{}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if h := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; h != "" && p.Namespace == dep.Namespace && isPodActive(p) {
			byHash[h] = append(byHash[h], p)
		}
	}
	have := map[string]bool{}
	for _, rs := range all {
		have[rs.Name] = true
	}
	hashes := slices.Sorted(maps.Keys(byHash))
	cur := computeHash(&dep.Spec.Template, dep.Status.CollisionCount)
	for _, h := range hashes {
		pods := byHash[h]
		if have[rsName(dep, h)] {
			continue
		}
		var tmpl corev1.PodTemplateSpec
		if h == cur {
			tmpl = *dep.Spec.Template.DeepCopy()
		} else {
			// The template of an older revision is known only from its pods.
			p := pods[0]
			tmpl.Labels = maps.Clone(p.Labels)
			tmpl.Annotations = maps.Clone(p.Annotations)
			delete(tmpl.Annotations, revisionAnnotation)
			tmpl.Spec = *p.Spec.DeepCopy()
			tmpl.Spec.NodeName = ""
		}
		var rev int64
		for _, p := range pods {
			r, _ := strconv.ParseInt(p.Annotations[revisionAnnotation], 10, 64)
			rev = max(rev, r)
		}
		if ok, err := d.stillLive(ctx, dep); err != nil || !ok {
			return nil, cmp.Or(err, errStale)
		}
		rs := newReplicaSet(dep, tmpl, h, int32(len(pods)), max(rev, 1))
		res, err := d.c.client.AppsV1().ReplicaSets(dep.Namespace).Create(ctx, rs, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) {
			d.loop.log.Warn("not migrating pods to a replica set", "deployment", keyOf(dep), "hash", h, "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating replica set for the pods of deployment %q: %w", keyOf(dep), err)
		}
		d.loop.log.Info("created replica set for pods the deployment owned directly", "deployment", keyOf(dep), "replicaset", res.Name, "pods", len(pods))
		d.fresh.wrote("rs/"+keyOf(res), res)
		all = append(all, res)
	}
	return all, nil
}

// newReplicaSet is the ReplicaSet of dep for template (Kubernetes'
// getNewReplicaSet): the pod-template-hash label on its template, selector
// and itself, and the deployment's annotations.
func newReplicaSet(dep *appsv1.Deployment, template corev1.PodTemplateSpec, hash string, replicas int32, rev int64) *appsv1.ReplicaSet {
	template.Labels = maps.Clone(template.Labels)
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	sel := dep.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            rsName(dep, hash),
			Namespace:       dep.Namespace,
			Labels:          maps.Clone(template.Labels),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, deploymentKind)},
			Annotations:     map[string]string{},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        &replicas,
			MinReadySeconds: dep.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        template,
		},
	}
	for k, v := range dep.Annotations {
		if !skipCopyAnnotation[k] {
			rs.Annotations[k] = v
		}
	}
	rs.Annotations[revisionAnnotation] = strconv.FormatInt(rev, 10)
	setReplicasAnnotations(rs, dep)
	return rs
}

// setReplicasAnnotations records the deployment's size on rs; it reports
// whether anything changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, dep *appsv1.Deployment) bool {
	replicas := int(*dep.Spec.Replicas)
	surge := 0
	if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		surge, _ = resolveFenceposts(dep.Spec.Strategy.RollingUpdate, replicas)
	}
	want := map[string]string{
		desiredReplicasAnnotation: strconv.Itoa(replicas),
		maxReplicasAnnotation:     strconv.Itoa(replicas + surge),
	}
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range want {
		if rs.Annotations[k] != v {
			rs.Annotations[k] = v
			changed = true
		}
	}
	return changed
}

func rsRevision(rs *appsv1.ReplicaSet) int64 {
	r, _ := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
	return r
}

func rsReplicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil || rs.Spec.Replicas == nil {
		return 0
	}
	return *rs.Spec.Replicas
}

// equalIgnoreHash compares pod templates without the pod-template-hash label.
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// findReplicaSets splits r.all into the ReplicaSet of the current template
// (the oldest such, as FindNewReplicaSet) and the old ones, and brings
// revision numbers up to date (getAllReplicaSetsAndSyncRevision); with
// create, a missing new ReplicaSet is created.
func (d *deploymentController) findReplicaSets(ctx context.Context, r *rollout, create bool) error {
	dep := r.dep
	slices.SortStableFunc(r.all, func(a, b *appsv1.ReplicaSet) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	r.newRS, r.old = nil, nil
	for _, rs := range r.all {
		if r.newRS == nil && equalIgnoreHash(&rs.Spec.Template, &dep.Spec.Template) {
			r.newRS = rs
		} else {
			r.old = append(r.old, rs)
		}
	}
	var maxOld int64
	for _, rs := range r.old {
		maxOld = max(maxOld, rsRevision(rs))
	}
	rev := maxOld + 1
	switch {
	case r.newRS != nil:
		upd := r.newRS.DeepCopy()
		changed := setReplicasAnnotations(upd, dep)
		// The deployment's own annotations (kubernetes.io/change-cause,
		// for one) follow onto its current ReplicaSet.
		for k, v := range dep.Annotations {
			if !skipCopyAnnotation[k] && upd.Annotations[k] != v {
				upd.Annotations[k] = v
				changed = true
			}
		}
		if cur := rsRevision(upd); cur < rev {
			if cur > 0 {
				hist := upd.Annotations[revisionHistoryAnnotation]
				if hist != "" {
					hist += ","
				}
				upd.Annotations[revisionHistoryAnnotation] = hist + strconv.FormatInt(cur, 10)
			}
			upd.Annotations[revisionAnnotation] = strconv.FormatInt(rev, 10)
			changed = true
		} else {
			rev = cur
		}
		if upd.Spec.MinReadySeconds != dep.Spec.MinReadySeconds {
			upd.Spec.MinReadySeconds = dep.Spec.MinReadySeconds
			changed = true
		}
		if changed {
			if err := d.writeReplicaSet(ctx, r.newRS, upd); err != nil {
				return err
			}
		}
	case create:
		if ok, err := d.stillLive(ctx, dep); err != nil || !ok {
			return cmp.Or(err, errStale)
		}
		rs := newReplicaSet(dep, *dep.Spec.Template.DeepCopy(), r.hash, 0, rev)
		res, err := d.c.client.AppsV1().ReplicaSets(dep.Namespace).Create(ctx, rs, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Someone else's ReplicaSet has the name: count a hash collision
			// so the next sync computes another name.
			existing, gerr := d.c.client.AppsV1().ReplicaSets(dep.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
			if gerr == nil && metav1.IsControlledBy(existing, dep) && equalIgnoreHash(&existing.Spec.Template, &dep.Spec.Template) {
				d.fresh.wrote("rs/"+keyOf(existing), existing)
				return errStale
			}
			upd := dep.DeepCopy()
			upd.Status.CollisionCount = ptrTo(ptrValue(dep.Status.CollisionCount) + 1)
			res, err := d.c.client.AppsV1().Deployments(dep.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("counting a hash collision of deployment %q: %w", keyOf(dep), err)
			}
			d.fresh.wrote(keyOf(dep), res)
			return fmt.Errorf("replica set %q of deployment %q exists with another template: hash collision", rs.Name, keyOf(dep))
		}
		if err != nil {
			return fmt.Errorf("creating replica set for deployment %q: %w", keyOf(dep), err)
		}
		d.fresh.wrote("rs/"+keyOf(res), res)
		d.c.recordEvent(ctx, deploymentComponent, dep, deploymentKind.Kind, deploymentKind.GroupVersion().String(), corev1.EventTypeNormal,
			"ScalingReplicaSet", fmt.Sprintf("Created new replica set %q", res.Name))
		r.newRS, r.created = res, true
		r.all = append(r.all, res)
	default:
		return nil
	}
	if want := strconv.FormatInt(rev, 10); dep.Annotations[revisionAnnotation] != want {
		upd := dep.DeepCopy()
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[revisionAnnotation] = want
		upd.Spec.Replicas = r.dep.Spec.Replicas
		res, err := d.c.client.AppsV1().Deployments(dep.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("setting revision of deployment %q: %w", keyOf(dep), err)
		}
		d.fresh.wrote(keyOf(dep), res)
		if res.Spec.Replicas == nil {
			res.Spec.Replicas = ptrTo[int32](1)
		}
		r.dep = res
	}
	return nil
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// writeReplicaSet updates rs (our copy) to upd and keeps the copy current.
func (d *deploymentController) writeReplicaSet(ctx context.Context, rs, upd *appsv1.ReplicaSet) error {
	res, err := d.c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating replica set %q: %w", keyOf(rs), err)
	}
	d.fresh.wrote("rs/"+keyOf(res), res)
	*rs = *res
	return nil
}

// scale sets rs's replicas (and the deployment's size annotations).
func (d *deploymentController) scale(ctx context.Context, r *rollout, rs *appsv1.ReplicaSet, n int32) error {
	from := rsReplicas(rs)
	upd := rs.DeepCopy()
	changed := setReplicasAnnotations(upd, r.dep)
	if from == n && !changed {
		return nil
	}
	upd.Spec.Replicas = &n
	if err := d.writeReplicaSet(ctx, rs, upd); err != nil {
		return err
	}
	if from != n {
		dir := "up"
		if n < from {
			dir = "down"
		}
		d.c.recordEvent(ctx, deploymentComponent, r.dep, deploymentKind.Kind, deploymentKind.GroupVersion().String(), corev1.EventTypeNormal,
			"ScalingReplicaSet", fmt.Sprintf("Scaled %s replica set %s from %d to %d", dir, rs.Name, from, n))
	}
	return nil
}

// syncPaused is Kubernetes' sync for a paused deployment: no new
// ReplicaSet and no rollout, but the deployment's size still applies when
// one ReplicaSet is active.
func (d *deploymentController) syncPaused(ctx context.Context, r *rollout) error {
	if err := d.findReplicaSets(ctx, r, false); err != nil {
		return err
	}
	var active []*appsv1.ReplicaSet
	for _, rs := range r.all {
		if rsReplicas(rs) > 0 {
			active = append(active, rs)
		}
	}
	switch {
	case len(active) == 1:
		if err := d.scale(ctx, r, active[0], *r.dep.Spec.Replicas); err != nil {
			return err
		}
	case len(active) == 0 && r.newRS != nil:
		if err := d.scale(ctx, r, r.newRS, *r.dep.Spec.Replicas); err != nil {
			return err
		}
	}
	return d.cleanup(ctx, r)
}

// rollout moves the deployment one step towards its template: Kubernetes'
// rolloutRecreate and rolloutRolling.
func (d *deploymentController) rollout(ctx context.Context, r *rollout) error {
	if err := d.findReplicaSets(ctx, r, true); err != nil {
		return err
	}
	dep := r.dep
	replicas := *dep.Spec.Replicas
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		scaledDown := false
		for _, rs := range r.old {
			if rsReplicas(rs) > 0 {
				if err := d.scale(ctx, r, rs, 0); err != nil {
					return err
				}
				scaledDown = true
			}
		}
		if scaledDown || d.oldPodsRunning(r) {
			return nil
		}
		if err := d.scale(ctx, r, r.newRS, replicas); err != nil {
			return err
		}
		if deploymentComplete(dep, &dep.Status) {
			return d.cleanup(ctx, r)
		}
		return nil
	}

	// reconcileNewReplicaSet: scale the new ReplicaSet up within maxSurge.
	surge, _ := resolveFenceposts(dep.Spec.Strategy.RollingUpdate, int(replicas))
	cur := rsReplicas(r.newRS)
	target := cur
	if cur > replicas {
		target = replicas
	} else if cur < replicas {
		var total int32
		for _, rs := range r.all {
			total += rsReplicas(rs)
		}
		if maxTotal := replicas + int32(surge); total < maxTotal {
			target = cur + min(maxTotal-total, replicas-cur)
		}
	}
	if target != cur {
		return d.scale(ctx, r, r.newRS, target)
	}

	// reconcileOldReplicaSets: scale old ones down within maxUnavailable,
	// unhealthy pods first.
	var oldCount, allCount int32
	for _, rs := range r.old {
		oldCount += rsReplicas(rs)
	}
	if oldCount == 0 {
		if deploymentComplete(dep, &dep.Status) {
			return d.cleanup(ctx, r)
		}
		return nil
	}
	for _, rs := range r.all {
		allCount += rsReplicas(rs)
	}
	minAvailable := replicas - int32(maxUnavailable(dep))
	newUnavailable := rsReplicas(r.newRS) - r.newRS.Status.AvailableReplicas
	maxScaledDown := allCount - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return nil
	}
	// Oldest first (cleanupUnhealthyReplicas).
	var cleaned int32
	for _, rs := range r.old {
		if cleaned >= maxScaledDown {
			break
		}
		n := rsReplicas(rs)
		unhealthy := n - rs.Status.AvailableReplicas
		if n == 0 || unhealthy <= 0 {
			continue
		}
		down := min(maxScaledDown-cleaned, unhealthy)
		if err := d.scale(ctx, r, rs, n-down); err != nil {
			return err
		}
		cleaned += down
	}
	// scaleDownOldReplicaSetsForRollingUpdate.
	var available int32
	for _, rs := range r.all {
		available += rs.Status.AvailableReplicas
	}
	if available <= minAvailable {
		return nil
	}
	total := available - minAvailable
	var done int32
	for _, rs := range r.old {
		if done >= total {
			break
		}
		n := rsReplicas(rs)
		if n == 0 {
			continue
		}
		down := min(n, total-done)
		if err := d.scale(ctx, r, rs, n-down); err != nil {
			return err
		}
		done += down
	}
	return nil
}

// oldPodsRunning reports whether any pod of an old ReplicaSet has not
// finished, terminating ones included (Recreate waits for them).
func (d *deploymentController) oldPodsRunning(r *rollout) bool {
	for _, rs := range r.old {
		if rs.Status.Replicas > 0 {
			return true
		}
		objs, _ := d.c.podInf.GetIndexer().ByIndex(byControllerUID, string(rs.UID))
		for _, o := range objs {
			if p := o.(*corev1.Pod); p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return true
			}
		}
	}
	return false
}

// cleanup deletes the oldest ReplicaSets scaled to zero beyond
// revisionHistoryLimit (cleanupDeployment).
func (d *deploymentController) cleanup(ctx context.Context, r *rollout) error {
	limit := r.dep.Spec.RevisionHistoryLimit
	if limit == nil {
		return nil
	}
	var cleanable []*appsv1.ReplicaSet
	for _, rs := range r.old {
		if rsReplicas(rs) == 0 && rs.Status.Replicas == 0 && rs.DeletionTimestamp == nil && rs.Status.ObservedGeneration >= rs.Generation {
			cleanable = append(cleanable, rs)
		}
	}
	diff := len(cleanable) - int(*limit)
	if diff <= 0 {
		return nil
	}
	slices.SortStableFunc(cleanable, func(a, b *appsv1.ReplicaSet) int { return cmpInt(rsRevision(a), rsRevision(b)) })
	for _, rs := range cleanable[:diff] {
		uid := rs.UID
		err := d.c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting old replica set %q of deployment %q: %w", keyOf(rs), keyOf(r.dep), err)
		}
		d.loop.log.Debug("deleted old replica set", "deployment", keyOf(r.dep), "replicaset", rs.Name)
	}
	return nil
}

func rsName(dep *appsv1.Deployment, hash string) string { return dep.Name + "-" + hash }

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
func calculateStatus(r *rollout, now time.Time) (appsv1.DeploymentStatus, time.Duration) {
	dep := r.dep
	replicas := int(*dep.Spec.Replicas)
	var total, ready, available, terminating int32
	for _, rs := range r.all {
		total += rs.Status.Replicas
		ready += rs.Status.ReadyReplicas
		available += rs.Status.AvailableReplicas
		terminating += ptrValue(rs.Status.TerminatingReplicas)
	}
	var requeue time.Duration
	st := *dep.Status.DeepCopy()
	st.ObservedGeneration = dep.Generation
	st.Replicas = total
	st.UpdatedReplicas = 0
	if r.newRS != nil {
		st.UpdatedReplicas = r.newRS.Status.Replicas
	}
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.UnavailableReplicas = max(0, int32(replicas)-available)
	st.TerminatingReplicas = ptrTo(terminating)

	if int(available) >= replicas-maxUnavailable(dep) {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinimumAvailable, "Deployment has minimum availability.", now))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinimumUnavail, "Deployment does not have minimum availability.", now))
	}

	rs := rsName(dep, r.hash)
	if r.newRS != nil {
		rs = r.newRS.Name
	}
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
	if r.created {
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSCreated, fmt.Sprintf("Created new replica set %q", rs), now))
	} else if getCondition(st, appsv1.DeploymentProgressing) == nil && r.newRS != nil {
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
