package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
)

// The Job controller runs a batch/v1 Job's pods to completion, as
// Kubernetes' does for NonIndexed jobs: up to parallelism pods at a time
// until completions pods have succeeded (or, without completions, until one
// has succeeded and the others have finished). Failed pods (restartPolicy
// Never) and container restarts (OnFailure, where the node agent restarts the
// container in place) count towards backoffLimit; replacements wait an
// exponential back-off (jobBackoffBase, doubling, at most six minutes) after
// the last failure. Past backoffLimit or activeDeadlineSeconds the job gets
// FailureTarget and Failed and its running pods are deleted; on success it
// gets SuccessCriteriaMet and Complete. Finished jobs with
// ttlSecondsAfterFinished are deleted once it has passed (their pods go with
// them through the garbage collector).
//
// Succeeded and failed are counted from the job's finished pods, which the
// controller never deletes; the counts never go down, so a finished pod
// deleted by hand is not run again.

const jobComponent = "job-controller"

var jobKind = batchv1.SchemeGroupVersion.WithKind("Job")

// jobBackoffBase is the first retry delay after a failed pod; a variable so
// tests can shorten it.
var jobBackoffBase = 10 * time.Second

const jobBackoffMax = 6 * time.Minute

type jobController struct {
	c     *Controllers
	loop  *loop
	jobs  batchlisters.JobLister
	exp   *expectations
	fresh *freshness
}

func newJobController(c *Controllers) *jobController {
	j := &jobController{c: c, exp: newExpectations(), fresh: newFreshness()}
	j.loop = c.newLoop("job", c.opts.Workers, j.sync)
	j.jobs = c.factory.Batch().V1().Jobs().Lister()
	c.watchPodOwners(c.factory.Batch().V1().Jobs().Informer(), jobKind, j.loop, j.exp, j.fresh)
	return j
}

func jobCondition(st *batchv1.JobStatus, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func jobHas(st *batchv1.JobStatus, t batchv1.JobConditionType) bool {
	c := jobCondition(st, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

func setJobCondition(st *batchv1.JobStatus, t batchv1.JobConditionType, reason, msg string, now metav1.Time) {
	if c := jobCondition(st, t); c != nil {
		if c.Status != corev1.ConditionTrue {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message, c.LastProbeTime = corev1.ConditionTrue, reason, msg, now
		return
	}
	st.Conditions = append(st.Conditions, batchv1.JobCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now,
	})
}

func jobFinished(st *batchv1.JobStatus) bool {
	return jobHas(st, batchv1.JobComplete) || jobHas(st, batchv1.JobFailed)
}

func (j *jobController) sync(ctx context.Context, key string) error {
	job, ok, err := startPodOwnerSync(key, func(ns, name string) (*batchv1.Job, error) { return j.jobs.Jobs(ns).Get(name) }, j.fresh, j.exp, j.loop.queue.AddAfter, j.c.now())
	if !ok {
		return err
	}
	now := j.c.now()
	if jobFinished(&job.Status) {
		return j.expire(ctx, job, now)
	}
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil // validation keeps this from happening
	}
	pods, err := j.c.ownedPods(job, sel)
	if err != nil {
		return err
	}
	var active []*corev1.Pod
	var succeeded, failed, ready, terminating, restarts int32
	var lastFailure time.Time
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		case p.Status.Phase == corev1.PodFailed:
			failed++
			lastFailure = later(lastFailure, finishedAt(p))
		case p.DeletionTimestamp != nil:
			terminating++
		default:
			active = append(active, p)
			if isPodReady(p) {
				ready++
			}
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
				if t := cs.LastTerminationState.Terminated; t != nil {
					lastFailure = later(lastFailure, t.FinishedAt.Time)
				}
			}
		}
	}
	st := job.Status.DeepCopy()
	st.Succeeded = max(st.Succeeded, succeeded)
	st.Failed = max(st.Failed, failed)
	st.Ready = &ready
	st.Terminating = &terminating
	mnow := metav1.NewTime(now)
	if st.StartTime == nil && !ptrTrue(job.Spec.Suspend) {
		st.StartTime = &mnow
	}
	completions := job.Spec.Completions
	parallelism := int32(1)
	if job.Spec.Parallelism != nil {
		parallelism = *job.Spec.Parallelism
	}
	backoffLimit := int32(6)
	if job.Spec.BackoffLimit != nil {
		backoffLimit = *job.Spec.BackoffLimit
	}

	var failReason, failMsg string
	switch {
	case st.Failed+restarts > backoffLimit:
		failReason, failMsg = batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
	case job.Spec.ActiveDeadlineSeconds != nil && st.StartTime != nil &&
		!now.Before(st.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second)):
		failReason, failMsg = batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"
	}
	complete := (completions != nil && st.Succeeded >= *completions) ||
		(completions == nil && st.Succeeded > 0 && len(active) == 0)
	var want int32
	switch {
	case failReason != "":
		setJobCondition(st, batchv1.JobFailureTarget, failReason, failMsg, mnow)
		setJobCondition(st, batchv1.JobFailed, failReason, failMsg, mnow)
		j.c.recordEvent(ctx, jobComponent, job, jobKind.Kind, jobKind.GroupVersion().String(), corev1.EventTypeWarning, failReason, failMsg)
	case complete:
		setJobCondition(st, batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", mnow)
		setJobCondition(st, batchv1.JobComplete, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", mnow)
		st.CompletionTime = &mnow
		j.c.recordEvent(ctx, jobComponent, job, jobKind.Kind, jobKind.GroupVersion().String(), corev1.EventTypeNormal, "Completed", "Job completed")
	case ptrTrue(job.Spec.Suspend):
		setJobCondition(st, batchv1.JobSuspended, "JobSuspended", "Job suspended", mnow)
	case completions != nil:
		want = min(parallelism, *completions-st.Succeeded)
	case st.Succeeded == 0:
		want = parallelism
	default:
		want = int32(len(active)) // one succeeded: let the others finish
	}
	if c := jobCondition(st, batchv1.JobSuspended); c != nil && c.Status == corev1.ConditionTrue && !ptrTrue(job.Spec.Suspend) {
		c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionFalse, "JobResumed", "Job resumed", mnow
	}

	st.Active = int32(len(active))
	switch n := int(want) - len(active); {
	case n > 0:
		if wait := jobBackoff(st.Failed+restarts, lastFailure, now); wait > 0 {
			j.loop.queue.AddAfter(key, wait)
			break
		}
		created, err := j.createPods(ctx, job, n)
		st.Active += int32(created)
		if err != nil {
			j.writeStatus(ctx, job, st)
			return err
		}
	case n < 0:
		// Newest first, as Kubernetes picks the pods to stop.
		slices.SortFunc(active, func(a, b *corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
		if err := j.deletePods(ctx, job, active[:-n]); err != nil {
			return err
		}
		st.Active = want
	}
	if failReason != "" || complete {
		st.Active = 0
	}
	if job.Spec.ActiveDeadlineSeconds != nil && st.StartTime != nil && failReason == "" && !complete {
		j.loop.queue.AddAfter(key, time.Until(st.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second))+time.Second/2)
	}
	if err := j.writeStatus(ctx, job, st); err != nil {
		return err
	}
	if jobFinished(st) {
		j.loop.queue.Add(key) // TTL, if any
	}
	return nil
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// finishedAt is when a failed pod's last container ended.
func finishedAt(p *corev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			t = later(t, cs.State.Terminated.FinishedAt.Time)
		}
	}
	if t.IsZero() {
		t = p.CreationTimestamp.Time
	}
	return t
}

// jobBackoff is how long to wait before replacing a failed pod.
func jobBackoff(failures int32, last time.Time, now time.Time) time.Duration {
	if failures == 0 || last.IsZero() {
		return 0
	}
	d := jobBackoffBase
	for i := int32(1); i < failures && d < jobBackoffMax; i++ {
		d *= 2
	}
	return last.Add(min(d, jobBackoffMax)).Sub(now)
}

func (j *jobController) writeStatus(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus) error {
	if apiequality.Semantic.DeepEqual(&job.Status, st) {
		return nil
	}
	upd := job.DeepCopy()
	upd.Status = *st
	res, err := j.c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of job %q: %w", keyOf(job), err)
	}
	j.fresh.wrote(keyOf(job), res)
	return nil
}

