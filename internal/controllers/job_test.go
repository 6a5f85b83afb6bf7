package controllers

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testJob(name string, muts ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: name, Image: "busybox", Command: []string{"nslookup", "kubernetes.default"}}},
		}}},
	}
	for _, m := range muts {
		m(j)
	}
	return j
}

func (tc *testCluster) createJob(j *batchv1.Job) *batchv1.Job {
	tc.t.Helper()
	got, err := tc.client.BatchV1().Jobs(j.Namespace).Create(tc.ctx, j, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating job: %v", err)
	}
	return got
}

func (tc *testCluster) getJob(name string) *batchv1.Job {
	tc.t.Helper()
	j, err := tc.client.BatchV1().Jobs("default").Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("getting job: %v", err)
	}
	return j
}

// finishPod ends a pod's only container with code, as the node agent reports
// a container of a restartPolicy Never pod that exited.
func (tc *testCluster) finishPod(name string, code int32) {
	tc.t.Helper()
	tc.updatePodStatus("default", name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		now := metav1.Now()
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now},
		}}}
		setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted"})
	})
}

// waitJobPods waits for n active pods of job name and returns them.
func (tc *testCluster) waitJobPods(name string, n int) []corev1.Pod {
	tc.t.Helper()
	var pods []corev1.Pod
	testutil.Eventually(tc.t, waitTimeout, fmt.Sprintf("%d active pods of job %s", n, name), func() error {
		all := tc.pods("default", "batch.kubernetes.io/job-name="+name)
		pods = activePods(all)
		if len(pods) != n {
			return errors.New(podNames(all))
		}
		return nil
	})
	return pods
}

func jobCond(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == t {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

func (tc *testCluster) waitJobCondition(name string, t batchv1.JobConditionType, reason string) *batchv1.Job {
	tc.t.Helper()
	var j *batchv1.Job
	testutil.Eventually(tc.t, waitTimeout, fmt.Sprintf("job %s %s", name, t), func() error {
		j = tc.getJob(name)
		c := jobCond(j, t)
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != reason {
			return fmt.Errorf("%+v", j.Status)
		}
		return nil
	})
	return j
}

func TestJobRunsToCompletions(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	j := tc.createJob(testJob("lookup", func(j *batchv1.Job) { j.Spec.Completions = ptrTo[int32](2) }))
	if *j.Spec.Parallelism != 1 || *j.Spec.BackoffLimit != 6 || *j.Spec.CompletionMode != batchv1.NonIndexedCompletion {
		t.Errorf("defaults: %+v", j.Spec)
	}
	uid := string(j.UID)
	if j.Spec.Selector == nil || j.Spec.Selector.MatchLabels["batch.kubernetes.io/controller-uid"] != uid {
		t.Errorf("generated selector = %v", j.Spec.Selector)
	}

	pod := tc.waitJobPods("lookup", 1)[0]
	for k, v := range map[string]string{"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
		"batch.kubernetes.io/job-name": "lookup", "job-name": "lookup"} {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.Kind != "Job" || ref.APIVersion != "batch/v1" || ref.UID != j.UID {
		t.Errorf("controller ref = %+v", ref)
	}
	testutil.Eventually(t, waitTimeout, "job started", func() error {
		j := tc.getJob("lookup")
		if j.Status.StartTime == nil || j.Status.Active != 1 {
			return fmt.Errorf("%+v", j.Status)
		}
		return nil
	})

	tc.finishPod(pod.Name, 0)
	second := tc.waitJobPods("lookup", 1)[0]
	if second.Name == pod.Name {
		t.Fatalf("no second pod")
	}
	if c := jobCond(tc.getJob("lookup"), batchv1.JobComplete); c != nil {
		t.Fatalf("complete after one of two completions: %+v", c)
	}
	tc.finishPod(second.Name, 0)
	done := tc.waitJobCondition("lookup", batchv1.JobComplete, batchv1.JobReasonCompletionsReached)
	if c := jobCond(done, batchv1.JobSuccessCriteriaMet); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("no SuccessCriteriaMet: %+v", done.Status.Conditions)
	}
	if done.Status.Succeeded != 2 || done.Status.Active != 0 || done.Status.Failed != 0 || done.Status.CompletionTime == nil {
		t.Errorf("status = %+v", done.Status)
	}
	if n := len(tc.pods("default", "job-name=lookup")); n != 2 {
		t.Errorf("%d pods after completion, want the 2 finished ones kept", n)
	}
}

func TestJobParallelism(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.createJob(testJob("par", func(j *batchv1.Job) {
		j.Spec.Completions = ptrTo[int32](3)
		j.Spec.Parallelism = ptrTo[int32](2)
	}))
	pods := tc.waitJobPods("par", 2)
	tc.finishPod(pods[0].Name, 0)
	// Two more to go, two at a time: one new pod beside the running one.
	pods = tc.waitJobPods("par", 2)
	for _, p := range pods {
		tc.finishPod(p.Name, 0)
	}
	done := tc.waitJobCondition("par", batchv1.JobComplete, batchv1.JobReasonCompletionsReached)
	if done.Status.Succeeded != 3 {
		t.Errorf("succeeded = %d, want 3", done.Status.Succeeded)
	}
}

func TestJobBackoffLimitExceeded(t *testing.T) {
	old := jobBackoffBase
	jobBackoffBase = 50 * time.Millisecond
	t.Cleanup(func() { jobBackoffBase = old })
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.createJob(testJob("flaky", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptrTo[int32](1) }))
	first := tc.waitJobPods("flaky", 1)[0]
	tc.finishPod(first.Name, 1)
	retry := tc.waitJobPods("flaky", 1)[0]
	if retry.Name == first.Name {
		t.Fatal("failed pod not replaced")
	}
	tc.finishPod(retry.Name, 1)
	j := tc.waitJobCondition("flaky", batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)
	if c := jobCond(j, batchv1.JobFailureTarget); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("no FailureTarget: %+v", j.Status.Conditions)
	}
	if j.Status.Failed != 2 || j.Status.Active != 0 {
		t.Errorf("status = %+v", j.Status)
	}
	if n := len(tc.pods("default", "job-name=flaky")); n != 2 {
		t.Errorf("%d pods, want the 2 failed ones and no third", n)
	}
}

