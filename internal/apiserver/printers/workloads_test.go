package printers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStatefulSetCells(t *testing.T) {
	containers := []corev1.Container{{Name: "nginx", Image: "nginx"}, {Name: "log", Image: "busybox"}}
	checkRows(t, "statefulsets", []rowCase{
		{"ready", &appsv1.StatefulSet{ObjectMeta: objectMeta("web", 3*time.Minute),
			Spec:   appsv1.StatefulSetSpec{Replicas: ptr[int32](3), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: 2}},
			[]interface{}{"web", "2/3", "3m", "nginx,log", "nginx,busybox"}},
		{"replicas unset", &appsv1.StatefulSet{ObjectMeta: objectMeta("db", time.Hour)},
			[]interface{}{"db", "0/1", "60m", "", ""}},
	})
}

func TestDaemonSetCells(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ingress"}}
	checkRows(t, "daemonsets", []rowCase{
		{"node selector", &appsv1.DaemonSet{ObjectMeta: objectMeta("ingress", 90*time.Second),
			Spec: appsv1.DaemonSetSpec{Selector: sel, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
				Containers:   []corev1.Container{{Name: "nginx", Image: "nginx"}}}}},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2, UpdatedNumberScheduled: 3, NumberAvailable: 2}},
			[]interface{}{"ingress", int64(3), int64(3), int64(2), int64(3), int64(2), "kubernetes.io/os=linux", "90s", "nginx", "nginx", "app=ingress"}},
		{"no node selector", &appsv1.DaemonSet{ObjectMeta: objectMeta("proxy", 5*time.Hour)},
			[]interface{}{"proxy", int64(0), int64(0), int64(0), int64(0), int64(0), "<none>", "5h", "", "", "<none>"}},
	})
}

func TestJobCells(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "u1"}}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "lookup", Image: "busybox"}}}}
	start, done := ago(2*time.Minute), ago(2*time.Minute-5*time.Second)
	cond := func(ts ...batchv1.JobConditionType) []batchv1.JobCondition {
		var out []batchv1.JobCondition
		for _, t := range ts {
			out = append(out, batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue})
		}
		return out
	}
	checkRows(t, "jobs", []rowCase{
		{"complete", &batchv1.Job{ObjectMeta: objectMeta("lookup", 3*time.Minute),
			Spec:   batchv1.JobSpec{Completions: ptr[int32](1), Parallelism: ptr[int32](1), Selector: sel, Template: tmpl},
			Status: batchv1.JobStatus{Succeeded: 1, StartTime: &start, CompletionTime: &done, Conditions: cond(batchv1.JobSuccessCriteriaMet, batchv1.JobComplete)}},
			[]interface{}{"lookup", "Complete", "1/1", "5s", "3m", "lookup", "busybox", "batch.kubernetes.io/controller-uid=u1"}},
		{"running", &batchv1.Job{ObjectMeta: objectMeta("batch", 3*time.Minute),
			Spec:   batchv1.JobSpec{Completions: ptr[int32](5), Parallelism: ptr[int32](2), Selector: sel, Template: tmpl},
			Status: batchv1.JobStatus{Succeeded: 2, Active: 2, StartTime: &start}},
			[]interface{}{"batch", "Running", "2/5", "2m", "3m", "lookup", "busybox", "batch.kubernetes.io/controller-uid=u1"}},
		{"work queue failed", &batchv1.Job{ObjectMeta: objectMeta("queue", 3*time.Minute),
			Spec:   batchv1.JobSpec{Parallelism: ptr[int32](3), Selector: sel, Template: tmpl},
			Status: batchv1.JobStatus{Failed: 7, StartTime: &start, Conditions: cond(batchv1.JobFailureTarget, batchv1.JobFailed)}},
			[]interface{}{"queue", "Failed", "0/1 of 3", "2m", "3m", "lookup", "busybox", "batch.kubernetes.io/controller-uid=u1"}},
	})
}