func (j *jobController) createPods(ctx context.Context, job *batchv1.Job, n int) (int, error) {
	key := keyOf(job)
	j.exp.expect(key, n, nil, j.c.now())
	created := 0
	for i := range n {
		pod := podFromTemplate(&job.Spec.Template, job, jobKind, nil)
		pod.GenerateName = podNamePrefix(job.Name)
		res, err := j.c.client.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			for range n - i {
				j.exp.creationObserved(key) // never to be seen
			}
			j.c.recordEvent(ctx, jobComponent, job, jobKind.Kind, jobKind.GroupVersion().String(), corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("Error creating: %v", err))
			return created, fmt.Errorf("creating pod for job %q: %w", key, err)
		}
		created++
		j.c.recordEvent(ctx, jobComponent, job, jobKind.Kind, jobKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+res.Name)
	}
	return created, nil
}

func (j *jobController) deletePods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) error {
	key := keyOf(job)
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = keyOf(p)
	}
	j.exp.expect(key, 0, keys, j.c.now())
	for _, p := range pods {
		uid := p.UID
		err := j.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil {
			j.exp.deletionObserved(key, keyOf(p))
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting pod %q of job %q: %w", keyOf(p), key, err)
			}
			continue
		}
		j.c.recordEvent(ctx, jobComponent, job, jobKind.Kind, jobKind.GroupVersion().String(), corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
	}
	return nil
}

// expire deletes the running pods of a finished job and, past
// ttlSecondsAfterFinished, the job itself.
func (j *jobController) expire(ctx context.Context, job *batchv1.Job, now time.Time) error {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err == nil {
		pods, err := j.c.ownedPods(job, sel)
		if err != nil {
			return err
		}
		if active := slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return !podActive(p) }); len(active) > 0 {
			if err := j.deletePods(ctx, job, active); err != nil {
				return err
			}
		}
	}
	ttl := job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return nil
	}
	var finished time.Time
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			finished = c.LastTransitionTime.Time
		}
	}
	if left := finished.Add(time.Duration(*ttl) * time.Second).Sub(now); left > 0 {
		j.loop.queue.AddAfter(keyOf(job), left)
		return nil
	}
	uid := job.UID
	bg := metav1.DeletePropagationBackground
	err = j.c.client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting job %q after its ttlSecondsAfterFinished: %w", keyOf(job), err)
	}
	return nil
}