func TestJobOnFailureCountsRestarts(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.createJob(testJob("restarts", func(j *batchv1.Job) {
		j.Spec.BackoffLimit = ptrTo[int32](2)
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	}))
	pod := tc.waitJobPods("restarts", 1)[0]
	// The node agent restarts the container in place; the job counts the restarts.
	tc.updatePodStatus("default", pod.Name, func(p *corev1.Pod) {
		runningStatus(p, "10.244.0.9", false)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "restarts", RestartCount: 3,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	tc.waitJobCondition("restarts", batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)
	testutil.Eventually(t, waitTimeout, "running pod deleted", func() error {
		all := tc.pods("default", "job-name=restarts")
		if len(activePods(all)) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}

func TestJobActiveDeadline(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.createJob(testJob("slow", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptrTo[int64](1) }))
	// The job starts its pod. Not waited for as active: a second later the
	// deadline deletes it, and on a loaded machine it can be terminating when
	// first seen (stop 47's rehearsal: "slow-g7f4x[Pending,terminating]").
	testutil.Eventually(t, waitTimeout, "the job's pod created", func() error {
		if all := tc.pods("default", "batch.kubernetes.io/job-name=slow"); len(all) != 1 {
			return errors.New(podNames(all))
		}
		return nil
	})
	j := tc.waitJobCondition("slow", batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded)
	if j.Status.Active != 0 {
		t.Errorf("active = %d after the deadline", j.Status.Active)
	}
	testutil.Eventually(t, waitTimeout, "pod deleted at the deadline", func() error {
		all := tc.pods("default", "job-name=slow")
		if len(activePods(all)) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}

func TestJobTTLAfterFinishedDeletesJobAndPods(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(false)
	tc.createJob(testJob("once", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptrTo[int32](0) }))
	pod := tc.waitJobPods("once", 1)[0]
	tc.finishPod(pod.Name, 0)
	testutil.Eventually(t, waitTimeout, "job deleted after its TTL", func() error {
		_, err := tc.client.BatchV1().Jobs("default").Get(tc.ctx, "once", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("job still there (get: %v)", err)
		}
		return nil
	})
	testutil.Eventually(t, waitTimeout, "pods collected", func() error {
		all := tc.pods("default", "job-name=once")
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}
