package validation

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func workloadTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container("web")}},
	}
}

func storedStatefulSet() *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: objMeta("web"), Spec: appsv1.StatefulSetSpec{
		ServiceName: "nginx", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: workloadTemplate()}}
	s.ResourceVersion, s.UID = "5", "u1"
	Default(s, Config{})
	return s
}

func storedDaemonSet() *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{ObjectMeta: objMeta("agent"), Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: workloadTemplate()}}
	d.ResourceVersion, d.UID = "5", "u2"
	Default(d, Config{})
	return d
}

func storedJob() *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: objMeta("lookup"), Spec: batchv1.JobSpec{Template: workloadTemplate()}}
	j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	j.ResourceVersion, j.UID = "5", "u3"
	Default(j, Config{})
	return j
}

// TestWorkloadDefaults pins the defaults of k8s.io/api's apps/v1 and
// batch/v1 that kubectl get -o yaml shows.
func TestWorkloadDefaults(t *testing.T) {
	s := storedStatefulSet()
	if *s.Spec.Replicas != 1 || s.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
		s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || *s.Spec.UpdateStrategy.RollingUpdate.Partition != 0 ||
		*s.Spec.RevisionHistoryLimit != 10 || s.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		s.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("statefulset defaults: %+v", s.Spec)
	}
	d := storedDaemonSet()
	if ru := d.Spec.UpdateStrategy.RollingUpdate; d.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ru.MaxUnavailable.IntValue() != 1 || ru.MaxSurge.IntValue() != 0 || *d.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("daemonset defaults: %+v", d.Spec)
	}
	j := storedJob()
	if *j.Spec.Completions != 1 || *j.Spec.Parallelism != 1 || *j.Spec.BackoffLimit != 6 || *j.Spec.CompletionMode != batchv1.NonIndexedCompletion ||
		*j.Spec.Suspend || *j.Spec.PodReplacementPolicy != batchv1.TerminatingOrFailed {
		t.Errorf("job defaults: %+v", j.Spec)
	}
	want := map[string]string{"app": "web", "batch.kubernetes.io/controller-uid": "u3", "controller-uid": "u3",
		"batch.kubernetes.io/job-name": "lookup", "job-name": "lookup"}
	for k, v := range want {
		if j.Spec.Template.Labels[k] != v || j.Labels[k] != v {
			t.Errorf("label %s: template %q, job %q, want %q", k, j.Spec.Template.Labels[k], j.Labels[k], v)
		}
	}
	if got := j.Spec.Selector.MatchLabels; len(got) != 1 || got["batch.kubernetes.io/controller-uid"] != "u3" {
		t.Errorf("generated selector %v", got)
	}
	if errs := Validate(j, nil, Config{}); len(errs) > 0 {
		t.Errorf("defaulted job invalid:\n%s", errorLines(errs))
	}
	parallelOnly := &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: ptr[int32](3)}}
	Default(parallelOnly, Config{})
	if parallelOnly.Spec.Completions != nil {
		t.Errorf("a work queue job (parallelism only) got completions %d", *parallelOnly.Spec.Completions)
	}
}

func TestWorkloadUpdates(t *testing.T) {
	cases := []struct {
		name          string
		old           func() runtime.Object
		mutate        func(runtime.Object)
		field, substr string // "" when the update is allowed
	}{
		{"statefulset replicas and template", func() runtime.Object { return storedStatefulSet() }, func(o runtime.Object) {
			s := o.(*appsv1.StatefulSet)
			s.Spec.Replicas = ptr[int32](5)
			s.Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr[int32](2)
		}, "", ""},
		{"statefulset serviceName", func() runtime.Object { return storedStatefulSet() }, func(o runtime.Object) {
			o.(*appsv1.StatefulSet).Spec.ServiceName = "other"
		}, "spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template'"},
		{"statefulset podManagementPolicy", func() runtime.Object { return storedStatefulSet() }, func(o runtime.Object) {
			o.(*appsv1.StatefulSet).Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		}, "spec", "are forbidden"},
		{"daemonset template", func() runtime.Object { return storedDaemonSet() }, func(o runtime.Object) {
			o.(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
		}, "", ""},
		{"daemonset selector", func() runtime.Object { return storedDaemonSet() }, func(o runtime.Object) {
			d := o.(*appsv1.DaemonSet)
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "x"}}
			d.Spec.Template.Labels["tier"] = "x"
		}, "spec.selector", "field is immutable"},
		{"job template", func() runtime.Object { return storedJob() }, func(o runtime.Object) {
			o.(*batchv1.Job).Spec.Template.Spec.Containers[0].Image = "busybox:1.36"
		}, "spec.template", "field is immutable"},
		{"job completions", func() runtime.Object { return storedJob() }, func(o runtime.Object) {
			o.(*batchv1.Job).Spec.Completions = ptr[int32](4)
		}, "spec.completions", "field is immutable"},
		{"job ttl", func() runtime.Object { return storedJob() }, func(o runtime.Object) {
			o.(*batchv1.Job).Spec.TTLSecondsAfterFinished = ptr[int32](60)
		}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.old()
			obj := old.DeepCopyObject()
			tc.mutate(obj)
			Default(obj, Config{})
			errs := Validate(obj, old, Config{})
			if tc.field == "" {
				if len(errs) > 0 {
					t.Errorf("allowed update refused:\n%s", errorLines(errs))
				}
				return
			}
			checkOnly(t, errs, tc.field, tc.substr)
		})
	}
}
