package printers

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

func batchKind(kind string) schema.GroupVersionKind { return batchv1.SchemeGroupVersion.WithKind(kind) }

var (
	containersColumn = wideColumn("Containers", "Names of each container in the template.")
	imagesColumn     = wideColumn("Images", "Images referenced by each container in the template.")
)

var statefulSetColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Ready", "Number of the pod with ready state"),
	ageColumn,
	containersColumn,
	imagesColumn,
}

func statefulSetCells(s *appsv1.StatefulSet, now time.Time) []interface{} {
	desired := int32(1)
	if s.Spec.Replicas != nil {
		desired = *s.Spec.Replicas
	}
	names, images := containerCells(s.Spec.Template.Spec.Containers)
	return []interface{}{s.Name, fmt.Sprintf("%d/%d", s.Status.ReadyReplicas, desired), age(s.CreationTimestamp, now), names, images}
}

var daemonSetColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Desired", appsv1.DaemonSetStatus{}.SwaggerDoc()["desiredNumberScheduled"]),
	column("Current", appsv1.DaemonSetStatus{}.SwaggerDoc()["currentNumberScheduled"]),
	column("Ready", appsv1.DaemonSetStatus{}.SwaggerDoc()["numberReady"]),
	column("Up-to-date", appsv1.DaemonSetStatus{}.SwaggerDoc()["updatedNumberScheduled"]),
	column("Available", appsv1.DaemonSetStatus{}.SwaggerDoc()["numberAvailable"]),
	column("Node Selector", corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]),
	ageColumn,
	containersColumn,
	imagesColumn,
	wideColumn("Selector", appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"]),
}

func daemonSetCells(d *appsv1.DaemonSet, now time.Time) []interface{} {
	names, images := containerCells(d.Spec.Template.Spec.Containers)
	return []interface{}{
		d.Name,
		int64(d.Status.DesiredNumberScheduled),
		int64(d.Status.CurrentNumberScheduled),
		int64(d.Status.NumberReady),
		int64(d.Status.UpdatedNumberScheduled),
		int64(d.Status.NumberAvailable),
		labels.FormatLabels(d.Spec.Template.Spec.NodeSelector),
		age(d.CreationTimestamp, now),
		names,
		images,
		metav1.FormatLabelSelector(d.Spec.Selector),
	}
}

var jobColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Status", "Status of the job."),
	column("Completions", batchv1.JobStatus{}.SwaggerDoc()["succeeded"]),
	column("Duration", "Time required to complete the job."),
	ageColumn,
	containersColumn,
	imagesColumn,
	wideColumn("Selector", batchv1.JobSpec{}.SwaggerDoc()["selector"]),
}

func jobCells(j *batchv1.Job, now time.Time) []interface{} {
	var completions string
	switch parallelism := j.Spec.Parallelism; {
	case j.Spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
	case parallelism != nil && *parallelism > 1:
		completions = fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, *parallelism)
	default:
		completions = fmt.Sprintf("%d/1", j.Status.Succeeded)
	}
	var took string
	switch {
	case j.Status.StartTime == nil:
	case j.Status.CompletionTime == nil:
		took = duration.HumanDuration(now.Sub(j.Status.StartTime.Time))
	default:
		took = duration.HumanDuration(j.Status.CompletionTime.Sub(j.Status.StartTime.Time))
	}
	names, images := containerCells(j.Spec.Template.Spec.Containers)
	return []interface{}{j.Name, jobStatus(j), completions, took, age(j.CreationTimestamp, now), names, images,
		metav1.FormatLabelSelector(j.Spec.Selector)}
}

// jobStatus is kubectl's STATUS of a job, from its conditions.
func jobStatus(j *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		for _, c := range j.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	switch {
	case has(batchv1.JobComplete):
		return "Complete"
	case has(batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case has(batchv1.JobSuspended):
		return "Suspended"
	case has(batchv1.JobFailureTarget):
		return "FailureTarget"
	case has(batchv1.JobSuccessCriteriaMet):
		return "SuccessCriteriaMet"
	}
	return "Running"
}
